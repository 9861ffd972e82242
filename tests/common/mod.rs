//! Helpers shared by the integration tests in this folder.
#![allow(dead_code)]

pub mod ports;
pub mod thermal;

#[allow(unused_imports)] // each test binary uses a different part
pub use ports::{free_port, free_ports};

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

/// The CPU llama-server: `$LUCEBOX_LLAMA_SERVER` (set by ci/test.sh), else what
/// `ci/build-engine.sh` prints (it builds when missing).
pub fn llama_server() -> PathBuf {
    if let Some(path) = std::env::var_os("LUCEBOX_LLAMA_SERVER") {
        return PathBuf::from(path);
    }
    let out = Command::new("bash").arg(repo_root().join("ci/build-engine.sh")).output().unwrap();
    assert!(out.status.success(), "ci/build-engine.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "ci/build-engine.sh printed {path:?}, not a file");
    path
}

/// The tiny model: `$LUCEBOX_TINY_MODEL` (set by ci/test.sh), else written into `dir` by
/// ci/make-tiny-model.py.
pub fn tiny_model(dir: &Path) -> PathBuf {
    if let Some(path) = std::env::var_os("LUCEBOX_TINY_MODEL") {
        return PathBuf::from(path);
    }
    let model = dir.join("tiny.gguf");
    let status =
        Command::new("python3").arg(repo_root().join("ci/make-tiny-model.py")).arg(&model).status().unwrap();
    assert!(status.success(), "ci/make-tiny-model.py failed");
    model
}

/// A real `lucebox run` in a temporary directory: the CPU llama-server as the `cpu` engine build,
/// the tiny model as `tiny-llama.gguf`, free engine and web ports, the process runtime. Create it,
/// add files or environment, then [`RunRig::spawn`]; the supervisor is killed on drop.
pub struct RunRig {
    pub dir: tempfile::TempDir,
    pub engines: PathBuf,
    pub models: PathBuf,
    pub state: PathBuf,
    pub engine_port: u16,
    pub web_port: u16,
    pub child: Option<std::process::Child>,
}

impl RunRig {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let engines = dir.path().join("engines");
        std::fs::create_dir_all(engines.join("cpu/bin")).unwrap();
        std::os::unix::fs::symlink(llama_server(), engines.join("cpu/bin/llama-server")).unwrap();
        let models = dir.path().join("models");
        std::fs::create_dir_all(&models).unwrap();
        std::fs::copy(tiny_model(dir.path()), models.join("tiny-llama.gguf")).unwrap();
        let state = dir.path().join("state");
        Self { dir, engines, models, state, engine_port: free_port(), web_port: free_port(), child: None }
    }

    /// `lucebox run` with this rig's directories and ports; add to it before spawning.
    pub fn command(&self) -> Command {
        let mut cmd = lucebox();
        cmd.arg("run")
            .env("LUCEBOX_STATE_DIR", &self.state)
            .env("LUCEBOX_ENGINES_DIR", &self.engines)
            .env("LUCEBOX_MODELS_DIR", &self.models)
            .env("LUCEBOX_ENGINE__PORT", self.engine_port.to_string())
            .env("LUCEBOX_WEB__PORT", self.web_port.to_string())
            .env("LUCEBOX_RUNTIME__MODE", "process")
            .stdin(std::process::Stdio::null());
        match std::env::var_os("LUCEBOX_TEST_RUN_LOG") {
            // Keep the supervisor's log when asked (debugging a failing run).
            Some(log) => {
                let file = std::fs::File::create(log).unwrap();
                cmd.stdout(std::process::Stdio::null()).stderr(file);
            }
            None => {
                cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
            }
        }
        cmd
    }

    /// Makes this rig a captured host: a copy of `tests/fixtures/hosts/<fixture>` as the root, the
    /// CPU llama-server standing in for the `backend` build, and a profiles folder holding the
    /// tiny profile for that backend, `tiny-<backend>-test`, and the same with a smaller context,
    /// `tiny-<backend>-small`. Returns the root and the profiles folder, for `LUCEBOX_ROOT` and
    /// `LUCEBOX_PROFILES_DIR`.
    pub fn on_captured_host(&self, fixture: &str, backend: &str) -> (PathBuf, PathBuf) {
        let root = self.dir.path().join("root");
        copy_tree(&host_fixture(fixture), &root);
        let profiles = self.dir.path().join("profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        let tiny = std::fs::read_to_string(repo_root().join("profiles/tiny-cpu-test.toml")).unwrap();
        let stand_in = tiny.replace("backends = [\"cpu\"]", &format!("backends = [\"{backend}\"]"));
        assert_ne!(tiny, stand_in, "the tiny profile names its backend as this rig expects");
        std::fs::write(profiles.join(format!("tiny-{backend}-test.toml")), &stand_in).unwrap();
        let small = stand_in.replace("ctx = 512", "ctx = 256");
        assert_ne!(small, stand_in, "the tiny profile sets ctx as this rig expects");
        std::fs::write(profiles.join(format!("tiny-{backend}-small.toml")), small).unwrap();
        std::fs::create_dir_all(self.engines.join(backend).join("bin")).unwrap();
        std::os::unix::fs::symlink(llama_server(), self.engines.join(backend).join("bin/llama-server"))
            .unwrap();
        (root, profiles)
    }

    pub fn spawn(&mut self, mut cmd: Command) {
        self.child = Some(cmd.spawn().expect("spawn lucebox run"));
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("spawned").id() as i32
    }

    /// SIGTERM, then waits up to `within` for the exit.
    pub fn terminate(&mut self, within: std::time::Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("spawned");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(exit) = child.try_wait().unwrap() {
                self.child = None;
                return exit;
            }
            assert!(std::time::Instant::now() < deadline, "supervisor did not exit after SIGTERM");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Default for RunRig {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for RunRig {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A minimal HTTP/1.1 exchange on loopback with extra header lines (each ending in `\r\n`);
/// returns (status, body), or `None` when nothing answers.
pub fn http_with(port: u16, method: &str, path: &str, headers: &str, body: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

pub fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    http_with(port, method, path, "", body)
}

/// Polls `check` every 100 ms; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}
