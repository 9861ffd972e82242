//! The bench-only reference: knows the plant and the future power exactly and each second takes
//! the lowest duty such that holding it for a few seconds and then running at full duty keeps the
//! true junction temperature under the limit over the horizon. Its commands reach the fan as
//! every controller's do: a zero-rpm fan stops only where its firmware's curve stops it. It never
//! runs on a device.

use super::interpolate;
use crate::thermal::plant::{PlantSpec, PlantState, PLANT_DT_S};

/// How long a candidate duty is held before the escape to full duty.
const HOLD_S: f64 = 5.0;
/// How far ahead the oracle checks the junction.
const HORIZON_S: f64 = 120.0;
/// Bisection stops at this duty resolution.
const RESOLUTION_PCT: f64 = 0.5;

pub struct Oracle {
    spec: PlantSpec,
    limit_c: f64,
    /// Board power for every plant step of the run.
    power: Vec<f64>,
}

impl Oracle {
    pub fn new(spec: PlantSpec, limit_c: f64, power: Vec<f64>) -> Self {
        Self { spec, limit_c, power }
    }

    /// The duty to command now, with the plant in `state` at plant step `step`.
    pub fn decide(&self, state: &PlantState, step: usize) -> f64 {
        // A zero-rpm fan stops only through its firmware, and only where the firmware's curve
        // stops it; where that curve spins it, the floor is quieter.
        if self.spec.fan.zero_rpm && self.sent(0.0, state) == 0.0 && self.holds(state, step, 0.0) {
            return 0.0;
        }
        let (mut lo, mut hi) = (self.spec.fan.min_duty_pct, 100.0);
        if self.holds(state, step, lo) {
            return lo;
        }
        if !self.holds(state, step, hi) {
            return 100.0;
        }
        while hi - lo > RESOLUTION_PCT {
            let mid = 0.5 * (lo + hi);
            if self.holds(state, step, mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// What the fan runs at in `state` for a command of `duty`: below a zero-rpm fan's floor, its
    /// firmware's curve (without the bench firmware's hysteresis, on the true junction).
    fn sent(&self, duty: f64, state: &PlantState) -> f64 {
        self.spec.duty_through_firmware(duty, interpolate(&self.spec.stock.curve, state.junction_c))
    }

    fn holds(&self, state: &PlantState, step: usize, duty: f64) -> bool {
        let hold_steps = (HOLD_S / PLANT_DT_S) as usize;
        let horizon_steps = (HORIZON_S / PLANT_DT_S) as usize;
        let idle = self.spec.power.idle_w;
        let mut s = *state;
        for k in 0..horizon_steps {
            let p = self.power.get(step + k).copied().unwrap_or(idle);
            let d = if k < hold_steps { self.sent(duty, &s) } else { 100.0 };
            s.step(&self.spec, p, d);
            if s.junction_c > self.limit_c {
                return false;
            }
        }
        true
    }
}
