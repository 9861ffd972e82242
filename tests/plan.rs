//! `lucebox plan` on every captured host: the expected variant and profile, reasons for every
//! rejection, clear errors for bad inputs, missing models, pins, and real smoke starts.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn plan_json(fixture: &str, extra: &[&str]) -> Value {
    json_of(&run_ok(lucebox().args(["plan", "--json", "--root"]).arg(host_fixture(fixture)).args(extra)))
}

fn group<'a>(plan: &'a Value, device: &str) -> &'a Value {
    plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["devices"][0] == device)
        .unwrap_or_else(|| panic!("no group for {device}: {plan:#}"))
}

/// (fixture, device, variant, profile)
const EXPECTED: &[(&str, &str, &str, &str)] = &[
    ("rtx3090-desktop", "0000:01:00.0", "cuda", "qwen3.6-27b-dflash-24g"),
    // Driver 550 is older than CUDA 12.8 needs: the portable Vulkan build takes over.
    ("rtx2080ti", "0000:01:00.0", "vulkan", "qwen3.6-35b-a3b-moe-11g"),
    // 32 607 MiB is the 32 GB tier, never a floored 31 GiB.
    ("rtx5090", "0000:01:00.0", "cuda", "qwen3.6-27b-dflash-32g"),
    ("r9700", "0000:03:00.0", "rocm", "qwen3.6-27b-dflash-32g"),
    ("strix-halo-128g", "0000:c3:00.0", "rocm", "deepseek-v4-flash-strix-128g"),
    ("lucebox-r9700-strix", "0000:03:00.0", "rocm", "qwen3.6-27b-dflash-32g"),
    ("lucebox-r9700-strix", "0000:c3:00.0", "rocm", "deepseek-v4-flash-strix-128g"),
    ("unknown-amd", "0000:0d:00.0", "vulkan", "qwen3.6-35b-a3b-moe-16g"),
    ("no-gpu", "cpu", "cpu", "qwen3-4b-cpu"),
    ("container-no-gpu-access", "cpu", "cpu", "qwen3-4b-cpu"),
];

#[test]
fn every_fixture_gets_the_expected_variant_and_profile() {
    for &(fixture, device, variant, profile) in EXPECTED {
        let plan = plan_json(fixture, &[]);
        let g = group(&plan, device);
        assert_eq!(g["choice"]["variant"], variant, "{fixture}");
        assert_eq!(g["choice"]["profile"], profile, "{fixture}");
        assert_eq!(g["proof"]["state"], "unproven", "{fixture}: captured trees are never smoke-started");
        let candidates = g["candidates"].as_array().unwrap();
        assert!(candidates.iter().any(|c| c["accepted"] == false), "{fixture}: rejections are listed");
        assert!(
            candidates.iter().all(|c| !c["reason"].as_str().unwrap().is_empty()),
            "{fixture}: every candidate has a reason"
        );
    }
}

#[test]
fn rejection_reasons_say_why() {
    let plan = plan_json("rtx2080ti", &[]);
    let reasons = group(&plan, "0000:01:00.0")["candidates"].to_string();
    assert!(reasons.contains("driver 550.144.03 older than 570.26"), "{reasons}");
    assert!(reasons.contains("needs ≥ 14000 MiB usable, device has 10896"), "{reasons}");
    // The Vulkan build on an NVIDIA card: CUDA_VISIBLE_DEVICES does not filter Vulkan devices, and
    // NVIDIA's Vulkan driver is mounted only with the graphics capability.
    let env = &group(&plan, "0000:01:00.0")["choice"]["launch"]["env"];
    let pci = group(&plan, "0000:01:00.0")["choice"]["launch"]["env"]["MESA_VK_DEVICE_SELECT"].clone();
    assert!(pci.as_str().is_some_and(|p| p.starts_with("10de:") && p.ends_with('!')), "{env}");
    assert_eq!(env["NVIDIA_DRIVER_CAPABILITIES"], "compute,utility,graphics", "{env}");

    let plan = plan_json("unknown-amd", &[]);
    let reasons = group(&plan, "0000:0d:00.0")["candidates"].to_string();
    assert!(reasons.contains("arch gfx1030 not in rocm build"), "{reasons}");

    let plan = plan_json("rtx3090-desktop", &[]);
    let reasons = group(&plan, "0000:01:00.0")["candidates"].to_string();
    assert!(reasons.contains("needs ≥ 28000 MiB usable, device has 24075"), "{reasons}");
    // The MoE profiles fit their memory by keeping cold experts in host RAM, which only
    // llama-server can be told to do: dflash_server would load every expert on the card.
    assert!(
        reasons
            .contains("dflash_server has no cpu_moe_layers setting, which the profile's 14000 MiB counts on"),
        "{reasons}"
    );
}

#[test]
fn lucebox_runs_two_engines_on_two_devices_and_ports() {
    let plan = plan_json("lucebox-r9700-strix", &[]);
    let groups = plan["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_ne!(groups[0]["devices"], groups[1]["devices"]);
    assert_ne!(groups[0]["choice"]["launch"]["port"], groups[1]["choice"]["launch"]["port"]);
    // ROCm numbers GPUs in KFD node order: in this tree node 1 is the Strix Halo (c3:00.0) and
    // node 2 the R9700 (03:00.0), the reverse of PCI order.
    assert_eq!(group(&plan, "0000:c3:00.0")["choice"]["launch"]["env"]["ROCR_VISIBLE_DEVICES"], "0");
    assert_eq!(group(&plan, "0000:03:00.0")["choice"]["launch"]["env"]["ROCR_VISIBLE_DEVICES"], "1");
    for g in groups {
        assert_eq!(
            g["choice"]["launch"]["container"]["devices"],
            serde_json::json!(["/dev/kfd", "/dev/dri"])
        );
    }
}

#[test]
fn unusable_gpus_are_explained_and_the_cpu_serves() {
    let plan = plan_json("container-no-gpu-access", &[]);
    let unplanned = plan["unplanned"].to_string();
    assert!(unplanned.contains("--gpus all") && unplanned.contains("--device /dev/kfd"), "{unplanned}");
    assert_eq!(plan["groups"].as_array().unwrap().len(), 1);
}

#[test]
fn nvidia_launch_pins_the_gpu_by_uuid() {
    let plan = plan_json("rtx3090-desktop", &[]);
    let launch = &group(&plan, "0000:01:00.0")["choice"]["launch"];
    assert_eq!(launch["env"]["CUDA_VISIBLE_DEVICES"], "GPU-7a1c3f52-3e0d-9b1e-4f62-0a9d3c5e8b21");
    assert_eq!(launch["container"]["nvidia_gpus"][0], "GPU-7a1c3f52-3e0d-9b1e-4f62-0a9d3c5e8b21");
    let args: Vec<&str> = launch["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args.windows(2).any(|w| w == ["--max-ctx", "98304"]), "{args:?}");
    assert!(args.contains(&"--ddtree-budget"), "{args:?}");
    assert!(launch["startup_allowance_s"].as_u64().unwrap() > 60, "a 17 GB model gets minutes to load");
}

#[test]
fn json_snapshots_of_every_plan() {
    for &(fixture, ..) in EXPECTED {
        let plan = plan_json(fixture, &[]);
        insta::with_settings!({snapshot_path => repo_root().join("tests/snapshots"), prepend_module_to_snapshot => false}, {
            insta::assert_json_snapshot!(format!("plan-{fixture}"), plan);
        });
    }
}

#[test]
fn missing_model_files_are_reported_before_any_engine_starts() {
    let models = tempfile::tempdir().unwrap();
    let root = host_fixture("no-gpu");
    // No model at all: nothing can run, and the plan says which file is missing.
    let plan = json_of(&run_ok(
        lucebox().args(["plan", "--json", "--root"]).arg(&root).arg("--models").arg(models.path()),
    ));
    assert!(plan["groups"].as_array().unwrap().is_empty(), "{plan:#}");
    let text = plan.to_string();
    assert!(
        text.contains("model file Qwen3-4B-Q4_K_M.gguf not in") && text.contains("tiny-llama.gguf"),
        "{text}"
    );
    // With the tiny model in the store, the tiny profile is chosen and the 4B one explained.
    std::fs::write(models.path().join("tiny-llama.gguf"), b"GGUF").unwrap();
    let plan = json_of(&run_ok(
        lucebox().args(["plan", "--json", "--root"]).arg(&root).arg("--models").arg(models.path()),
    ));
    let g = group(&plan, "cpu");
    assert_eq!(g["choice"]["profile"], "tiny-cpu-test");
    assert!(g["candidates"].to_string().contains("Qwen3-4B-Q4_K_M.gguf not in"));
}

#[test]
fn pins_from_the_environment_override_the_choice() {
    let plan = json_of(&run_ok(
        lucebox()
            .args(["plan", "--json", "--root"])
            .arg(host_fixture("rtx3090-desktop"))
            .env("LUCEBOX_PIN__DEFAULT__VARIANT", "vulkan")
            .env("LUCEBOX_PIN__DEFAULT__PROFILE", "qwen3-4b-vulkan"),
    ));
    let g = group(&plan, "0000:01:00.0");
    assert_eq!(g["choice"]["variant"], "vulkan");
    assert_eq!(g["choice"]["profile"], "qwen3-4b-vulkan");
    assert!(g["candidates"].to_string().contains("pinned to vulkan"));
}

fn write_profile(dir: &Path, name: &str, body: &str) {
    std::fs::write(dir.join(format!("{name}.toml")), body).unwrap();
}

const GOOD_PROFILE: &str = "description = \"x\"\nrank = 1\n[model]\nfile = \"m.gguf\"\nsize_mib = 1\n[requirements]\nbackends = [\"cpu\"]\nengines = [\"llama-server\"]\nmin_usable_mib = 1\n[engine]\nctx = 256\n";

#[test]
fn malformed_profile_names_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    write_profile(dir.path(), "good", GOOD_PROFILE);
    write_profile(dir.path(), "broken", &GOOD_PROFILE.replace("ctx = 256", "ctx = 256\ncontext_len = 9"));
    let output = lucebox()
        .args(["plan", "--root"])
        .arg(host_fixture("no-gpu"))
        .arg("--profiles")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("broken.toml") && stderr.contains("context_len"), "{stderr}");
}

#[test]
fn malformed_variants_file_names_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let variants = dir.path().join("variants.toml");
    let shipped = std::fs::read_to_string(repo_root().join("engine/variants.toml")).unwrap();
    std::fs::write(&variants, shipped.replace("min_driver = \"570.26\"", "min_driver = \"newest\"")).unwrap();
    let output = lucebox()
        .args(["plan", "--root"])
        .arg(host_fixture("no-gpu"))
        .arg("--variants")
        .arg(&variants)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("variants.toml") && stderr.contains("variant[0].min_driver"), "{stderr}");
}

#[test]
fn fifty_profiles_plan_correctly() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..50 {
        let body = GOOD_PROFILE
            .replace("rank = 1", &format!("rank = {i}"))
            .replace("min_usable_mib = 1", &format!("min_usable_mib = {}", i * 1000));
        write_profile(dir.path(), &format!("p{i:02}"), &body);
    }
    let plan = json_of(&run_ok(
        lucebox()
            .args(["plan", "--json", "--timing", "--root"])
            .arg(host_fixture("no-gpu"))
            .arg("--profiles")
            .arg(dir.path()),
    ));
    // no-gpu has 27 904 MiB usable: p27 is the highest rank that fits.
    assert_eq!(group(&plan, "cpu")["choice"]["profile"], "p27");
    // 27 more fit; the plan keeps the best few as its step-down ladder.
    assert_eq!(group(&plan, "cpu")["fallbacks"].as_array().unwrap().len(), lucebox::plan::MAX_FALLBACKS);
}

/// A real smoke start: the CPU llama-server built by ci/build-engine.sh and the tiny model.
#[test]
fn smoke_start_proves_the_cpu_engine_and_caches_it() {
    let Some((engines, models, state)) = live_engine_dirs() else { return };
    let plan = || json_of(&run_ok(&mut live_plan_command(&engines, &models, &state)));
    let first = plan();
    assert_eq!(
        group(&first, "cpu")["proof"],
        serde_json::json!({"state": "proven", "cached": false}),
        "{first:#}"
    );
    let second = plan();
    assert_eq!(group(&second, "cpu")["proof"], serde_json::json!({"state": "proven", "cached": true}));
}

#[test]
fn failed_smoke_start_is_recorded_with_its_reason() {
    let Some((engines, models, state)) = live_engine_dirs() else { return };
    // Replace the engine with one that dies at once.
    let broken = engines.path().join("cpu/bin/llama-server");
    std::fs::remove_file(&broken).unwrap();
    std::fs::write(&broken, "#!/bin/sh\necho 'illegal instruction' >&2\nexit 132\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plan = || json_of(&run_ok(&mut live_plan_command(&engines, &models, &state)));
    let first = plan();
    let g = group(&first, "cpu");
    assert_eq!(g["proof"]["state"], "failed", "{g:#}");
    assert!(g["candidates"].to_string().contains("smoke start failed: engine exited"), "{g:#}");

    // A new build in its place (a new image) is proven again, not judged by the cached failure.
    std::fs::remove_file(&broken).unwrap();
    std::os::unix::fs::symlink(std::env::var("LUCEBOX_LLAMA_SERVER").unwrap(), &broken).unwrap();
    let second = plan();
    let g = group(&second, "cpu");
    assert_eq!(g["proof"], serde_json::json!({"state": "proven", "cached": false}), "{g:#}");
}

/// The port a smoke start picks may be taken before the engine listens on it (anything on the box
/// may be handed it for an outgoing connection). That says nothing of the build: the start is made
/// again on another port, and the build is proven, not failed and stepped down from for a day. The
/// engine here finds its first port held by another process, as the real llama-server would.
#[test]
fn a_smoke_start_whose_port_was_taken_is_made_again_on_another() {
    let Some((engines, models, state)) = live_engine_dirs() else { return };
    let server = engines.path().join("cpu/bin/llama-server");
    let real = std::fs::read_link(&server).unwrap();
    let taken = state.path().join("first-port-taken");
    std::fs::remove_file(&server).unwrap();
    let script = format!(
        "#!/bin/sh\n\
         port=$(echo \"$@\" | sed -n 's/.*--port \\([0-9]*\\).*/\\1/p')\n\
         if [ ! -e '{taken}' ]; then\n\
           echo \"$port\" > '{taken}'\n\
           python3 -c 'import socket, sys, time\n\
         s = socket.socket(); s.bind((\"127.0.0.1\", int(sys.argv[1]))); s.listen(); time.sleep(15)' \"$port\" &\n\
           sleep 1\n\
         fi\n\
         exec '{real}' \"$@\"\n",
        taken = taken.display(),
        real = real.display()
    );
    std::fs::write(&server, script).unwrap();
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plan = json_of(&run_ok(&mut live_plan_command(&engines, &models, &state)));
    assert!(taken.exists(), "the first smoke start never ran");
    let g = group(&plan, "cpu");
    assert_eq!(g["proof"], serde_json::json!({"state": "proven", "cached": false}), "{g:#}");
    assert_eq!(g["choice"]["profile"], "tiny-cpu-test", "{g:#}");
}

/// On a host that runs its engines in containers the builds are in the image, not on the host: a
/// smoke start there would run a path that is not there (or another build than the image's), so
/// none is run, and the plan says why.
#[test]
fn a_host_running_engines_in_containers_does_not_smoke_start_them_and_says_why() {
    let Some((engines, models, state)) = live_engine_dirs() else { return };
    let output =
        live_plan_command(&engines, &models, &state).env("LUCEBOX_RUNTIME__MODE", "docker").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(group(&plan, "cpu")["proof"], serde_json::json!({"state": "unproven"}), "{plan:#}");
    assert!(stderr.contains("no smoke start: engines run in containers of"), "{stderr}");
    assert!(!state.path().join("smoke-cache.json").exists(), "nothing proven, nothing cached");
}

/// `lucebox plan --json` on the directories of [`live_engine_dirs`], the tiny CPU profile pinned.
fn live_plan_command(
    engines: &tempfile::TempDir,
    models: &tempfile::TempDir,
    state: &tempfile::TempDir,
) -> std::process::Command {
    let mut cmd = lucebox();
    cmd.args(["plan", "--json"])
        .env("LUCEBOX_ENGINES_DIR", engines.path())
        .env("LUCEBOX_MODELS_DIR", models.path())
        .env("LUCEBOX_STATE_DIR", state.path())
        .env("LUCEBOX_PIN__DEFAULT__PROFILE", "tiny-cpu-test");
    cmd
}

/// Engines dir with the real CPU llama-server, a models dir with the tiny model, a state dir.
/// Needs LUCEBOX_LLAMA_SERVER and LUCEBOX_TINY_MODEL (ci/test.sh sets both); without them the
/// test fails, telling how to set them up.
fn live_engine_dirs() -> Option<(tempfile::TempDir, tempfile::TempDir, tempfile::TempDir)> {
    let server = std::env::var("LUCEBOX_LLAMA_SERVER")
        .expect("LUCEBOX_LLAMA_SERVER unset: run `bash ci/test.sh` (it builds llama-server and sets it)");
    let model = std::env::var("LUCEBOX_TINY_MODEL")
        .expect("LUCEBOX_TINY_MODEL unset: run `bash ci/test.sh` (it writes the tiny model and sets it)");
    let engines = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(engines.path().join("cpu/bin")).unwrap();
    std::os::unix::fs::symlink(&server, engines.path().join("cpu/bin/llama-server")).unwrap();
    let models = tempfile::tempdir().unwrap();
    std::fs::copy(&model, models.path().join("tiny-llama.gguf")).unwrap();
    Some((engines, models, tempfile::tempdir().unwrap()))
}

/// Engines in Docker on a host whose dockerd has neither the `nvidia` runtime nor CDI devices
/// (this machine's real dockerd): the NVIDIA GPU is planned out with the toolkit fix, and the CPU
/// takes over instead of a CUDA container that would fail at start.
#[test]
fn docker_without_the_nvidia_toolkit_plans_the_gpu_out_with_the_fix() {
    let docker_plan = json_of(&run_ok(
        lucebox()
            .env("LUCEBOX_RUNTIME__MODE", "docker")
            .args(["plan", "--json", "--root"])
            .arg(host_fixture("rtx3090-desktop")),
    ));
    let unplanned = docker_plan["unplanned"].as_array().expect("unplanned list");
    let gpu = unplanned
        .iter()
        .find(|u| u["device"] == "0000:01:00.0")
        .unwrap_or_else(|| panic!("the 3090 must be planned out: {docker_plan:#}"));
    let why = gpu.to_string();
    assert!(why.contains("NVIDIA Container Toolkit"), "{why}");
    assert!(why.contains("nvidia-ctk runtime configure"), "{why}");
    assert_eq!(group(&docker_plan, "cpu")["choice"]["variant"], "cpu");

    // The same tree with engines as child processes is not asked about Docker at all.
    let process_plan = json_of(&run_ok(
        lucebox()
            .env("LUCEBOX_RUNTIME__MODE", "process")
            .args(["plan", "--json", "--root"])
            .arg(host_fixture("rtx3090-desktop")),
    ));
    assert_eq!(group(&process_plan, "0000:01:00.0")["choice"]["variant"], "cuda");
}

/// A GPU whose every build failed its smoke start would crash-loop with nothing to step down to:
/// it gets no engine, naming why, and with no GPU left serving the CPU is planned in its place
/// (the 3090 box's CPU had been left out because the GPU served).
#[test]
fn a_gpu_whose_builds_all_fail_their_smoke_start_gives_its_place_to_the_cpu() {
    use lucebox::plan::{cpu_instead_of_failed_gpus, inputs::PlanInputs, make_plan, Proof};
    let detection = lucebox::hardware::detect(
        &lucebox::hardware::SysRoot::new(host_fixture("rtx3090-desktop")),
        &lucebox::hardware::DetectOptions::default(),
    );
    let config = lucebox::config::Config::default();
    let profiles = repo_root().join("profiles");
    let inputs =
        PlanInputs::load(&config, Some(&profiles), Some(&repo_root().join("engine/variants.toml"))).unwrap();
    let settings = inputs.settings(&config, None, false);
    let mut plan = make_plan(&detection, &inputs.manifest, &inputs.profiles, &settings);
    assert_eq!(plan.groups.len(), 1, "{plan:#?}");
    assert!(plan.unplanned.iter().any(|u| u.device == "cpu" && u.reason == "GPUs serve the models"));
    let proven = plan.clone();
    let untouched =
        cpu_instead_of_failed_gpus(&mut plan, &detection, &inputs.manifest, &inputs.profiles, &settings);
    assert!(!untouched && plan == proven, "nothing failed, nothing changes");

    plan.groups[0].proof = Proof::Failed { reason: "cuda: engine exited with exit status: 1".into() };
    assert!(cpu_instead_of_failed_gpus(&mut plan, &detection, &inputs.manifest, &inputs.profiles, &settings));
    assert_eq!(plan.groups.len(), 1);
    assert_eq!(plan.groups[0].devices, ["cpu"], "{plan:#?}");
    assert_eq!(plan.groups[0].choice.variant, "cpu");
    let gpu = plan.unplanned.iter().find(|u| u.device == "0000:01:00.0").expect("the GPU is unplanned");
    assert!(gpu.reason.contains("smoke start") && gpu.reason.contains("exit status: 1"), "{}", gpu.reason);
    assert!(!gpu.candidates.is_empty(), "its candidates are kept, with their reasons");
    assert!(!plan.unplanned.iter().any(|u| u.device == "cpu"), "{plan:#?}");
}

/// An Intel Arc card gets the Vulkan build, pinned to it through Mesa's device-select layer and
/// given `/dev/dri` in a container; the integrated Intel GPU beside it gets no engine and says why.
#[test]
fn an_intel_arc_card_runs_the_vulkan_build() {
    let plan = plan_json("arc-b580", &[]);
    let arc = group(&plan, "0000:03:00.0");
    assert_eq!(arc["choice"]["variant"], "vulkan", "{arc:#}");
    assert_eq!(arc["choice"]["launch"]["env"]["MESA_VK_DEVICE_SELECT"], "8086:e20b!", "{arc:#}");
    assert_eq!(arc["choice"]["launch"]["container"]["devices"], serde_json::json!(["/dev/dri"]), "{arc:#}");
    let reasons = arc["candidates"].to_string();
    assert!(reasons.contains("cuda build does not drive intel devices"), "{reasons}");

    // A discrete card newer than our table, its memory measured by xe: the portable Vulkan build
    // needs no target, so it serves (the CUDA and ROCm builds would need one).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    copy_tree(&host_fixture("arc-b580"), &root);
    let card_dir = std::fs::canonicalize(root.join("sys/bus/pci/devices/0000:03:00.0")).unwrap();
    std::fs::write(card_dir.join("device"), "0xe2ff\n").unwrap();
    let plan = json_of(&run_ok(lucebox().args(["plan", "--json", "--root"]).arg(&root)));
    let newer = group(&plan, "0000:03:00.0");
    assert_eq!(newer["choice"]["variant"], "vulkan", "{newer:#}");
    assert!(
        newer["candidates"].to_string().contains("target unknown; the vulkan build runs on any"),
        "{newer:#}"
    );

    // The 16 GB A770 (told by its memory window) runs the 16 GB tier, not the 8 GB card's model.
    let plan = plan_json("arc-a770-igpu", &[]);
    let arc = group(&plan, "0000:03:00.0");
    assert_eq!(arc["choice"]["variant"], "vulkan", "{plan:#}");
    assert_eq!(arc["choice"]["profile"], "qwen3.6-35b-a3b-moe-16g", "{arc:#}");
    let igpu = plan["unplanned"].as_array().unwrap().iter().find(|u| u["device"] == "0000:00:02.0");
    let why = igpu.unwrap_or_else(|| panic!("the integrated GPU is listed: {plan:#}"))["reason"].to_string();
    assert!(why.contains("integrated Intel graphics"), "{why}");
}
