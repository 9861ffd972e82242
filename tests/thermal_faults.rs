//! Fault tests of the control loop on captured sysfs trees: every fault ends with the fan in a
//! safe state (firmware auto, or full speed at the limit), checked on the tree itself. Also the
//! loop's account of its own CPU time. The loop runs at 50 Hz here so the tests stay short; checks
//! wait for the state rather than count ticks.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::thermal::{start_fan_loop, FanLoop, DEV};
use lucebox::status::StatusModel;
use lucebox::thermal::ControlConfig;
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
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Rig {
    fn start(name: &str, arch: &str, hwmon: &str) -> Self {
        let config = ControlConfig { period: PERIOD, ..Default::default() };
        let FanLoop { dir, root, hwmon, state, status, cancel, task } =
            start_fan_loop(name, arch, hwmon, config);
        Self { _dir: dir, root, hwmon, state, status, cancel, task: Some(task) }
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

    fn mode(&self) -> (String, Option<String>) {
        let t =
            self.status.snapshot().thermal.get("0000:03:00.0").cloned().expect("thermal status published");
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
    assert_eq!(rig.mode().0, "predictive");
    let rig = rig.stop().await;
    assert_eq!(rig.file("pwm1_enable"), "2");
    let saved: Vec<_> = std::fs::read_dir(rig.state.path().join("thermal")).unwrap().collect();
    assert_eq!(saved.len(), 1);
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

#[tokio::test]
async fn junction_file_vanishing_hands_back_to_firmware() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    std::fs::remove_file(rig.hwmon.join("temp2_input")).unwrap();
    assert!(eventually(|| rig.file("pwm1_enable") == "2", |_| {}).await, "{}", rig.file("pwm1_enable"));
    let (mode, safety) = rig.mode();
    assert_eq!(mode, "firmware-auto");
    assert!(safety.unwrap().contains("temp2_input"));
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
    assert!(rig.mode().1.unwrap().contains("frozen"));
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
    assert_eq!(rig.mode().0, "actuator-failed");
    rig.stop().await;
}

#[tokio::test]
async fn hard_limit_forces_full_speed() {
    let rig = Rig::start("rx6800-hwmon", "gfx1030", "hwmon2");
    rig.until_driven().await;
    rig.write("temp2_input", "96000\n"); // crit 110 °C - 15 = 95 °C limit
    assert!(eventually(|| rig.file("pwm1_enable") == "0", |_| {}).await, "{}", rig.file("pwm1_enable"));
    assert_eq!(rig.mode().0, "full-speed");
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
