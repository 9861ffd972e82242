//! The build recipes and the tiny model generator, run as CI runs them.

mod support;

use std::path::Path;
use std::process::Command;

use support::REPO_ROOT;

fn recipe(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("bash")
        .arg(Path::new(REPO_ROOT).join("engine/recipes/build.sh"))
        .args(args)
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn flags(variant: &str) -> Vec<String> {
    let (ok, stdout, stderr) = recipe(&["--print-flags", variant]);
    assert!(ok, "{variant}: {stderr}");
    stdout.lines().map(str::to_owned).collect()
}

#[test]
fn cuda_carries_sass_for_every_supported_arch_and_ptx() {
    let cuda = flags("cuda");
    assert!(cuda.contains(&"-DGGML_CUDA=ON".to_owned()));
    assert!(cuda.contains(
        &"-DCMAKE_CUDA_ARCHITECTURES=75-real;80-real;86-real;89-real;90-real;120-real;120-virtual".to_owned()
    ));
}

#[test]
fn rocm_targets_exactly_strix_halo_and_r9700() {
    let rocm = flags("rocm");
    assert!(rocm.contains(&"-DGGML_HIP=ON".to_owned()));
    assert!(rocm.contains(&"-DAMDGPU_TARGETS=gfx1151;gfx1201".to_owned()), "{rocm:?}");
}

#[test]
fn every_variant_is_portable_and_offline() {
    for variant in ["cpu", "cuda", "rocm", "vulkan"] {
        let f = flags(variant);
        for required in [
            "-DGGML_NATIVE=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_SERVER=ON",
        ] {
            assert!(f.contains(&required.to_owned()), "{variant} lacks {required}");
        }
        assert!(f.contains(&"-DLLAMA_BUILD_COMMIT=0c1e57098bba".to_owned()), "{variant}");
    }
    assert!(!flags("cpu").iter().any(|f| f.contains("CUDA") || f.contains("HIP") || f.contains("VULKAN")));
    assert!(flags("vulkan").contains(&"-DGGML_VULKAN=ON".to_owned()));
}

#[test]
fn unknown_variant_and_missing_source_are_refused() {
    let (ok, stdout, stderr) = recipe(&["--print-flags", "metal"]);
    assert!(!ok && stdout.is_empty() && stderr.contains("unknown variant 'metal'"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) =
        recipe(&["cpu", dir.path().to_str().unwrap(), dir.path().join("out").to_str().unwrap()]);
    assert!(!ok && stderr.contains("no llama.cpp tree"), "{stderr}");
}

#[test]
fn tiny_model_is_small_and_byte_identical_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(REPO_ROOT).join("ci/make-tiny-model.py");
    let write = |name: &str| {
        let path = dir.path().join(name);
        let status = Command::new("python3").arg(&script).arg(&path).status().unwrap();
        assert!(status.success(), "make-tiny-model.py failed");
        std::fs::read(path).unwrap()
    };
    let (first, second) = (write("a.gguf"), write("b.gguf"));
    assert_eq!(&first[..4], b"GGUF");
    assert!((300_000..1_000_000).contains(&first.len()), "{} bytes", first.len());
    assert!(first == second, "two runs wrote different bytes");
}

/// Runs the recipe end to end with a stand-in `cmake` first on PATH that records its arguments and
/// produces a binary, so the script's plumbing (flags, install, BUILD-INFO) is checked in seconds.
#[test]
fn recipe_configures_builds_and_installs_with_build_info() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let src = dir.path().join("src");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("CMakeLists.txt"), "").unwrap();
    let log = dir.path().join("cmake.log");
    let fake_cmake = format!(
        "#!/bin/sh\necho \"$*\" >> {log}\nif [ \"$1\" = --build ]; then mkdir -p \"$2/bin\"; \
         printf '#!/bin/sh\\n' > \"$2/bin/llama-server\"; fi\n",
        log = log.display()
    );
    std::fs::write(bin.join("cmake"), fake_cmake).unwrap();
    Command::new("chmod").arg("+x").arg(bin.join("cmake")).status().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());

    let run = |variant: &str| {
        Command::new("bash")
            .arg(Path::new(REPO_ROOT).join("engine/recipes/build.sh"))
            .args([variant, src.to_str().unwrap(), out.to_str().unwrap()])
            .env("PATH", &path)
            .env("JOBS", "1")
            .output()
            .unwrap()
    };
    let cpu = run("cpu");
    assert!(cpu.status.success(), "{}", String::from_utf8_lossy(&cpu.stderr));
    assert_eq!(String::from_utf8(cpu.stdout).unwrap().trim(), out.join("llama-server").to_str().unwrap());
    assert!(out.join("llama-server").is_file());
    let info = std::fs::read_to_string(out.join("BUILD-INFO")).unwrap();
    assert!(info.contains("variant=cpu\n") && info.contains("llama_cpp_commit=0c1e57098bba\n"), "{info}");

    let calls = std::fs::read_to_string(&log).unwrap();
    let mut lines = calls.lines();
    let configure = lines.next().unwrap();
    assert!(configure.starts_with(&format!("-S {} -B ", src.display())), "{configure}");
    assert!(configure.ends_with(&flags("cpu").join(" ")), "configure used other flags: {configure}");
    assert!(lines.next().unwrap().contains("--target llama-server -j1"));

    // A GPU variant without its toolchain stops before configuring.
    if Command::new("sh").args(["-c", "command -v nvcc"]).output().unwrap().stdout.is_empty() {
        let cuda = run("cuda");
        assert!(!cuda.status.success());
        assert!(String::from_utf8_lossy(&cuda.stderr).contains("nvcc missing"));
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2, "cmake ran for cuda");
    }
}
