//! The bench-only reference: knows the plant and the future power exactly and each second takes
//! the lowest duty such that holding it for a few seconds and then running at full duty keeps the
//! true junction temperature under the limit over the horizon. Its commands reach the fan as
//! every controller's do: a zero-rpm fan stops only where its firmware's curve stops it. It never
//! runs on a device.
//!
//! Kept to survive unannounced work ([`Oracle::surviving_unannounced_work`]), it is about the best
//! a controller can do that must survive work nobody announced: each duty must also hold the
//! limit if, from now, the box ran prefill as long as the longest stretch of prefill it has run
//! so far (one long prompt, or a burst of short ones), seen at the next sample and answered at
//! once with full duty. What is left between it and the oracle is what foresight of the
//! arrivals is worth, which no controller that sees only the queue can have.

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
    /// Per plant step, the longest stretch of prefill so far, in steps: the unannounced work each
    /// duty must also survive (empty: none).
    unannounced_steps: Vec<usize>,
    /// Plant steps before a controller sees unannounced work and answers it: one sample.
    reaction_steps: usize,
}

impl Oracle {
    pub fn new(spec: PlantSpec, limit_c: f64, power: Vec<f64>) -> Self {
        let reaction_steps = spec.sample_steps();
        Self { spec, limit_c, power, unannounced_steps: Vec::new(), reaction_steps }
    }

    /// The oracle that must also survive, at every step, unannounced prefill as long as the
    /// longest stretch of prefill in its power timeline so far.
    pub fn surviving_unannounced_work(mut self) -> Self {
        let prefill_w = self.spec.power.prefill_w;
        let (mut stretch, mut longest) = (0, 0);
        self.unannounced_steps = self
            .power
            .iter()
            .map(|&p| {
                stretch = if p >= prefill_w { stretch + 1 } else { 0 };
                longest = longest.max(stretch);
                longest
            })
            .collect();
        self
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
        self.holds_the_known_future(state, step, duty) && self.survives_unannounced_work(state, step, duty)
    }

    /// The known future with `duty` held for `HOLD_S`, then full duty.
    fn holds_the_known_future(&self, state: &PlantState, step: usize, duty: f64) -> bool {
        let hold_steps = (HOLD_S / PLANT_DT_S) as usize;
        let horizon_steps = (HORIZON_S / PLANT_DT_S) as usize;
        self.stays_under_limit(state, step, horizon_steps, |_, known| known, |k| k < hold_steps, duty)
    }

    /// The known future with prefill power from now for the unannounced work's length, the duty
    /// held until the next sample and full duty after it.
    fn survives_unannounced_work(&self, state: &PlantState, step: usize, duty: f64) -> bool {
        let prefill_steps = self.unannounced_steps.get(step).copied().unwrap_or(0);
        if prefill_steps == 0 {
            return true;
        }
        // The heatsink turns within seconds of the prefill's end, at full duty.
        let steps = (prefill_steps + (10.0 / PLANT_DT_S) as usize).min((HORIZON_S / PLANT_DT_S) as usize);
        let prefill_w = self.spec.power.prefill_w;
        let power = |k, known: f64| if k < prefill_steps { known.max(prefill_w) } else { known };
        self.stays_under_limit(state, step, steps, power, |k| k < self.reaction_steps, duty)
    }

    /// Whether the true junction stays under the limit for `steps` from `state` at plant step
    /// `step`, with the known power of each step `k` ahead passed through `power(k, known)` and
    /// `duty` sent while `holding(k)`, full duty after.
    fn stays_under_limit(
        &self,
        state: &PlantState,
        step: usize,
        steps: usize,
        power: impl Fn(usize, f64) -> f64,
        holding: impl Fn(usize) -> bool,
        duty: f64,
    ) -> bool {
        let idle = self.spec.power.idle_w;
        let mut s = *state;
        for k in 0..steps {
            let p = power(k, self.power.get(step + k).copied().unwrap_or(idle));
            let d = if holding(k) { self.sent(duty, &s) } else { 100.0 };
            s.step(&self.spec, p, d);
            if s.junction_c > self.limit_c {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fe_warm() -> PlantSpec {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../thermal/plants/rtx5090-fe-warm.toml");
        PlantSpec::load(&path).unwrap()
    }

    /// The oracle's run over `power`, deciding once a second: the state and command of each step.
    fn run(oracle: &Oracle, spec: &PlantSpec, power: &[f64]) -> Vec<(PlantState, f64)> {
        let period = spec.sample_steps();
        let (mut state, mut command) = (PlantState::at_ambient(spec), 0.0);
        let mut run = Vec::with_capacity(power.len());
        for (step, &p) in power.iter().enumerate() {
            if step % period == 0 {
                command = oracle.decide(&state, step);
            }
            run.push((state, command));
            state.step(spec, p, command);
        }
        run
    }

    /// The peak junction if, from `state`, the box ran prefill for `steps` on top of `power`,
    /// answered a sample later with full duty.
    fn peak_under_unannounced_work(spec: &PlantSpec, state: PlantState, command: f64, steps: usize) -> f64 {
        let period = spec.sample_steps();
        let mut s = state;
        let mut peak = s.junction_c;
        for k in 0..steps + 100 {
            let p = if k < steps { spec.power.prefill_w } else { spec.power.decode_w };
            s.step(spec, p, if k < period { command } else { 100.0 });
            peak = peak.max(s.junction_c);
        }
        peak
    }

    /// 5 s of prefill, then ten minutes of decode: the oracle, which knows no more prefill comes,
    /// runs the junction up to the limit, where 5 s of prefill nobody announced would take it
    /// over. Kept to survive such work, it runs louder and that prefill stays under the limit.
    #[test]
    fn the_oracle_kept_to_survive_unannounced_work_leaves_room_for_it() {
        let spec = fe_warm();
        let limit = spec.limits.junction_limit_c;
        let prefill_steps = (5.0 / PLANT_DT_S) as usize;
        let mut power = vec![spec.power.prefill_w; prefill_steps];
        power.resize((600.0 / PLANT_DT_S) as usize, spec.power.decode_w);
        let oracle = Oracle::new(spec.clone(), limit, power.clone());
        let kept = Oracle::new(spec.clone(), limit, power.clone()).surviving_unannounced_work();
        assert_eq!(
            kept.unannounced_steps[prefill_steps + 10],
            prefill_steps,
            "the longest stretch of prefill so far"
        );

        let at = (400.0 / PLANT_DT_S) as usize;
        let (plain_run, kept_run) = (run(&oracle, &spec, &power), run(&kept, &spec, &power));
        let (plain_state, plain_command) = plain_run[at];
        let (kept_state, kept_command) = kept_run[at];
        let plain_peak = peak_under_unannounced_work(&spec, plain_state, plain_command, prefill_steps);
        let kept_peak = peak_under_unannounced_work(&spec, kept_state, kept_command, prefill_steps);
        assert!(
            plain_peak > limit,
            "the oracle's junction {:.2} °C, under that work {plain_peak:.2}",
            plain_state.junction_c
        );
        assert!(
            kept_peak <= limit,
            "kept to survive it: {:.2} °C, under that work {kept_peak:.2}",
            kept_state.junction_c
        );
        let mean = |run: &[(PlantState, f64)]| run.iter().map(|(_, c)| c).sum::<f64>() / run.len() as f64;
        assert!(mean(&kept_run) > mean(&plain_run), "{} vs {}", mean(&kept_run), mean(&plain_run));
        // Both hold the limit on the work that does come.
        assert!(plain_run.iter().chain(&kept_run).all(|(s, _)| s.junction_c <= limit));
    }
}
