//! Fault tests of the control loop on captured sysfs trees: every fault ends with the fan in a
//! safe state (firmware auto, or full speed at the limit), checked on the tree itself. Also the
//! loop's account of its own CPU time. The loop runs at 50 Hz here so the tests stay short; checks
//! wait for the state rather than count ticks.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::thermal::{copy_fixture, spawn_control_loop, start_fan_loop, start_fan_loop_in, FanLoop, DEV};
use lucebox::hardware::Device;
use lucebox::status::StatusModel;
use lucebox::thermal::ControlConfig;
use lucebox_engine::LoadSignal;
use tokio_util::sync::CancellationToken;

/// Control period in these tests.
const PERIOD: Duration = Duration::from_millis(20);
/// Longest wait for an expected state (a loaded CI machine may run few ticks).
const PATIENCE: Duration = Duration::from_secs(20);

struct Rig {
    _dir: tempfile::TempDir,
    root: PathBuf,
    hwmon: PathBuf,
    state: tempfile::TempDir,
    status: StatusModel,
    load: tokio::sync::watch::Sender<Option<LoadSignal>>,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Rig {
    fn start(name: &str, arch: &str, hwmon: &str) -> Self {
        let config = ControlConfig { period: PERIOD, ..Default::default() };
        Self::from(start_fan_loop(name, arch, hwmon, config))
    }

    /// A loop that writes its command, safe modes included, again every few periods.
    fn start_refreshing(name: &str, arch: &str, hwmon: &str) -> Self {
        let config = ControlConfig { period: PERIOD, refresh: PERIOD * 5, ..Default::default() };
        Self::from(start_fan_loop(name, arch, hwmon, config))
    }

    /// A loop on a fresh copy of the tree that keeps `state` (the box restarted).
    fn restart(name: &str, arch: &str, hwmon: &str, state: tempfile::TempDir) -> Self {
        let config = ControlConfig { period: PERIOD, ..Default::default() };
        Self::from(start_fan_loop_in(name, arch, hwmon, config, state))
    }

    fn events(&self) -> Vec<String> {
        self.status.snapshot().events.iter().map(|e| e.message.clone()).collect()
    }

    fn from(fan_loop: FanLoop) -> Self {
        let FanLoop { dir, root, hwmon, state, status, load, cancel, task } = fan_loop;
        Self { _dir: dir, root, hwmon, state, status, load, cancel, task: Some(task) }
    }

    fn file(&self, rel: &str) -> String {
        std::fs::read_to_string(self.hwmon.join(rel)).unwrap().trim().to_string()
    }

    fn curve(&self) -> String {
        std::fs::read_to_string(self.root.join(DEV).join("gpu_od/fan_ctrl/fan_curve"))
            .unwrap()
            .trim()
            .to_string()
    }

    fn write(&self, rel: &str, value: &str) {
        std::fs::write(self.hwmon.join(rel), value).unwrap();
    }

    /// The mode and safety reason the loop published last (empty before its first round ends).
    fn mode(&self) -> (String, Option<String>) {
        let t = self.status.snapshot().thermal.get("0000:03:00.0").cloned().unwrap_or_default();
        (t.mode, t.safety)
    }

    /// Waits until the loop has taken the fan over (manual pwm, or a committed curve).
    async fn until_driven(&self) {
        let rdna4 = self.root.join(DEV).join("gpu_od").exists();
        let driven = || if rdna4 { self.curve() == "c" } else { self.file("pwm1_enable") == "1" };
        assert!(eventually(driven, |_| {}).await, "the loop never drove the fan");
    }

    async fn stop(mut self) -> Self {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
        self
    }
}

/// Lets the loop run about `n` periods.
async fn ticks(n: u32) {
    tokio::time::sleep(PERIOD * n).await;
}

/// Waits until `check` holds, running `each` between tries; false after [`PATIENCE`].
async fn eventually(mut check: impl FnMut() -> bool, mut each: impl FnMut(u32)) -> bool {
    let start = std::time::Instant::now();
    let mut i = 0;
    while start.elapsed() < PATIENCE {
        if check() {
            return true;
        }
        each(i);
        i += 1;
        ticks(1).await;
    }
    check()
}

#[tokio::test]
async fn pwm_fan_is_driven_then_restored_on_cancel_and_the_model_is_saved() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    assert!(eventually(|| rig.file("pwm1_enable") == "1", |_| {}).await);
    assert!(eventually(|| rig.mode().0 == "predictive", |_| {}).await, "{:?}", rig.mode());
    let rig = rig.stop().await;
    assert_eq!(rig.file("pwm1_enable"), "2");
    let mut saved: Vec<String> = std::fs::read_dir(rig.state.path().join("thermal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    saved.sort();
    assert_eq!(saved, ["0000_03_00.0-serial1.forecast.json", "0000_03_00.0-serial1.json"]);
}

/// A restart resumes the learned model and load forecast; a bad file costs only its own part and
/// is reported with the file and field, and the next save replaces it.
#[tokio::test]
async fn a_restarted_loop_resumes_what_it_learned_and_names_a_bad_file() {
    let (fixture, arch, hwmon) = ("rx6800-hwmon", "gfx1030", "hwmon2");
    let rig = Rig::start(fixture, arch, hwmon);
    rig.until_driven().await;
    let mut rig = rig.stop().await;
    let dir = rig.state.path().join("thermal");
    let model = dir.join("0000_03_00.0-serial1.json");
    let forecast = dir.join("0000_03_00.0-serial1.forecast.json");
    let read = |path: &PathBuf| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let write = |path: &PathBuf, value: &serde_json::Value| std::fs::write(path, value.to_string()).unwrap();

    // Values the priors do not have and that nothing here relearns (no power step, no engine).
    let (mut learned_model, mut learned_forecast) = (read(&model), read(&forecast));
    learned_model["r_js_k_per_w"] = serde_json::json!(0.123);
    learned_forecast["typical_output_tokens"] = serde_json::json!(777.0);
    write(&model, &learned_model);
    write(&forecast, &learned_forecast);
    for life in ["resumes both", "the forecast file lost a field"] {
        rig = Rig::restart(fixture, arch, hwmon, rig.state);
        rig.until_driven().await;
        let events = rig.events();
        rig = rig.stop().await;
        assert_eq!(read(&model)["r_js_k_per_w"], 0.123, "{life}: the model was not resumed");
        if life == "resumes both" {
            assert!(events.iter().all(|m| !m.contains("serial1")), "{life}: {events:?}");
            assert_eq!(
                read(&forecast)["typical_output_tokens"],
                777.0,
                "{life}: the forecast was not resumed"
            );
            let bad = std::fs::read_to_string(&forecast).unwrap().replace("\"idle_w\"", "\"idle\"");
            std::fs::write(&forecast, bad).unwrap();
        } else {
            let named =
                |m: &String| m.contains("serial1.forecast.json") && m.contains("missing field `idle_w`");
            assert!(events.iter().any(named), "{life}: {events:?}");
            assert!(read(&forecast)["idle_w"].is_number(), "{life}: the bad file was not replaced");
            assert_ne!(
                read(&forecast)["typical_output_tokens"],
                777.0,
                "{life}: the forecast is the prior's"
            );
        }
    }
}

/// A profile that loads another model: the loop says so, and the forecast it saves relearns the
/// engine's phase power and rates from the prior while it keeps what it learned of the users.
#[tokio::test]
async fn another_served_model_is_reported_and_its_power_relearned() {
    let (fixture, arch, hwmon) = ("rx6800-hwmon", "gfx1030", "hwmon2");
    let serving = |model: &str| Some(LoadSignal { model: Some(model.into()), ..Default::default() });
    let rig = Rig::start(fixture, arch, hwmon);
    rig.load.send_replace(serving("big-70b-q4.gguf"));
    rig.until_driven().await;
    ticks(5).await;
    let mut rig = rig.stop().await;
    let forecast = rig.state.path().join("thermal/0000_03_00.0-serial1.forecast.json");
    let read =
        || -> serde_json::Value { serde_json::from_slice(&std::fs::read(&forecast).unwrap()).unwrap() };
    let mut learned = read();
    assert_eq!(learned["model"], "big-70b-q4.gguf", "{learned}");
    // What the big model drew in prefill, and the users' answer length: no engine here relearns
    // either.
    learned["prefill_w"] = serde_json::json!(555.0);
    learned["typical_output_tokens"] = serde_json::json!(777.0);
    std::fs::write(&forecast, learned.to_string()).unwrap();

    for (life, served) in [("same model", "big-70b-q4.gguf"), ("another model", "small-8b-q8.gguf")] {
        rig = Rig::restart(fixture, arch, hwmon, rig.state);
        rig.load.send_replace(serving(served));
        rig.until_driven().await;
        let said = "0000:03:00.0: the engine now serves small-8b-q8.gguf (was big-70b-q4.gguf); relearning";
        let told = || rig.events().iter().any(|m| m.starts_with(said));
        if life == "another model" {
            assert!(eventually(told, |_| {}).await, "{life}: {:?}", rig.events());
        } else {
            ticks(5).await;
            assert!(!told(), "{life}: {:?}", rig.events());
        }
        rig = rig.stop().await;
        let saved = read();
        assert_eq!(saved["model"], served, "{life}: {saved}");
        // Another model starts again from the prior: the tree's power limit (`power1_cap`).
        let prefill_w = if life == "same model" { 555.0 } else { 203.0 };
        assert_eq!(saved["prefill_w"], prefill_w, "{life}: {saved}");
        assert_eq!(saved["typical_output_tokens"], 777.0, "{life}: the users' pattern was lost: {saved}");
    }
}

#[tokio::test]
async fn the_loop_publishes_the_cpu_time_it_uses() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    let cpu = || {
        let thermal = rig.status.snapshot().thermal;
        thermal.get("0000:03:00.0").map_or((0.0, None), |t| (t.loop_cpu_s, t.loop_cpu_pct))
    };
    assert!(eventually(|| cpu().0 > 0.0, |_| {}).await, "no CPU time counted: {:?}", cpu());
    let (first, _) = cpu();
    assert!(eventually(|| cpu().0 > first, |_| {}).await, "CPU time stopped growing at {first} s");
    let (spent, share) = cpu();
    let share = share.expect("a share once the loop has run");
    // The share is the CPU time over the loop's wall time: positive, and no more than one core.
    assert!(share > 0.0 && share <= 100.0, "share {share} % for {spent} s");
    rig.stop().await;
}

/// While the predictive controller drives the fan the status says why it runs at that duty, with
/// the numbers its plans weighed; a safe mode has no plan and says nothing of the kind.
#[tokio::test]
async fn the_status_says_why_the_fan_runs_at_its_duty_while_the_controller_drives_it() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    let thermal = || rig.status.snapshot().thermal.get("0000:03:00.0").cloned().expect("published");
    assert!(eventually(|| thermal().why.is_some(), |_| {}).await, "{:?}", thermal());
    let t = thermal();
    let (why, decision) = (t.why.unwrap(), t.decision.expect("the plans' numbers beside the line"));
    assert_eq!(t.mode, "predictive");
    assert_eq!(t.power_cap_w, Some(203.0), "the tree's power1_cap, which the forecast starts from");
    assert!(why.starts_with("stopped") || why.contains(" % "), "{why}");
    assert!(decision.budget_c < t.limit_c.unwrap(), "{decision:?}");
    // The pwm register reads back what was sent, so the fan shows no lag: the fastest is assumed.
    assert!((decision.fan_lag_s - 2.0).abs() < 0.01, "{decision:?}");
    let json = serde_json::to_value(rig.status.snapshot().thermal).unwrap();
    assert!(json["0000:03:00.0"]["decision"]["required_pct"].is_number(), "{json}");
    rig.write("temp2_input", "garbage\n");
    assert!(eventually(|| thermal().mode == "firmware-auto", |_| {}).await, "{:?}", thermal());
    let t = thermal();
    assert!(t.why.is_none() && t.decision.is_none(), "{t:?}");
    rig.stop().await;
}

#[tokio::test]
async fn junction_file_vanishing_hands_back_to_firmware() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    std::fs::remove_file(rig.hwmon.join("temp2_input")).unwrap();
    assert!(eventually(|| rig.file("pwm1_enable") == "2", |_| {}).await, "{}", rig.file("pwm1_enable"));
    // The file is written within the round, the status published after it.
    let handed_back =
        || matches!(rig.mode(), (mode, Some(why)) if mode == "firmware-auto" && why.contains("temp2_input"));
    assert!(eventually(handed_back, |_| {}).await, "{:?}", rig.mode());
    rig.stop().await;
}

#[tokio::test]
async fn garbage_reading_hands_back_to_firmware_and_recovery_resumes_control() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    rig.write("temp2_input", "garbage\n");
    assert!(eventually(|| rig.file("pwm1_enable") == "2", |_| {}).await, "{}", rig.file("pwm1_enable"));
    rig.write("temp2_input", "999000\n"); // 999 °C: absurd, not hot
    ticks(10).await;
    assert!(eventually(|| rig.file("pwm1_enable") == "2", |_| {}).await, "{}", rig.file("pwm1_enable"));
    rig.write("temp2_input", "50000\n");
    assert!(eventually(|| rig.file("pwm1_enable") == "1", |_| {}).await, "{}", rig.file("pwm1_enable"));
    rig.stop().await;
}

#[tokio::test]
async fn frozen_junction_while_power_swings_hands_back_to_firmware() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    let swing = |i: u32| {
        rig.write("power1_average", if (i / 5).is_multiple_of(2) { "40000000\n" } else { "190000000\n" })
    };
    assert!(eventually(|| rig.file("pwm1_enable") == "2", swing).await);
    let frozen = || rig.mode().1.is_some_and(|why| why.contains("frozen"));
    assert!(eventually(frozen, |_| {}).await, "{:?}", rig.mode());
    rig.stop().await;
}

#[tokio::test]
async fn failing_pwm_write_leaves_the_fan_in_firmware_auto() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    // pwm1 turns into something that cannot be written; heat forces a new duty.
    std::fs::remove_file(rig.hwmon.join("pwm1")).unwrap();
    std::fs::create_dir(rig.hwmon.join("pwm1")).unwrap();
    rig.write("temp2_input", "90000\n");
    rig.write("power1_average", "200000000\n");
    assert!(eventually(|| rig.file("pwm1_enable") == "2", |_| {}).await, "{}", rig.file("pwm1_enable"));
    assert!(eventually(|| rig.mode().0 == "actuator-failed", |_| {}).await, "{:?}", rig.mode());
    rig.stop().await;
}

#[tokio::test]
async fn hard_limit_forces_full_speed() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    rig.write("temp2_input", "96000\n"); // crit 110 °C - 15 = 95 °C limit
    assert!(eventually(|| rig.file("pwm1_enable") == "0", |_| {}).await, "{}", rig.file("pwm1_enable"));
    assert!(eventually(|| rig.mode().0 == "full-speed", |_| {}).await, "{:?}", rig.mode());
    rig.stop().await;
}

/// Full speed at the limit is written again while the junction stays there: something else (a
/// reset from the panic hook, a GPU reset) may have put the fan back on auto meanwhile.
#[tokio::test]
async fn full_speed_at_the_limit_is_written_again_after_something_else_changed_the_fan() {
    let rig = Rig::start_refreshing("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    rig.write("temp2_input", "96000\n");
    assert!(eventually(|| rig.file("pwm1_enable") == "0", |_| {}).await, "{}", rig.file("pwm1_enable"));
    rig.write("pwm1_enable", "2\n");
    assert!(eventually(|| rig.file("pwm1_enable") == "0", |_| {}).await, "{}", rig.file("pwm1_enable"));
    assert!(eventually(|| rig.mode().0 == "full-speed", |_| {}).await, "{:?}", rig.mode());
    let entered = rig.events().iter().filter(|e| e.contains("full speed")).count();
    assert_eq!(entered, 1, "written again without a new event: {:?}", rig.events());
    rig.stop().await;
}

/// amdgpu refuses `pwm1` while `pwm1_enable` is 2. A fan put back on auto from elsewhere is
/// switched to manual again before the next duty, not failed for good.
#[tokio::test]
async fn a_pwm_fan_put_back_on_auto_from_elsewhere_is_taken_over_again() {
    let rig = Rig::start_refreshing("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    rig.write("pwm1_enable", "2\n");
    assert!(eventually(|| rig.file("pwm1_enable") == "1", |_| {}).await, "{}", rig.file("pwm1_enable"));
    assert!(eventually(|| rig.mode().0 == "predictive", |_| {}).await, "{:?}", rig.mode());
    rig.stop().await;
}

#[tokio::test]
async fn rdna4_curve_rises_to_full_before_the_limit_and_is_reset_on_exit() {
    let rig = Rig::start("r9700-rdna4", "gfx1201", "hwmon3");
    assert!(eventually(|| rig.curve() == "c", |_| {}).await, "{}", rig.curve());
    assert_eq!(rig.file("pwm1_enable"), "2", "RDNA4 pwm is never touched");
    let rig = rig.stop().await;
    assert_eq!(rig.curve(), "r");
}

#[tokio::test]
async fn rdna4_sensor_loss_resets_the_curve() {
    let rig = Rig::start("r9700-rdna4", "gfx1201", "hwmon3");
    rig.until_driven().await;
    std::fs::remove_file(rig.hwmon.join("temp2_input")).unwrap();
    assert!(eventually(|| rig.curve() == "r", |_| {}).await, "{}", rig.curve());
    rig.stop().await;
}

/// A device without a learned model starts from its card's entry in the profile set's priors; once
/// it has learned one, that wins. A bad priors file is named and the generic prior used.
#[tokio::test]
async fn a_new_device_starts_from_its_cards_prior_and_a_learned_model_wins() {
    let (fixture, arch, hwmon) = ("rx6800-hwmon", "gfx1030", "hwmon2");
    let priors_dir = tempfile::tempdir().unwrap();
    let priors = priors_dir.path().join("priors.toml");
    let card = |r_js: f64| {
        format!(
            "[[card]]\narch = \"gfx1030\"\nsink_capacity_j_per_k = 700.0\nsink_to_air_stopped_k_per_w = 0.5\n\
             sink_to_air_full_k_per_w = 0.1\njunction_to_sink_k_per_w = {r_js}\nambient_c = 30.0\n"
        )
    };
    let config = || ControlConfig { period: PERIOD, priors: Some(priors.clone()), ..Default::default() };
    let learned_r_js = |rig: &Rig| -> serde_json::Value {
        let model = rig.state.path().join("thermal/0000_03_00.0-serial1.json");
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(model).unwrap()).unwrap()["r_js_k_per_w"]
            .clone()
    };

    std::fs::write(&priors, card(0.123)).unwrap();
    let rig = Rig::from(start_fan_loop(fixture, arch, hwmon, config()));
    rig.until_driven().await;
    let from_card = "no learned thermal model yet; starting from the prior for arch = \"gfx1030\"";
    assert!(rig.events().iter().any(|m| m.contains(from_card)), "{:?}", rig.events());
    let rig = rig.stop().await;
    assert_eq!(learned_r_js(&rig), 0.123, "the card's prior was not used");

    std::fs::write(&priors, card(0.2)).unwrap();
    let rig = Rig::from(start_fan_loop_in(fixture, arch, hwmon, config(), rig.state));
    rig.until_driven().await;
    assert!(!rig.events().iter().any(|m| m.contains(from_card)), "{:?}", rig.events());
    let rig = rig.stop().await;
    assert_eq!(learned_r_js(&rig), 0.123, "the learned model must win over the card's prior");

    std::fs::write(&priors, card(0.2).replace("ambient_c", "ambient")).unwrap();
    let rig = Rig::from(start_fan_loop(fixture, arch, hwmon, config()));
    rig.until_driven().await;
    let named = |m: &String| m.contains("priors.toml") && m.contains("unknown field `ambient`");
    assert!(rig.events().iter().any(named), "{:?}", rig.events());
    let rig = rig.stop().await;
    assert_eq!(learned_r_js(&rig), 0.08, "a bad priors file leaves the generic prior");
}

/// A Strix Halo box: the APU's hwmon reports the junction and power but no fan (the fan belongs
/// to the embedded controller), and the board's firmware hook drives it. The loop drives the fan
/// through the hook, takes it to run at the duty last sent (taken as stopped, the fan would be
/// learned as one that never answers: the slowest lag), and hands it back to the firmware on exit.
#[tokio::test]
async fn a_fan_behind_an_embedded_controller_is_driven_through_the_board_hook() {
    let rig = EcFanRig::start(r#"{"ok":true}"#, r#"{"ok":true}"#);
    let (status, cancel, task) = (&rig.status, &rig.cancel, rig.task);
    let thermal = || status.snapshot().thermal.get("0000:03:00.0").cloned();
    let events = || std::fs::read_to_string(&rig.log).unwrap_or_default();
    let driving = || thermal().is_some_and(|t| t.mode == "predictive");
    assert!(eventually(|| driving() && events().contains("\"set-fan\""), |_| {}).await, "{:?}", thermal());
    let t = thermal().expect("thermal status published");
    assert_eq!(t.actuator, "firmware-hook", "{t:?}");
    assert_eq!(t.fan_duty_pct, None, "the tree reports no fan");
    // Enough periods for a fan reported at 0 % under a 20 % command to be learned as the slowest.
    ticks(40).await;
    let decision = thermal().and_then(|t| t.decision).expect("the controller's plans");
    assert!((decision.fan_lag_s - 2.0).abs() < 0.01, "{decision:?}");
    cancel.cancel();
    task.await.unwrap();
    let last = events().lines().last().map(str::to_string);
    assert_eq!(last.as_deref(), Some("{\"event\":\"fan-auto\"}"), "{}", events());
}

/// A Strix Halo box's fan loop on a copy of a captured hwmon tree without its fan files (the
/// embedded controller owns the fan), driving it through a board folder whose `set-fan` and
/// `fan-auto` append their event to `log` and answer `set_fan` and `fan_auto`.
struct EcFanRig {
    dir: tempfile::TempDir,
    _state: tempfile::TempDir,
    log: PathBuf,
    status: StatusModel,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl EcFanRig {
    fn start(set_fan: &str, fan_auto: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let (dir, root) = copy_fixture("rx6800-hwmon");
        let hwmon_rel = format!("{DEV}/hwmon/hwmon2");
        for fan_file in ["pwm1", "pwm1_enable", "fan1_input", "fan1_min", "fan1_max"] {
            std::fs::remove_file(root.join(&hwmon_rel).join(fan_file)).unwrap();
        }
        let (hooks, log) = (dir.path().join("board-hooks"), dir.path().join("hook-events"));
        std::fs::create_dir_all(&hooks).unwrap();
        for (name, reply) in [("set-fan", set_fan), ("fan-auto", fan_auto)] {
            let path = hooks.join(name);
            let script = format!("#!/bin/sh\ncat >> {0}; echo >> {0}\necho '{reply}'\n", log.display());
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let device = Device { integrated: true, ..common::thermal::amd_hwmon_device("gfx1151", &hwmon_rel) };
        let config = ControlConfig { period: PERIOD, hook: Some(hooks), ..Default::default() };
        let state = tempfile::tempdir().unwrap();
        let (status, cancel, task) = spawn_control_loop(vec![device], &root, config, state.path());
        Self { dir, _state: state, log, status, cancel, task }
    }

    /// From now on the hook `name` answers `reply` (replaced whole, never rewritten in place).
    fn answer(&self, name: &str, reply: &str) {
        use std::os::unix::fs::PermissionsExt;
        let (hooks, next) = (self.dir.path().join("board-hooks"), self.dir.path().join("next-hook"));
        let script = format!("#!/bin/sh\ncat >> {0}; echo >> {0}\necho '{reply}'\n", self.log.display());
        std::fs::write(&next, script).unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&next, hooks.join(name)).unwrap();
    }
}

/// The shipped hooks refuse with exit 0 and `{"ok":false}` (the board tool missing, the EC busy).
/// A refused `set-fan` is not a fan at the duty sent: the loop hands the fan back to the firmware
/// (once, and drives it no more) and says why.
#[tokio::test]
async fn a_fan_command_the_board_hook_refuses_hands_the_fan_back_to_the_firmware() {
    let rig = EcFanRig::start(r#"{"ok":false,"detail":"EC busy"}"#, r#"{"ok":true}"#);
    let (status, cancel, task) = (&rig.status, &rig.cancel, rig.task);
    let thermal = || status.snapshot().thermal.get("0000:03:00.0").cloned();
    let events = || std::fs::read_to_string(&rig.log).unwrap_or_default();
    let failed = || thermal().is_some_and(|t| t.mode == "actuator-failed");
    assert!(eventually(failed, |_| {}).await, "{:?}", thermal());
    let said = status.snapshot().events.iter().map(|e| e.message.clone()).collect::<Vec<_>>();
    assert!(said.iter().any(|m| m.contains("refused: EC busy")), "{said:?}");
    ticks(3).await;
    let calls: Vec<String> = events().lines().map(str::to_string).collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].contains("\"set-fan\""), "{calls:?}");
    assert_eq!(calls[1], "{\"event\":\"fan-auto\"}");
    cancel.cancel();
    task.await.unwrap();
}

/// A fan that neither auto nor full speed can reach after a failed command may be left at a low
/// duty, so the loop keeps trying to hand it back, with a doubling wait, until one write holds.
#[tokio::test]
async fn a_fan_that_cannot_be_handed_back_is_tried_again_until_it_is() {
    let refused = r#"{"ok":false,"detail":"EC busy"}"#;
    let rig = EcFanRig::start(refused, refused);
    let thermal = || rig.status.snapshot().thermal.get("0000:03:00.0").cloned();
    let safety = || thermal().and_then(|t| t.safety).unwrap_or_default();
    assert!(eventually(|| safety().contains("not handed back"), |_| {}).await, "{:?}", thermal());
    assert_eq!(thermal().map(|t| t.mode).as_deref(), Some("actuator-failed"));
    let said = rig.status.snapshot().events.iter().map(|e| e.message.clone()).collect::<Vec<_>>();
    assert!(said.iter().any(|m| m.contains("handing the fan back failed too")), "{said:?}");
    rig.answer("fan-auto", r#"{"ok":true}"#);
    assert!(eventually(|| safety().contains("handed back (firmware auto)"), |_| {}).await, "{:?}", thermal());
    let said = rig.status.snapshot().events.iter().map(|e| e.message.clone()).collect::<Vec<_>>();
    assert!(said.iter().any(|m| m.contains("fan handed back (firmware auto) at try")), "{said:?}");
    let calls = std::fs::read_to_string(&rig.log).unwrap();
    let autos = calls.lines().filter(|l| l.contains("fan-auto")).count();
    assert!(autos >= 2, "tried again: {calls}");
    // Handed back, it is left alone: no more calls.
    ticks(10).await;
    assert_eq!(std::fs::read_to_string(&rig.log).unwrap(), calls);
    rig.cancel.cancel();
    rig.task.await.unwrap();
}

/// A sensor file turned into a FIFO nobody writes: a read of it blocks, as a wedged driver's
/// does. Dropped (the test over, or failed), it answers any read waiting on it and is a file
/// again, so no thread stays stuck in it and a failing test fails rather than hangs.
struct WedgedFile {
    path: PathBuf,
    reading: String,
    scratch: PathBuf,
}

impl WedgedFile {
    fn wedge(path: PathBuf, scratch: &std::path::Path) -> Self {
        let reading = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fifo = scratch.join(format!("wedged-fifo-{name}"));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR).unwrap();
        std::fs::rename(&fifo, &path).unwrap();
        Self { path, reading, scratch: scratch.to_path_buf() }
    }
}

impl Drop for WedgedFile {
    fn drop(&mut self) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let name = self.path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let file = self.scratch.join(format!("wedged-file-{name}"));
        let _ = std::fs::write(&file, &self.reading);
        // A reader of our own answers the writers waiting to open the FIFO, and lets our writer
        // open at once; the readers waiting on it get the reading.
        let nonblocking = || {
            let mut options = std::fs::OpenOptions::new();
            options.custom_flags(nix::libc::O_NONBLOCK);
            options
        };
        let _reader = nonblocking().read(true).open(&self.path);
        let writer = nonblocking().write(true).open(&self.path);
        let _ = std::fs::rename(&file, &self.path);
        if let Ok(mut writer) = writer {
            let _ = writer.write_all(self.reading.as_bytes());
        }
    }
}

/// A wedged GPU driver can block a sysfs read for good. The fan loop's thread then hangs inside
/// its round while the rest of the supervisor runs on, so the loop's heartbeat falls silent and
/// systemd's watchdog is no longer fed (`lucebox::watchdog`). Here the junction file becomes a
/// FIFO nobody writes: a read that blocks. The heartbeat beats while the loop turns, falls silent
/// while the read hangs, and beats again once it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_loop_hung_in_a_sysfs_read_stops_feeding_the_watchdog() {
    use lucebox::watchdog::Heartbeats;

    let (dir, root) = copy_fixture("rx6800-hwmon");
    let junction = root.join(format!("{DEV}/hwmon/hwmon2/temp2_input"));
    let heartbeats = Heartbeats::default();
    let silence = Duration::from_millis(600);
    let config = ControlConfig {
        period: PERIOD,
        heartbeats: Some(heartbeats.clone()),
        watchdog_silence: silence,
        ..Default::default()
    };
    let device = common::thermal::amd_hwmon_device("gfx1030", &format!("{DEV}/hwmon/hwmon2"));
    let state = tempfile::tempdir().unwrap();
    let (status, cancel, task) = spawn_control_loop(vec![device], &root, config, state.path());
    let mode = || status.snapshot().thermal.get("0000:03:00.0").map(|t| t.mode.clone());
    assert!(eventually(|| mode().as_deref() == Some("predictive"), |_| {}).await, "{:?}", mode());
    tokio::time::sleep(2 * silence).await;
    assert_eq!(heartbeats.silent(), [], "a turning loop beats");

    let wedged = WedgedFile::wedge(junction, dir.path());
    tokio::time::sleep(2 * silence).await;
    let silent: Vec<String> = heartbeats.silent().into_iter().map(|(name, _)| name).collect();
    assert_eq!(silent, ["fan loop of 0000:03:00.0"]);

    // The read returns and the file is a file again.
    drop(wedged);
    assert!(eventually(|| heartbeats.silent().is_empty(), |_| {}).await, "the loop beats again");
    cancel.cancel();
    task.await.unwrap();
}

/// A wedged driver on one card of a group (a model split over two cards) must hold up neither
/// the other card's fan nor its own: each fan has a loop of its own, and a round stuck past its
/// allowance hands its fan back from another thread. Card A's junction becomes a FIFO nobody
/// writes; card B then reaches its limit and goes to full speed while A's fan is on firmware
/// auto. Once A's read returns, its loop drives the fan again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_whose_driver_stops_answering_holds_up_neither_its_own_fan_nor_the_one_beside_it() {
    let (dir, root) = copy_fixture("rx6800-hwmon");
    let beside = DEV.replace("0000:03:00.0", "0000:04:00.0");
    assert!(std::process::Command::new("cp")
        .arg("-a")
        .arg(root.join(DEV))
        .arg(root.join(&beside))
        .status()
        .unwrap()
        .success());
    let card_a = common::thermal::amd_hwmon_device("gfx1030", &format!("{DEV}/hwmon/hwmon2"));
    let card_b = Device {
        id: "0000:04:00.0".into(),
        uid: Some("serial2".into()),
        telemetry: lucebox::hardware::Telemetry {
            sysfs_path: Some(beside.clone()),
            hwmon_path: Some(format!("{beside}/hwmon/hwmon2")),
            ..Default::default()
        },
        ..card_a.clone()
    };
    let (hwmon_a, hwmon_b) =
        (root.join(format!("{DEV}/hwmon/hwmon2")), root.join(format!("{beside}/hwmon/hwmon2")));
    let read =
        |hwmon: &PathBuf, file: &str| std::fs::read_to_string(hwmon.join(file)).unwrap().trim().to_string();

    let config =
        ControlConfig { period: PERIOD, stall_after: Duration::from_millis(300), ..Default::default() };
    let state = tempfile::tempdir().unwrap();
    let (status, cancel, task) = spawn_control_loop(vec![card_a, card_b], &root, config, state.path());
    let mode = |id: &str| status.snapshot().thermal.get(id).map(|t| (t.mode.clone(), t.safety.clone()));
    let driven = || read(&hwmon_a, "pwm1_enable") == "1" && read(&hwmon_b, "pwm1_enable") == "1";
    assert!(
        eventually(driven, |_| {}).await,
        "both fans driven: {:?} {:?}",
        mode("0000:03:00.0"),
        mode("0000:04:00.0")
    );

    let wedged = WedgedFile::wedge(hwmon_a.join("temp2_input"), dir.path());
    // The hand-back writes the fan, then publishes: wait for both.
    let handed_back = || {
        read(&hwmon_a, "pwm1_enable") == "2"
            && mode("0000:03:00.0").is_some_and(|(mode, _)| mode == "firmware-auto")
    };
    assert!(
        eventually(handed_back, |_| {}).await,
        "the stalled card's fan is handed back to firmware auto: {:?}",
        mode("0000:03:00.0")
    );
    let stalled = mode("0000:03:00.0").unwrap();
    assert_eq!(stalled.0, "firmware-auto");
    assert!(stalled.1.as_deref().is_some_and(|why| why.contains("has not returned")), "{stalled:?}");

    // The card beside it is still controlled: at its limit it goes to full speed.
    std::fs::write(hwmon_b.join("temp2_input"), "96000\n").unwrap();
    assert!(
        eventually(|| read(&hwmon_b, "pwm1_enable") == "0", |_| {}).await,
        "the other card's loop turns on: {:?}",
        mode("0000:04:00.0")
    );
    assert_eq!(mode("0000:04:00.0").unwrap().0, "full-speed");

    // The read returns and the file is a file again.
    drop(wedged);
    let resumed = || read(&hwmon_a, "pwm1_enable") == "1" && mode("0000:03:00.0").unwrap().0 == "predictive";
    assert!(eventually(resumed, |_| {}).await, "driven again: {:?}", mode("0000:03:00.0"));
    let events: Vec<String> = status.snapshot().events.iter().map(|e| e.message.clone()).collect();
    assert!(
        events.iter().any(|e| e.contains("0000:03:00.0: the fan loop's round returned after")),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e.contains("0000:04:00.0: the fan loop's round")), "{events:?}");
    cancel.cancel();
    task.await.unwrap();
    assert_eq!((read(&hwmon_a, "pwm1_enable"), read(&hwmon_b, "pwm1_enable")), ("2".into(), "2".into()));
}

/// A driver that holds the hand-back too (its fan file does not answer either) gets one
/// hand-back thread, however often the loop stalls again: the guard does not pile threads up.
/// The junction and `pwm1_enable` become FIFOs: the round stalls on the first, its hand-back on
/// the second. Once the junction answers, the round writes its command again, reads
/// `pwm1_enable` and stalls a second time, while the first hand-back still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_back_the_driver_holds_too_is_not_started_again_on_the_next_stall() {
    let config =
        ControlConfig { period: PERIOD, stall_after: Duration::from_millis(200), ..Default::default() };
    let rig = Rig::from(start_fan_loop("rx6800-hwmon", "gfx1030", "hwmon2", config));
    rig.until_driven().await;
    let count = |what: &str| rig.events().iter().filter(|e| e.contains(what)).count();
    let enable = WedgedFile::wedge(rig.hwmon.join("pwm1_enable"), rig._dir.path());
    let junction = WedgedFile::wedge(rig.hwmon.join("temp2_input"), rig._dir.path());
    assert!(eventually(|| count("handing the fan back") == 1, |_| {}).await, "{:?}", rig.events());

    drop(junction);
    let again = "the hand-back of an earlier stall has not returned either";
    assert!(eventually(|| count(again) >= 1, |_| {}).await, "{:?}", rig.events());
    assert_eq!(count("handing the fan back"), 1, "one hand-back thread: {:?}", rig.events());

    // Both answer: the hand-back ends, the loop drives the fan again.
    drop(enable);
    assert!(eventually(|| count("fan handed back (firmware auto)") == 1, |_| {}).await, "{:?}", rig.events());
    assert!(eventually(|| rig.mode().0 == "predictive", |_| {}).await, "{:?}", rig.mode());
    rig.stop().await;
}

/// An engine that publishes no queue shows only the requests on its connections: that signal
/// never reaches the fan loop's forecast (it knows no prompt or stream, and an engine it calls
/// idle while the card works would teach the forecast the work's power as idle power). The
/// forecast saves the served model of every signal it reads, which shows what reached it.
#[tokio::test]
async fn requests_counted_on_connections_never_reach_the_forecast() {
    let (fixture, arch, hwmon) = ("rx6800-hwmon", "gfx1030", "hwmon2");
    let serving = LoadSignal { model: Some("served.gguf".into()), ..Default::default() };
    let on_connections = LoadSignal { model: serving.model.clone(), ..LoadSignal::from_connections(2) };
    for (signal, reached) in [(serving, true), (on_connections, false)] {
        let rig = Rig::start(fixture, arch, hwmon);
        rig.load.send_replace(Some(signal.clone()));
        rig.until_driven().await;
        ticks(5).await;
        let rig = rig.stop().await;
        let forecast = rig.state.path().join("thermal/0000_03_00.0-serial1.forecast.json");
        let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&forecast).unwrap()).unwrap();
        assert_eq!(saved["model"] == "served.gguf", reached, "{signal:?}: {saved}");
    }
}
