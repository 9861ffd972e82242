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
