//! The captured AMD card of `tests/fixtures/thermal/`, as the device the fan control loop drives.

use std::path::{Path, PathBuf};
use std::process::Command;

use lucebox::hardware::{Device, SysRoot, Telemetry, Vendor};
use lucebox::status::StatusModel;
use lucebox::thermal::{control_loop_with, ControlConfig};
use lucebox_engine::LoadSignal;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The card's folder below the captured root.
pub const DEV: &str = "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0";

/// The card at `0000:03:00.0` of target `arch`, its fan behind `hwmon_rel` (relative to the root).
pub fn amd_hwmon_device(arch: &str, hwmon_rel: &str) -> Device {
    Device {
        arch: Some(arch.into()),
        uid: Some("serial1".into()),
        telemetry: Telemetry {
            sysfs_path: Some(DEV.into()),
            hwmon_path: Some(hwmon_rel.into()),
            ..Default::default()
        },
        ..Device::new("0000:03:00.0", Vendor::Amd, "test")
    }
}

/// The fan control loop running on a private copy of a captured tree.
pub struct FanLoop {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    /// The card's hwmon folder in the copy.
    pub hwmon: PathBuf,
    pub state: tempfile::TempDir,
    pub status: StatusModel,
    /// What the engine's queue shows the loop (none until a test sends it).
    pub load: watch::Sender<Option<LoadSignal>>,
    pub cancel: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

/// Copies `tests/fixtures/thermal/<fixture>` and starts the loop on its card (target `arch`, fan
/// behind `hwmon/<hwmon>`), with no engine load signal yet and a new state directory.
pub fn start_fan_loop(fixture: &str, arch: &str, hwmon: &str, config: ControlConfig) -> FanLoop {
    start_fan_loop_in(fixture, arch, hwmon, config, tempfile::tempdir().unwrap())
}

/// [`start_fan_loop`] with the state directory of an earlier loop (a restart).
pub fn start_fan_loop_in(
    fixture: &str,
    arch: &str,
    hwmon: &str,
    config: ControlConfig,
    state: tempfile::TempDir,
) -> FanLoop {
    let (dir, root) = copy_fixture(fixture);
    let hwmon_rel = format!("{DEV}/hwmon/{hwmon}");
    let device = amd_hwmon_device(arch, &hwmon_rel);
    let (load, signal) = watch::channel(None);
    let (status, cancel, task) = spawn_control_loop_with(vec![device], &root, config, state.path(), signal);
    let hwmon = root.join(&hwmon_rel);
    FanLoop { dir, root, hwmon, state, status, load, cancel, task }
}

/// A private copy of `tests/fixtures/thermal/<fixture>`: the folder holding it, and its root.
pub fn copy_fixture(fixture: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/thermal").join(fixture);
    assert!(Command::new("cp").arg("-a").arg(&src).arg(dir.path()).status().unwrap().success());
    let root = dir.path().join(fixture);
    (dir, root)
}

/// Starts the fan control loop on `devices` under `root`, keeping its state in `state`, with no
/// engine load signal: the status it publishes to, its cancel token and its task.
pub fn spawn_control_loop(
    devices: Vec<Device>,
    root: &Path,
    config: ControlConfig,
    state: &Path,
) -> (StatusModel, CancellationToken, tokio::task::JoinHandle<()>) {
    spawn_control_loop_with(devices, root, config, state, watch::channel(None).1)
}

/// [`spawn_control_loop`] with the engine load the loop reads from `load`.
pub fn spawn_control_loop_with(
    devices: Vec<Device>,
    root: &Path,
    config: ControlConfig,
    state: &Path,
    load: watch::Receiver<Option<LoadSignal>>,
) -> (StatusModel, CancellationToken, tokio::task::JoinHandle<()>) {
    let (status, cancel) = (StatusModel::new(), CancellationToken::new());
    let task = tokio::spawn(control_loop_with(
        config,
        devices,
        SysRoot::new(root),
        state.to_path_buf(),
        load,
        status.clone(),
        cancel.clone(),
    ));
    (status, cancel, task)
}
