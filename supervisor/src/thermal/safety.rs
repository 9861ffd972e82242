//! The safety layer, above the controller and independent of it: hard limit → full speed;
//! sensor missing, absurd or frozen → firmware auto; near the limit the duty never drops below
//! what a reactive curve demands, whatever the forecast says. The bench scores the predictive
//! controller under this same layer (`bench.rs`), so its figures are what a device does.

use std::collections::VecDeque;

use super::controller::interpolate;
use super::sensors::{Readings, SensorError};

/// Plausible junction range; outside it the sensor is broken, not the GPU.
pub(crate) const JUNCTION_RANGE_C: (f64, f64) = (-10.0, 130.0);
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
/// The reactive floor starts this far under the limit: twice the predictive controller's margin,
/// so it lifts the fan where the junction has passed what the plans allowed, not where they ride.
/// From 6 °C under, it overrode the plans on every hot run and, read off a 1 °C sensor once a
/// second, moved the fan up to 30 times a minute (thermal/FINDINGS.md, "The bench under the
/// safety layer").
const FLOOR_FROM_BELOW_LIMIT_C: f64 = 2.0;
/// The floor falls only once it has been lower for this many readings: it rises at once.
const FLOOR_HOLD_SAMPLES: usize = 15;

/// The reactive curve near `limit_c`: the least duty the fan may run at with the junction at
/// `junction_c`, 0 up to `FLOOR_FROM_BELOW_LIMIT_C` under the limit, then rising to 100 % at it.
pub fn reactive_floor_pct(junction_c: f64, limit_c: f64) -> f64 {
    interpolate(&[(limit_c - FLOOR_FROM_BELOW_LIMIT_C, 0.0), (limit_c, 100.0)], junction_c)
}

/// Where [`reactive_floor_pct`] reaches `duty_pct` under `limit_c`.
pub fn reactive_floor_reaches_c(duty_pct: f64, limit_c: f64) -> f64 {
    limit_c - FLOOR_FROM_BELOW_LIMIT_C * (1.0 - duty_pct.clamp(0.0, 100.0) / 100.0)
}

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
    /// The reactive floor of the last `FLOOR_HOLD_SAMPLES` readings under control.
    recent_floors: VecDeque<f64>,
}

impl SafetyLayer {
    pub fn new(limit_c: f64) -> Self {
        Self {
            limit_c,
            at_full: false,
            recent: VecDeque::with_capacity(FROZEN_SAMPLES_NO_POWER),
            recent_floors: VecDeque::with_capacity(FLOOR_HOLD_SAMPLES),
        }
    }

    pub fn judge(&mut self, reading: &Result<Readings, SensorError>) -> Verdict {
        let verdict = self.verdict(reading);
        if !matches!(verdict, Verdict::Control { .. }) {
            // Full speed and firmware auto end on rules of their own; no floor outlasts them.
            self.recent_floors.clear();
        }
        verdict
    }

    fn verdict(&mut self, reading: &Result<Readings, SensorError>) -> Verdict {
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
        if self.recent_floors.len() == FLOOR_HOLD_SAMPLES {
            self.recent_floors.pop_front();
        }
        self.recent_floors.push_back(reactive_floor_pct(r.junction_c, self.limit_c));
        let floor_pct = self.recent_floors.iter().copied().fold(0.0, f64::max);
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
        assert!(matches!(s.judge(&ok(92.0, 100.0)), Verdict::Control { floor_pct } if floor_pct == 0.0));
    }

    #[test]
    fn the_floor_rises_at_once_near_the_limit_and_falls_only_after_it_has_been_lower_a_while() {
        let mut s = SafetyLayer::new(95.0);
        let floor = |v: Verdict| match v {
            Verdict::Control { floor_pct } => floor_pct,
            other => panic!("{other:?}"),
        };
        assert_eq!(floor(s.judge(&ok(92.9, 100.0))), 0.0);
        assert_eq!(floor(s.judge(&ok(94.0, 100.0))), 50.0);
        // A noisy sensor dipping back under the floor's start does not move the fan.
        for _ in 1..FLOOR_HOLD_SAMPLES {
            assert_eq!(floor(s.judge(&ok(92.0, 100.0))), 50.0);
        }
        assert_eq!(floor(s.judge(&ok(92.0, 100.0))), 0.0);
        assert_eq!(floor(s.judge(&ok(94.5, 100.0))), 75.0);
        // Full speed at the limit ends by its own rule; the floor before it is not held after.
        assert!(matches!(s.judge(&ok(95.0, 100.0)), Verdict::FullSpeed(_)));
        assert_eq!(floor(s.judge(&ok(89.0, 100.0))), 0.0);
    }

    #[test]
    fn the_curve_reaches_a_duty_where_the_floor_does() {
        for duty in [0.0, 30.0, 50.0, 100.0] {
            let at = reactive_floor_reaches_c(duty, 95.0);
            assert!((reactive_floor_pct(at, 95.0) - duty).abs() < 1e-9, "{duty} % at {at} °C");
        }
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
