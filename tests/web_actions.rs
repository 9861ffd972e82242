//! The web API's state-changing actions against a real `lucebox run` (CPU llama-server, tiny
//! model, 127.0.0.1): restart an engine, switch its profile (persisted pin), apply a signed OTA
//! update whose engine never gets healthy (rolled back by the supervisor's own health gate) and
//! one that does (committed). Fan-mode overrides are checked on the control loop with a captured
//! hwmon tree (a CPU-only run has no fan to drive).

mod common;
#[path = "ota_support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Engine start plus model load of the tiny model on a loaded CI machine.
const READY_WITHIN: Duration = Duration::from_secs(90);

fn get(port: u16, path: &str) -> Value {
    let (status, body) = http(port, "GET", path, "").unwrap_or_else(|| panic!("GET {path}: no answer"));
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn post(rig: &RunRig, path: &str, body: &str) -> (u16, Value) {
    let token = std::fs::read_to_string(rig.state.join("api-token")).unwrap();
    let auth = format!("Authorization: Bearer {}\r\n", token.trim());
    let (status, body) = http_with(rig.web_port, "POST", path, &auth, body).expect("web answers");
    (status, serde_json::from_str(&body).unwrap_or(Value::String(body)))
}

fn engine(rig: &RunRig) -> Value {
    get(rig.web_port, "/api/v1/engines")["engine-cpu"].clone()
}

fn events(rig: &RunRig) -> String {
    get(rig.web_port, "/api/v1/events")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{}\n", e["message"]))
        .collect()
}

/// Waits until engine-cpu is ready on a process other than `old_pid`; returns its pid.
fn ready_engine(rig: &RunRig, old_pid: Option<&str>, within: Duration) -> String {
    let mut pid = String::new();
    wait_for("engine-cpu ready", within, || {
        // The web starts after detection and the smoke start: no answer yet is fine.
        let Some((200, body)) = http(rig.web_port, "GET", "/api/v1/engines", "") else { return false };
        let e = serde_json::from_str::<Value>(&body).unwrap()["engine-cpu"].clone();
        let instance = e["instance"].as_str().unwrap_or_default().to_string();
        let fresh = old_pid.is_none_or(|old| old != instance);
        if e["state"]["state"] == "ready" && fresh && !instance.is_empty() {
            pid = instance;
            true
        } else {
            false
        }
    });
    pid
}

/// The `control` events that give a time (the supervisor's own measure of an action).
fn timed_events(rig: &RunRig) -> Vec<String> {
    get(rig.web_port, "/api/v1/events")
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "control" && e["message"].as_str().is_some_and(|m| m.contains(" ms")))
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}

fn chat_works(port: u16) -> bool {
    let body = r#"{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}"#;
    matches!(http(port, "POST", "/v1/chat/completions", body), Some((200, b)) if b.contains("\"choices\""))
}

fn process_alive(pid: &str) -> bool {
    let pid: i32 = pid.parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

#[test]
fn restart_needs_the_token_and_brings_the_engine_back_on_a_new_process() {
    let mut rig = RunRig::new();
    rig.spawn(rig.command());
    let old = ready_engine(&rig, None, READY_WITHIN);
    let restarts_before = engine(&rig)["restarts"].as_u64().unwrap();

    let (status, _) =
        http(rig.web_port, "POST", "/api/v1/engines/engine-cpu/restart", "").expect("web answers");
    assert_eq!(status, 401, "no token, no restart");
    assert_eq!(engine(&rig)["instance"], old.as_str());
    let (status, body) = post(&rig, "/api/v1/engines/engine-nope/restart", "");
    assert_eq!(status, 404, "{body}");
    assert!(body["message"].as_str().unwrap().contains("engine-cpu"), "names the engines: {body}");
    // A CPU-only run drives no fan.
    let (status, body) = post(&rig, "/api/v1/thermal/cpu/fan-mode", r#"{"mode":"full-speed"}"#);
    assert_eq!(status, 404, "{body}");

    let asked = Instant::now();
    let (status, body) = post(&rig, "/api/v1/engines/engine-cpu/restart", "");
    assert_eq!(status, 202, "{body}");
    let new = ready_engine(&rig, Some(&old), READY_WITHIN);
    let took = asked.elapsed();
    eprintln!("figure: API restart to ready on a new process: {} ms", took.as_millis());
    assert!(!process_alive(&old), "old engine {old} left running");
    assert_eq!(
        engine(&rig)["restarts"].as_u64().unwrap(),
        restarts_before,
        "a requested restart is not a failure"
    );
    assert!(chat_works(rig.engine_port), "engine serves after the restart");
    wait_for("the restart events", Duration::from_secs(10), || {
        let events = events(&rig);
        events.contains("restart requested through the API") && events.contains("restart done")
    });
    assert_ne!(old, new);
    eprintln!("figure (supervisor): {:?}", timed_events(&rig));
    assert!(rig.terminate(Duration::from_secs(30)).success());
}

fn write_profiles(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let tiny = std::fs::read_to_string(repo_root().join("profiles/tiny-cpu-test.toml")).unwrap();
    std::fs::write(dir.join("tiny-cpu-test.toml"), &tiny).unwrap();
    // The same model with a smaller context: a second eligible profile to switch to.
    std::fs::write(dir.join("tiny-cpu-small.toml"), tiny.replace("ctx = 512", "ctx = 256")).unwrap();
    // Needs more memory than any machine running this test has.
    std::fs::write(
        dir.join("huge-cpu.toml"),
        tiny.replace("min_usable_mib = 256", "min_usable_mib = 900000000"),
    )
    .unwrap();
}

#[test]
fn switching_the_profile_validates_persists_and_restarts_the_engine_on_it() {
    let mut rig = RunRig::new();
    let profiles = rig.dir.path().join("profiles");
    write_profiles(&profiles);
    let command = |rig: &RunRig| {
        let mut cmd = rig.command();
        cmd.env("LUCEBOX_PROFILES_DIR", &profiles);
        cmd
    };
    rig.spawn(command(&rig));
    let old = ready_engine(&rig, None, READY_WITHIN);
    let current = engine(&rig)["profile"].as_str().unwrap().to_string();
    let other = if current == "tiny-cpu-small" { "tiny-cpu-test" } else { "tiny-cpu-small" };

    let (status, body) = post(&rig, "/api/v1/pin", r#"{"device":"cpu","profile":"no-such-profile"}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body["message"].as_str().unwrap().contains("no-such-profile"), "{body}");
    let (status, body) = post(&rig, "/api/v1/pin", r#"{"device":"cpu","profile":"huge-cpu"}"#);
    assert_eq!(status, 400, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("not eligible") && message.contains("MiB"), "says why: {body}");
    let (status, body) =
        post(&rig, "/api/v1/pin", &format!(r#"{{"device":"cpu","profile":"{other}","variant":"nope"}}"#));
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(&rig, "/api/v1/pin", r#"{"device":"0000:99:00.0","profile":"tiny-cpu-test"}"#);
    assert_eq!(status, 404, "{body}");
    assert!(!rig.state.join("pins.toml").exists(), "rejected pins are not persisted");
    assert_eq!(engine(&rig)["instance"], old.as_str(), "rejected pins restart nothing");

    let asked = Instant::now();
    let (status, body) = post(&rig, "/api/v1/pin", &format!(r#"{{"device":"cpu","profile":"{other}"}}"#));
    assert_eq!(status, 202, "{body}");
    let new = ready_engine(&rig, Some(&old), READY_WITHIN);
    eprintln!("figure: profile switch to ready on the new profile: {} ms", asked.elapsed().as_millis());
    assert_eq!(engine(&rig)["profile"], other);
    let plan = get(rig.web_port, "/api/v1/plan");
    assert_eq!(plan["groups"][0]["choice"]["profile"], other, "the status plan follows");
    assert!(events(&rig).contains(&format!("pinned cpu to profile {other}")));
    assert!(chat_works(rig.engine_port));
    wait_for("the switch event", Duration::from_secs(10), || events(&rig).contains("profile switch done"));
    eprintln!("figure (supervisor): {:?}", timed_events(&rig));
    // Kept once the engine runs on it.
    let pins = std::fs::read_to_string(rig.state.join("pins.toml")).unwrap();
    assert!(pins.contains(other), "{pins}");

    // The pin survives a restart of the supervisor.
    assert!(rig.terminate(Duration::from_secs(30)).success());
    assert!(!process_alive(&new));
    rig.spawn(command(&rig));
    ready_engine(&rig, None, READY_WITHIN);
    assert_eq!(engine(&rig)["profile"], other, "pinned profile after a restart");
    assert!(rig.terminate(Duration::from_secs(30)).success());
}

/// A switch to a profile whose engine never gets ready (its model file is not a model) goes
/// back to the profile that ran before, keeps no pin, and says why. A device the supervisor's
/// environment pins answers 409: that pin outranks the API's.
#[test]
fn a_switch_whose_engine_fails_goes_back_and_an_environment_pin_is_not_overridden() {
    let mut rig = RunRig::new();
    let profiles = rig.dir.path().join("profiles");
    write_profiles(&profiles);
    let tiny = std::fs::read_to_string(repo_root().join("profiles/tiny-cpu-test.toml")).unwrap();
    let broken: String =
        tiny.lines()
            .filter(|l| !l.starts_with("sha256"))
            .map(|l| {
                if l.starts_with("file = ") {
                    "file = \"broken.gguf\"\n".to_string()
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
    std::fs::write(profiles.join("tiny-cpu-broken.toml"), broken).unwrap();
    std::fs::write(rig.models.join("broken.gguf"), "not a model\n").unwrap();
    let mut command = rig.command();
    command.env("LUCEBOX_PROFILES_DIR", &profiles).env("LUCEBOX_PIN__DEFAULT__PROFILE", "tiny-cpu-test");
    rig.spawn(command);
    let old = ready_engine(&rig, None, READY_WITHIN);
    assert_eq!(engine(&rig)["profile"], "tiny-cpu-test", "the environment's pin");

    let (status, body) = post(&rig, "/api/v1/pin", r#"{"device":"default","profile":"tiny-cpu-small"}"#);
    assert_eq!(status, 409, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("LUCEBOX_PIN__DEFAULT__PROFILE=tiny-cpu-test"),
        "{body}"
    );

    let (status, body) = post(&rig, "/api/v1/pin", r#"{"device":"cpu","profile":"tiny-cpu-broken"}"#);
    assert_eq!(status, 202, "{body}");
    wait_for("the switch undone", READY_WITHIN, || events(&rig).contains("the pin was not kept"));
    let said = events(&rig);
    assert!(said.contains("profile switch of cpu failed: engine-cpu"), "{said}");
    assert!(said.contains("back to engine-cpu on cpu/tiny-cpu-test"), "{said}");
    ready_engine(&rig, Some(&old), READY_WITHIN);
    assert_eq!(engine(&rig)["profile"], "tiny-cpu-test");
    assert!(chat_works(rig.engine_port));
    assert!(!rig.state.join("pins.toml").exists(), "a failed switch keeps no pin");
    // The control plane is free again.
    let (status, body) = post(&rig, "/api/v1/engines/engine-cpu/restart", "");
    assert_eq!(status, 202, "{body}");
    assert!(rig.terminate(Duration::from_secs(30)).success());
}

/// On a box with a GPU the CPU gets no engine whatever the profile; a `default` pin is for the
/// devices that get one (here the captured Strix Halo's iGPU, the CPU llama-server standing in
/// for its Vulkan build).
#[test]
fn a_default_pin_on_a_gpu_box_switches_the_gpus_engine() {
    let mut rig = RunRig::new();
    let (root, profiles) = rig.on_captured_host("strix-halo-128g", "vulkan");
    let mut command = rig.command();
    command.env("LUCEBOX_ROOT", &root).env("LUCEBOX_PROFILES_DIR", &profiles);
    rig.spawn(command);
    let name = "engine-0000-c3-00-0";
    let gpu_engine = || get(rig.web_port, "/api/v1/engines")[name].clone();
    wait_for("the GPU's engine ready", READY_WITHIN, || {
        http(rig.web_port, "GET", "/api/v1/engines", "").is_some()
            && gpu_engine()["state"]["state"] == "ready"
    });
    let current = gpu_engine()["profile"].as_str().unwrap().to_string();
    let other = if current == "tiny-vulkan-small" { "tiny-vulkan-test" } else { "tiny-vulkan-small" };
    let (status, body) = post(&rig, "/api/v1/pin", &format!(r#"{{"device":"default","profile":"{other}"}}"#));
    assert_eq!(status, 202, "{body}");
    assert!(body["message"].as_str().unwrap().contains(name), "{body}");
    wait_for("the switch done", READY_WITHIN, || events(&rig).contains("profile switch done"));
    assert_eq!(gpu_engine()["profile"], other);
    assert_eq!(gpu_engine()["state"]["state"], "ready");
    let pins = std::fs::read_to_string(rig.state.join("pins.toml")).unwrap();
    assert!(pins.contains("[pin.default]") && pins.contains(other), "{pins}");
    assert!(rig.terminate(Duration::from_secs(30)).success());
}

/// A profile set for the CPU engine whose one profile loads `model` from the models directory.
fn cpu_set(dir: &Path, version: u64, model: &str) {
    let tiny = std::fs::read_to_string(repo_root().join("profiles/tiny-cpu-test.toml")).unwrap();
    let profile = tiny
        .lines()
        .filter(|l| !l.starts_with("sha256"))
        .map(|l| if l.starts_with("file = ") { format!("file = \"{model}\"") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    support::make_set(dir, version, &profile, &[]);
    std::fs::copy(repo_root().join("engine/variants.toml"), dir.join("variants.toml")).unwrap();
}

fn ota(rig: &RunRig) -> Value {
    get(rig.web_port, "/api/v1/ota")
}

#[test]
fn ota_apply_through_the_api_rolls_back_an_unhealthy_set_and_commits_a_healthy_one() {
    let mut rig = RunRig::new();
    let repo = rig.dir.path().join("repo");
    let sets = rig.dir.path().join("sets");
    // Signed and hashed correctly, but not a model: the engine exits while loading it.
    std::fs::write(rig.models.join("corrupt.gguf"), vec![0x5a; 4096]).unwrap();
    cpu_set(&sets.join("v1"), 1, "corrupt.gguf");
    cpu_set(&sets.join("v2"), 2, "tiny-llama.gguf");
    cpu_set(&sets.join("v3"), 3, "tiny-llama.gguf");
    let v3_profile = sets.join("v3/profiles/tiny.toml");
    let text = std::fs::read_to_string(&v3_profile).unwrap().replace("ctx = 512", "ctx = 256");
    std::fs::write(&v3_profile, text).unwrap();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(support::publish(&sets.join("v1"), &repo, &support::PublishSpec::default()));
    let mut cmd = rig.command();
    cmd.env("LUCEBOX_OTA__REPOSITORY", &repo).env("LUCEBOX_OTA__TRUSTED_ROOT", repo.join("root.json"));
    rig.spawn(cmd);
    let first = ready_engine(&rig, None, READY_WITHIN);
    assert_eq!(engine(&rig)["profile"], "tiny-cpu-test", "built-in profiles before any update");

    // The CLI's own gate restarts no engines: beside a running supervisor it refuses and names
    // the API, and installs nothing.
    let cli = lucebox()
        .args(["ota", "apply", "--health-cmd", "/bin/true", "--repo"])
        .arg(&repo)
        .env("LUCEBOX_STATE_DIR", &rig.state)
        .env("LUCEBOX_WEB__PORT", rig.web_port.to_string())
        .env("LUCEBOX_OTA__TRUSTED_ROOT", repo.join("root.json"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stderr);
    assert!(!cli.status.success() && said.contains("/api/v1/ota/apply"), "{said}");
    assert_eq!(ota(&rig)["active_set"], Value::Null, "the refused CLI installed nothing");

    let (status, _) = http(rig.web_port, "POST", "/api/v1/ota/apply", "").expect("web answers");
    assert_eq!(status, 401);
    let asked = Instant::now();
    let (status, body) = post(&rig, "/api/v1/ota/apply", "");
    assert_eq!(status, 202, "{body}");
    let (status, body) = post(&rig, "/api/v1/engines/engine-cpu/restart", "");
    assert_eq!(status, 423, "one action at a time: {body}");
    wait_for("the bad set rolled back", READY_WITHIN, || ota(&rig)["state"]["state"] == "rolled-back");
    let rolled_back = asked.elapsed();
    let state = ota(&rig);
    let reason = state["state"]["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("engine-cpu"), "names the engine: {state}");
    assert_eq!(state["state"]["version"], 1);
    assert!(state["active_set"].is_null(), "no set committed: {state}");
    let back = ready_engine(&rig, Some(&first), READY_WITHIN);
    eprintln!(
        "figure: OTA apply to rolled back: {} ms; to the engine serving the previous set again: {} ms",
        rolled_back.as_millis(),
        asked.elapsed().as_millis()
    );
    assert_eq!(engine(&rig)["profile"], "tiny-cpu-test", "previous (built-in) set active again");
    assert!(chat_works(rig.engine_port), "engine serves after the rollback");
    assert!(!rig.state.join("sets/current").exists(), "the bad set is not current");
    // The action ends (and frees the control plane) once the engine is back: its event says so.
    wait_for("the rollback event", Duration::from_secs(10), || {
        events(&rig).contains("update to v1 rolled back")
    });

    tokio.block_on(support::publish(&sets.join("v2"), &repo, &support::PublishSpec::default()));
    let asked = Instant::now();
    let (status, body) = post(&rig, "/api/v1/ota/apply", "{}");
    assert_eq!(status, 202, "{body}");
    wait_for("the good set committed", READY_WITHIN, || ota(&rig)["state"]["state"] == "committed");
    eprintln!("figure: OTA apply to committed: {} ms", asked.elapsed().as_millis());
    assert_eq!(ota(&rig)["state"]["version"], 2);
    let on_v2 = ready_engine(&rig, Some(&back), READY_WITHIN);
    assert_eq!(engine(&rig)["profile"], "tiny", "the new set's profile runs");
    assert!(chat_works(rig.engine_port));
    let v2_set = ota(&rig)["active_set"].clone();
    let (status, body) = post(&rig, "/api/v1/ota/rollback", "");
    assert_eq!(status, 400, "nothing before the first committed set: {body}");
    wait_for("the commit event", Duration::from_secs(10), || events(&rig).contains("update to v2 committed"));

    // v3, then a rollback by hand through the API: back on v2, health-gated the same way.
    tokio.block_on(support::publish(&sets.join("v3"), &repo, &support::PublishSpec::default()));
    let (status, body) = post(&rig, "/api/v1/ota/apply", "");
    assert_eq!(status, 202, "{body}");
    wait_for("v3 committed", READY_WITHIN, || {
        ota(&rig)["state"] == serde_json::json!({"state": "committed", "version": 3})
    });
    let on_v3 = ready_engine(&rig, Some(&on_v2), READY_WITHIN);
    wait_for("the action to finish", Duration::from_secs(10), || {
        post(&rig, "/api/v1/ota/rollback", "").0 == 202
    });
    wait_for("rolled back by hand", READY_WITHIN, || ota(&rig)["state"]["state"] == "rolled-back");
    let state = ota(&rig);
    assert!(state["state"]["reason"].as_str().unwrap().contains("by hand to v2"), "{state}");
    assert_eq!(state["active_set"], v2_set, "v2 is the active set again");
    ready_engine(&rig, Some(&on_v3), READY_WITHIN);
    assert!(chat_works(rig.engine_port));
    wait_for("the rollback event", Duration::from_secs(10), || events(&rig).contains("rolled back to v2"));
    eprintln!("figure (supervisor): {:?}", timed_events(&rig));
    assert!(rig.terminate(Duration::from_secs(30)).success());
}

mod fan {
    use std::time::Duration;

    use super::common::thermal::{start_fan_loop, FanLoop};
    use lucebox::thermal::{ControlConfig, FanOverride, FanOverrides};

    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        let start = std::time::Instant::now();
        while !check() {
            assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn fan_mode_overrides_drive_the_fan_and_predictive_resumes_control() {
        let overrides = FanOverrides::default();
        let config = ControlConfig {
            period: Duration::from_millis(20),
            overrides: overrides.clone(),
            ..Default::default()
        };
        let FanLoop { dir: _dir, state: _state, hwmon, status, cancel, task, .. } =
            start_fan_loop("rx6800-hwmon", "gfx1030", "hwmon2", config);
        let enable = || std::fs::read_to_string(hwmon.join("pwm1_enable")).unwrap().trim().to_string();
        let mode =
            || status.snapshot().thermal.get("0000:03:00.0").map(|t| (t.mode.clone(), t.safety.clone()));

        until("predictive control", || enable() == "1").await;
        assert_eq!(mode(), Some(("predictive".into(), None)));
        overrides.set("0000:03:00.0", Some(FanOverride::FullSpeed));
        until("full speed (pwm1_enable 0)", || enable() == "0").await;
        until("mode full-speed", || mode() == Some(("full-speed".into(), None))).await;
        overrides.set("0000:03:00.0", Some(FanOverride::FirmwareAuto));
        until("firmware auto (pwm1_enable 2)", || enable() == "2").await;
        until("mode firmware-auto", || mode() == Some(("firmware-auto".into(), None))).await;
        // Held: the controller does not take the fan back while the override stands.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(enable(), "2");
        overrides.set("0000:03:00.0", None);
        until("predictive control again", || enable() == "1").await;
        until("mode predictive", || mode() == Some(("predictive".into(), None))).await;
        let events: Vec<String> = status.snapshot().events.iter().map(|e| e.message.clone()).collect();
        assert!(events.iter().any(|e| e.contains("operator override")), "{events:?}");
        cancel.cancel();
        task.await.unwrap();
        assert_eq!(enable(), "2", "fan handed back on exit");
    }
}
