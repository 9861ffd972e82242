//! `lucebox install-appliance` into a temp prefix, then `systemd-analyze verify` of the installed
//! unit against that prefix (with the host's own systemd units standing in for the OS's), and
//! `lucebox version --json`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const LUCEBOX: &str = env!("CARGO_BIN_EXE_lucebox");

fn lucebox(args: &[&str]) -> Output {
    let output = Command::new(LUCEBOX).args(args).output().expect("running lucebox");
    assert!(output.status.success(), "lucebox {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

fn install(prefix: &Path) {
    lucebox(&["install-appliance", "--prefix", prefix.to_str().unwrap()]);
}

/// `systemd-analyze verify` of the unit below `prefix`; returns (success, lines about the unit).
fn verify(prefix: &Path) -> (bool, Vec<String>) {
    // The OS's units (sysinit.target, docker.service...) that ours orders against.
    let system = prefix.join("usr/lib/systemd/system");
    if !system.exists() {
        fs::create_dir_all(system.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink("/usr/lib/systemd/system", &system).unwrap();
    }
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", prefix.display()))
        .arg("/etc/systemd/system/lucebox.service")
        .output()
        .expect("systemd-analyze (Debian package systemd) must be installed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let about_unit = stderr.lines().filter(|l| l.contains("lucebox.service")).map(str::to_string).collect();
    (output.status.success(), about_unit)
}

#[test]
fn installed_unit_passes_systemd_analyze_verify() {
    let prefix = tempfile::tempdir().unwrap();
    install(prefix.path());
    let (ok, complaints) = verify(prefix.path());
    assert!(ok && complaints.is_empty(), "verify failed: {complaints:#?}");

    let unit = fs::read_to_string(prefix.path().join("etc/systemd/system/lucebox.service")).unwrap();
    for line in [
        "Type=notify",
        "Restart=always",
        "Requires=docker.service",
        "ExecStopPost=/usr/local/bin/lucebox thermal reset",
        "ExecStart=/usr/local/bin/lucebox run",
    ] {
        assert!(unit.lines().any(|l| l == line), "unit lacks {line}");
    }
    assert!(unit.lines().any(|l| l.starts_with("WatchdogSec=")), "unit lacks WatchdogSec");
    assert!(unit.lines().any(|l| l.starts_with("After=") && l.contains("docker.service")));
}

#[test]
fn verify_catches_a_broken_unit() {
    // The check above must be able to fail: a unit with a typo and a missing binary.
    let prefix = tempfile::tempdir().unwrap();
    install(prefix.path());
    let unit = prefix.path().join("etc/systemd/system/lucebox.service");
    let text = fs::read_to_string(&unit).unwrap().replace("Restart=always", "Restrat=always");
    fs::write(&unit, text).unwrap();
    let (_, complaints) = verify(prefix.path());
    assert!(complaints.iter().any(|l| l.contains("Restrat")), "{complaints:#?}");
    fs::remove_file(prefix.path().join("usr/local/bin/lucebox")).unwrap();
    let (ok, _) = verify(prefix.path());
    assert!(!ok, "a unit whose ExecStart is missing must fail verification");
}

#[test]
fn install_lays_down_binary_hooks_and_config_and_keeps_an_edited_config() {
    let prefix = tempfile::tempdir().unwrap();
    install(prefix.path());
    let p = prefix.path();
    let binary = p.join("usr/local/bin/lucebox");
    assert_eq!(fs::read(&binary).unwrap(), fs::read(LUCEBOX).unwrap(), "the installed binary is this one");
    let hooks = p.join("usr/local/lib/lucebox/firmware-hooks");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware-hooks");
    for board in ["framework-desktop", "sixunited-axb35"] {
        for hook in ["boot", "set-fan", "fan-auto", "power-limit", "engine-crashed", "shutdown"] {
            let installed = hooks.join(board).join(hook);
            let mode = fs::metadata(&installed).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o755, "{}", installed.display());
            assert_eq!(fs::read(&installed).unwrap(), fs::read(shipped.join(board).join(hook)).unwrap());
        }
    }
    assert!(hooks.join("lib/hook.sh").is_file());
    let config = p.join("etc/lucebox/lucebox.toml");
    assert!(fs::read_to_string(&config).unwrap().contains("appliance = true"));

    fs::write(&config, "appliance = true\n# mine\n").unwrap();
    install(p);
    assert_eq!(
        fs::read_to_string(&config).unwrap(),
        "appliance = true\n# mine\n",
        "reinstall keeps the config"
    );
}

#[test]
fn version_json_reports_build_and_image_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("absent.json");
    let out = lucebox(&["version", "--json", "--image-provenance", none.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    if head.status.success() {
        assert_eq!(v["git_commit"], String::from_utf8_lossy(&head.stdout).trim());
    }
    assert_eq!(v["engine_pins"]["LLAMA_CPP_COMMIT"], pin("LLAMA_CPP_COMMIT"));
    assert!(v["image"].is_null());

    let image = dir.path().join("provenance.json");
    fs::write(
        &image,
        r#"{"title":"lucebox","version":"0.1.0","revision":"abc","created":"2026-01-01T00:00:00Z",
            "variants":["cpu"],"engine_commits":{"llama.cpp":"0c1e57098bba"}}"#,
    )
    .unwrap();
    let out = lucebox(&["version", "--json", "--image-provenance", image.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["image"]["variants"], serde_json::json!(["cpu"]));
    assert_eq!(v["image"]["engine_commits"]["llama.cpp"], "0c1e57098bba");
}

/// A pin from `ci/pins.env` or the engine recipe pins it sources.
fn pin(key: &str) -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    ["ci/pins.env", "engine/recipes/upstream.env"]
        .iter()
        .filter_map(|f| fs::read_to_string(repo.join(f)).ok())
        .find_map(|pins| pins.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).map(str::to_string))
        .unwrap_or_else(|| panic!("{key} is pinned nowhere"))
}
