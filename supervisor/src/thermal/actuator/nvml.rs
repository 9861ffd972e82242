//! NVIDIA fans through NVML (nvml-wrapper): `SetFanSpeed_v2` per fan switches to manual,
//! `SetDefaultFanSpeed_v2` hands back to auto. 0 % is only reachable through auto.

use std::path::Path;

use nvml_wrapper::Nvml;

use super::{ActuatorError, FanActuator, FanRange};

/// Typical NVIDIA floor when the driver does not say.
const DEFAULT_MIN_DUTY_PCT: f64 = 30.0;

pub struct NvmlFan {
    nvml: Nvml,
    index: u32,
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

/// `0000:01:00.0` and NVML's `00000000:01:00.0` name the same device.
fn same_bus_id(a: &str, b: &str) -> bool {
    let tail = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        let (domain, rest) =
            s.split_once(':').map(|(d, r)| (d.to_string(), r.to_string())).unwrap_or_default();
        (u32::from_str_radix(&domain, 16).ok(), rest)
    };
    tail(a) == tail(b)
}

/// NVML's index of the device at PCI address `bus_id`.
pub fn index_of(nvml: &Nvml, bus_id: &str) -> Result<u32, ActuatorError> {
    for index in 0..nvml.device_count().map_err(nvml_err)? {
        let device = nvml.device_by_index(index).map_err(nvml_err)?;
        if device.pci_info().is_ok_and(|p| same_bus_id(&p.bus_id, bus_id)) {
            return Ok(index);
        }
    }
    Err(ActuatorError::Nvml(format!("no device at {bus_id}")))
}

impl NvmlFan {
    /// The device at PCI address `bus_id` (e.g. `0000:01:00.0`).
    pub fn open(bus_id: &str, lib: Option<&Path>) -> Result<Self, ActuatorError> {
        let nvml = load(lib)?;
        let index = index_of(&nvml, bus_id)?;
        let (fans, min) = {
            let device = nvml.device_by_index(index).map_err(nvml_err)?;
            let fans = device.num_fans().map_err(nvml_err)?;
            let min = device.min_max_fan_speed().map(|(min, _)| min as f64).unwrap_or(DEFAULT_MIN_DUTY_PCT);
            (fans, min)
        };
        if fans == 0 {
            return Err(ActuatorError::Nvml(format!("{bus_id}: no fans")));
        }
        // A device that says it may spin at 0 % still only gets there through auto.
        let range = FanRange { min_duty_pct: min.max(1.0), zero_rpm: true };
        let mut fan = Self { nvml, index, fans, range };
        // Every fan handed to the driver first: the one command that is always safe, and it shows
        // whether NVML takes commands from this process at all (only from root/admin).
        fan.restore_auto().map_err(|e| {
            let detail = match e {
                ActuatorError::Nvml(detail) => detail,
                other => other.to_string(),
            };
            ActuatorError::Nvml(format!("fan commands refused ({detail}); NVML takes them only from root"))
        })?;
        Ok(fan)
    }

    fn each_fan(
        &self,
        mut f: impl FnMut(&mut nvml_wrapper::Device<'_>, u32) -> Result<(), nvml_wrapper::error::NvmlError>,
    ) -> Result<(), ActuatorError> {
        let mut device = self.nvml.device_by_index(self.index).map_err(nvml_err)?;
        // Every fan is tried: one that fails must not keep the others from the command.
        let mut first_error = None;
        for fan in 0..self.fans {
            if let Err(e) = f(&mut device, fan) {
                first_error.get_or_insert(ActuatorError::Nvml(format!("fan {fan}: {e}")));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl FanActuator for NvmlFan {
    fn kind(&self) -> &'static str {
        "nvml"
    }

    fn range(&self) -> FanRange {
        self.range
    }

    fn set_duty(&mut self, duty_pct: f64, _limit_c: f64) -> Result<(), ActuatorError> {
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

/// What [`reset_all`] did: fans handed back to auto, fans that went to full speed instead, and
/// what failed.
#[derive(Debug, Default)]
pub struct NvmlReset {
    pub auto: u32,
    pub full_speed: u32,
    pub errors: Vec<String>,
}

/// Hands every fan of every NVIDIA device back to auto, else to full speed. A device or fan that
/// fails (a GPU fallen off the bus) is reported and the rest are still handed back; a device
/// without fans is not an error.
pub fn reset_all(lib: Option<&Path>) -> Result<NvmlReset, ActuatorError> {
    let nvml = load(lib)?;
    let mut reset = NvmlReset::default();
    for index in 0..nvml.device_count().map_err(nvml_err)? {
        let fans = nvml.device_by_index(index).and_then(|mut device| {
            let fans = match device.num_fans() {
                Err(nvml_wrapper::error::NvmlError::NotSupported) => 0,
                fans => fans?,
            };
            for fan in 0..fans {
                let handed = super::hand_back(
                    &mut device,
                    |d| d.set_default_fan_speed(fan).map_err(nvml_err),
                    |d| d.set_fan_speed(fan, 100).map_err(nvml_err),
                );
                match handed {
                    Ok(super::HandedBack::FirmwareAuto) => reset.auto += 1,
                    Ok(super::HandedBack::FullSpeed { auto }) => {
                        reset.full_speed += 1;
                        reset
                            .errors
                            .push(format!("GPU {index} fan {fan}: {auto}; set to full speed instead"));
                    }
                    Err(e) => reset.errors.push(format!("GPU {index} fan {fan}: {e}")),
                }
            }
            Ok(())
        });
        if let Err(e) = fans {
            reset.errors.push(format!("GPU {index}: {}", nvml_err(e)));
        }
    }
    Ok(reset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_compare_across_domain_widths() {
        assert!(same_bus_id("0000:01:00.0", "00000000:01:00.0"));
        assert!(same_bus_id("0000:C5:00.0", "00000000:c5:00.0"));
        assert!(!same_bus_id("0000:01:00.0", "00000000:02:00.0"));
    }
}
