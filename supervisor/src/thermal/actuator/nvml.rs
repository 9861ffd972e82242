//! NVIDIA fans through NVML (nvml-wrapper): `SetFanSpeed_v2` per fan switches to manual,
//! `SetDefaultFanSpeed_v2` hands back to auto. 0 % is only reachable through auto.

use std::path::Path;

use nvml_wrapper::Nvml;

use super::{ActuatorError, FanActuator, FanRange};

/// Typical NVIDIA floor when the driver does not say.
const DEFAULT_MIN_DUTY_PCT: f64 = 30.0;

pub struct NvmlFan {
    nvml: Nvml,
    bus_id: String,
    fans: u32,
    range: FanRange,
}

fn nvml_err(e: impl std::fmt::Display) -> ActuatorError {
    ActuatorError::Nvml(e.to_string())
}

/// Loads NVML from `lib` (a fake in tests) or the system library.
pub fn load(lib: Option<&Path>) -> Result<Nvml, ActuatorError> {
    match lib {
        Some(path) => Nvml::builder().lib_path(path.as_os_str()).init().map_err(nvml_err),
        None => Nvml::init().map_err(nvml_err),
    }
}

impl NvmlFan {
    /// The device at PCI address `bus_id` (e.g. `0000:01:00.0`).
    pub fn open(bus_id: &str, lib: Option<&Path>) -> Result<Self, ActuatorError> {
        let nvml = load(lib)?;
        let (fans, min) = {
            let device = nvml.device_by_pci_bus_id(bus_id).map_err(nvml_err)?;
            let fans = device.num_fans().map_err(nvml_err)?;
            let min = device.min_max_fan_speed().map(|(min, _)| min as f64).unwrap_or(DEFAULT_MIN_DUTY_PCT);
            (fans, min)
        };
        if fans == 0 {
            return Err(ActuatorError::Nvml(format!("{bus_id}: no fans")));
        }
        // A device that says it may spin at 0 % still only gets there through auto.
        let range = FanRange { min_duty_pct: min.max(1.0), zero_rpm: true };
        Ok(Self { nvml, bus_id: bus_id.to_string(), fans, range })
    }

    fn each_fan(
        &self,
        mut f: impl FnMut(&mut nvml_wrapper::Device<'_>, u32) -> Result<(), nvml_wrapper::error::NvmlError>,
    ) -> Result<(), ActuatorError> {
        let mut device = self.nvml.device_by_pci_bus_id(self.bus_id.as_str()).map_err(nvml_err)?;
        for fan in 0..self.fans {
            f(&mut device, fan).map_err(nvml_err)?;
        }
        Ok(())
    }
}

impl FanActuator for NvmlFan {
    fn kind(&self) -> &'static str {
        "nvml"
    }

    fn range(&self) -> FanRange {
        self.range
    }

    fn set_duty(&mut self, duty_pct: f64, _junction_c: f64, _limit_c: f64) -> Result<(), ActuatorError> {
        if duty_pct < self.range.min_duty_pct {
            return self.restore_auto();
        }
        let speed = duty_pct.clamp(self.range.min_duty_pct, 100.0).round() as u32;
        self.each_fan(|d, fan| d.set_fan_speed(fan, speed))
    }

    fn restore_auto(&mut self) -> Result<(), ActuatorError> {
        self.each_fan(|d, fan| d.set_default_fan_speed(fan))
    }

    fn full_speed(&mut self) -> Result<(), ActuatorError> {
        self.each_fan(|d, fan| d.set_fan_speed(fan, 100))
    }
}

/// Hands every fan of every NVIDIA device back to auto; returns how many fans were reset.
pub fn reset_all(lib: Option<&Path>) -> Result<u32, ActuatorError> {
    let nvml = load(lib)?;
    let mut reset = 0;
    for index in 0..nvml.device_count().map_err(nvml_err)? {
        let mut device = nvml.device_by_index(index).map_err(nvml_err)?;
        for fan in 0..device.num_fans().map_err(nvml_err)? {
            device.set_default_fan_speed(fan).map_err(nvml_err)?;
            reset += 1;
        }
    }
    Ok(reset)
}
