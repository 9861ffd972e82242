//! The safety layer, above the controller and independent of it: hard limit → full speed;
//! sensor missing, absurd or frozen → firmware auto; near the limit the duty never drops below
//! what a reactive curve demands, whatever the forecast says.

use std::collections::VecDeque;

use super::controller::interpolate;
use super::sensors::{Readings, SensorError};

/// Plausible junction range; outside it the sensor is broken, not the GPU.
const JUNCTION_RANGE_C: (f64, f64) = (-10.0, 130.0);
/// Plausible board power.
const POWER_RANGE_W: (f64, f64) = (0.0, 1500.0);
/// After the hard limit, full speed holds until the junction is this far under it.
const RELEASE_BELOW_LIMIT_C: f64 = 5.0;
/// A junction reading unchanged for this many samples while power moves is frozen ...
const FROZEN_SAMPLES: usize = 60;
/// ... by at least this much.
const FROZEN_POWER_SWING_W: f64 = 40.0;
/// Without a power reading, unchanged this long counts as frozen.
const FROZEN_SAMPLES_NO_POWER: usize = 600;
/// The reactive floor starts this far under the limit.
const FLOOR_FROM_BELOW_LIMIT_C: f64 = 6.0;

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The controller may drive the fan, at no less than `floor_pct`.
    Control {
        floor_pct: f64,
    },
    FullSpeed(String),
    FirmwareAuto(String),
}

pub struct SafetyLayer {
    limit_c: f64,
    at_full: bool,
    recent: VecDeque<(f64, Option<f64>)>,
}

impl SafetyLayer {
    pub fn new(limit_c: f64) -> Self {
        Self { limit_c, at_full: false, recent: VecDeque::with_capacity(FROZEN_SAMPLES_NO_POWER) }
    }

    pub fn judge(&mut self, reading: &Result<Readings, SensorError>) -> Verdict {
        let r = match reading {
            Ok(r) => r,
            Err(e) => {
                self.recent.clear();
                return Verdict::FirmwareAuto(format!("sensor unusable: {e}"));
            }
        };
        let (jlo, jhi) = JUNCTION_RANGE_C;
        if !(jlo..=jhi).contains(&r.junction_c) {
            self.recent.clear();
            return Verdict::FirmwareAuto(format!("absurd junction reading {:.1} °C", r.junction_c));
        }
        if let Some(p) = r.power_w.filter(|p| !(POWER_RANGE_W.0..=POWER_RANGE_W.1).contains(p)) {
            self.recent.clear();
            return Verdict::FirmwareAuto(format!("absurd power reading {p:.0} W"));
        }
        if self.recent.len() == FROZEN_SAMPLES_NO_POWER {
            self.recent.pop_front();
        }
        self.recent.push_back((r.junction_c, r.power_w));
        if self.frozen() {
            return Verdict::FirmwareAuto(format!("junction sensor frozen at {:.1} °C", r.junction_c));
        }
        if r.junction_c >= self.limit_c
            || (self.at_full && r.junction_c > self.limit_c - RELEASE_BELOW_LIMIT_C)
        {
            self.at_full = true;
            return Verdict::FullSpeed(format!(
                "junction {:.1} °C at the {:.1} °C limit",
                r.junction_c, self.limit_c
            ));
        }
        self.at_full = false;
        let floor_pct = interpolate(
            &[(self.limit_c - FLOOR_FROM_BELOW_LIMIT_C, 0.0), (self.limit_c, 100.0)],
            r.junction_c,
        );
        Verdict::Control { floor_pct }
    }

    fn frozen(&self) -> bool {
        let Some(&(last, _)) = self.recent.back() else { return false };
        let same = self.recent.iter().rev().take_while(|(j, _)| *j == last).count();
        let window = self.recent.iter().rev().take(same);
        let powers: Vec<f64> = window.filter_map(|(_, p)| *p).collect();
        if powers.is_empty() {
            return same >= FROZEN_SAMPLES_NO_POWER;
        }
        let swing =
            powers.iter().copied().fold(f64::MIN, f64::max) - powers.iter().copied().fold(f64::MAX, f64::min);
        same >= FROZEN_SAMPLES && swing >= FROZEN_POWER_SWING_W
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(j: f64, p: f64) -> Result<Readings, SensorError> {
        Ok(Readings { junction_c: j, power_w: Some(p), fan_rpm: None, fan_duty_pct: None })
    }

    #[test]
    fn limit_forces_full_speed_until_well_below() {
        let mut s = SafetyLayer::new(95.0);
        assert!(matches!(s.judge(&ok(60.0, 100.0)), Verdict::Control { floor_pct } if floor_pct == 0.0));
        assert!(matches!(s.judge(&ok(95.0, 100.0)), Verdict::FullSpeed(_)));
        assert!(matches!(s.judge(&ok(92.0, 100.0)), Verdict::FullSpeed(_)));
        assert!(matches!(s.judge(&ok(89.0, 100.0)), Verdict::Control { floor_pct } if floor_pct == 0.0));
        assert!(matches!(s.judge(&ok(92.0, 100.0)), Verdict::Control { floor_pct } if floor_pct == 50.0));
    }

    #[test]
    fn missing_and_absurd_readings_hand_back_to_firmware() {
        let mut s = SafetyLayer::new(95.0);
        assert!(matches!(s.judge(&Err(SensorError::Missing("x".into()))), Verdict::FirmwareAuto(_)));
        assert!(matches!(s.judge(&ok(-40.0, 100.0)), Verdict::FirmwareAuto(_)));
        assert!(matches!(s.judge(&ok(500.0, 100.0)), Verdict::FirmwareAuto(_)));
        assert!(matches!(s.judge(&ok(50.0, 1e6)), Verdict::FirmwareAuto(_)));
    }

    #[test]
    fn a_reading_stuck_while_power_swings_is_frozen_but_a_quiet_idle_is_not() {
        let mut s = SafetyLayer::new(95.0);
        for _ in 0..FROZEN_SAMPLES * 2 {
            assert!(matches!(s.judge(&ok(45.0, 30.0)), Verdict::Control { .. }));
        }
        let mut last = None;
        for i in 0..FROZEN_SAMPLES {
            last = Some(s.judge(&ok(45.0, if i % 10 < 5 { 30.0 } else { 280.0 })));
        }
        assert!(matches!(last, Some(Verdict::FirmwareAuto(_))), "{last:?}");
    }
}
