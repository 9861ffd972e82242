//! The learned thermal model of one device: the junction sits `r_js · P_j` above a heatsink node
//! (`P_j`: power low-passed by the junction time constant), and the heatsink follows
//! `dTs/dt = a·P − (b·s + c·f(d))·(Ts − T0 − δ)` with `f(d) = (d/100)^0.7` the airflow of duty
//! `d`, `s` = 1 while the fan is stopped (passive cooling only) else 0, `T0` a generic ambient and
//! `δ` the real one's offset from it. One ambient serves both cooling modes: with an offset per
//! mode, a fan held at one duty and one rise lets its conductance and its offset trade freely.
//! Every parameter is projected onto its physical range after each update. Both parts are fitted
//! by recursive least squares with forgetting from what the device shows (the heatsink by an
//! extended Kalman step, since `c·δ` is not linear), starting from a generic prior, and persisted
//! per device. The heatsink is fitted in integral form: the heatsink change over a 30 s window
//! against the integrals of the regressors, which averages the 1 °C sensor steps out and uses
//! transients as well as settled stretches.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::fan::{FASTEST_LAG_S, FIRMWARE_STOPS_BELOW_RANGE_C, SLOWEST_LAG_S};

/// Generic junction time constant (GPU dies: ~2–4 s).
pub const JUNCTION_TAU_S: f64 = 3.0;
/// Generic airflow exponent (sink-to-air resistance ∝ airflow^-0.6…-0.8).
const AIRFLOW_EXPONENT: f64 = 0.7;
/// RLS forgetting factor per heatsink update (one every `UPDATE_EVERY` samples): a memory of
/// ~40 min spans several fan speeds, which separating capacity from cooling needs.
const FORGETTING: f64 = 0.998;
/// Samples over which the heatsink change is integrated (noise of a 1 °C sensor averages out).
const SLOPE_WINDOW: usize = 31;
/// Samples averaged at each end of the window.
const END_SAMPLES: usize = 3;
/// A heatsink update every this many samples (overlapping windows are not independent).
const UPDATE_EVERY: u64 = 5;
/// Seconds over which a junction step is measured for `r_js`.
const STEP_LAG: usize = 3;
/// A power change smaller than this does not teach `r_js`.
const MIN_STEP_W: f64 = 25.0;
/// Expected noise of the measured mean heatsink slope (K/s): ~0.3 K of end-group error over 30 s.
const SLOPE_NOISE: f64 = 0.015;
const PARAMS: usize = 4;
/// Share of the gap between the power and the power the junction feels (at a window's ends) by
/// which the heatsink reading may be off: the junction's time constant is generic (GPU dies take
/// 2–4 s), so where the power has just moved the junction may have gone further or less far.
const UNSETTLED_SHARE: f64 = 0.5;
/// Below this duty the fan is taken as stopped.
const STOPPED_DUTY_PCT: f64 = 1.0;
/// Generic ambient the model measures from (inside a case).
const AMBIENT_PRIOR_C: f64 = 30.0;
const FORMAT_VERSION: u32 = 3;
/// Physical range of the heatsink fit (see [`ModelParams::project`]): capacity ...
const MIN_CAPACITY_J_PER_K: f64 = 50.0;
const MAX_CAPACITY_J_PER_K: f64 = 5000.0;
/// ... heatsink time constants of 10 s or more ...
const MAX_RATE_PER_S: f64 = 0.1;
/// ... and the ambient within this of the prior's.
const MAX_AMBIENT_ERROR_C: f64 = 25.0;

/// Airflow share of a duty.
pub fn airflow(duty_pct: f64) -> f64 {
    (duty_pct.clamp(0.0, 100.0) / 100.0).powf(AIRFLOW_EXPONENT)
}

/// The persisted part of the model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelParams {
    pub version: u32,
    pub r_js_k_per_w: f64,
    pub r_js_var: f64,
    /// `[a, b, c, δ]` of the heatsink equation.
    pub sink: [f64; PARAMS],
    pub sink_cov: [[f64; PARAMS]; PARAMS],
    pub updates: u64,
    /// The fan's lag as learned from the duty it reports (absent until a command has moved it;
    /// files from before it was kept read as absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_lag_s: Option<f64>,
    /// For a zero-rpm fan, the reading under which its firmware was seen to keep it stopped
    /// (`fan::FirmwareStop`; absent until the firmware has shown it, and in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware_stops_below_c: Option<f64>,
}

impl ModelParams {
    /// A generic discrete GPU: sink 400 J/K, sink-to-air 0.7 K/W stopped and 0.15 K/W at full
    /// airflow, 30 °C inside the case. Deliberately on the warm side: the fan errs loud, not hot.
    pub fn prior() -> Self {
        Self::starting_from(400.0, 0.7, 0.15, 0.08, AMBIENT_PRIOR_C)
    }

    /// A card's own starting point (a profile set's `thermal/priors.toml`), with the generic
    /// prior's uncertainty; the first value the model cannot represent is returned as (key, why).
    pub fn from_card(
        capacity_j_per_k: f64,
        stopped_k_per_w: f64,
        full_k_per_w: f64,
        r_js_k_per_w: f64,
        ambient_c: f64,
    ) -> Result<Self, (&'static str, String)> {
        let within = |key: &'static str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err((key, format!("{v} is outside {lo}..={hi}")))
            }
        };
        within("sink_capacity_j_per_k", capacity_j_per_k, MIN_CAPACITY_J_PER_K, MAX_CAPACITY_J_PER_K)?;
        let (lo, hi) = (AMBIENT_PRIOR_C - MAX_AMBIENT_ERROR_C, AMBIENT_PRIOR_C + MAX_AMBIENT_ERROR_C);
        within("ambient_c", ambient_c, lo, hi)?;
        within("junction_to_sink_k_per_w", r_js_k_per_w, 0.001, 1.0)?;
        // Heatsink time constants of 10 s or more, and a running fan cools at least as still air.
        let fastest = 1.0 / (MAX_RATE_PER_S * capacity_j_per_k);
        within("sink_to_air_full_k_per_w", full_k_per_w, fastest, 100.0)?;
        within("sink_to_air_stopped_k_per_w", stopped_k_per_w, full_k_per_w, 100.0)?;
        Ok(Self::starting_from(capacity_j_per_k, stopped_k_per_w, full_k_per_w, r_js_k_per_w, ambient_c))
    }

    fn starting_from(
        cap: f64,
        stopped_k_per_w: f64,
        full_k_per_w: f64,
        r_js_k_per_w: f64,
        ambient_c: f64,
    ) -> Self {
        let (g_stopped, g_full) = (1.0 / stopped_k_per_w, 1.0 / full_k_per_w);
        let sink = [1.0 / cap, g_stopped / cap, g_full / cap, ambient_c - AMBIENT_PRIOR_C];
        let mut sink_cov = [[0.0; PARAMS]; PARAMS];
        for i in 0..PARAMS {
            // 70 % prior uncertainty per parameter, in units of the slope noise.
            sink_cov[i][i] = (0.7 * sink[i] / SLOPE_NOISE).powi(2);
        }
        // The ambient: ±10 °C around the prior's.
        sink_cov[3][3] = (10.0 / SLOPE_NOISE).powi(2);
        Self {
            version: FORMAT_VERSION,
            r_js_k_per_w,
            r_js_var: 0.05_f64.powi(2) / 0.5_f64.powi(2),
            sink,
            sink_cov,
            updates: 0,
            fan_lag_s: None,
            firmware_stops_below_c: None,
        }
    }

    /// The first implausible value, as (field, why): a saved model must pass this before it is
    /// resumed.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let [a, b, c, _] = self.sink;
        if self.version != FORMAT_VERSION {
            return Err(("version", format!("format {}, this build reads {FORMAT_VERSION}", self.version)));
        }
        if !(self.r_js_k_per_w.is_finite() && self.r_js_var.is_finite()) {
            return Err(("r_js_k_per_w", "not a finite number".into()));
        }
        if !(self.sink.iter().all(|v| v.is_finite()) && a > 0.0 && b >= 0.0 && c >= 0.0) {
            return Err(("sink", format!("{:?} is not a physical heatsink", self.sink)));
        }
        if !self.sink_cov.iter().flatten().all(|v| v.is_finite()) {
            return Err(("sink_cov", "not all finite".into()));
        }
        if let Some(lag) = self.fan_lag_s.filter(|lag| !(FASTEST_LAG_S..=SLOWEST_LAG_S).contains(lag)) {
            return Err(("fan_lag_s", format!("{lag} is outside {FASTEST_LAG_S}..={SLOWEST_LAG_S}")));
        }
        let stop_range = FIRMWARE_STOPS_BELOW_RANGE_C;
        if let Some(stop) = self.firmware_stops_below_c.filter(|c| !stop_range.contains(c)) {
            return Err(("firmware_stops_below_c", format!("{stop} is outside {stop_range:?}")));
        }
        Ok(())
    }

    /// Keeps the heatsink parameters physical: capacity between 50 J/K and 5 kJ/K, heatsink time
    /// constants of 10 s or more, no negative conductance, ambient within ±25 °C of the prior.
    fn project(&mut self) {
        self.sink[0] = self.sink[0].clamp(1.0 / MAX_CAPACITY_J_PER_K, 1.0 / MIN_CAPACITY_J_PER_K);
        self.sink[1] = self.sink[1].clamp(0.0, MAX_RATE_PER_S);
        self.sink[2] = self.sink[2].clamp(self.sink[1], MAX_RATE_PER_S);
        self.sink[3] = self.sink[3].clamp(-MAX_AMBIENT_ERROR_C, MAX_AMBIENT_ERROR_C);
    }

    /// The ambient the heatsink cools towards.
    pub fn ambient_c(&self) -> f64 {
        AMBIENT_PRIOR_C + self.sink[3]
    }

    /// Whether the heatsink fit sits on one of the bounds of [`Self::project`]: the data has not
    /// pinned it down there (or contradicts the model's form).
    pub fn at_bound(&self) -> bool {
        let [a, b, c, ambient] = self.sink;
        let on = |v: f64, bound: f64| (v - bound).abs() <= 1e-9 * bound.abs().max(1e-12);
        on(a, 1.0 / MAX_CAPACITY_J_PER_K)
            || on(a, 1.0 / MIN_CAPACITY_J_PER_K)
            || on(c, b)
            || on(c, MAX_RATE_PER_S)
            || on(ambient.abs(), MAX_AMBIENT_ERROR_C)
    }
}

/// A running fan that cools less than still air (`c < b`) contradicts the model. Clamping `c` alone
/// would leave the parameters the data ties to it where they were, and the ambient then runs away
/// along the ridge it shares with the capacity on a fan that never stops. Instead the fit moves onto
/// `c = b` along its covariance (the projection of a constrained Kalman filter), so the
/// parameters correlated with `c` move with it.
fn lift_fan_to_still_air(sink: &mut [f64; PARAMS], cov: &[[f64; PARAMS]; PARAMS]) {
    let below = sink[2] - sink[1];
    if below >= 0.0 {
        return;
    }
    let normal = [0.0, -1.0, 1.0, 0.0];
    let along = mat_vec(cov, &normal);
    let spread = dot(&normal, &along);
    if spread > 0.0 {
        for i in 0..PARAMS {
            sink[i] -= along[i] * below / spread;
        }
    }
}

/// `m·v` for the heatsink fit's covariance.
fn mat_vec(m: &[[f64; PARAMS]; PARAMS], v: &[f64; PARAMS]) -> [f64; PARAMS] {
    m.map(|row| dot(&row, v))
}

fn dot(u: &[f64; PARAMS], v: &[f64; PARAMS]) -> f64 {
    (0..PARAMS).map(|i| u[i] * v[i]).sum()
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    junction_c: f64,
    power_w: f64,
    power_j_w: f64,
    airflow: f64,
    stopped: f64,
}

/// The model plus its filter state.
#[derive(Debug, Clone)]
pub struct ThermalModel {
    pub params: ModelParams,
    power_j_w: Option<f64>,
    history: VecDeque<Sample>,
    samples: u64,
    dt_s: f64,
}

impl ThermalModel {
    pub fn new(params: ModelParams, dt_s: f64) -> Self {
        Self { params, power_j_w: None, history: VecDeque::with_capacity(SLOPE_WINDOW + 1), samples: 0, dt_s }
    }

    /// Power as the junction feels it (low-passed by its time constant).
    pub fn power_j_w(&self) -> Option<f64> {
        self.power_j_w
    }

    fn junction_filter(&self) -> f64 {
        1.0 - (-self.dt_s / JUNCTION_TAU_S).exp()
    }

    /// Feeds one sample (taken every `dt_s`) and updates the fit.
    pub fn observe(&mut self, junction_c: f64, power_w: f64, duty_pct: f64) {
        let pj = match self.power_j_w {
            Some(pj) => pj + (power_w - pj) * self.junction_filter(),
            None => power_w,
        };
        self.power_j_w = Some(pj);
        if self.history.len() == SLOPE_WINDOW {
            self.history.pop_front();
        }
        let stopped = if duty_pct < STOPPED_DUTY_PCT { 1.0 } else { 0.0 };
        self.history.push_back(Sample {
            junction_c,
            power_w,
            power_j_w: pj,
            airflow: airflow(duty_pct),
            stopped,
        });
        self.samples += 1;
        self.learn_r_js();
        if self.samples.is_multiple_of(UPDATE_EVERY) {
            self.learn_sink();
        }
    }

    fn learn_r_js(&mut self) {
        let n = self.history.len();
        if n <= STEP_LAG {
            return;
        }
        let (now, then) = (self.history[n - 1], self.history[n - 1 - STEP_LAG]);
        let x = now.power_j_w - then.power_j_w;
        if x.abs() < MIN_STEP_W {
            return;
        }
        let y = now.junction_c - then.junction_c;
        let p = &mut self.params;
        let gain = p.r_js_var * x / (0.98 + x * p.r_js_var * x);
        p.r_js_k_per_w = (p.r_js_k_per_w + gain * (y - x * p.r_js_k_per_w)).clamp(0.02, 0.3);
        p.r_js_var = ((1.0 - gain * x) * p.r_js_var / 0.98).min(ModelParams::prior().r_js_var);
    }

    fn sink_c(&self, s: &Sample) -> f64 {
        s.junction_c - self.params.r_js_k_per_w * s.power_j_w
    }

    fn learn_sink(&mut self) {
        let n = self.history.len();
        if n < SLOPE_WINDOW {
            return;
        }
        // Where the junction has not settled on the power at the ends (work that comes and goes
        // every second or two never lets it), the reading of the heatsink there depends on the
        // junction's time constant: such a window counts for less. Leaving it out instead leaves
        // a flickering load's fit to its idle stretches alone, where the ambient and the fan's
        // cooling trade freely and the fit overstates the heat under sustained work.
        let ends = (0..END_SAMPLES).chain(n - END_SAMPLES..n);
        let unsettled_w =
            ends.map(|i| (self.history[i].power_w - self.history[i].power_j_w).abs()).sum::<f64>()
                / END_SAMPLES as f64;
        // Change of `value` across the window: the mean of its end group minus that of its start.
        let change = |value: &dyn Fn(&Sample) -> f64| {
            let mean = |range: std::ops::Range<usize>| {
                range.map(|i| value(&self.history[i])).sum::<f64>() / END_SAMPLES as f64
            };
            mean(n - END_SAMPLES..n) - mean(0..END_SAMPLES)
        };
        // Heatsink change between the centres of the two end groups, over the integral of the
        // regressors between them (trapezoid), both divided by the span: a mean slope.
        let (from, to) = (END_SAMPLES / 2, n - 1 - END_SAMPLES / 2);
        let span = (to - from) as f64;
        let y = change(&|s| self.sink_c(s)) / (span * self.dt_s);
        // Window means of P_j, s, s·rise, f, f·rise (rise above the prior's ambient).
        let mut means = [0.0; 5];
        for i in from..=to {
            let s = &self.history[i];
            let w = if i == from || i == to { 0.5 } else { 1.0 } / span;
            let rise = self.sink_c(s) - AMBIENT_PRIOR_C;
            let row = [s.power_j_w, s.stopped, rise * s.stopped, s.airflow, rise * s.airflow];
            for (mean, v) in means.iter_mut().zip(row) {
                *mean += w * v;
            }
        }
        let [power, stopped, stopped_rise, airflow, airflow_rise] = means;
        // The slope is linear in a, b, c but not in the ambient δ (b·δ, c·δ): linearised at the
        // current estimate (an extended Kalman step), x is the slope's gradient.
        let [a, b, c, delta] = self.params.sink;
        let (passive_drive, fan_drive) = (stopped_rise - delta * stopped, airflow_rise - delta * airflow);
        let predicted = a * power - b * passive_drive - c * fan_drive;
        let x = [power, -passive_drive, -fan_drive, b * stopped + c * airflow];
        // The heatsink is read as junction − r_js·P_j, so across a power step the uncertainty of
        // r_js adds to the measured slope's noise: such a window counts for less until r_js is known.
        let step_w = change(&|s| s.power_j_w);
        let r_js_slope_sd = step_w.abs() * self.params.r_js_var.sqrt() / (span * self.dt_s);
        let unsettled_slope_sd =
            UNSETTLED_SHARE * self.params.r_js_k_per_w * unsettled_w / (span * self.dt_s);
        let noise = 1.0 + (r_js_slope_sd / SLOPE_NOISE).powi(2) + (unsettled_slope_sd / SLOPE_NOISE).powi(2);
        let p = &mut self.params;
        let px = mat_vec(&p.sink_cov, &x);
        let denom = FORGETTING * noise + dot(&x, &px);
        let err = y - predicted;
        let mut next = p.sink;
        for i in 0..PARAMS {
            next[i] += px[i] / denom * err;
        }
        let prior = ModelParams::prior();
        let mut cov = p.sink_cov;
        for i in 0..PARAMS {
            for j in 0..PARAMS {
                cov[i][j] = (p.sink_cov[i][j] - px[i] * px[j] / denom) / FORGETTING;
            }
        }
        // Bound the covariance so directions the data never excites do not wind up.
        for i in 0..PARAMS {
            let limit = prior.sink_cov[i][i];
            if cov[i][i] > limit {
                let scale = (limit / cov[i][i]).sqrt();
                cov[i].iter_mut().for_each(|v| *v *= scale);
                cov.iter_mut().for_each(|row| row[i] *= scale);
            }
        }
        lift_fan_to_still_air(&mut next, &cov);
        let mut candidate = ModelParams { sink: next, sink_cov: cov, ..p.clone() };
        candidate.project();
        if candidate.check().is_ok() {
            p.sink = candidate.sink;
            p.sink_cov = cov;
            p.updates += 1;
        }
    }

    /// The heatsink temperature implied by a junction reading now.
    pub fn sink_estimate_c(&self, junction_c: f64) -> f64 {
        junction_c - self.params.r_js_k_per_w * self.power_j_w.unwrap_or(0.0)
    }

    /// This model with its heatsink no slower than the generic prior's: every heatsink rate scaled
    /// by the same factor, so the settled temperatures stay as fitted.
    pub fn no_slower_than_prior(&self) -> ThermalModel {
        let mut fast = self.clone();
        let scale = (ModelParams::prior().sink[0] / self.params.sink[0]).max(1.0);
        fast.params.sink[..3].iter_mut().for_each(|v| *v *= scale);
        fast
    }

    /// Heatsink warming per joule the device draws (the inverse of the heatsink capacity).
    pub fn sink_k_per_j(&self) -> f64 {
        self.params.sink[0]
    }

    /// Predicts the junction over `power.len()` steps from a junction reading now, with
    /// `duty(k)` commanded at step k; calls `visit(k, junction)` for each step.
    pub fn predict(
        &self,
        junction_c: f64,
        power: &[f64],
        duty: impl Fn(usize) -> f64,
        visit: impl FnMut(usize, f64),
    ) {
        self.predict_from(junction_c, self.power_j_w.unwrap_or(0.0), power, duty, visit);
    }

    /// [`Self::predict`] from a past state: the junction then and the power it felt then.
    pub fn predict_from(
        &self,
        junction_c: f64,
        power_j_w: f64,
        power: &[f64],
        duty: impl Fn(usize) -> f64,
        mut visit: impl FnMut(usize, f64),
    ) {
        let [a, b, c, delta] = self.params.sink;
        let r_js = self.params.r_js_k_per_w;
        let alpha = self.junction_filter();
        let mut pj = power_j_w;
        let mut ts = junction_c - r_js * pj;
        for (k, &p) in power.iter().enumerate() {
            let d = duty(k);
            let (f, s) = (airflow(d), if d < STOPPED_DUTY_PCT { 1.0 } else { 0.0 });
            ts += self.dt_s * (a * pj - (b * s + c * f) * (ts - AMBIENT_PRIOR_C - delta));
            pj += (p - pj) * alpha;
            visit(k, ts + r_js * pj);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One heatsink update over a window whose readings put the heatsink at a constant 50 °C
    /// (under the model's own r_js), the power at `from_w` for the first half and `to_w` after;
    /// returns how far the capacity term moved from the prior's.
    fn capacity_move(r_js_var: f64, from_w: f64, to_w: f64) -> f64 {
        let mut params = ModelParams::prior();
        params.r_js_var = r_js_var;
        let mut model = ThermalModel::new(params, 1.0);
        let mut pj = from_w;
        for k in 0..SLOPE_WINDOW {
            let power_w = if k < SLOPE_WINDOW / 2 { from_w } else { to_w };
            if k > 0 {
                pj += (power_w - pj) * model.junction_filter();
            }
            let junction_c = 50.0 + model.params.r_js_k_per_w * pj;
            model.history.push_back(Sample {
                junction_c,
                power_w,
                power_j_w: pj,
                airflow: 1.0,
                stopped: 0.0,
            });
        }
        model.learn_sink();
        assert_eq!(model.params.updates, 1, "the window must be used");
        (model.params.sink[0] - ModelParams::prior().sink[0]).abs()
    }

    /// The heatsink is read as junction − r_js·P_j, so a window across a power step depends on
    /// r_js: while r_js is uncertain such a window moves the fit less. A window without a step
    /// does not depend on r_js and moves it alike.
    #[test]
    fn a_window_across_a_power_step_counts_less_while_r_js_is_uncertain() {
        let prior_var = ModelParams::prior().r_js_var;
        let (unsure, sure) = (capacity_move(prior_var, 30.0, 330.0), capacity_move(1e-9, 30.0, 330.0));
        assert!(sure > 0.0 && unsure < 0.5 * sure, "uncertain r_js {unsure:e}, known {sure:e}");
        let (unsure, sure) = (capacity_move(prior_var, 330.0, 330.0), capacity_move(1e-9, 330.0, 330.0));
        assert!(sure > 0.0 && (unsure - sure).abs() < 1e-12 * sure, "{unsure:e} vs {sure:e}");
    }

    /// An update that leaves the running fan cooling less than still air lands on `c = b`, and a
    /// parameter the covariance ties to `c` moves with it, where clamping `c` would leave it.
    #[test]
    fn a_fan_below_still_air_is_projected_along_the_covariance() {
        let mut cov = [[0.0; PARAMS]; PARAMS];
        for (i, row) in cov.iter_mut().enumerate() {
            row[i] = 1.0;
        }
        // c and the ambient strongly correlated (they trade at one duty and power).
        cov[2][3] = -0.9;
        cov[3][2] = -0.9;
        let mut sink = [0.003, 0.004, 0.002, 5.0];
        lift_fan_to_still_air(&mut sink, &cov);
        assert!((sink[2] - sink[1]).abs() < 1e-12, "c {} b {}", sink[2], sink[1]);
        assert!(sink[3] < 5.0 - 1e-4, "the ambient moves with c: {}", sink[3]);
        assert_eq!(sink[0], 0.003, "an uncorrelated parameter stays");
        let mut inside = [0.003, 0.001, 0.002, 5.0];
        lift_fan_to_still_air(&mut inside, &cov);
        assert_eq!(inside, [0.003, 0.001, 0.002, 5.0], "a fit inside its range is left alone");
    }

    /// A true two-node plant for the fit to learn (the airflow law is the model's own).
    struct TruePlant {
        tj: f64,
        ts: f64,
    }

    impl TruePlant {
        const CJ: f64 = 40.0;
        const CS: f64 = 900.0;
        const RJS: f64 = 0.05;
        const RFULL: f64 = 0.09;
        const RSTOP: f64 = 0.5;
        const AMB: f64 = 22.0;

        fn new() -> Self {
            Self { tj: Self::AMB, ts: Self::AMB }
        }

        /// One second at `p` W with the fan at `d` %.
        fn run(&mut self, p: f64, d: f64) {
            for _ in 0..10 {
                let rsa = if d <= 0.0 {
                    Self::RSTOP
                } else {
                    (Self::RFULL * (d / 100.0f64).powf(-0.7)).min(Self::RSTOP)
                };
                let q = (self.tj - self.ts) / Self::RJS;
                self.tj += 0.1 * (p - q) / Self::CJ;
                self.ts += 0.1 * (q - (self.ts - Self::AMB) / rsa) / Self::CS;
            }
        }

        /// How far `model`'s prediction of 120 s at `p` W and `d` % from now misses the plant's.
        fn prediction_error(&mut self, model: &ThermalModel, p: f64, d: f64) -> f64 {
            let mut predicted = 0.0;
            model.predict(self.tj, &[p; 120], |_| d, |_, t| predicted = t);
            for _ in 0..120 {
                self.run(p, d);
            }
            predicted - self.tj
        }
    }

    /// Drives a true two-node plant with power and fan steps and checks the fit predicts it.
    #[test]
    fn learns_a_plant_it_was_not_given() {
        let mut model = ThermalModel::new(ModelParams::prior(), 1.0);
        let mut plant = TruePlant::new();
        for k in 0..4000 {
            let p = if (k / 90) % 3 == 0 {
                40.0
            } else if (k / 90) % 3 == 1 {
                300.0
            } else {
                180.0
            };
            let d = [20.0, 45.0, 70.0, 100.0][(k / 400) % 4];
            plant.run(p, d);
            model.observe(plant.tj.round(), p, d);
        }
        let rjs = TruePlant::RJS;
        assert!((model.params.r_js_k_per_w - rjs).abs() < 0.02, "r_js {}", model.params.r_js_k_per_w);
        // The integral-form fit finds the heatsink capacity and full-airflow resistance.
        let [a, _, c, _] = model.params.sink;
        let (cs, rfull) = (TruePlant::CS, TruePlant::RFULL);
        assert!((1.0 / a - cs).abs() < 0.3 * cs, "capacity {}", 1.0 / a);
        assert!((a / c - rfull).abs() < 0.3 * rfull, "full-airflow resistance {}", a / c);
        // One ambient for both cooling modes, learned without the fan ever stopping.
        let ambient = model.params.ambient_c();
        assert!((ambient - TruePlant::AMB).abs() < 3.0, "ambient {ambient}");
        // Predict 120 s of 250 W at 50 % from the current state and compare with the truth.
        let error = plant.prediction_error(&model, 250.0, 50.0);
        assert!(error.abs() < 4.0, "off by {error:.1} °C: {:?}", model.params);
    }

    /// Work that comes and goes every second or two (short requests on a fast card) never lets
    /// the junction settle at a window's ends. Those windows still teach the heatsink, for less:
    /// with them left out, two windows of this run taught it and this prediction missed by 12 °C.
    #[test]
    fn learns_a_plant_under_work_that_never_settles() {
        let mut model = ThermalModel::new(ModelParams::prior(), 1.0);
        let mut plant = TruePlant::new();
        // A fixed pseudo-random flicker: 1–3 s at a time, busy a little over half the time.
        let mut state = 12345_u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as f64 / (1u64 << 31) as f64
        };
        let (mut p, mut left) = (30.0, 0);
        for k in 0..3000 {
            if left == 0 {
                p = if next() < 0.55 { 200.0 + 150.0 * next() } else { 30.0 };
                left = 1 + (3.0 * next()) as usize;
            }
            left -= 1;
            let d = [35.0, 50.0, 40.0][(k / 500) % 3];
            plant.run(p, d);
            model.observe(plant.tj.round(), p, d);
        }
        let error = plant.prediction_error(&model, 300.0, 50.0);
        assert!(error.abs() < 4.0, "off by {error:.1} °C: {:?}", model.params);
    }
}
