//! Fan actuators, one small type per way a card lets us drive its fan, behind one trait. Every
//! actuator can hand the fan back to the firmware's automatic control and can force full speed.

mod hook;
mod hwmon;
mod nvml;
mod od_curve;

use std::path::{Path, PathBuf};

pub use hook::FirmwareHook;
pub use hwmon::HwmonPwm;
pub use nvml::{
    index_of as nvml_index_of, load as load_nvml, reset_all as reset_all_nvml, NvmlFan, NvmlReset,
};
pub use od_curve::OdFanCurve;

use crate::hardware::{Device, SysRoot, Vendor};

#[derive(Debug, thiserror::Error)]
pub enum ActuatorError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: unexpected contents: {why}")]
    Format { path: PathBuf, why: String },
    #[error("NVML: {0}")]
    Nvml(String),
    #[error("firmware hook {0}")]
    Hook(#[from] crate::hooks::HookError),
    #[error("firmware hook {path}: the board has no hook for this event")]
    NoHook { path: PathBuf },
}

/// The fan range a device publishes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FanRange {
    pub min_duty_pct: f64,
    pub zero_rpm: bool,
}

pub trait FanActuator: Send {
    /// `hwmon-pwm`, `od-fan-curve`, `nvml`, `firmware-hook`.
    fn kind(&self) -> &'static str;
    fn range(&self) -> FanRange;
    /// Drives the fan at `duty_pct`; `limit_c` lets a curve-based actuator commit a curve that
    /// rises to full speed at the limit rather than a flat one.
    fn set_duty(&mut self, duty_pct: f64, limit_c: f64) -> Result<(), ActuatorError>;
    /// Hands the fan back to the firmware's automatic control.
    fn restore_auto(&mut self) -> Result<(), ActuatorError>;
    fn full_speed(&mut self) -> Result<(), ActuatorError>;
    /// How long one command may take before it fails: a board's hook runs to its timeout, sysfs
    /// and NVML answer at once. A fan loop's round that outlasts its commands' time is stuck.
    fn command_timeout(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Firmware auto, else full speed.
    fn hand_back(&mut self) -> Result<HandedBack, HandBackError> {
        hand_back(self, |fan| fan.restore_auto(), |fan| fan.full_speed())
    }
}

/// Where a fan was handed back to.
#[derive(Debug)]
pub enum HandedBack {
    FirmwareAuto,
    /// Auto could not be written (why: `auto`); the fan runs at full speed.
    FullSpeed {
        auto: ActuatorError,
    },
}

/// Neither auto nor full speed could be written: the fan may be at whatever duty it last had.
#[derive(Debug, thiserror::Error)]
#[error("firmware auto: {auto}; full speed: {full_speed}")]
pub struct HandBackError {
    pub auto: Box<ActuatorError>,
    pub full_speed: Box<ActuatorError>,
}

/// Hands `fan` back with `auto`, else with `full_speed`: whatever fails, a fan is never left at
/// a low fixed duty while either write can still be made. Every way out of fan control (the loop's
/// fallback and its exit, the panic hook, `lucebox thermal reset`) goes through here.
pub fn hand_back<F: ?Sized>(
    fan: &mut F,
    auto: impl FnOnce(&mut F) -> Result<(), ActuatorError>,
    full_speed: impl FnOnce(&mut F) -> Result<(), ActuatorError>,
) -> Result<HandedBack, HandBackError> {
    match auto(fan) {
        Ok(()) => Ok(HandedBack::FirmwareAuto),
        Err(auto) => match full_speed(fan) {
            Ok(()) => Ok(HandedBack::FullSpeed { auto }),
            Err(full_speed) => Err(HandBackError { auto: Box::new(auto), full_speed: Box::new(full_speed) }),
        },
    }
}

/// Writes one command to a sysfs attribute (one `write` per command, as sysfs expects).
pub fn write_attr(path: &Path, value: &str) -> Result<(), ActuatorError> {
    use std::io::Write;
    let io = |source| ActuatorError::Io { path: path.to_path_buf(), source };
    let mut file = std::fs::OpenOptions::new().write(true).truncate(true).open(path).map_err(io)?;
    file.write_all(value.as_bytes()).map_err(io)
}

/// Fails unless this process may write `path`. A read-only sysfs (a container's, by default)
/// refuses here, before the loop takes a fan it could neither command nor hand back: the fan
/// then stays with its firmware, and the loop says why.
pub(crate) fn check_writable(path: &Path) -> Result<(), ActuatorError> {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK)
        .map_err(|errno| ActuatorError::Io { path: path.to_path_buf(), source: errno.into() })
}

pub(crate) fn read_attr(path: &Path) -> Result<String, ActuatorError> {
    std::fs::read_to_string(path).map_err(|source| ActuatorError::Io { path: path.to_path_buf(), source })
}

/// Why a device's fan stays with its firmware.
#[derive(Debug, thiserror::Error)]
pub enum NoFanControl {
    /// Nothing here drives this kind of fan.
    #[error("{0}")]
    NotOurs(&'static str),
    /// The interface is there but refuses this process (a read-only sysfs, NVML without root).
    #[error(transparent)]
    Refused(ActuatorError),
}

/// Why an RDNA3/RDNA4 card without `gpu_od/fan_ctrl/fan_curve` keeps its fan, and the fix.
const NO_OVERDRIVE: &str = "no overdrive fan curve: RDNA3 and RDNA4 cards take fan commands only \
     through overdrive, which the kernel parameter amdgpu.ppfeaturemask with bit 0x4000 turns on (then reboot)";

/// Where a device's fan can be driven from, best first: the RDNA3/4 overdrive fan curve, the
/// hwmon pwm (older Radeon cards), NVML for NVIDIA (not a GPU lent to WSL2), else the board's firmware hook if one is
/// configured (integrated GPUs whose fan belongs to an embedded controller).
pub fn for_device(
    device: &Device,
    root: &SysRoot,
    hook: Option<&Path>,
    nvml_lib: Option<&Path>,
) -> Result<Box<dyn FanActuator>, NoFanControl> {
    match device.vendor {
        Vendor::Amd if !device.integrated => {
            let rdna3_or_later =
                device.arch.as_deref().is_some_and(|a| a.starts_with("gfx11") || a.starts_with("gfx12"));
            let mut refused = None;
            if let Some(sysfs) = &device.telemetry.sysfs_path {
                let curve = root.path(sysfs).join("gpu_od/fan_ctrl/fan_curve");
                match OdFanCurve::open(curve.clone()).and_then(OdFanCurve::with_firmware_zero_rpm) {
                    Ok(a) => return Ok(Box::new(a)),
                    Err(e) if curve.exists() => refused = Some(e),
                    Err(_) => {}
                }
            }
            if let (false, Some(hwmon)) = (rdna3_or_later, &device.telemetry.hwmon_path) {
                let dir = root.path(hwmon);
                match HwmonPwm::open(dir.clone()) {
                    Ok(a) => return Ok(Box::new(a)),
                    Err(e) if dir.join("pwm1_enable").exists() => refused = refused.or(Some(e)),
                    Err(_) => {}
                }
            }
            let absent = if rdna3_or_later { NO_OVERDRIVE } else { "no hwmon pwm in sysfs" };
            Err(refused.map_or(NoFanControl::NotOurs(absent), NoFanControl::Refused))
        }
        Vendor::Intel => Err(NoFanControl::NotOurs("i915 and xe publish no fan control")),
        Vendor::Nvidia if device.lent_to_wsl() => {
            Err(NoFanControl::NotOurs("Windows keeps the fans of a GPU it lends to WSL2"))
        }
        Vendor::Nvidia => match NvmlFan::open(&device.id, nvml_lib) {
            Ok(a) => Ok(Box::new(a)),
            Err(e) => Err(NoFanControl::Refused(e)),
        },
        _ => match hook {
            Some(h) => Ok(Box::new(FirmwareHook::new(h.to_path_buf(), root.clone()))),
            None => Err(NoFanControl::NotOurs("no board hook drives this box's fans")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The board's hook drives the fan an embedded controller owns (an integrated GPU's); never
    /// for a card with fans of its own that no interface here controls.
    #[test]
    fn only_devices_without_fans_of_their_own_fall_back_to_the_boards_hook() {
        let root = SysRoot::new("/nonexistent-root");
        let hook = Path::new("/usr/lib/lucebox/hooks/board");
        let mut igpu = Device::new("0000:c3:00.0", Vendor::Amd, "Radeon 8060S");
        igpu.integrated = true;
        assert_eq!(for_device(&igpu, &root, Some(hook), None).map(|a| a.kind()).ok(), Some("firmware-hook"));
        let arc = Device::new("0000:03:00.0", Vendor::Intel, "Arc B580");
        assert!(for_device(&arc, &root, Some(hook), None).is_err(), "an Arc card's fans are its own");
    }

    /// An RDNA4 card whose overdrive is off has no fan curve: the reason names the fix.
    #[test]
    fn an_rdna4_card_without_overdrive_is_told_how_to_turn_it_on() {
        let root = SysRoot::new("/nonexistent-root");
        let mut r9700 = Device::new("0000:03:00.0", Vendor::Amd, "Radeon AI PRO R9700");
        r9700.arch = Some("gfx1201".into());
        r9700.telemetry.sysfs_path = Some("sys/devices/pci0000:00/0000:03:00.0".into());
        r9700.telemetry.hwmon_path = Some("sys/devices/pci0000:00/0000:03:00.0/hwmon/hwmon3".into());
        let why = for_device(&r9700, &root, None, None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(why.contains("amdgpu.ppfeaturemask with bit 0x4000"), "{why}");
        r9700.arch = Some("gfx1030".into());
        let why = for_device(&r9700, &root, None, None).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(why, "no hwmon pwm in sysfs");
    }
}
