//! RDNA3/RDNA4 overdrive fan curve (`gpu_od/fan_ctrl/fan_curve`): write `idx temp pct` per point,
//! then `c` to commit; `r` restores the boot default (automatic). Manual pwm is rejected on these
//! cards. A committed curve outlives our process, so a duty is never written as a flat curve: the
//! curve holds the duty around the current junction and rises to 100 % 10 °C under the limit.

use std::path::PathBuf;

use super::{check_writable, read_attr, write_attr, ActuatorError, FanActuator, FanRange};

/// The curve reaches full speed this far under the limit.
const FULL_BELOW_LIMIT_C: f64 = 10.0;
/// The duty is held up to this far above the current junction before the curve starts rising.
const HOLD_ABOVE_JUNCTION_C: f64 = 4.0;

pub struct OdFanCurve {
    file: PathBuf,
    points: usize,
    temp_range: (f64, f64),
    speed_range: (f64, f64),
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
        Ok(Self { file, points, temp_range, speed_range })
    }

    /// The points to write for `duty` with the junction at `junction_c` under `limit_c`.
    pub fn curve_for(&self, duty_pct: f64, junction_c: f64, limit_c: f64) -> Vec<(u32, u32)> {
        let (t_lo, t_hi) = self.temp_range;
        let (s_lo, s_hi) = self.speed_range;
        let duty = duty_pct.clamp(s_lo, s_hi);
        let full_at = (limit_c - FULL_BELOW_LIMIT_C).clamp(t_lo, t_hi);
        let rise_from = (junction_c + HOLD_ABOVE_JUNCTION_C).clamp(t_lo, full_at);
        let n = self.points;
        (0..n)
            .map(|i| {
                if i == 0 {
                    return (t_lo.round() as u32, duty.round() as u32);
                }
                let share = i as f64 / (n - 1) as f64;
                let t = rise_from + (full_at - rise_from) * share;
                let s = duty + (s_hi - duty) * share;
                (t.round() as u32, s.round() as u32)
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

impl FanActuator for OdFanCurve {
    fn kind(&self) -> &'static str {
        "od-fan-curve"
    }

    fn range(&self) -> FanRange {
        FanRange { min_duty_pct: self.speed_range.0, zero_rpm: false }
    }

    fn set_duty(&mut self, duty_pct: f64, junction_c: f64, limit_c: f64) -> Result<(), ActuatorError> {
        let points = self.curve_for(duty_pct, junction_c, limit_c);
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

    #[test]
    fn a_duty_becomes_a_rising_curve_at_full_speed_ten_degrees_under_the_limit() {
        let points = curve().curve_for(30.0, 60.0, 95.0);
        assert_eq!(points.first(), Some(&(25, 30)));
        assert_eq!(points.last(), Some(&(85, 100)));
        assert!(points.windows(2).all(|w| w[1].0 >= w[0].0 && w[1].1 >= w[0].1), "{points:?}");
        // Never below the card's floor, even when asked.
        assert_eq!(curve().curve_for(0.0, 40.0, 95.0)[0].1, 15);
    }

    #[test]
    fn unparsable_file_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fan_curve");
        std::fs::write(&path, "OD_FAN_CURVE:\n").unwrap();
        assert!(matches!(OdFanCurve::open(path), Err(ActuatorError::Format { .. })));
    }
}
