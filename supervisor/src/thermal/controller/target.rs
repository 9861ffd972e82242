//! The best reactive peer: a PI controller on junction temperature with a setpoint under the
//! limit. Its constants were tuned once on the shipped plants and then fixed.

use super::{Controller, DeviceLimits, Observation};

/// Setpoint distance under the limit; prefill spikes lift the junction ~15 °C in seconds.
const SETPOINT_BELOW_LIMIT_C: f64 = 14.0;
const KP_PCT_PER_K: f64 = 4.0;
const KI_PCT_PER_K_S: f64 = 0.12;
/// Stop a zero-rpm fan only this far under the setpoint.
const STOP_BELOW_SETPOINT_C: f64 = 12.0;

pub struct Target {
    limits: DeviceLimits,
    integral: f64,
    last_t: Option<f64>,
}

impl Target {
    pub fn new(limits: DeviceLimits) -> Self {
        Self { limits, integral: limits.min_duty_pct, last_t: None }
    }
}

impl Controller for Target {
    fn name(&self) -> &'static str {
        "target"
    }

    fn decide(&mut self, obs: &Observation) -> f64 {
        let dt = self.last_t.map(|t| (obs.t_s - t).clamp(0.0, 10.0)).unwrap_or(1.0);
        self.last_t = Some(obs.t_s);
        let setpoint = self.limits.junction_limit_c - SETPOINT_BELOW_LIMIT_C;
        let error = obs.junction_c - setpoint;
        let (lo, hi) = (self.limits.min_duty_pct, 100.0);
        // Conditional integration (anti-windup): integrate only while the output is not pinned.
        let candidate = self.integral + KI_PCT_PER_K_S * error * dt;
        let unclamped = KP_PCT_PER_K * error + candidate;
        if (lo..=hi).contains(&unclamped)
            || (unclamped > hi && error < 0.0)
            || (unclamped < lo && error > 0.0)
        {
            self.integral = candidate.clamp(lo - 20.0, hi);
        }
        let duty = (KP_PCT_PER_K * error + self.integral).clamp(lo, hi);
        if self.limits.zero_rpm && duty <= lo && obs.junction_c < setpoint - STOP_BELOW_SETPOINT_C {
            return 0.0;
        }
        duty
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_harder_the_hotter_it_stays() {
        let limits =
            DeviceLimits { junction_limit_c: 95.0, min_duty_pct: 20.0, zero_rpm: false, power_cap_w: None };
        let mut c = Target::new(limits);
        let obs = |t_s: f64, j: f64| Observation {
            t_s,
            junction_c: j,
            power_w: 0.0,
            fan_duty_pct: 0.0,
            load: None,
        };
        let first = c.decide(&obs(0.0, 88.0));
        let later = (1..20).map(|i| c.decide(&obs(i as f64, 88.0))).last().unwrap();
        assert!(later > first, "{first} -> {later}");
        let cold = (20..200).map(|i| c.decide(&obs(i as f64, 40.0))).last().unwrap();
        assert_eq!(cold, 20.0);
    }
}
