//! The model-predictive controller: each period it forecasts power from the engine's queue,
//! predicts the junction with the learned model and picks the slowest duty that, held for a
//! while and then followed by full speed, keeps the junction under the limit over the horizon —
//! with room kept for a large prompt arriving unannounced. Rate limits and hysteresis keep the
//! fan from hunting.

use std::collections::VecDeque;

use super::{interpolate, Controller, DeviceLimits, Observation};
use crate::thermal::forecast::PowerForecast;
use crate::thermal::model::{ModelParams, ThermalModel, JUNCTION_TAU_S};

/// How far ahead the junction is predicted.
const HORIZON_S: f64 = 90.0;
/// How long a candidate duty is held before the plan escapes to full speed.
const HOLD_S: f64 = 20.0;
/// Weight of a new reading against the model's one-step prediction of the junction: the sensor
/// has 1 °C steps and noise, and the duty search near the limit is sensitive to both.
const READING_GAIN: f64 = 0.35;
/// A reading this far from the model's one-step prediction replaces the estimate outright.
const RESET_C: f64 = 3.0;
/// Kept under the limit for sensor resolution, noise and model error (the junction estimate is
/// filtered and the model fitted in integral form, so 1 °C suffices on the shipped plants).
const MARGIN_C: f64 = 1.0;
/// Duty added on the way up (beyond the rounding to the command grid).
const UP_HEADROOM_PCT: f64 = 0.0;
/// The fan slows only when it could go this much lower ...
const DOWN_DEADBAND_PCT: f64 = 5.0;
/// ... for this many consecutive periods.
const DOWN_DWELL: usize = 10;
/// Commands go up and down in steps of this much.
const STEP_PCT: f64 = 10.0;

/// Rounds a duty up to the command grid: small wanders of the search are not each a change.
fn grid(duty: f64) -> f64 {
    ((duty / STEP_PCT).ceil() * STEP_PCT).min(100.0)
}
/// A zero-rpm fan stops only after this many periods of needing nothing.
const STOP_DWELL: usize = 30;
/// Bisection resolution of the duty search.
const SEARCH_RESOLUTION_PCT: f64 = 1.0;

pub struct Predictive {
    limits: DeviceLimits,
    model: ThermalModel,
    forecast: PowerForecast,
    dt_s: f64,
    duty: Option<f64>,
    recent_required: VecDeque<f64>,
    prediction_30s_c: Option<f64>,
    predicted_peak_c: Option<f64>,
    /// Filtered junction estimate.
    junction_est_c: Option<f64>,
}

impl Predictive {
    pub fn new(limits: DeviceLimits, params: ModelParams, dt_s: f64) -> Self {
        Self {
            limits,
            model: ThermalModel::new(params, dt_s),
            forecast: PowerForecast::new(),
            dt_s,
            duty: None,
            recent_required: VecDeque::with_capacity(STOP_DWELL),
            prediction_30s_c: None,
            predicted_peak_c: None,
            junction_est_c: None,
        }
    }

    /// The learned parameters, to persist.
    pub fn params(&self) -> &ModelParams {
        &self.model.params
    }

    /// Lowest duty whose plan keeps the junction (plus the surprise reserve) under `budget_c`.
    fn required_duty(&self, junction_c: f64, power: &[f64], reserve: &[f64], budget_c: f64) -> f64 {
        let hold = (HOLD_S / self.dt_s).round() as usize;
        let holds = |duty: f64| {
            let mut ok = true;
            self.model.predict(
                junction_c,
                power,
                |k| if k < hold { duty } else { 100.0 },
                |k, tj| {
                    ok &= tj + reserve[k] <= budget_c;
                },
            );
            ok
        };
        let lowest = self.limits.lowest_duty();
        // A stopped fan restarts slowly and passive cooling is the least observed part of the
        // model: stop only where staying stopped for the whole horizon holds.
        let stop_holds = || {
            let mut ok = true;
            self.model.predict(junction_c, power, |_| lowest, |k, tj| ok &= tj + reserve[k] <= budget_c);
            ok
        };
        if lowest < self.limits.min_duty_pct && stop_holds() {
            return lowest;
        }
        let (mut lo, mut hi) = (self.limits.min_duty_pct, 100.0);
        if holds(lo) {
            return lo;
        }
        if !holds(hi) {
            return 100.0;
        }
        while hi - lo > SEARCH_RESOLUTION_PCT {
            let mid = 0.5 * (lo + hi);
            if holds(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// Junction rise a large prompt arriving at each step would add on top of the forecast power.
    /// While the engine works on known requests, room is kept only where prompts have been seen
    /// arriving while it was busy (several users, batch jobs); after it drains, only from the
    /// learned shortest idle gap on (one user or agent waits for each answer, then thinks or
    /// runs a tool).
    fn surprise_reserve(&self, power: &[f64], loaded: bool) -> Vec<f64> {
        let rise_share = 1.0 - (-self.forecast.large_prefill_s() / JUNCTION_TAU_S).exp();
        let r_js = self.model.params.r_js_k_per_w;
        let idle_w = self.forecast.idle_w();
        // The forecast has no new arrivals: once idle it stays idle.
        let drained = if loaded { power.iter().rposition(|&p| p != idle_w).map_or(0, |k| k + 1) } else { 0 };
        let quiet_s = self.forecast.quiet_after_idle_s();
        let wait_s = if drained == 0 { (quiet_s - self.forecast.idle_s()).max(0.0) } else { quiet_s };
        let after_idle = drained + (wait_s / self.dt_s).floor() as usize;
        let busy = self.forecast.arrives_while_busy();
        power
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                let open = if k < drained { busy } else { k >= after_idle };
                if open {
                    r_js * (self.forecast.prefill_w() - p).max(0.0) * rise_share
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// Rate limits and hysteresis: up at once (with headroom), down only after a dwell.
    fn smooth(&mut self, required: f64) -> f64 {
        if self.recent_required.len() == STOP_DWELL {
            self.recent_required.pop_front();
        }
        self.recent_required.push_back(required);
        let Some(current) = self.duty else { return required.max(self.limits.lowest_duty()) };
        if required > current {
            let up = grid(required + UP_HEADROOM_PCT);
            return if required < self.limits.min_duty_pct {
                required
            } else {
                up.max(self.limits.min_duty_pct)
            };
        }
        let window: Vec<f64> = self.recent_required.iter().rev().take(DOWN_DWELL).copied().collect();
        let dwell_met =
            window.len() == DOWN_DWELL && window.iter().all(|&r| r <= current - DOWN_DEADBAND_PCT);
        if !dwell_met {
            return current;
        }
        let needed = window.iter().copied().fold(0.0, f64::max);
        if needed < self.limits.min_duty_pct {
            let stop_ok = self.recent_required.len() == STOP_DWELL
                && self.recent_required.iter().all(|&r| r < self.limits.min_duty_pct);
            return if stop_ok { self.limits.lowest_duty() } else { self.limits.min_duty_pct.min(current) };
        }
        grid(needed).max(self.limits.min_duty_pct).min(current)
    }
}

impl Controller for Predictive {
    fn name(&self) -> &'static str {
        "predictive"
    }

    fn decide(&mut self, obs: &Observation) -> f64 {
        if let Some(load) = &obs.load {
            self.forecast.observe(load, obs.power_w, self.dt_s);
        }
        // One-step prediction from the last estimate, corrected by the reading.
        let junction_c = match self.junction_est_c {
            Some(est) => {
                let mut next = est;
                self.model.predict(est, &[obs.power_w], |_| obs.fan_duty_pct, |_, tj| next = tj);
                if (obs.junction_c - next).abs() > RESET_C {
                    obs.junction_c
                } else {
                    next + READING_GAIN * (obs.junction_c - next)
                }
            }
            None => obs.junction_c,
        };
        self.junction_est_c = Some(junction_c);
        self.model.observe(obs.junction_c, obs.power_w, obs.fan_duty_pct);
        let steps = (HORIZON_S / self.dt_s).round() as usize;
        let power = self.forecast.power(obs.load.as_ref(), steps, self.dt_s);
        let reserve = self.surprise_reserve(&power, obs.load.is_some());
        let limit = self.limits.junction_limit_c;
        let required = self.required_duty(junction_c, &power, &reserve, limit - MARGIN_C);
        // The forecast is never trusted below a reactive curve near the limit.
        let floor = interpolate(&[(limit - MARGIN_C, 0.0), (limit, 100.0)], obs.junction_c);
        let duty = self.smooth(required).max(floor);
        self.duty = Some(duty);

        let (at_30, mut peak) = ((30.0 / self.dt_s).round() as usize, f64::MIN);
        let mut ahead = None;
        self.model.predict(
            junction_c,
            &power,
            |_| duty,
            |k, tj| {
                peak = peak.max(tj);
                if k + 1 == at_30 {
                    ahead = Some(tj);
                }
            },
        );
        self.prediction_30s_c = ahead;
        self.predicted_peak_c = Some(peak);
        duty
    }

    fn prediction_30s_c(&self) -> Option<f64> {
        self.prediction_30s_c
    }

    fn predicted_peak_c(&self) -> Option<f64> {
        self.predicted_peak_c
    }
}
