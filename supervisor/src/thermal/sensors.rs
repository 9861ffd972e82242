//! What a device shows: junction temperature, board power and fan speed, read from amdgpu hwmon
//! or NVML, plus the junction limit and the board power limit the device publishes.

use std::path::{Path, PathBuf};

use nvml_wrapper::enum_wrappers::device::{TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::Nvml;

use crate::hardware::units::{
    celsius_from_millidegrees, power_limit_w, watts_from_microwatts, watts_from_milliwatts,
};
use crate::hardware::{Device, SysRoot, Vendor};

/// Where a device publishes no limit, this one is used.
pub const DEFAULT_LIMIT_C: f64 = 90.0;
/// The control limit sits this far under the card's critical junction temperature.
const LIMIT_BELOW_CRITICAL_C: f64 = 15.0;
/// A control limit outside this range comes from a bad threshold, not from a real card (some
/// APUs publish `temp1_crit` as 2147483647).
const PLAUSIBLE_LIMIT_C: (f64, f64) = (50.0, 120.0);

/// The control limit `derived` from the threshold `source` published, or `default` with why where
/// that is absurd: a limit too high would keep the hard limit and the reactive floor from ever
/// acting.
fn plausible_limit(source: &str, derived: f64, default: f64) -> (f64, Option<String>) {
    let (lo, hi) = PLAUSIBLE_LIMIT_C;
    if (lo..=hi).contains(&derived) {
        return (derived, None);
    }
    let doubt = format!(
        "{source} gives a junction limit of {derived:.0} °C, outside {lo:.0}–{hi:.0} °C; using {default:.0} °C"
    );
    (default, Some(doubt))
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Readings {
    pub junction_c: f64,
    pub power_w: Option<f64>,
    pub fan_rpm: Option<f64>,
    pub fan_duty_pct: Option<f64>,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum SensorError {
    #[error("{0}: missing or unreadable")]
    Missing(PathBuf),
    #[error("{path}: not a number: {text:?}")]
    Garbage { path: PathBuf, text: String },
    #[error("NVML: {0}")]
    Nvml(String),
    #[error("{0}: no hwmon directory to read")]
    NoHwmon(String),
}

pub trait SensorSource: Send {
    fn read(&mut self) -> Result<Readings, SensorError>;
    /// The junction limit the device publishes.
    fn limit_c(&self) -> f64;
    /// Why the device's own limit was not used, where it was absurd.
    fn limit_doubt(&self) -> Option<&str> {
        None
    }
    /// The board power limit in force when the sensors were opened, where the device has one.
    fn power_cap_w(&self) -> Option<f64> {
        None
    }
}

/// The sensors of `device` as the fan loop reads them: NVML for NVIDIA, else the device's hwmon
/// directory below `root`.
pub fn for_device(
    device: &Device,
    root: &SysRoot,
    nvml_lib: Option<&Path>,
) -> Result<Box<dyn SensorSource>, SensorError> {
    match device.vendor {
        Vendor::Nvidia => Ok(Box::new(NvmlSensors::open(&device.id, nvml_lib)?)),
        _ => {
            let hwmon = device
                .telemetry
                .hwmon_path
                .as_ref()
                .ok_or_else(|| SensorError::NoHwmon(device.id.clone()))?;
            Ok(Box::new(HwmonSensors::new(root.path(hwmon))))
        }
    }
}

/// amdgpu hwmon: `temp2_input` (junction, m°C; `temp1_input` where there is no junction
/// sensor), `power1_average`/`power1_input` (µW), `fan1_input` (rpm), `pwm1` (0–255), and the
/// power limit `power1_cap` (µW; 0 where the board has none).
pub struct HwmonSensors {
    dir: PathBuf,
    /// Chosen once: a junction file that vanishes later must not silently become the edge.
    junction: PathBuf,
    limit_c: f64,
    limit_doubt: Option<String>,
    power_cap_w: Option<f64>,
}

fn read_number(path: &Path) -> Result<f64, SensorError> {
    let text = std::fs::read_to_string(path).map_err(|_| SensorError::Missing(path.to_path_buf()))?;
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| SensorError::Garbage {
        path: path.to_path_buf(),
        text: text.chars().take(40).collect(),
    })
}

impl HwmonSensors {
    pub fn new(dir: PathBuf) -> Self {
        let name = if dir.join("temp2_input").exists() { "temp2" } else { "temp1" };
        let crit = dir.join(format!("{name}_crit"));
        let (limit_c, limit_doubt) = match read_number(&crit) {
            Ok(m) => plausible_limit(
                &crit.display().to_string(),
                celsius_from_millidegrees(m) - LIMIT_BELOW_CRITICAL_C,
                DEFAULT_LIMIT_C,
            ),
            Err(SensorError::Missing(_)) => (DEFAULT_LIMIT_C, None),
            Err(e) => {
                (DEFAULT_LIMIT_C, Some(format!("{e}; using a junction limit of {DEFAULT_LIMIT_C:.0} °C")))
            }
        };
        let power_cap_w =
            read_number(&dir.join("power1_cap")).ok().map(watts_from_microwatts).and_then(power_limit_w);
        Self { junction: dir.join(format!("{name}_input")), dir, limit_c, limit_doubt, power_cap_w }
    }
}

impl SensorSource for HwmonSensors {
    fn read(&mut self) -> Result<Readings, SensorError> {
        let junction_c = celsius_from_millidegrees(read_number(&self.junction)?);
        let power = read_number(&self.dir.join("power1_average"))
            .or_else(|_| read_number(&self.dir.join("power1_input")));
        let power_w = match power {
            Ok(uw) => Some(watts_from_microwatts(uw)),
            Err(e @ SensorError::Garbage { .. }) => return Err(e),
            Err(_) => None,
        };
        let fan_rpm = read_number(&self.dir.join("fan1_input")).ok();
        let fan_duty_pct = read_number(&self.dir.join("pwm1")).ok().map(|p| p * 100.0 / 255.0);
        Ok(Readings { junction_c, power_w, fan_rpm, fan_duty_pct })
    }

    fn limit_c(&self) -> f64 {
        self.limit_c
    }

    fn limit_doubt(&self) -> Option<&str> {
        self.limit_doubt.as_deref()
    }

    fn power_cap_w(&self) -> Option<f64> {
        self.power_cap_w
    }
}

/// NVIDIA through NVML: GPU temperature, power usage (mW) and fan speed (%), and the enforced
/// power limit (mW).
pub struct NvmlSensors {
    nvml: Nvml,
    index: u32,
    limit_c: f64,
    limit_doubt: Option<String>,
    power_cap_w: Option<f64>,
}

impl NvmlSensors {
    pub fn open(bus_id: &str, lib: Option<&Path>) -> Result<Self, SensorError> {
        // The actuator's NVML errors already say "NVML".
        let nvml_err = |e: super::actuator::ActuatorError| match e {
            super::actuator::ActuatorError::Nvml(message) => SensorError::Nvml(message),
            other => SensorError::Nvml(other.to_string()),
        };
        let nvml = super::actuator::load_nvml(lib).map_err(nvml_err)?;
        let index = super::actuator::nvml_index_of(&nvml, bus_id).map_err(nvml_err)?;
        let default = DEFAULT_LIMIT_C - 7.0;
        let (slowdown, power_cap_mw) = match nvml.device_by_index(index) {
            Ok(d) => {
                (d.temperature_threshold(TemperatureThreshold::Slowdown).ok(), d.enforced_power_limit().ok())
            }
            Err(_) => (None, None),
        };
        let (limit_c, limit_doubt) = match slowdown {
            Some(t) => plausible_limit("NVML's slowdown temperature", t as f64 - 5.0, default),
            None => (default, None),
        };
        let power_cap_w = power_cap_mw.and_then(|mw| power_limit_w(watts_from_milliwatts(f64::from(mw))));
        Ok(Self { nvml, index, limit_c, limit_doubt, power_cap_w })
    }
}

impl SensorSource for NvmlSensors {
    fn read(&mut self) -> Result<Readings, SensorError> {
        let err = |e: nvml_wrapper::error::NvmlError| SensorError::Nvml(e.to_string());
        let device = self.nvml.device_by_index(self.index).map_err(err)?;
        let junction_c = device.temperature(TemperatureSensor::Gpu).map_err(err)? as f64;
        let power_w = device.power_usage().ok().map(|mw| watts_from_milliwatts(f64::from(mw)));
        let fan_duty_pct = device.fan_speed(0).ok().map(|p| p as f64);
        Ok(Readings { junction_c, power_w, fan_rpm: None, fan_duty_pct })
    }

    fn limit_c(&self) -> f64 {
        self.limit_c
    }

    fn limit_doubt(&self) -> Option<&str> {
        self.limit_doubt.as_deref()
    }

    fn power_cap_w(&self) -> Option<f64> {
        self.power_cap_w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hwmon_with_crit(crit: Option<&str>) -> (tempfile::TempDir, HwmonSensors) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("temp2_input"), "52000\n").unwrap();
        if let Some(crit) = crit {
            std::fs::write(dir.path().join("temp2_crit"), crit).unwrap();
        }
        let sensors = HwmonSensors::new(dir.path().to_path_buf());
        (dir, sensors)
    }

    #[test]
    fn the_limit_comes_from_the_critical_temperature_unless_that_is_absurd() {
        let (_d, sensors) = hwmon_with_crit(Some("110000\n"));
        assert_eq!((sensors.limit_c(), sensors.limit_doubt()), (95.0, None));
        let (_d, sensors) = hwmon_with_crit(None);
        assert_eq!((sensors.limit_c(), sensors.limit_doubt()), (DEFAULT_LIMIT_C, None));
        let (_d, sensors) = hwmon_with_crit(Some("2147483647\n"));
        assert_eq!(sensors.limit_c(), DEFAULT_LIMIT_C);
        let doubt = sensors.limit_doubt().expect("an absurd limit is named");
        assert!(doubt.contains("temp2_crit") && doubt.contains("2147469 °C"), "{doubt}");
        let (_d, sensors) = hwmon_with_crit(Some("0\n"));
        assert_eq!(sensors.limit_c(), DEFAULT_LIMIT_C);
        assert!(sensors.limit_doubt().is_some_and(|d| d.contains("-15 °C")));
        let (_d, sensors) = hwmon_with_crit(Some("hot\n"));
        assert_eq!(sensors.limit_c(), DEFAULT_LIMIT_C);
        assert!(sensors
            .limit_doubt()
            .is_some_and(|d| d.contains("temp2_crit") && d.contains("not a number")));
    }
}
