//! `lucebox detect` against captured host trees, the fake NVML, damaged trees and this machine.

mod common;

use common::*;
use serde_json::Value;

fn detect_json(fixture: &str) -> Value {
    json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(host_fixture(fixture))))
}

fn device<'a>(detection: &'a Value, id: &str) -> &'a Value {
    detection["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .unwrap_or_else(|| panic!("no device {id} in {detection:#}"))
}

/// `detect --json` of the tree at `root` with the fake NVML `lib` answering from its `nvml.json`.
fn detect_with_fake_nvml(root: &std::path::Path, lib: &std::path::Path) -> Value {
    json_of(&run_ok(
        lucebox()
            .args(["detect", "--json", "--root"])
            .arg(root)
            .arg("--nvml-lib")
            .arg(lib)
            .env("FAKE_NVML_CONFIG", root.join("nvml.json")),
    ))
}

fn gpus(detection: &Value) -> Vec<&Value> {
    detection["devices"].as_array().unwrap().iter().filter(|d| d["vendor"] != "cpu").collect()
}

/// (fixture, PCI address, model, arch, dedicated MiB, shared MiB, integrated)
const EXPECTED: &[(&str, &str, &str, &str, u64, u64, bool)] = &[
    ("rtx3090-desktop", "0000:01:00.0", "RTX 3090", "sm_86", 24576, 0, false),
    ("rtx2080ti", "0000:01:00.0", "RTX 2080 Ti", "sm_75", 11264, 0, false),
    ("rtx5090", "0000:01:00.0", "RTX 5090", "sm_120", 32607, 0, false),
    ("r9700", "0000:03:00.0", "Radeon AI PRO R9700", "gfx1201", 32624, 0, false),
    ("strix-halo-128g", "0000:c3:00.0", "Radeon 8060S", "gfx1151", 512, 122880, true),
    ("lucebox-r9700-strix", "0000:03:00.0", "Radeon AI PRO R9700", "gfx1201", 32624, 0, false),
    ("lucebox-r9700-strix", "0000:c3:00.0", "Radeon 8060S", "gfx1151", 512, 122880, true),
    ("unknown-amd", "0000:0d:00.0", "AMD GPU 1002:73bf", "gfx1030", 16368, 0, false),
    ("arc-b580", "0000:03:00.0", "Arc B580", "xe2-hpg", 12288, 0, false),
    ("arc-a770-igpu", "0000:03:00.0", "Arc A770", "xe-hpg", 16384, 0, false),
];

#[test]
fn every_fixture_gives_the_right_model_arch_memory_and_integration() {
    for &(fixture, id, model, arch, dedicated, shared, integrated) in EXPECTED {
        let detection = detect_json(fixture);
        let d = device(&detection, id);
        assert_eq!(d["model"], model, "{fixture} {id}");
        assert_eq!(d["arch"], arch, "{fixture} {id}");
        assert_eq!(d["memory"]["dedicated_mib"], dedicated, "{fixture} {id}");
        assert_eq!(d["memory"]["shared_mib"], shared, "{fixture} {id}");
        assert_eq!(d["integrated"], integrated, "{fixture} {id}");
        let usable = d["memory"]["usable_mib"].as_u64().unwrap();
        assert!(usable > 0 && usable <= dedicated + shared, "{fixture} {id}: usable {usable}");
        // Every device of the contract carries these fields.
        for key in [
            "id",
            "vendor",
            "model",
            "pci_id",
            "arch",
            "integrated",
            "memory",
            "driver",
            "sources",
            "warnings",
        ] {
            assert!(d.get(key).is_some(), "{fixture} {id}: missing {key}");
        }
    }
}

#[test]
fn unified_memory_counts_the_gtt_pool() {
    let detection = detect_json("strix-halo-128g");
    let igpu = device(&detection, "0000:c3:00.0");
    // A 512 MiB carve-out must not hide the 120 GiB the GPU can map.
    assert!(igpu["memory"]["usable_mib"].as_u64().unwrap() > 100_000, "{igpu:#}");
    assert_eq!(detection["host"]["memory_mib"], 130_560);
    assert_eq!(detection["host"]["board"]["vendor"], "Framework");
}

#[test]
fn two_gpu_lucebox_lists_both_and_the_cpu() {
    let detection = detect_json("lucebox-r9700-strix");
    assert_eq!(gpus(&detection).len(), 2);
    assert!(detection["devices"].as_array().unwrap().iter().any(|d| d["id"] == "cpu"));
}

#[test]
fn machine_without_gpu_has_only_the_cpu() {
    let detection = detect_json("no-gpu");
    assert!(gpus(&detection).is_empty(), "{detection:#}");
    let cpu = device(&detection, "cpu");
    assert_eq!(cpu["model"], "Intel(R) Xeon(R) E-2388G CPU @ 3.20GHz");
    assert_eq!(detection["host"]["cores"], 8);
    assert_eq!(detection["host"]["threads"], 16);
    assert_eq!(detection["host"]["memory_mib"], 32_000);
}

#[test]
fn nvidia_without_nvml_is_marked_expected_not_measured() {
    let detection = detect_json("rtx3090-desktop");
    let gpu = device(&detection, "0000:01:00.0");
    assert_eq!(gpu["memory"]["measured"], false);
    assert_eq!(gpu["sources"], serde_json::json!(["pci", "proc-nvidia"]));
    assert_eq!(gpu["driver"]["version"], "570.124.04");
    assert_eq!(gpu["uid"], "GPU-7a1c3f52-3e0d-9b1e-4f62-0a9d3c5e8b21");
}

#[test]
fn nvml_path_through_the_real_nvml_wrapper_and_a_fake_library() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake_nvml(dir.path());
    for fixture in ["rtx3090-desktop", "rtx2080ti", "rtx5090"] {
        let root = host_fixture(fixture);
        let detection = detect_with_fake_nvml(&root, &lib);
        let config: Value = serde_json::from_slice(&std::fs::read(root.join("nvml.json")).unwrap()).unwrap();
        let want = &config["devices"][0];
        let gpu = device(&detection, "0000:01:00.0");
        assert!(gpu["sources"].as_array().unwrap().contains(&Value::from("nvml")), "{fixture}: {gpu:#}");
        assert_eq!(gpu["memory"]["measured"], true, "{fixture}");
        assert_eq!(gpu["memory"]["dedicated_mib"], want["memory_total_mib"], "{fixture}");
        assert_eq!(
            gpu["arch"],
            format!("sm_{}{}", want["cc_major"], want["cc_minor"]),
            "{fixture}: arch comes from NVML's compute capability"
        );
        assert_eq!(gpu["uid"], want["uuid"], "{fixture}");
        assert_eq!(gpu["telemetry"]["fans"], want["num_fans"], "{fixture}");
        assert_eq!(gpu["telemetry"]["temperature_c"].as_f64(), want["temperature_c"].as_f64(), "{fixture}");
        assert_eq!(
            gpu["telemetry"]["power_cap_w"].as_f64().map(|w| w * 1000.0),
            want["power_limit_mw"].as_f64(),
            "{fixture}: the enforced power limit, in watts"
        );
        assert_eq!(gpu["accessible"], true, "{fixture}: {gpu:#}");
        assert_eq!(detection["host"]["drivers"]["nvidia"], config["driver_version"], "{fixture}");
        assert!(detection["host"]["drivers"]["cuda"].is_string(), "{fixture}");
    }
}

#[test]
fn nvml_that_fails_to_initialise_is_a_warning_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake_nvml(dir.path());
    let config = dir.path().join("nvml.json");
    std::fs::write(&config, r#"{"init_error": 9, "devices": []}"#).unwrap();
    let detection = json_of(&run_ok(
        lucebox()
            .args(["detect", "--json", "--root"])
            .arg(host_fixture("rtx3090-desktop"))
            .arg("--nvml-lib")
            .arg(&lib)
            .env("FAKE_NVML_CONFIG", &config),
    ));
    let warnings = detection["warnings"].to_string();
    assert!(warnings.contains("nvml"), "{warnings}");
    let gpu = device(&detection, "0000:01:00.0");
    assert_eq!(gpu["model"], "RTX 3090", "PCI still names the card");
    assert_eq!(gpu["accessible"], false);
}

#[test]
fn missing_nvml_library_is_a_warning() {
    let detection = json_of(&run_ok(
        lucebox()
            .args(["detect", "--json", "--root"])
            .arg(host_fixture("rtx3090-desktop"))
            .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]),
    ));
    assert!(detection["warnings"].to_string().contains("/nonexistent/libnvidia-ml.so.1"));
    assert_eq!(gpus(&detection).len(), 1);
}

#[test]
fn gpus_a_container_cannot_use_name_the_fix() {
    let detection = detect_json("container-no-gpu-access");
    assert_eq!(detection["host"]["in_container"], true);
    let nvidia = device(&detection, "0000:01:00.0");
    assert_eq!(nvidia["accessible"], false);
    assert!(nvidia["warnings"].to_string().contains("--gpus all"), "{nvidia:#}");
    let amd = device(&detection, "0000:0d:00.0");
    assert_eq!(amd["accessible"], false);
    assert!(amd["warnings"].to_string().contains("--device /dev/kfd --device /dev/dri"), "{amd:#}");
    // The human table says it too.
    let table = String::from_utf8(
        run_ok(lucebox().args(["detect", "--root"]).arg(host_fixture("container-no-gpu-access"))).stdout,
    )
    .unwrap();
    assert!(table.contains("--gpus all") && table.contains("/dev/kfd"), "{table}");
}

#[test]
fn garbage_and_missing_files_become_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    copy_tree(&host_fixture("lucebox-r9700-strix"), &root);
    let r9700 = root.join("sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0");
    std::fs::write(r9700.join("mem_info_vram_total"), "lots of memory\n").unwrap();
    std::fs::write(root.join("sys/class/kfd/kfd/topology/nodes/1/properties"), [0xff, 0xfe, 0x00]).unwrap();
    std::fs::write(root.join("proc/cpuinfo"), [0x80, 0x81]).unwrap();
    std::fs::remove_file(root.join("proc/meminfo")).unwrap();
    // A bus entry whose class file is garbage, and one that dangles.
    let host_bridge = root.join("sys/devices/pci0000:00/0000:00:00.0");
    std::fs::write(host_bridge.join("class"), "0xZZZ\n").unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/nowhere",
        root.join("sys/bus/pci/devices/0000:09:00.0"),
    )
    .unwrap();

    let detection = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let all_warnings = detection.to_string();
    for expected in ["mem_info_vram_total", "/proc/cpuinfo", "MemTotal", "0000:00:00.0", "0000:09:00.0"] {
        assert!(all_warnings.contains(expected), "no warning naming {expected}: {detection:#}");
    }
    // Both GPUs are still found; the R9700 falls back to its specified memory.
    let r9700 = device(&detection, "0000:03:00.0");
    assert_eq!(r9700["model"], "Radeon AI PRO R9700");
    assert_eq!(r9700["arch"], "gfx1201", "from the table when KFD is unreadable");
    assert_eq!(r9700["memory"]["measured"], false);
    assert_eq!(device(&detection, "0000:c3:00.0")["arch"], "gfx1151");
}

/// `h200-vm` was captured on a real H200 (a Firecracker VM, the open kernel module 580.159.04)
/// by `ci/device-check.sh`: the tree, NVML's answers (`nvml.json`) and what `lucebox detect`
/// printed there through the real NVML (`live-detect.json`). With the fake NVML fed those
/// answers, the tree must detect as the machine did.
#[test]
fn a_host_captured_on_a_real_h200_detects_as_it_did_live() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake_nvml(dir.path());
    let root = host_fixture("h200-vm");
    let captured = detect_with_fake_nvml(&root, &lib);
    let live: Value = serde_json::from_slice(&std::fs::read(root.join("live-detect.json")).unwrap()).unwrap();
    let facts = |d: &Value| {
        let keys =
            ["id", "vendor", "model", "pci_id", "arch", "memory", "driver", "sources", "accessible", "uid"];
        keys.map(|k| (k, d[k].clone())).to_vec()
    };
    let (live_gpu, captured_gpu) = (device(&live, "0000:00:06.0"), device(&captured, "0000:00:06.0"));
    assert_eq!(facts(captured_gpu), facts(live_gpu));
    assert_eq!(captured_gpu["arch"], "sm_90");
    assert_eq!(captured["host"]["drivers"]["cuda"], live["host"]["drivers"]["cuda"]);
}

/// Without NVML the open kernel module's `/proc/driver/nvidia/version` still names the driver.
#[test]
fn the_open_kernel_module_names_the_driver_without_nvml() {
    let detection = detect_json("h200-vm");
    let gpu = device(&detection, "0000:00:06.0");
    assert_eq!(gpu["sources"], serde_json::json!(["pci", "proc-nvidia"]));
    assert_eq!(gpu["model"], "H200", "from /proc/driver/nvidia/gpus/*/information");
    assert_eq!(gpu["driver"]["version"], "580.159.04");
    assert_eq!(detection["host"]["drivers"]["nvidia"], "580.159.04");
}

/// `capture_host.py` is how a real machine becomes a fixture: re-capturing each tree through it
/// must keep everything `lucebox detect` sees.
#[test]
fn recapturing_a_tree_keeps_what_detect_sees() {
    let fixtures = repo_root().join("tests/fixtures/hosts");
    let out = tempfile::tempdir().unwrap();
    let detect_text = |root: &std::path::Path| {
        let output = run_ok(lucebox().args(["detect", "--json", "--root"]).arg(root));
        String::from_utf8(output.stdout).unwrap().replace(&root.display().to_string(), "<root>")
    };
    let mut compared = 0;
    for entry in std::fs::read_dir(&fixtures).unwrap().flatten().filter(|e| e.path().is_dir()) {
        let copy = out.path().join(entry.file_name());
        let status = std::process::Command::new("python3")
            .arg(fixtures.join("capture_host.py"))
            .arg(&copy)
            .arg(entry.path())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run python3");
        assert!(status.success(), "capture of {:?}", entry.file_name());
        assert_eq!(detect_text(&copy), detect_text(&entry.path()), "{:?}", entry.file_name());
        compared += 1;
    }
    assert!(compared >= 10, "{compared}");
}

#[test]
fn json_snapshots_of_every_fixture() {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("tests/fixtures/hosts"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        let detection = detect_json(&name);
        insta::with_settings!({snapshot_path => repo_root().join("tests/snapshots"), prepend_module_to_snapshot => false}, {
            insta::assert_json_snapshot!(format!("detect-{name}"), detection);
        });
    }
}

#[test]
fn this_machine_detects_the_cpu_and_exits_zero() {
    let detection = json_of(&run_ok(lucebox().args(["detect", "--json"])));
    let cpu = device(&detection, "cpu");
    assert!(cpu["memory"]["usable_mib"].as_u64().unwrap() > 0);
    assert!(detection["host"]["cores"].as_u64().unwrap() >= 1);
    assert!(detection["host"]["memory_mib"].as_u64().unwrap() > 0);
    let table = run_ok(lucebox().arg("detect"));
    assert!(String::from_utf8_lossy(&table.stdout).contains("cpu"));
}

/// A container given one GPU of two (a Kubernetes device plugin, `--device /dev/dri/renderD128`)
/// still sees both on PCI: the one whose own render node is missing is not usable, and says so.
#[test]
fn an_amd_gpu_whose_own_render_node_is_missing_is_not_usable() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    copy_tree(&host_fixture("lucebox-r9700-strix"), &root);
    std::fs::remove_file(root.join("dev/dri/renderD129")).unwrap();
    let detection = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let r9700 = device(&detection, "0000:03:00.0");
    assert_eq!(r9700["accessible"], false, "{r9700:#}");
    assert!(r9700["warnings"].to_string().contains("/dev/dri/renderD129"), "{r9700:#}");
    assert_eq!(device(&detection, "0000:c3:00.0")["accessible"], true, "its render node is here");
}

/// Docker Desktop on Windows (WSL2): the GPU is lent through `/dev/dxg` and is not on Linux's
/// PCI bus, which shows only Microsoft's paravirtual adapter. NVML names the card; it is usable,
/// reached by its UUID with the profile's WSL2 settings, and the adapter is not listed beside it.
/// Without NVML the adapter is listed, unusable, with what to install.
#[test]
fn a_gpu_windows_lends_to_wsl2_is_found_through_nvml() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake_nvml(dir.path());
    let root = host_fixture("wsl2-rtx4090");
    let detection = detect_with_fake_nvml(&root, &lib);
    let gpu = device(&detection, "0000:01:00.0");
    assert_eq!(gpu["model"], "RTX 4090", "{gpu:#}");
    assert_eq!(gpu["arch"], "sm_89", "{gpu:#}");
    assert_eq!(gpu["pci_id"], "10de:2684", "{gpu:#}");
    assert_eq!(gpu["memory"]["dedicated_mib"], 24564);
    assert_eq!(gpu["memory"]["measured"], true);
    assert_eq!(gpu["accessible"], true, "no /dev/nvidia* under WSL2, and none needed: {gpu:#}");
    assert_eq!(gpu["sources"], serde_json::json!(["nvml", "wsl-dxg"]));
    assert_eq!(gpu["uid"], "GPU-3f9b2c71-8e4d-4a06-b5c2-7d1e0a9f6c43");
    assert_eq!(gpu["telemetry"]["power_cap_w"], Value::Null, "NVML says no enforced limit: {gpu:#}");
    assert!(gpu["warnings"][0].as_str().unwrap().contains("Windows driver keeps its fans"), "{gpu:#}");
    assert_eq!(gpus(&detection).len(), 1, "the paravirtual adapter is the same GPU: {detection:#}");
    assert_eq!(detection["host"]["drivers"]["nvidia"], "572.83");

    let plan = json_of(&run_ok(
        lucebox()
            .args(["plan", "--json", "--root"])
            .arg(&root)
            .arg("--nvml-lib")
            .arg(&lib)
            .env("FAKE_NVML_CONFIG", root.join("nvml.json")),
    ));
    let group = plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["devices"][0] == "0000:01:00.0")
        .unwrap_or_else(|| panic!("no engine for the lent GPU: {plan:#}"));
    assert_eq!(group["choice"]["variant"], "cuda", "{group:#}");
    assert_eq!(
        group["choice"]["launch"]["env"]["CUDA_VISIBLE_DEVICES"], "GPU-3f9b2c71-8e4d-4a06-b5c2-7d1e0a9f6c43",
        "{group:#}"
    );
    // The profile's `[engine.wsl]`: the smaller context and DDTree budget of the engine's WSL2 tier.
    let args: Vec<&str> =
        group["choice"]["launch"]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let after = |flag: &str| args.iter().position(|a| *a == flag).map(|i| args[i + 1]);
    assert_eq!(group["choice"]["profile"], "qwen3.6-27b-dflash-24g", "{group:#}");
    assert_eq!((after("--max-ctx"), after("--ddtree-budget")), (Some("65536"), Some("16")), "{args:?}");

    let without_nvml = detect_json("wsl2-rtx4090");
    let adapter = device(&without_nvml, "8756:00:00.0");
    assert_eq!(adapter["accessible"], false, "{adapter:#}");
    assert_eq!(adapter["model"], "WSL2 paravirtual GPU adapter");
    assert!(adapter["warnings"][0].as_str().unwrap().contains("--gpus all"), "{adapter:#}");
    assert!(!without_nvml["devices"].as_array().unwrap().iter().any(|d| d["vendor"] == "nvidia"));
}

/// Intel: the xe driver's per-tile VRAM is measured; mainline i915 publishes none, so a known
/// card's size is its specification and says why. The A770 comes in 8 and 16 GB under one id:
/// the memory window Resizable BAR grew (PCI region 2) tells them apart, and without it the
/// smaller counts. Integrated Intel graphics are listed, not used. In a container the card needs
/// its render node: without `/dev/dri` the fix is named, and a container given the other GPU's
/// node says so.
#[test]
fn intel_arc_cards_are_usable_and_integrated_intel_graphics_are_listed_only() {
    let b580 = detect_json("arc-b580");
    let card = device(&b580, "0000:03:00.0");
    assert_eq!(card["vendor"], "intel");
    assert_eq!(card["accessible"], true, "{card:#}");
    assert_eq!(card["memory"]["measured"], true, "tile0/physical_vram_size_bytes: {card:#}");
    assert_eq!(card["sources"], serde_json::json!(["pci", "xe-sysfs"]));
    assert_eq!(card["driver"]["name"], "xe");

    let a770 = detect_json("arc-a770-igpu");
    let card = device(&a770, "0000:03:00.0");
    assert_eq!(card["accessible"], true, "{card:#}");
    assert_eq!(
        (card["memory"]["dedicated_mib"].as_u64(), card["memory"]["measured"].as_bool()),
        (Some(16384), Some(false)),
        "a 16 GiB window: {card:#}"
    );
    assert_eq!(card["warnings"].as_array().map(Vec::len), Some(1), "{card:#}");
    assert!(card["warnings"][0].as_str().unwrap().contains("16 GB Arc A770"), "{card:#}");
    let igpu = device(&a770, "0000:00:02.0");
    assert_eq!((igpu["integrated"].as_bool(), igpu["accessible"].as_bool()), (Some(true), Some(false)));
    assert!(igpu["warnings"][0].as_str().unwrap().contains("CPU engine serves"), "{igpu:#}");

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    copy_tree(&host_fixture("arc-a770-igpu"), &root);
    std::fs::write(root.join(".dockerenv"), "").unwrap();
    // `--device /dev/dri/renderD128`: the integrated GPU's node, not the Arc card's.
    std::fs::remove_file(root.join("dev/dri/renderD129")).unwrap();
    let given_the_other = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let card = device(&given_the_other, "0000:03:00.0");
    assert_eq!(card["accessible"], false, "{card:#}");
    assert!(card["warnings"].to_string().contains("/dev/dri/renderD129 is not here"), "{card:#}");
    // No `--device /dev/dri` at all.
    std::fs::remove_dir_all(root.join("dev/dri")).unwrap();
    let without = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let card = device(&without, "0000:03:00.0");
    assert_eq!(card["accessible"], false, "{card:#}");
    assert!(card["warnings"].to_string().contains("--device /dev/dri"), "{card:#}");

    // Resizable BAR off: the firmware's 256 MiB window tells the A770's versions apart no more,
    // so the smaller counts, and the warning says how to turn it on. A garbled table is named.
    let window_of = |root: &std::path::Path, name: &str| {
        let card_dir = std::fs::canonicalize(root.join("sys/bus/pci/devices/0000:03:00.0")).unwrap();
        let window = card_dir.join("resource");
        let regions = std::fs::read_to_string(&window).unwrap();
        (window, regions.replace(name, "0x000000600fffffff"))
    };
    let root = dir.path().join("no-rebar");
    copy_tree(&host_fixture("arc-a770-igpu"), &root);
    let (window, small) = window_of(&root, "0x00000063ffffffff");
    std::fs::write(&window, small).unwrap();
    let no_rebar = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let card = device(&no_rebar, "0000:03:00.0");
    assert_eq!(card["memory"]["dedicated_mib"].as_u64(), Some(8192), "{card:#}");
    let warnings = card["warnings"].to_string();
    assert!(warnings.contains("8 or 16 GB"), "{warnings}");
    assert!(warnings.contains("Resizable BAR is off") && warnings.contains("is 256 MiB"), "{warnings}");
    std::fs::write(&window, "0x0000006000000000 16G\n".repeat(3)).unwrap();
    let garbled = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let card = device(&garbled, "0000:03:00.0");
    let warnings = card["warnings"].to_string();
    assert!(warnings.contains("0000:03:00.0/resource") && warnings.contains("16G"), "{warnings}");
    assert_eq!(card["memory"]["dedicated_mib"].as_u64(), Some(8192), "{card:#}");
    assert_eq!(card["accessible"], true, "{card:#}");

    // The workstation Battlemage cards people buy for local models: the Arc Pro B60 (24 GB).
    let root = dir.path().join("b60");
    copy_tree(&host_fixture("arc-b580"), &root);
    let card_dir = std::fs::canonicalize(root.join("sys/bus/pci/devices/0000:03:00.0")).unwrap();
    std::fs::write(card_dir.join("device"), "0xe211\n").unwrap();
    std::fs::write(card_dir.join("tile0/physical_vram_size_bytes"), format!("{}\n", 24u64 << 30)).unwrap();
    let b60 = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let card = device(&b60, "0000:03:00.0");
    assert_eq!(
        (card["model"].as_str(), card["arch"].as_str()),
        (Some("Arc Pro B60"), Some("xe2-hpg")),
        "{card:#}"
    );
    assert_eq!(card["memory"]["dedicated_mib"].as_u64(), Some(24576), "{card:#}");
    assert_eq!(card["accessible"], true, "{card:#}");

    // A tile size that is not a number is named, and the table's size stands in.
    let root = dir.path().join("garbled");
    copy_tree(&host_fixture("arc-b580"), &root);
    let card_dir = std::fs::canonicalize(root.join("sys/bus/pci/devices/0000:03:00.0")).unwrap();
    let tile = card_dir.join("tile0/physical_vram_size_bytes");
    std::fs::write(&tile, "12 GiB\n").unwrap();
    let garbled = json_of(&run_ok(lucebox().args(["detect", "--json", "--root"]).arg(&root)));
    let card = device(&garbled, "0000:03:00.0");
    let warnings = card["warnings"].to_string();
    assert!(warnings.contains("tile0/physical_vram_size_bytes") && warnings.contains("12 GiB"), "{warnings}");
    assert_eq!(
        (card["memory"]["dedicated_mib"].as_u64(), card["memory"]["measured"].as_bool()),
        (Some(12288), Some(false))
    );
    assert_eq!(card["accessible"], true, "{card:#}");
}
