//! Puts every fan under a root back to firmware auto: the supervisor's exit path, its panic
//! hook and `lucebox thermal reset` (the systemd `ExecStopPost`, which also covers SIGKILL).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::actuator::{
    hand_back, write_attr, FanActuator, FirmwareHook, HandBackError, HandedBack, OdFanCurve,
};
use crate::hardware::SysRoot;

#[derive(Debug, Default, Clone, Serialize)]
pub struct ResetReport {
    /// What was handed back to auto (paths, `nvml: N fans`, hook).
    pub restored: Vec<String>,
    pub errors: Vec<String>,
}

/// Every PCI device directory under the root.
fn pci_devices(root: &SysRoot) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.path("/sys/bus/pci/devices")) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    dirs.sort();
    dirs
}

/// Records how `what` was handed back.
fn record(what: String, handed: Result<HandedBack, HandBackError>, report: &mut ResetReport) {
    match handed {
        Ok(HandedBack::FirmwareAuto) => report.restored.push(what),
        Ok(HandedBack::FullSpeed { auto }) => {
            report.errors.push(format!("{what}: {auto}; set to full speed instead"));
            report.restored.push(format!("{what} (full speed)"));
        }
        Err(e) => report.errors.push(format!("{what}: {e}")),
    }
}

/// Resets overdrive fan curves (`r`) and hwmon pwm (`pwm1_enable` = 2) of every PCI device under
/// `root`, every NVML fan when NVML loads (`nvml_lib`, or the system library on a live root),
/// and the firmware hook's fans when a hook is given.
pub fn reset_all(root: &SysRoot, hook: Option<&Path>, nvml_lib: Option<&Path>) -> ResetReport {
    let mut report = ResetReport::default();
    for dev in pci_devices(root) {
        let curve = dev.join("gpu_od/fan_ctrl/fan_curve");
        if curve.exists() {
            // RDNA3/4: the curve is the fan's only control; their pwm1_enable rejects writes.
            let handed = hand_back(
                &mut (),
                |_| write_attr(&curve, "r\n"),
                |_| OdFanCurve::open(curve.clone()).and_then(|mut fan| fan.full_speed()),
            );
            record(curve.display().to_string(), handed, &mut report);
            continue;
        }
        let Ok(hwmons) = std::fs::read_dir(dev.join("hwmon")) else { continue };
        for hwmon in hwmons.filter_map(Result::ok) {
            let enable = hwmon.path().join("pwm1_enable");
            if enable.exists() {
                // 0: no control, the card runs its fan at full speed.
                let handed = hand_back(&mut (), |_| write_attr(&enable, "2"), |_| write_attr(&enable, "0"));
                record(enable.display().to_string(), handed, &mut report);
            }
        }
    }
    if nvml_lib.is_some() || root.is_live() {
        match super::actuator::reset_all_nvml(nvml_lib) {
            Ok(nvml) => {
                if nvml.auto > 0 {
                    report.restored.push(format!("nvml: {} fans", nvml.auto));
                }
                if nvml.full_speed > 0 {
                    report.restored.push(format!("nvml: {} fans at full speed", nvml.full_speed));
                }
                report.errors.extend(nvml.errors);
            }
            // No NVIDIA driver on this machine is not an error of the reset.
            Err(e) if nvml_lib.is_none() => tracing::debug!("NVML not available: {e}"),
            Err(e) => report.errors.push(e.to_string()),
        }
    }
    if let Some(hook) = hook {
        let handed = FirmwareHook::new(hook.to_path_buf(), root.clone()).hand_back();
        record(format!("hook {}", hook.display()), handed, &mut report);
    }
    report
}
