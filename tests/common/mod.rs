//! Helpers shared by the integration tests in this folder.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

pub fn host_fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/hosts").join(name)
}

pub fn lucebox() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lucebox"));
    // Tests never read the machine's configuration file.
    cmd.env("LUCEBOX_CONFIG", repo_root().join("tests/fixtures/empty.toml"));
    cmd.env_remove("LUCEBOX_NVML_LIB");
    cmd
}

/// Runs a command and returns its output, failing the test with stderr when it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let output = cmd.output().expect("spawn");
    assert!(
        output.status.success(),
        "{cmd:?} failed: {}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

pub fn json_of(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", String::from_utf8_lossy(&output.stdout)))
}

/// Builds the fake libnvidia-ml.so.1 from tests/fake-nvml into `dir` with the system C compiler.
pub fn build_fake_nvml(dir: &Path) -> PathBuf {
    let lib = dir.join("libnvidia-ml.so.1");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&lib)
        .arg(repo_root().join("tests/fake-nvml/fake_nvml.c"))
        .status()
        .expect("run cc (install gcc)");
    assert!(status.success(), "building the fake NVML failed");
    lib
}

/// Copies a tree, keeping symlinks as symlinks (sysfs fixtures rely on relative links).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
