//! amdgpu hwmon `pwm1` (0–255) and `pwm1_enable` (0 full speed, 1 manual, 2 automatic), for
//! Radeon cards before RDNA3.

use std::path::PathBuf;

use super::{check_writable, read_attr, write_attr, ActuatorError, FanActuator, FanRange};

/// Floor used where the card publishes no minimum fan speed.
const DEFAULT_MIN_DUTY_PCT: f64 = 20.0;

pub struct HwmonPwm {
    dir: PathBuf,
    range: FanRange,
}

impl HwmonPwm {
    /// Opens the hwmon directory; fails if it has no writable pwm.
    pub fn open(dir: PathBuf) -> Result<Self, ActuatorError> {
        for attr in ["pwm1_enable", "pwm1"] {
            read_attr(&dir.join(attr))?;
            check_writable(&dir.join(attr))?;
        }
        let rpm = |name: &str| read_attr(&dir.join(name)).ok().and_then(|s| s.trim().parse::<f64>().ok());
        let min_duty_pct = match (rpm("fan1_min"), rpm("fan1_max")) {
            (Some(min), Some(max)) if max > 0.0 && min > 0.0 => (100.0 * min / max).clamp(1.0, 60.0),
            _ => DEFAULT_MIN_DUTY_PCT,
        };
        Ok(Self { dir, range: FanRange { min_duty_pct, zero_rpm: false } })
    }
}

impl FanActuator for HwmonPwm {
    fn kind(&self) -> &'static str {
        "hwmon-pwm"
    }

    fn range(&self) -> FanRange {
        self.range
    }

    fn set_duty(&mut self, duty_pct: f64, _limit_c: f64) -> Result<(), ActuatorError> {
        // Read each time, not remembered: a reset from elsewhere (the panic hook, a GPU reset)
        // puts the fan back on auto, and amdgpu then refuses a pwm1 write.
        let enable = self.dir.join("pwm1_enable");
        if read_attr(&enable)?.trim() != "1" {
            write_attr(&enable, "1")?;
        }
        let pwm = (duty_pct.clamp(self.range.min_duty_pct, 100.0) * 255.0 / 100.0).round() as u32;
        write_attr(&self.dir.join("pwm1"), &pwm.to_string())
    }

    fn restore_auto(&mut self) -> Result<(), ActuatorError> {
        write_attr(&self.dir.join("pwm1_enable"), "2")
    }

    fn full_speed(&mut self) -> Result<(), ActuatorError> {
        // 0 = no control: the card runs its fan at full speed on its own.
        write_attr(&self.dir.join("pwm1_enable"), "0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_duty_then_auto_and_full_speed() {
        let dir = tempfile::tempdir().unwrap();
        for (name, value) in [("pwm1", "0"), ("pwm1_enable", "2"), ("fan1_min", "660"), ("fan1_max", "3300")]
        {
            std::fs::write(dir.path().join(name), value).unwrap();
        }
        let mut fan = HwmonPwm::open(dir.path().to_path_buf()).unwrap();
        assert_eq!(fan.range().min_duty_pct, 20.0);
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        fan.set_duty(50.0, 95.0).unwrap();
        assert_eq!((read("pwm1_enable"), read("pwm1")), ("1".into(), "128".into()));
        fan.set_duty(5.0, 95.0).unwrap();
        assert_eq!(read("pwm1"), "51", "clamped to the published floor");
        fan.restore_auto().unwrap();
        assert_eq!(read("pwm1_enable"), "2");
        fan.full_speed().unwrap();
        assert_eq!(read("pwm1_enable"), "0");
        // Something else put the fan on auto: the next duty takes it back to manual first.
        std::fs::write(dir.path().join("pwm1_enable"), "2").unwrap();
        fan.set_duty(40.0, 95.0).unwrap();
        assert_eq!((read("pwm1_enable"), read("pwm1")), ("1".into(), "102".into()));
    }
}
