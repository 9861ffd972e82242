//! RDNA3/RDNA4 overdrive fan curve (`gpu_od/fan_ctrl/fan_curve`): write `idx temp pct` per point,
//! then `c` to commit; `r` restores the boot default (automatic). Manual pwm is rejected on these
//! cards. A committed curve outlives our process, so a duty is never written as a flat curve: the
//! curve holds the duty up to where the safety layer's reactive floor reaches it, then follows
//! that floor to full speed at the limit. While the loop runs, the firmware so never runs the fan
//! faster than the loop itself would (before, a curve at full speed 10 °C under the limit overrode
//! every plan above that, which the bench did not see); should the process die, the firmware keeps
//! that floor: full speed at the control limit, which sits 15 °C under the card's critical
//! temperature (`sensors.rs`).
//!
//! The curve takes no speed under the card's lowest. A card whose firmware has zero-rpm on
//! (`fan_zero_rpm_enable` beside the curve reads 1; Linux 6.13 and later) stops its fan through
//! its own automatic control, as NVML's auto does: a command under the floor resets the curve,
//! and the firmware keeps the fan stopped or spins it by its own curve. A card that does not say
//! (an older kernel, or no such file on the card) keeps its fan at the floor instead of a stop.

use std::path::PathBuf;

use super::{check_writable, read_attr, write_attr, ActuatorError, FanActuator, FanRange};
use crate::thermal::safety::reactive_floor_reaches_c;

pub struct OdFanCurve {
    file: PathBuf,
    points: usize,
    temp_range: (f64, f64),
    speed_range: (f64, f64),
    firmware_zero_rpm: bool,
}

impl OdFanCurve {
    pub fn open(file: PathBuf) -> Result<Self, ActuatorError> {
        let text = read_attr(&file)?;
        check_writable(&file)?;
        let format = |why: &str| ActuatorError::Format { path: file.clone(), why: why.to_string() };
        let points = text
            .lines()
            .filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()) && l.contains(':'))
            .count();
        if points < 2 {
            return Err(format("no OD_FAN_CURVE points"));
        }
        let range = |key: &str, unit: char| -> Result<(f64, f64), ActuatorError> {
            let line = text.lines().find(|l| l.trim_start().starts_with(key)).ok_or_else(|| format(key))?;
            let values: Vec<f64> = line
                .split_once(':')
                .map(|(_, v)| {
                    v.split_whitespace().filter_map(|w| w.trim_end_matches(unit).parse().ok()).collect()
                })
                .unwrap_or_default();
            match values.as_slice() {
                [lo, hi] if lo < hi => Ok((*lo, *hi)),
                _ => Err(format(key)),
            }
        };
        let temp_range = range("FAN_CURVE(hotspot temp)", 'C')?;
        let speed_range = range("FAN_CURVE(fan speed)", '%')?;
        Ok(Self { file, points, temp_range, speed_range, firmware_zero_rpm: false })
    }

    /// The same fan, stopped through the firmware where its zero-rpm is on. Apart from `open`
    /// so that a bad `fan_zero_rpm_enable` costs the loop its control, with the file named, but
    /// never the reset its full speed.
    pub fn with_firmware_zero_rpm(mut self) -> Result<Self, ActuatorError> {
        self.firmware_zero_rpm = read_zero_rpm_enable(&self.file.with_file_name(ZERO_RPM_ENABLE_FILE))?;
        Ok(self)
    }

    /// The points to write for `duty` under `limit_c`: flat at the duty from the lowest
    /// temperature the card takes to where the reactive floor reaches the duty, then full speed
    /// at the limit. Temperatures are whole degrees, rounded down: never under the floor.
    pub fn curve_for(&self, duty_pct: f64, limit_c: f64) -> Vec<(u32, u32)> {
        let (t_lo, t_hi) = self.temp_range;
        let (s_lo, s_hi) = self.speed_range;
        let duty = duty_pct.clamp(s_lo, s_hi);
        let full_at = limit_c.clamp(t_lo + 1.0, t_hi).floor();
        let rise_from = reactive_floor_reaches_c(duty, limit_c).floor().clamp(t_lo, full_at - 1.0);
        let flat = self.points - 1;
        (0..self.points)
            .map(|i| {
                if i == flat {
                    return (full_at as u32, s_hi.round() as u32);
                }
                let share = if flat > 1 { i as f64 / (flat - 1) as f64 } else { 0.0 };
                ((t_lo + (rise_from - t_lo) * share).round() as u32, duty.round() as u32)
            })
            .collect()
    }

    fn commit(&self, points: &[(u32, u32)]) -> Result<(), ActuatorError> {
        for (i, (t, s)) in points.iter().enumerate() {
            write_attr(&self.file, &format!("{i} {t} {s}\n"))?;
        }
        write_attr(&self.file, "c\n")
    }
}

const ZERO_RPM_ENABLE_FILE: &str = "fan_zero_rpm_enable";

/// Whether the firmware's zero-rpm is on, from `fan_zero_rpm_enable` as the kernel prints it
/// (`FAN_ZERO_RPM_ENABLE:`, then 0 or 1, then its `OD_RANGE:`); false where the file is missing.
fn read_zero_rpm_enable(path: &std::path::Path) -> Result<bool, ActuatorError> {
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        read => read.map_err(|source| ActuatorError::Io { path: path.to_path_buf(), source })?,
    };
    let mut lines = text.lines().map(str::trim).skip_while(|l| *l != "FAN_ZERO_RPM_ENABLE:");
    match lines.nth(1) {
        Some("1") => Ok(true),
        Some("0") => Ok(false),
        _ => Err(ActuatorError::Format {
            path: path.to_path_buf(),
            why: "no FAN_ZERO_RPM_ENABLE: followed by 0 or 1".to_string(),
        }),
    }
}

impl FanActuator for OdFanCurve {
    fn kind(&self) -> &'static str {
        "od-fan-curve"
    }

    fn range(&self) -> FanRange {
        FanRange { min_duty_pct: self.speed_range.0, zero_rpm: self.firmware_zero_rpm }
    }

    fn set_duty(&mut self, duty_pct: f64, limit_c: f64) -> Result<(), ActuatorError> {
        if self.firmware_zero_rpm && duty_pct < self.speed_range.0 {
            return self.restore_auto();
        }
        let points = self.curve_for(duty_pct, limit_c);
        self.commit(&points)
    }

    fn restore_auto(&mut self) -> Result<(), ActuatorError> {
        write_attr(&self.file, "r\n")
    }

    fn full_speed(&mut self) -> Result<(), ActuatorError> {
        let (t_lo, t_hi) = self.temp_range;
        let n = self.points;
        let points: Vec<(u32, u32)> = (0..n)
            .map(|i| {
                (
                    (t_lo + (t_hi - t_lo) * i as f64 / (n - 1) as f64).round() as u32,
                    self.speed_range.1.round() as u32,
                )
            })
            .collect();
        self.commit(&points)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "../tests/fixtures/thermal/r9700-rdna4/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0/gpu_od/fan_ctrl/fan_curve";

    fn curve() -> OdFanCurve {
        OdFanCurve::open(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)).unwrap()
    }

    #[test]
    fn reads_points_and_ranges_as_the_kernel_prints_them() {
        let c = curve();
        assert_eq!((c.points, c.temp_range, c.speed_range), (5, (25.0, 100.0), (15.0, 100.0)));
        assert_eq!(c.range().min_duty_pct, 15.0);
    }

    /// The speed the firmware runs the fan at with the junction at `t_c`, from the committed
    /// points: straight lines between them, flat beyond the ends.
    fn firmware_speed(points: &[(u32, u32)], t_c: f64) -> f64 {
        let points: Vec<(f64, f64)> = points.iter().map(|&(t, s)| (t as f64, s as f64)).collect();
        crate::thermal::controller::interpolate(&points, t_c)
    }

    #[test]
    fn a_duty_becomes_a_curve_that_holds_it_and_follows_the_safety_floor_to_full_speed_at_the_limit() {
        use crate::thermal::safety::reactive_floor_pct;
        let c = curve();
        let limit = 95.0;
        assert_eq!(c.curve_for(30.0, limit), vec![(25, 30), (48, 30), (70, 30), (93, 30), (95, 100)]);
        for duty in (15..=100).step_by(5).map(f64::from) {
            let points = c.curve_for(duty, limit);
            assert!(points.windows(2).all(|w| w[1].0 > w[0].0 && w[1].1 >= w[0].1), "{points:?}");
            for tenth in 250..=1000 {
                let t = tenth as f64 / 10.0;
                let speed = firmware_speed(&points, t);
                // Never under what the loop would run (the duty, lifted by the safety floor) ...
                let loop_would = duty.max(reactive_floor_pct(t, limit));
                assert!(speed >= loop_would - 0.5, "{duty} % at {t} °C: {speed} < {loop_would}; {points:?}");
                // ... and no faster than the duty until the junction is a degree from the floor's reach.
                if t <= reactive_floor_reaches_c(duty, limit) - 1.0 {
                    assert!((speed - duty).abs() <= 0.5, "{duty} % at {t} °C: {speed}; {points:?}");
                }
                if t >= limit {
                    assert_eq!(speed, 100.0, "{duty} % at {t} °C");
                }
            }
        }
        // Never below the card's lowest speed, even when asked.
        assert_eq!(c.curve_for(0.0, limit)[0].1, 15);
    }

    /// The fixture's curve in a folder of its own, with `fan_zero_rpm_enable` as given (none
    /// for `None`).
    fn curve_beside(zero_rpm_enable: Option<&str>) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fan_curve");
        std::fs::copy(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE), &file).unwrap();
        if let Some(text) = zero_rpm_enable {
            std::fs::write(dir.path().join(ZERO_RPM_ENABLE_FILE), text).unwrap();
        }
        (dir, file)
    }

    #[test]
    fn the_firmware_stops_the_fan_only_where_the_card_says_its_zero_rpm_is_on() {
        let on = "FAN_ZERO_RPM_ENABLE:\n1\nOD_RANGE:\nZERO_RPM_ENABLE: 0 1\n";
        let off = "FAN_ZERO_RPM_ENABLE:\n0\nOD_RANGE:\nZERO_RPM_ENABLE: 0 1\n";
        for (file, zero_rpm) in [(Some(on), true), (Some(off), false), (None, false)] {
            let (_dir, path) = curve_beside(file);
            let mut fan = OdFanCurve::open(path.clone()).unwrap().with_firmware_zero_rpm().unwrap();
            assert_eq!(fan.range(), FanRange { min_duty_pct: 15.0, zero_rpm }, "{file:?}");
            fan.set_duty(0.0, 95.0).unwrap();
            // Zero-rpm on: the curve is reset, and the firmware's own control stops the fan.
            // Otherwise a curve at the card's lowest speed is committed.
            assert_eq!(std::fs::read_to_string(&path).unwrap(), if zero_rpm { "r\n" } else { "c\n" });
            fan.set_duty(15.0, 95.0).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "c\n", "{file:?}: the floor is a curve");
        }
        // The reset opens the curve alone: a bad zero-rpm file never costs it full speed.
        let (_dir, path) = curve_beside(Some("FAN_ZERO_RPM_ENABLE:\nyes\n"));
        assert!(OdFanCurve::open(path.clone()).is_ok());
        match OdFanCurve::open(path).unwrap().with_firmware_zero_rpm() {
            Err(ActuatorError::Format { path, .. }) => {
                assert!(path.ends_with(ZERO_RPM_ENABLE_FILE), "{path:?}")
            }
            other => panic!("{:?}", other.map(|f| f.range())),
        }
    }

    #[test]
    fn unparsable_file_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fan_curve");
        std::fs::write(&path, "OD_FAN_CURVE:\n").unwrap();
        assert!(matches!(OdFanCurve::open(path), Err(ActuatorError::Format { .. })));
    }
}
