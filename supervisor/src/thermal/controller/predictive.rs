//! The model-predictive controller: each period it forecasts power from the engine's queue (and,
//! for a fan that can stop, the requests still to come where they keep arriving while it works),
//! predicts the junction with the learned model and picks the slowest duty that, held for a
//! while and then followed by full speed, keeps the junction under the limit over the horizon —
//! with room kept for a large prompt arriving unannounced, and with the work the queue did not
//! show where it has not let up. The same plan must also hold should the last seconds' work go
//! on instead of draining as the queue says, with the same room for a prompt landing on it.
//! Rate limits and hysteresis keep the fan from hunting. The margin under the limit grows by
//! what the model has recently got wrong.

use std::collections::VecDeque;

use super::{interpolate, Controller, DecisionDetail, DeviceLimits, Observation};
use crate::thermal::fan::{FanResponse, FirmwareStop};
use crate::thermal::forecast::{after_drain, PowerForecast};
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
/// A drop larger than this is split where the heatsink fit is doubtful (see
/// [`Predictive::split_drop`]), the rest following after `DOWN_DWELL` periods.
const MAX_DOWN_STEP_PCT: f64 = 40.0;
/// Commands go up and down in steps of this much.
const STEP_PCT: f64 = 10.0;

/// Rounds a duty up to the command grid: small wanders of the search are not each a change.
fn grid(duty: f64) -> f64 {
    ((duty / STEP_PCT).ceil() * STEP_PCT).min(100.0)
}
/// A zero-rpm fan stops after this many periods of needing nothing, or after `DOWN_DWELL`
/// periods in which stopping would survive a large prompt arriving at any time (see
/// [`Predictive::stop_survives_any_prompt`]).
const STOP_DWELL: usize = 30;
/// Bisection resolution of the duty search.
const SEARCH_RESOLUTION_PCT: f64 = 1.0;
/// The room kept for a surprise counts the heatsink's warming for a period (until the prompt is
/// seen) and this much more: the plans that follow see the fan's own spin-up. Counting each fan's
/// learned lag here instead cost more duty than it bought in safety (thermal/FINDINGS.md, "The
/// fan's lag, learned").
const SURPRISE_SPIN_UP_S: f64 = 2.0;
/// A surprise also shows late: the loop reads the engine's queue from the supervisor's latest
/// sample, taken once a second on a clock of its own (`runtime/load.rs`), so a prompt may reach
/// the plans up to this long after the engine took it.
const LOAD_SAMPLE_AGE_S: f64 = crate::runtime::load::SAMPLE_INTERVAL.as_secs_f64();
/// The room kept for a surprise is capped by the junction's largest rise over what the plans'
/// power said, within the time the fan takes to answer (a period, `LOAD_SAMPLE_AGE_S`,
/// `SURPRISE_SPIN_UP_S` and the fan's lag), as seen on this device (the forecast's `MissedRise`, once trusted), and never
/// below this share of the room the prompt's size and rates call for (a prompt larger than any
/// seen may still come).
const SEEN_SURPRISE_FLOOR: f64 = 0.7;
/// The first seconds of a plan are committed: the fan's spin-up leaves them to the duty it turns
/// at now, whatever is sent.
const COMMITTED_S: f64 = 2.0;
/// The model's recent error is measured by replaying this span (the hold of a plan) from the
/// junction estimate at its start with the power and fan duty that were seen ...
const BIAS_WINDOW_S: f64 = HOLD_S;
/// ... averaged over this time constant ...
const BIAS_TAU_S: f64 = 10.0;
/// ... and only the part above this is added to the margin (a 1 °C sensor leaves about this much
/// in the average where the model is right).
const BIAS_DEADBAND_C: f64 = 0.3;
/// Work the queue did not show is taken to go on where every period of this long drew more than
/// the plans foresaw (see [`UnforeseenPower`]).
const UNFORESEEN_WINDOW_S: f64 = 20.0;

/// What a period's learning leaves the plans.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The filtered junction estimate.
    junction_c: f64,
    /// Periods until the fan has answered a surprise ([`Predictive::surprise_lead`]).
    lead: usize,
    /// A zero-rpm fan's firmware would spin it were it stopped now.
    firmware_would_spin: bool,
}

/// The power expected over the horizon: from the queue alone (`known`), and with the requests
/// still to come where the fan may stop (`foreseen`).
#[derive(Debug)]
struct Expected {
    known: Vec<f64>,
    foreseen: Vec<f64>,
    may_stop: bool,
}

/// What a plan is judged against: the power expected at each step of the horizon, the room kept
/// at each step for a surprise, and the junction budget.
#[derive(Debug, Clone, Copy)]
struct Outlook<'a> {
    power: &'a [f64],
    reserve: &'a [f64],
    budget_c: f64,
}

pub struct Predictive {
    limits: DeviceLimits,
    model: ThermalModel,
    forecast: PowerForecast,
    dt_s: f64,
    duty: Option<f64>,
    /// What the fan was last sent: this controller's duty, unless a layer above changed it.
    sent: Option<f64>,
    recent_required: VecDeque<f64>,
    /// Per period of the last `DOWN_DWELL`: whether stopping survived a prompt at any time.
    recent_stop_safe: VecDeque<bool>,
    /// The fan's learned lag, and the duty it reported last.
    fan: FanResponse,
    fan_now_pct: f64,
    /// Where a stop, a hand-back to the fan's firmware, leaves a zero-rpm fan stopped.
    firmware_stop: FirmwareStop,
    prediction_30s_c: Option<f64>,
    predicted_peak_c: Option<f64>,
    /// Filtered junction estimate.
    junction_est_c: Option<f64>,
    /// The last `BIAS_WINDOW_S` of estimates and inputs, to replay through the model.
    replay: VecDeque<ReplayStep>,
    /// Mean amount (°C) by which the junction ran warmer than the replayed model.
    model_bias_c: f64,
    /// Periods before the rest of a split drop may follow.
    down_wait: usize,
    detail: Option<DecisionDetail>,
    seen_surprise: SeenSurprise,
    unforeseen: UnforeseenPower,
    /// When this controller last decided (`Observation::t_s`).
    last_seen_s: Option<f64>,
}

/// Measures how much warmer the junction got than the plans' power said, within the time the fan
/// takes to answer (folded into the forecast's `MissedRise`): each period, the plan of that many
/// periods ago is replayed from the state it started from, once with the power it expected and
/// once with the power seen, both with the fan duty seen, so the difference is the forecast's
/// miss alone (the model's own error is the bias's). A stream that the plans count already, or a
/// card that prefills a prompt within a second, shows a smaller rise than a large prompt landing
/// on an idle GPU.
#[derive(Debug, Default)]
struct SeenSurprise {
    planned: RecentPlans,
}

impl SeenSurprise {
    /// Keeps the power the plan made now expects over its first `lead` steps.
    fn record_plan(&mut self, power: &[f64], lead: usize) {
        self.planned.record(power, lead);
    }

    /// The rise over the plan made `lead` periods ago, from the `replay` of what was seen since;
    /// none until there is such a plan.
    fn rise_c(&self, model: &ThermalModel, replay: &VecDeque<ReplayStep>, lead: usize) -> Option<f64> {
        if replay.len() < lead {
            return None;
        }
        // A plan recorded while the fan's lag was learned shorter may cover fewer steps.
        let planned = self.planned.made_ago(lead)?;
        let planned = &planned[..lead.min(planned.len())];
        let seen: Vec<ReplayStep> = replay.iter().skip(replay.len() - lead).copied().collect();
        let start = seen[0];
        let power_seen: Vec<f64> = seen.iter().map(|s| s.power_w).collect();
        let mut junction_seen = vec![start.junction_c; lead];
        model.predict_from(
            start.junction_c,
            start.power_j_w,
            &power_seen,
            |k| seen[k].duty_pct,
            |k, tj| junction_seen[k] = tj,
        );
        let mut rise = 0.0f64;
        model.predict_from(
            start.junction_c,
            start.power_j_w,
            planned,
            |k| seen[k].duty_pct,
            |k, tj| rise = rise.max(junction_seen[k] - tj),
        );
        Some(rise)
    }
}

/// The power of work the queue did not show and that has not let up. Requests that arrive and
/// finish between two samples of the queue (an evaluation harness's short questions on a fast
/// card, each worker asking again as soon as it is answered) draw power that no plan foresees:
/// each plan expects the idle power once the queue it saw drains, the fan stays low, and the
/// heatsink warms period after period. Each period, the power seen is compared with what the
/// plan made a fan's answer ago expected for it; where every period of `UNFORESEEN_WINDOW_S`
/// drew more, the least of those misses is taken to go on. Several people's prompts arriving
/// unannounced miss some periods and not others, so they count nothing here (the surprise
/// reserve keeps room for them).
#[derive(Debug)]
struct UnforeseenPower {
    /// Periods of `UNFORESEEN_WINDOW_S`.
    window: usize,
    planned: RecentPlans,
    /// What each period of the window drew over its plan (W; negative where less), newest last.
    misses: VecDeque<f64>,
}

impl UnforeseenPower {
    /// Keeps the misses of the last `window` periods.
    fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            planned: RecentPlans::default(),
            misses: VecDeque::with_capacity(window),
        }
    }

    /// Folds in the power seen over the period just ended, against the plan made `lead` periods
    /// ago.
    fn observe(&mut self, power_w: f64, lead: usize) {
        let Some(&expected) = self.planned.made_ago(lead).and_then(|plan| plan.get(lead - 1)) else {
            return;
        };
        if self.misses.len() >= self.window {
            self.misses.pop_front();
        }
        self.misses.push_back(power_w - expected);
    }

    /// Keeps the first `keep` steps of the power the plan made now expects, for the last `keep`
    /// plans (enough for any lead up to `keep`).
    fn record_plan(&mut self, power: &[f64], keep: usize) {
        self.planned.record(power, keep);
    }

    /// The power (W) every period of a full window drew over its plan, at least; 0 until the
    /// window is full.
    fn sustained_w(&self) -> f64 {
        if self.misses.len() < self.window {
            return 0.0;
        }
        self.misses.iter().copied().fold(f64::INFINITY, f64::min).max(0.0)
    }
}

/// The first steps of the power each recent plan expected, the newest last: what a later period
/// is measured against ([`SeenSurprise`], [`UnforeseenPower`]).
#[derive(Debug, Default)]
struct RecentPlans(VecDeque<Vec<f64>>);

impl RecentPlans {
    /// Keeps the first `keep` steps of `power`, for the last `keep` plans.
    fn record(&mut self, power: &[f64], keep: usize) {
        self.0.push_back(power.iter().take(keep).copied().collect());
        while self.0.len() > keep {
            self.0.pop_front();
        }
    }

    /// The plan made `lead` periods ago, where one is kept (none for a lead of 0).
    fn made_ago(&self, lead: usize) -> Option<&[f64]> {
        self.0.len().checked_sub(lead).filter(|_| lead > 0).map(|at| self.0[at].as_slice())
    }
}

/// One period as the model saw it: the state at its start and the inputs over it.
#[derive(Debug, Clone, Copy)]
struct ReplayStep {
    junction_c: f64,
    power_j_w: f64,
    power_w: f64,
    duty_pct: f64,
}

impl Predictive {
    pub fn new(limits: DeviceLimits, mut params: ModelParams, dt_s: f64) -> Self {
        // The fan's lag and its firmware's stop live in `fan` and `firmware_stop` alone while
        // running; `learned` puts them back for saving.
        let fan =
            params.fan_lag_s.take().map_or(FanResponse::new(dt_s), |lag| FanResponse::with_lag(lag, dt_s));
        let firmware_stop =
            params.firmware_stops_below_c.take().map_or_else(FirmwareStop::default, FirmwareStop::resumed);
        Self {
            limits,
            model: ThermalModel::new(params, dt_s),
            forecast: PowerForecast::for_power_cap(limits.power_cap_w),
            dt_s,
            duty: None,
            sent: None,
            recent_required: VecDeque::with_capacity(STOP_DWELL),
            recent_stop_safe: VecDeque::with_capacity(DOWN_DWELL),
            fan,
            fan_now_pct: 0.0,
            firmware_stop,
            prediction_30s_c: None,
            predicted_peak_c: None,
            junction_est_c: None,
            replay: VecDeque::new(),
            model_bias_c: 0.0,
            down_wait: 0,
            detail: None,
            seen_surprise: SeenSurprise::default(),
            unforeseen: UnforeseenPower::new((UNFORESEEN_WINDOW_S / dt_s).round() as usize),
            last_seen_s: None,
        }
    }

    /// Starts from a load forecast learned before (a restart resumes it), or where there is
    /// none from the priors of the device's power limit.
    pub fn with_forecast(mut self, forecast: Option<PowerForecast>) -> Self {
        if let Some(forecast) = forecast {
            self.forecast = forecast.with_power_cap(self.limits.power_cap_w);
        }
        self
    }

    pub fn forecast(&self) -> &PowerForecast {
        &self.forecast
    }

    /// Whether `model`'s junction plus the reserve stays under the budget at every step from `from`
    /// on with `command(k)` sent at step k and the fan following as [`FanResponse::follow`] counts
    /// it from the duty it reports now: the one check behind every plan of the controller.
    fn within_budget(
        &self,
        model: &ThermalModel,
        junction_c: f64,
        outlook: Outlook,
        from: usize,
        command: impl Fn(usize) -> f64,
    ) -> bool {
        let Outlook { power, reserve, budget_c } = outlook;
        let duty = self.fan_follows(power.len(), command);
        let mut ok = true;
        model.predict(junction_c, power, |k| duty[k], |k, tj| ok &= k < from || tj + reserve[k] <= budget_c);
        ok
    }

    /// The duty the fan turns at over each of `steps` periods from the one it reports now, with
    /// `command(k)` sent at step k.
    fn fan_follows(&self, steps: usize, command: impl Fn(usize) -> f64) -> Vec<f64> {
        self.fan.follow(self.fan_now_pct, steps, |k| self.limits.effective_duty(command(k)))
    }

    /// Lowest duty whose plan keeps the junction (plus the surprise reserve) under the budget.
    fn required_duty(&self, junction_c: f64, outlook: Outlook) -> f64 {
        let holds = |duty: f64| self.plan_holds(&self.model, junction_c, outlook, duty);
        let lowest = self.limits.lowest_duty();
        // A stopped fan restarts slowly and passive cooling is the least observed part of the
        // model: stop only where staying stopped for the whole horizon holds.
        let stop_holds = || self.within_budget(&self.model, junction_c, outlook, 0, |_| lowest);
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

    /// Whether holding `duty` for the hold and then full speed keeps `model`'s junction plus the
    /// reserve under the budget.
    fn plan_holds(&self, model: &ThermalModel, junction_c: f64, outlook: Outlook, duty: f64) -> bool {
        let hold = self.hold_steps();
        // No duty chosen now changes the committed steps much, so a junction already too warm
        // there would otherwise send every search to full speed.
        let committed = (COMMITTED_S / self.dt_s).round() as usize;
        self.within_budget(model, junction_c, outlook, committed, |k| if k < hold { duty } else { 100.0 })
    }

    /// Periods a plan holds its duty before it escapes to full speed.
    fn hold_steps(&self) -> usize {
        (HOLD_S / self.dt_s).round() as usize
    }

    /// The power of the last `periods` periods seen, repeated over `steps`: the work as it just
    /// ran, going on (none before a period has been seen).
    fn recent_work_repeated(&self, periods: usize, steps: usize) -> Vec<f64> {
        let recent: Vec<f64> =
            self.replay.iter().skip(self.replay.len().saturating_sub(periods)).map(|s| s.power_w).collect();
        if recent.is_empty() {
            return Vec::new();
        }
        recent.iter().copied().cycle().take(steps).collect()
    }

    /// Where a running fan's drop from `current` to `proposed` is larger than
    /// `MAX_DOWN_STEP_PCT`, the heatsink fit sits on a bound of its physical range (the data has not
    /// pinned it down) and the drop's plan would not hold with a heatsink as fast as the generic
    /// prior's: the duty to go to instead, part way, so that the heatsink shows a model error
    /// before the rest of the drop. A stop has its own plans (a prompt at any time).
    fn split_drop(&self, current: f64, proposed: f64, junction_c: f64, outlook: Outlook) -> Option<f64> {
        let partial = current - MAX_DOWN_STEP_PCT;
        let doubtful = proposed < partial
            && proposed >= self.limits.min_duty_pct
            && self.model.params.at_bound()
            && !self.plan_holds(&self.model.no_slower_than_prior(), junction_c, outlook, proposed);
        doubtful.then_some(partial)
    }

    /// Whether a zero-rpm fan may stop now with room for the worst: sent a stop for `hold_s` and
    /// then full speed, the junction stays under the budget even with a large prompt arriving at
    /// any step (the outlook's reserve, the learned arrival pattern not trusted). With the running
    /// fan's hold this lets the fan stay stopped through queued work (the next periods re-plan as
    /// the heatsink warms) and stop soon after a burst; elsewhere it stops only where staying
    /// stopped for the whole horizon holds.
    fn stop_survives_any_prompt(&self, junction_c: f64, outlook: Outlook, hold_s: f64) -> bool {
        let lowest = self.limits.lowest_duty();
        if lowest >= self.limits.min_duty_pct {
            return false;
        }
        let hold = (hold_s / self.dt_s).round() as usize;
        self.within_budget(&self.model, junction_c, outlook, 0, |k| if k < hold { lowest } else { 100.0 })
    }

    /// Whether a zero-rpm fan may stop with room for a prompt at any time after the running fan's
    /// hold (which also lets a running fan stop after the down dwell), and whether a stopped fan
    /// may stay stopped now: also where the known work ends within a hold (an agent's turn) and a
    /// restart as late as a surprise is seen (a period) would still be in time. That second way
    /// is only for a fan its firmware lets stop (`may_stop`): one it would spin runs at its floor,
    /// with no restart to save, and its duty is searched instead.
    fn stop_plans(
        &self,
        junction_c: f64,
        known: &[f64],
        power: &[f64],
        loaded: bool,
        budget_c: f64,
        may_stop: bool,
    ) -> (bool, bool) {
        if !self.limits.zero_rpm {
            return (false, false);
        }
        let any_time = self.surprise_reserve_with(known, loaded, false);
        let outlook = Outlook { power, reserve: &any_time, budget_c };
        let stop_safe = self.stop_survives_any_prompt(junction_c, outlook, HOLD_S);
        let brief_work = may_stop && self.forecast.work_steps(known) as f64 * self.dt_s <= HOLD_S;
        // The plan counts a stop at once (a running fan's coasting is not counted on), so this is
        // judged from a standstill, as for a stopped fan.
        let late_restart = self.dt_s;
        let stays_stopped =
            stop_safe || (brief_work && self.stop_survives_any_prompt(junction_c, outlook, late_restart));
        (stop_safe, stays_stopped)
    }

    /// Junction rise a large prompt arriving at each step would add on top of the forecast power:
    /// the junction's own rise from the power it feels at that step (low-passed: right after a
    /// drain it is still warm from the work, so a prompt then adds less than one from idle), plus
    /// the heatsink's warming until the fan answers. While the engine works on known requests,
    /// room is kept only where prompts have been seen arriving while it was busy (several users,
    /// batch jobs); after it drains, only from the learned shortest idle gap on (one user or
    /// agent waits for each answer, then thinks or runs a tool).
    fn surprise_reserve(&self, power: &[f64], loaded: bool) -> Vec<f64> {
        self.surprise_reserve_with(power, loaded, true)
    }

    /// [`Self::surprise_reserve`], or with `trust_pattern` false a prompt may come at any step.
    fn surprise_reserve_with(&self, power: &[f64], loaded: bool, trust_pattern: bool) -> Vec<f64> {
        let prefill_s = self.forecast.large_prefill_s();
        let rise_share = 1.0 - (-prefill_s / JUNCTION_TAU_S).exp();
        let r_js = self.model.params.r_js_k_per_w;
        let answer_s = self.dt_s + LOAD_SAMPLE_AGE_S + SURPRISE_SPIN_UP_S;
        let sink_s = self.model.sink_k_per_j() * prefill_s.min(answer_s);
        let prefill_w = self.forecast.prefill_w();
        let idle_w = self.forecast.idle_w();
        let alpha = 1.0 - (-self.dt_s / JUNCTION_TAU_S).exp();
        let mut power_j = self.model.power_j_w().unwrap_or(idle_w);
        let drained = if loaded { self.forecast.work_steps(power) } else { 0 };
        let quiet_s = self.forecast.quiet_after_idle_s();
        let wait_s = if drained == 0 { (quiet_s - self.forecast.idle_s()).max(0.0) } else { quiet_s };
        let after_idle = drained + (wait_s / self.dt_s).floor() as usize;
        let busy = self.forecast.arrives_while_busy();
        let seen = self.forecast.missed_rise().trusted_c();
        power
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                power_j += (p - power_j) * alpha;
                let open = !trust_pattern || if k < drained { busy } else { k >= after_idle };
                if !open {
                    return 0.0;
                }
                let sized =
                    r_js * (prefill_w - power_j).max(0.0) * rise_share + sink_s * (prefill_w - p).max(0.0);
                seen.map_or(sized, |seen| sized.min(seen.max(SEEN_SURPRISE_FLOOR * sized)))
            })
            .collect()
    }

    /// Replays the last `BIAS_WINDOW_S` through the current model and folds how much warmer the
    /// junction is than the replay into `model_bias_c`. Call before the estimate is updated.
    fn learn_bias(&mut self, obs: &Observation) {
        let (Some(junction_c), Some(power_j_w)) = (self.junction_est_c, self.model.power_j_w()) else {
            return;
        };
        let window = ((BIAS_WINDOW_S / self.dt_s).round() as usize).max(1);
        if self.replay.len() == window {
            self.replay.pop_front();
        }
        self.replay.push_back(ReplayStep {
            junction_c,
            power_j_w,
            power_w: obs.power_w,
            duty_pct: obs.fan_duty_pct,
        });
        let Some(start) = self.replay.front().copied().filter(|_| self.replay.len() == window) else {
            return;
        };
        let power: Vec<f64> = self.replay.iter().map(|s| s.power_w).collect();
        let mut replayed = start.junction_c;
        self.model.predict_from(
            start.junction_c,
            start.power_j_w,
            &power,
            |k| self.replay[k].duty_pct,
            |_, tj| replayed = tj,
        );
        let error = obs.junction_c - replayed;
        self.model_bias_c += (error - self.model_bias_c) * (self.dt_s / BIAS_TAU_S).min(1.0);
    }

    /// Periods until the fan has answered a surprise: the one in which it is seen, the load
    /// sample's age, the spin-up every surprise is given, and the fan's lag.
    fn surprise_lead(&self) -> usize {
        let answer_s = self.dt_s + LOAD_SAMPLE_AGE_S + SURPRISE_SPIN_UP_S + self.fan.lag_s();
        let lead = (answer_s / self.dt_s).round() as usize;
        lead.clamp(1, self.longest_lead())
    }

    /// The most periods [`Self::surprise_lead`] counts: the replay's span.
    fn longest_lead(&self) -> usize {
        ((BIAS_WINDOW_S / self.dt_s).round() as usize).max(1)
    }

    /// Learns from one period as the device showed it: the forecast, the fan's lag and its
    /// firmware's stop, the model and its bias, the misses of earlier plans and the junction
    /// estimate. Returns what the plans start from.
    fn learn(&mut self, obs: &Observation) -> Seen {
        // The safety layer holds the fan without asking this controller (full speed at the
        // limit, firmware auto on a bad sensor): the forecast then learns its rates over the
        // whole time since it last looked, not a period (a prompt prefilled over those seconds is
        // no prompt prefilled within one).
        let since_s = self.last_seen_s.map_or(self.dt_s, |t| (obs.t_s - t).max(self.dt_s));
        self.last_seen_s = Some(obs.t_s);
        if let Some(load) = &obs.load {
            self.forecast.observe(load, obs.power_w, since_s);
        }
        // A stop hands a zero-rpm fan back to its firmware: what the fan does then shows where
        // the firmware stops it, and nothing of its lag.
        let fan_floor = self.limits.min_duty_pct;
        let handed_back = self.limits.zero_rpm && self.sent.is_some_and(|sent| sent < fan_floor);
        self.firmware_stop.observe(
            handed_back,
            obs.junction_c,
            self.fan_now_pct,
            obs.fan_duty_pct,
            fan_floor,
        );
        if let Some(sent) = self.sent.filter(|_| !handed_back) {
            self.fan.observe(self.limits.effective_duty(sent), self.fan_now_pct, obs.fan_duty_pct);
        }
        // Where a stop would not leave it stopped, a zero-rpm fan runs at its floor at least: its
        // plans may still find a stop holds, which the floor holds better.
        let firmware_would_spin =
            self.limits.zero_rpm && !self.firmware_stop.silent(handed_back, obs.junction_c);
        self.fan_now_pct = obs.fan_duty_pct;
        self.learn_bias(obs);
        // The fan's lag is learned above, so one lead serves what is learned now and the plan kept.
        let lead = self.surprise_lead();
        self.unforeseen.observe(obs.power_w, lead);
        if let Some(rise_c) = self.seen_surprise.rise_c(&self.model, &self.replay, lead) {
            self.forecast.missed_rise_mut().fold(rise_c, self.dt_s);
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
        Seen { junction_c, lead, firmware_would_spin }
    }

    /// The power the queue (and, for a fan that may stop, the stream of requests) leads this
    /// controller to expect over the horizon, recorded so that later periods measure what it
    /// missed.
    fn expect(&mut self, obs: &Observation, seen: &Seen) -> Expected {
        let steps = (HORIZON_S / self.dt_s).round() as usize;
        let known = self.forecast.power(obs.load.as_ref(), steps, self.dt_s);
        // The requests still to come keep a stopped fan from putting its restart off period after
        // period while the heatsink warms. A fan that never stops, or a zero-rpm fan while its
        // firmware would not let it stop, answers them within its lag from where it runs, so its
        // plans see the queue alone (the surprise reserve stays).
        let may_stop = self.limits.zero_rpm && !seen.firmware_would_spin;
        let foreseen = if may_stop { self.forecast.with_stream(&known, self.dt_s) } else { known.clone() };
        // The plans are remembered as they were before the unforeseen work was added: each
        // measures what the queue alone (and the stream) missed.
        self.seen_surprise.record_plan(&foreseen, seen.lead);
        self.unforeseen.record_plan(&foreseen, self.longest_lead());
        Expected { known, foreseen, may_stop }
    }

    /// `power` with `unforeseen_w` of work the queue did not show going on once the known work
    /// drains (`drained` steps from now), fading over the fan's answer time (`lead` periods) from
    /// now: by then a plan that saw it has answered.
    fn with_unforeseen(&self, power: &[f64], unforeseen_w: f64, drained: usize, lead: usize) -> Vec<f64> {
        let answer_s = lead as f64 * self.dt_s;
        after_drain(power, drained, |k| unforeseen_w * (-(k as f64) * self.dt_s / answer_s).exp())
    }

    /// Rate limits and hysteresis: up at once (with headroom), down only after a dwell.
    fn smooth(&mut self, required: f64) -> f64 {
        if self.recent_required.len() == STOP_DWELL {
            self.recent_required.pop_front();
        }
        self.recent_required.push_back(required);
        self.down_wait = self.down_wait.saturating_sub(1);
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
        if !dwell_met || self.down_wait > 0 {
            return current;
        }
        let needed = window.iter().copied().fold(0.0, f64::max);
        if needed < self.limits.min_duty_pct {
            let stop_ok = (self.recent_required.len() == STOP_DWELL
                && self.recent_required.iter().all(|&r| r < self.limits.min_duty_pct))
                || (self.recent_stop_safe.len() == DOWN_DWELL && self.recent_stop_safe.iter().all(|&s| s));
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
        let seen = self.learn(obs);
        let Expected { known, foreseen, may_stop } = self.expect(obs, &seen);
        let Seen { junction_c, lead, firmware_would_spin } = seen;
        let reserve = self.surprise_reserve(&known, obs.load.is_some());
        let drained = self.forecast.work_steps(&known);
        let unforeseen_w = self.unforeseen.sustained_w();
        let power = self.with_unforeseen(&foreseen, unforeseen_w, drained, lead);
        let limit = self.limits.junction_limit_c;
        // A model that has lately run cool (a fit still poor in this region) gets more room.
        let margin = MARGIN_C + (self.model_bias_c - BIAS_DEADBAND_C).max(0.0);
        let budget_c = limit - margin;
        let outlook = Outlook { power: &power, reserve: &reserve, budget_c };
        let (stop_safe, stays_stopped) =
            self.stop_plans(junction_c, &known, &power, obs.load.is_some(), budget_c, may_stop);
        if self.recent_stop_safe.len() == DOWN_DWELL {
            self.recent_stop_safe.pop_front();
        }
        self.recent_stop_safe.push_back(stop_safe);
        let required =
            if stays_stopped { self.limits.lowest_duty() } else { self.required_duty(junction_c, outlook) };
        // Every plan trusts the queue to drain. Requests sent back to back, each shown only as it
        // arrives (a mailing list's sync), keep the board near its limit while each plan expects
        // idle within seconds, and the heatsink warms under a fan left at its floor until the
        // next request lifts the die over the limit faster than the fan answers. So the plan
        // must also hold with the work of the fan's answer time going on as it just ran, with
        // room for a large prompt landing on it where prompts come while the engine works (a
        // team's code completions warm the heatsink burst after burst, and a chat question
        // lands on top); a person's prompt on a cool heatsink passes that easily.
        let going_on = self.recent_work_repeated(lead, self.hold_steps() + lead);
        let going_on_reserve = self.surprise_reserve(&going_on, obs.load.is_some());
        let going_on_pct = self
            .required_duty(junction_c, Outlook { power: &going_on, reserve: &going_on_reserve, budget_c });
        let required = required.max(going_on_pct);
        let going_on_stops = going_on_pct < self.limits.min_duty_pct;
        // The forecast is never trusted below a reactive curve near the limit.
        let floor = interpolate(&[(limit - MARGIN_C, 0.0), (limit, 100.0)], obs.junction_c);
        let mut duty = self.smooth(required);
        if let Some(split) = self.duty.and_then(|current| self.split_drop(current, duty, junction_c, outlook))
        {
            duty = split;
            self.down_wait = DOWN_DWELL;
        }
        let mut duty = duty.max(floor);
        if firmware_would_spin && duty < self.limits.min_duty_pct {
            duty = self.limits.min_duty_pct;
        }
        self.duty = Some(duty);
        self.sent = Some(duty);
        // What the plans alone would command: a stop (the floor where the firmware would spin the
        // fan), or the required duty on the command grid.
        let plans_alone = match required < self.limits.min_duty_pct {
            true if firmware_would_spin => self.limits.min_duty_pct,
            true => required,
            false => grid(required),
        };
        self.detail = Some(DecisionDetail {
            junction_est_c: junction_c,
            budget_c,
            model_bias_c: self.model_bias_c,
            reserve_max_c: reserve.iter().copied().fold(0.0, f64::max),
            stream_w: foreseen.get(drained).zip(known.get(drained)).map_or(0.0, |(p, k)| p - k),
            unforeseen_w,
            going_on_pct,
            // The queue's stop plans may let the fan stop where the work going on runs it.
            stop_safe: stop_safe && going_on_stops,
            stays_stopped: stays_stopped && going_on_stops,
            required_pct: required,
            reactive_floor_pct: floor,
            held: duty > plans_alone + 0.5 && duty > floor + 0.5,
            at_floor: self.limits.min_duty_pct > 0.0 && (duty - self.limits.min_duty_pct).abs() < 0.5,
            fan_lag_s: self.fan.lag_s(),
            surprise_seen_c: self.forecast.missed_rise().trusted_c(),
            firmware_stops_below_c: self.limits.zero_rpm.then(|| self.firmware_stop.stops_below_c()),
            firmware_would_spin,
        });

        let (at_30, mut peak) = ((30.0 / self.dt_s).round() as usize, f64::MIN);
        let mut ahead = None;
        let spinning = self.fan_follows(power.len(), |_| duty);
        self.model.predict(
            junction_c,
            &power,
            |k| spinning[k],
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

    fn learned(&self) -> Option<(ModelParams, &PowerForecast)> {
        let params = ModelParams {
            fan_lag_s: self.fan.own_lag_s(),
            firmware_stops_below_c: self.firmware_stop.own_stops_below_c(),
            ..self.model.params.clone()
        };
        Some((params, &self.forecast))
    }

    fn detail(&self) -> Option<DecisionDetail> {
        self.detail
    }

    fn commanded(&mut self, duty_pct: Option<f64>) {
        self.sent = duty_pct;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thermal::forecast::MissedRise;

    fn controller() -> Predictive {
        let limits =
            DeviceLimits { junction_limit_c: 95.0, min_duty_pct: 20.0, zero_rpm: false, power_cap_w: None };
        Predictive::new(limits, ModelParams::prior(), 1.0)
    }

    /// A controller plans prompts at the power limit its device reports until it has seen one;
    /// a resumed forecast keeps what it learned, and another model starts again from the limit.
    #[test]
    fn the_forecast_starts_from_the_power_limit_the_device_reports() {
        let limits = DeviceLimits { power_cap_w: Some(165.0), ..controller().limits };
        assert_eq!(Predictive::new(limits, ModelParams::prior(), 1.0).forecast.prefill_w(), 165.0);
        let serving =
            |model: &str| lucebox_engine::LoadSignal { model: Some(model.into()), ..Default::default() };
        let mut saved = PowerForecast::new();
        saved.observe(&serving("a.gguf"), 12.0, 1.0);
        let mut resumed = Predictive::new(limits, ModelParams::prior(), 1.0).with_forecast(Some(saved));
        assert_eq!(resumed.forecast.prefill_w(), 300.0, "as it was saved");
        resumed.forecast.observe(&serving("b.gguf"), 12.0, 1.0);
        assert_eq!(resumed.forecast.prefill_w(), 165.0, "another model: from the limit");
    }

    /// A controller whose junction still feels the 200 W of work that just drained.
    fn warm_controller() -> Predictive {
        let mut c = controller();
        for _ in 0..60 {
            c.model.observe(70.0, 200.0, 40.0);
        }
        c
    }

    fn obs(t_s: f64, junction_c: f64, power_w: f64, fan_duty_pct: f64) -> Observation {
        Observation { t_s, junction_c, power_w, fan_duty_pct, load: None }
    }

    /// Right after work drains the junction still feels the work's power, so a prompt arriving
    /// then would add less than one arriving once the junction has settled at idle.
    #[test]
    fn surprise_reserve_starts_from_the_power_the_junction_feels() {
        let c = warm_controller();
        let idle = vec![c.forecast.idle_w(); 90];
        let reserve = c.surprise_reserve(&idle, true);
        assert!(reserve.iter().all(|r| *r > 0.0), "no idle gap learned: room everywhere");
        assert!(reserve[0] < 0.7 * reserve[89], "{} vs {}", reserve[0], reserve[89]);
        assert!(reserve.windows(2).all(|w| w[0] <= w[1] + 1e-9), "grows as the junction cools");
    }

    /// Power that came as the plans expected shows no rise; a prompt they did not expect shows
    /// the junction's rise over their power within the time the fan takes to answer, the largest
    /// kept and slowly forgotten. None of it is trusted before a minute was seen.
    #[test]
    fn the_rise_over_the_plans_power_is_seen_then_trusted_and_slowly_forgotten() {
        let c = controller();
        let lead = c.surprise_lead();
        assert_eq!(lead, 6, "a period, the sample's age, the spin-up and the prior's 2 s lag");
        let (mut seen, mut missed) = (SeenSurprise::default(), MissedRise::default());
        let mut replay = VecDeque::new();
        let mut period = |missed: &mut MissedRise, power_w: f64| {
            replay.push_back(ReplayStep { junction_c: 50.0, power_j_w: 30.0, power_w, duty_pct: 40.0 });
            if replay.len() > 20 {
                replay.pop_front();
            }
            if let Some(rise_c) = seen.rise_c(&c.model, &replay, lead) {
                missed.fold(rise_c, 1.0);
            }
            seen.record_plan(&[30.0; 90], lead);
        };
        for _ in 0..30 {
            period(&mut missed, 30.0);
        }
        assert_eq!(missed.trusted_c(), None, "half a minute seen");
        for _ in 30..70 {
            period(&mut missed, 30.0);
        }
        assert_eq!(missed.trusted_c(), Some(0.0), "power as planned");

        // 400 W for one period where the plans expected idle: the rise is the model's answer to it.
        period(&mut missed, 400.0);
        let (mut planned, mut got) = (0.0, 0.0);
        let mut power = vec![30.0; lead];
        c.model.predict_from(50.0, 30.0, &power, |_| 40.0, |_, tj| planned = tj);
        power[lead - 1] = 400.0;
        c.model.predict_from(50.0, 30.0, &power, |_| 40.0, |_, tj| got = tj);
        let first = missed.trusted_c().unwrap();
        assert!((first - (got - planned)).abs() < 1e-9 && first > 0.5, "{first} vs {}", got - planned);
        // Later plans see the junction cool from it again: the largest rise is kept, and forgotten
        // by half over its half-life, 690 s.
        for _ in 0..690 {
            period(&mut missed, 30.0);
        }
        let later = missed.trusted_c().unwrap() / first;
        assert!((0.49..0.51).contains(&later), "half forgotten after 690 s: {later}");
    }

    /// Work the queue did not show counts only where every period of the window drew more than
    /// its plan: the least miss of a full window, nothing before the window fills, and nothing
    /// once one period drew what was planned.
    #[test]
    fn unforeseen_power_is_the_least_miss_of_a_window_where_every_period_missed() {
        let (lead, window) = (3, 5);
        let mut unforeseen = UnforeseenPower::new(window);
        let period = |u: &mut UnforeseenPower, power_w: f64| {
            u.observe(power_w, lead);
            u.record_plan(&[30.0; 90], 20);
        };
        for _ in 0..lead {
            period(&mut unforeseen, 500.0);
        }
        assert!(unforeseen.misses.is_empty(), "no plan a fan's answer old yet");
        for power_w in [500.0, 450.0, 520.0, 480.0] {
            period(&mut unforeseen, power_w);
        }
        assert_eq!(unforeseen.sustained_w(), 0.0, "four periods of a five-period window");
        period(&mut unforeseen, 510.0);
        assert_eq!(unforeseen.sustained_w(), 420.0, "450 W over the 30 W planned, the least");
        period(&mut unforeseen, 30.0);
        assert_eq!(unforeseen.sustained_w(), 0.0, "a period as planned: the work let up");
        for _ in 0..window - 1 {
            period(&mut unforeseen, 500.0);
        }
        assert_eq!(unforeseen.sustained_w(), 0.0, "the planned period is still in the window");
        period(&mut unforeseen, 500.0);
        assert_eq!(unforeseen.sustained_w(), 470.0);
        assert_eq!(unforeseen.misses.len(), window, "bounded by the window");
        period(&mut unforeseen, 10.0);
        assert_eq!(unforeseen.sustained_w(), 0.0, "less than planned is no miss to keep");
    }

    /// Work no queue shows (here an engine that shows none): the card draws 450 W period after
    /// period where every plan expected the idle power. The plans come to expect that work going
    /// on after the queue, fading over the fan's answer time, and the same power with a period
    /// at idle now and then counts nothing.
    #[test]
    fn work_the_queue_never_shows_is_planned_where_it_does_not_let_up() {
        let run = |every: usize| {
            let mut c = controller();
            for t in 0..60 {
                let power_w = if every > 0 && t % every == 0 { c.forecast.idle_w() } else { 450.0 };
                c.decide(&obs(t as f64, 60.0, power_w, 40.0));
            }
            c
        };
        let sustained = run(0);
        let unforeseen_w = sustained.detail().unwrap().unforeseen_w;
        let planned_idle = sustained.forecast.idle_w();
        assert!(
            (unforeseen_w - (450.0 - planned_idle)).abs() < 1e-9,
            "{unforeseen_w} W: the whole 450 W over the idle power the plans expected"
        );
        let lead = sustained.surprise_lead();
        let plan = sustained.with_unforeseen(&[planned_idle; 90], unforeseen_w, 0, lead);
        assert!((plan[0] - 450.0).abs() < 1e-9, "now: the power seen");
        let answered = plan[lead] - planned_idle;
        assert!((answered / unforeseen_w - (-1.0f64).exp()).abs() < 1e-9, "faded by e over the answer");
        let after_queue = sustained.with_unforeseen(&[200.0, 200.0, planned_idle], unforeseen_w, 2, lead);
        assert_eq!(after_queue[..2], [200.0, 200.0], "the queue's own work is planned as it is");
        assert!(after_queue[2] > planned_idle);

        let bursts = run(7);
        assert_eq!(bursts.detail().unwrap().unforeseen_w, 0.0, "an idle period every 7 s");
    }

    /// The safety layer held the fan at full speed for nine periods without asking the
    /// controller, while a long prompt finished prefilling: the forecast learns that the 11 424
    /// tokens took ten seconds, not one, and still plans the next long prompt over many periods.
    #[test]
    fn a_prompt_that_finished_while_the_safety_layer_held_the_fan_is_not_taken_as_fast() {
        let prompt = |done: u64, decoded: u64| lucebox_engine::LoadSignal {
            requests_processing: 1,
            slots: vec![lucebox_engine::SlotLoad {
                id: 1,
                is_processing: true,
                prompt_tokens: 36_000,
                prompt_processed: done,
                decoded_tokens: decoded,
                remaining_tokens: Some(600 - decoded),
            }],
            ..Default::default()
        };
        let observed = |t_s: f64, load| Observation { load: Some(load), ..obs(t_s, 80.0, 350.0, 100.0) };
        let mut c = controller();
        c.decide(&observed(0.0, prompt(22_528, 0)));
        c.decide(&observed(1.0, prompt(24_576, 0)));
        c.decide(&observed(10.0, prompt(36_000, 100)));
        let next = lucebox_engine::LoadSignal {
            slots: vec![lucebox_engine::SlotLoad {
                id: 2,
                decoded_tokens: 0,
                remaining_tokens: Some(600),
                ..prompt(0, 0).slots[0]
            }],
            ..prompt(0, 0)
        };
        let power = c.forecast.power(Some(&next), 90, 1.0);
        let prefill_s = power.iter().take_while(|&&p| p == c.forecast.prefill_w()).count();
        assert!(
            prefill_s >= 10,
            "36 000 tokens planned over {prefill_s} s: read as 11 424 tokens in one period"
        );
    }

    /// The room kept for a surprise is what its size calls for, capped by the rise this device
    /// showed once that is trusted, and never less than `SEEN_SURPRISE_FLOOR` of it.
    #[test]
    fn the_room_for_a_surprise_is_capped_by_the_rise_seen_down_to_its_floor() {
        let mut c = warm_controller();
        let idle = vec![c.forecast.idle_w(); 90];
        let sized = c.surprise_reserve(&idle, true);
        let cap = 0.8 * sized[89];
        c.forecast.missed_rise_mut().fold(cap, 30.0);
        assert_eq!(c.surprise_reserve(&idle, true), sized, "not trusted yet");
        c.forecast.missed_rise_mut().fold(cap, 30.0);
        let capped = c.surprise_reserve(&idle, true);
        for (r, s) in capped.iter().zip(&sized) {
            assert!((r - s.min(cap.max(SEEN_SURPRISE_FLOOR * s))).abs() < 1e-12, "{r} vs {s}");
        }
        assert!(capped[89] < sized[89] && capped[0] == sized[0], "{capped:?}");
        *c.forecast.missed_rise_mut() = MissedRise::default();
        c.forecast.missed_rise_mut().fold(0.0, 60.0);
        let floor: Vec<f64> = sized.iter().map(|s| SEEN_SURPRISE_FLOOR * s).collect();
        assert_eq!(c.surprise_reserve(&idle, true), floor);
    }

    /// The rise seen goes with the learned forecast: a restarted controller that resumes it caps
    /// the room for a surprise from its first decision, without a minute of learning again.
    #[test]
    fn a_restart_resumes_the_rise_seen_with_the_forecast() {
        let mut c = warm_controller();
        c.forecast.missed_rise_mut().fold(3.5, 60.0);
        let (params, forecast) = c.learned().unwrap();
        let saved = serde_json::to_string(forecast).unwrap();
        let mut resumed =
            Predictive::new(c.limits, params, 1.0).with_forecast(Some(serde_json::from_str(&saved).unwrap()));
        resumed.decide(&obs(0.0, 50.0, 30.0, 40.0));
        assert_eq!(resumed.detail().and_then(|d| d.surprise_seen_c), Some(3.5));
        let mut fresh = Predictive::new(c.limits, ModelParams::prior(), 1.0);
        fresh.decide(&obs(0.0, 50.0, 30.0, 40.0));
        assert_eq!(fresh.detail().and_then(|d| d.surprise_seen_c), None);
    }

    fn zero_rpm() -> Predictive {
        let limits =
            DeviceLimits { junction_limit_c: 93.0, min_duty_pct: 30.0, zero_rpm: true, power_cap_w: None };
        Predictive::new(limits, ModelParams::prior(), 1.0)
    }

    /// Where a prompt arriving at any time would fit with the fan stopped, a running zero-rpm fan
    /// stops after the down dwell instead of the long stop dwell.
    #[test]
    fn a_zero_rpm_fan_stops_after_the_down_dwell_where_any_prompt_fits() {
        let mut c = zero_rpm();
        c.duty = Some(30.0);
        let stopped_at = (0..STOP_DWELL).find(|&k| c.decide(&obs(k as f64, 45.0, 30.0, 30.0)) == 0.0);
        assert_eq!(stopped_at, Some(DOWN_DWELL - 1));
    }

    /// Queued work that would overheat a fan stopped for the whole horizon does not start it while
    /// a hold stopped, then full speed, keeps room for any prompt; a warm heatsink does.
    #[test]
    fn a_stopped_fan_waits_while_a_hold_then_full_speed_keeps_room() {
        let c = zero_rpm();
        let (power, budget) = (vec![250.0; 90], 92.0);
        let mut stopped_peak = f64::MIN;
        c.model.predict(50.0, &power, |_| 0.0, |_, tj| stopped_peak = stopped_peak.max(tj));
        assert!(stopped_peak > budget, "{stopped_peak}");
        let any_time = c.surprise_reserve_with(&power, true, false);
        let outlook = Outlook { power: &power, reserve: &any_time, budget_c: budget };
        assert!(c.stop_survives_any_prompt(50.0, outlook, HOLD_S));
        assert!(!c.stop_survives_any_prompt(80.0, outlook, HOLD_S));
    }

    /// Through a turn that ends within a hold a stopped fan stays stopped up to a warmer heatsink
    /// than through longer work: only the restart has to be in time. A fan its firmware would
    /// spin has no restart to save: its duty is searched.
    #[test]
    fn a_stopped_fan_stays_stopped_through_a_brief_turn_where_a_late_restart_is_in_time() {
        let c = zero_rpm();
        let budget = 92.0;
        let mut turn = vec![c.forecast.idle_w(); 90];
        turn[..10].fill(250.0);
        let long = vec![250.0; 90];
        let band: Vec<f64> = (40..90)
            .map(f64::from)
            .filter(|&tj| {
                let (safe, stays) = c.stop_plans(tj, &turn, &turn, true, budget, true);
                stays && !safe
            })
            .collect();
        assert!(!band.is_empty(), "a late restart never helps");
        for &tj in &band {
            let (safe, stays) = c.stop_plans(tj, &turn, &turn, true, budget, false);
            assert!(!safe && !stays, "a fan its firmware would spin, at {tj} °C, is not held at its floor");
        }
        for tj in (40..90).map(f64::from) {
            let (safe, stays) = c.stop_plans(tj, &long, &long, true, budget, true);
            assert_eq!(safe, stays, "long work at {tj} °C");
        }
    }

    /// A large drop that holds only on a heatsink fit sitting on a bound of its range (here the
    /// 5 kJ/K capacity bound, settled temperatures as the prior's) and not with the prior's faster
    /// heatsink goes part way; the same drop on a fit inside its range, or one that holds on the
    /// faster heatsink too, goes all the way.
    #[test]
    fn a_large_drop_on_a_doubtful_fit_goes_part_way() {
        let mut slow = controller();
        slow.model.params.sink[..3].iter_mut().for_each(|v| *v *= 400.0 / 5000.0);
        assert!(slow.model.params.at_bound());
        let mut fitted = controller();
        assert!(!fitted.model.params.at_bound());
        let (power, reserve) = (vec![150.0; 90], vec![0.0; 90]);
        for _ in 0..10 {
            slow.model.observe(60.0, 150.0, 100.0);
        }
        // The fan turns at full speed and slows over its lag.
        (slow.fan_now_pct, fitted.fan_now_pct) = (100.0, 100.0);
        let duty = slow.fan.follow(100.0, power.len(), |k| if k < 20 { 20.0 } else { 100.0 });
        // The junction the fit settles at with the fan at full speed.
        let mut settled = 0.0;
        slow.model.predict(60.0, &[150.0; 3000], |_| 100.0, |_, tj| settled = tj);
        let peak = |model: &ThermalModel| {
            let mut peak = f64::MIN;
            model.predict(settled, &power, |k| duty[k], |_, tj| peak = peak.max(tj));
            peak
        };
        let (slow_peak, fast_peak) = (peak(&slow.model), peak(&slow.model.no_slower_than_prior()));
        assert!(fast_peak > slow_peak + 1.0, "{slow_peak} vs {fast_peak}");
        let budget = 0.5 * (slow_peak + fast_peak);
        let outlook = Outlook { power: &power, reserve: &reserve, budget_c: budget };
        assert!(slow.plan_holds(&slow.model, settled, outlook, 20.0));
        assert_eq!(slow.split_drop(100.0, 20.0, settled, outlook), Some(60.0));
        assert_eq!(slow.split_drop(100.0, 60.0, settled, outlook), None, "small drop");
        let roomy = Outlook { budget_c: fast_peak + 0.1, ..outlook };
        assert_eq!(slow.split_drop(100.0, 20.0, settled, roomy), None);
        assert_eq!(fitted.split_drop(100.0, 20.0, settled, outlook), None);
    }

    /// A fan that takes longer to spin up answers a raised command later, so its plans need a
    /// higher duty for the same heat.
    #[test]
    fn a_slower_fan_needs_a_higher_duty_for_the_same_heat() {
        let mut quick = controller();
        let mut slow = controller();
        slow.fan = FanResponse::with_lag(8.0, 1.0);
        for c in [&mut quick, &mut slow] {
            c.fan_now_pct = 20.0;
            for _ in 0..30 {
                c.model.observe(70.0, 200.0, 20.0);
            }
        }
        let (power, reserve) = (vec![250.0; 90], vec![0.0; 90]);
        let budget = (60..100)
            .map(f64::from)
            .find(|&b| {
                let outlook = Outlook { power: &power, reserve: &reserve, budget_c: b };
                (30.0..90.0).contains(&quick.required_duty(70.0, outlook))
            })
            .expect("a budget the quick fan meets at a middling duty");
        let outlook = Outlook { power: &power, reserve: &reserve, budget_c: budget };
        let (needs_quick, needs_slow) =
            (quick.required_duty(70.0, outlook), slow.required_duty(70.0, outlook));
        assert!(needs_slow > needs_quick + 2.0, "{needs_slow} vs {needs_quick} under {budget} °C");
    }

    /// A prefill ending now warms the junction before the fan can answer: the duty search judges
    /// only the steps the fan can change, and does not go to full speed for the ones it cannot.
    #[test]
    fn the_duty_search_ignores_the_steps_before_the_fan_answers() {
        let mut c = controller();
        for _ in 0..30 {
            c.model.observe(50.0, 35.0, 20.0);
        }
        c.fan_now_pct = 20.0;
        let mut power = vec![35.0; 90];
        power[..2].fill(300.0);
        let reserve = vec![0.0; 90];
        let mut peaks = (f64::MIN, f64::MIN);
        c.model.predict(
            50.0,
            &power,
            |_| 20.0,
            |k, tj| {
                let peak = if k < 2 { &mut peaks.0 } else { &mut peaks.1 };
                *peak = peak.max(tj);
            },
        );
        let budget = peaks.1 + 0.1;
        assert!(peaks.0 > budget + 1.0, "{peaks:?}");
        let outlook = Outlook { power: &power, reserve: &reserve, budget_c: budget };
        let everywhere = c.within_budget(&c.model, 50.0, outlook, 0, |_| 100.0);
        assert!(!everywhere, "full speed would not hold the first steps either");
        assert_eq!(c.required_duty(50.0, outlook), 20.0);
    }

    /// The work going on is the power of the last periods, repeated from the oldest.
    #[test]
    fn the_work_going_on_repeats_the_last_periods() {
        let mut c = controller();
        assert!(c.recent_work_repeated(2, 5).is_empty(), "nothing seen yet");
        for (t, power_w) in [100.0, 200.0, 300.0].into_iter().enumerate() {
            c.junction_est_c = Some(60.0);
            c.model.observe(60.0, power_w, 40.0);
            c.learn_bias(&obs(t as f64, 60.0, power_w, 40.0));
        }
        assert_eq!(c.recent_work_repeated(2, 5), [200.0, 300.0, 200.0, 300.0, 200.0]);
        assert_eq!(c.recent_work_repeated(9, 4), [100.0, 200.0, 300.0, 100.0]);
    }

    /// What `c` decides after 30 periods of requests sent back to back, each shown only as it
    /// arrives (the queue says the work drains within a second), with the junction read at
    /// `junction_c` and the fan at a 20 % floor.
    fn after_back_to_back_requests(mut c: Predictive, junction_c: f64) -> DecisionDetail {
        let draining = lucebox_engine::LoadSignal {
            requests_processing: 1,
            slots: vec![lucebox_engine::SlotLoad {
                id: 1,
                is_processing: true,
                prompt_tokens: 400,
                prompt_processed: 400,
                decoded_tokens: 3,
                remaining_tokens: Some(1),
            }],
            ..Default::default()
        };
        // Fewer periods than a heatsink window: the junction held still under this work would
        // teach the fit that the heatsink holds it, and this is about the prior's plans.
        for t in 0..30 {
            // An idle period now and then: the queue's plans miss no whole window, so they count
            // no unforeseen work.
            let power_w = [300.0, 220.0, 220.0, 300.0, 220.0, 220.0, 30.0][t % 7];
            let seen =
                Observation { load: Some(draining.clone()), ..obs(t as f64, junction_c, power_w, 20.0) };
            c.decide(&seen);
            c.commanded(Some(20.0));
        }
        c.detail().unwrap()
    }

    /// With the junction near the budget, the work of the last seconds going on needs more than
    /// the fan's floor, and the plans take it; with the junction cool it needs the floor alone.
    /// (`tests/thermal.rs` runs the sync this was found on.)
    #[test]
    fn the_work_going_on_needs_more_than_the_floor_only_near_the_budget() {
        let warm = after_back_to_back_requests(controller(), 90.0);
        assert!(warm.going_on_pct > 20.0 && warm.required_pct >= warm.going_on_pct, "{warm:?}");
        let cool = after_back_to_back_requests(controller(), 60.0);
        assert_eq!(cool.going_on_pct, 20.0, "{cool:?}");
    }

    /// A forecast that learned one user who waits for each answer: each prompt arrives 3 s after
    /// the last answer ended, never while the engine works.
    fn sequential_forecast() -> PowerForecast {
        let mut forecast = PowerForecast::new();
        for id in 1..=20u32 {
            for remaining in [50, 40, 30, 20, 10] {
                let slot = lucebox_engine::SlotLoad {
                    id,
                    is_processing: true,
                    prompt_tokens: 500,
                    prompt_processed: 500,
                    decoded_tokens: 0,
                    remaining_tokens: Some(remaining),
                };
                let answering = lucebox_engine::LoadSignal {
                    requests_processing: 1,
                    slots: vec![slot],
                    ..Default::default()
                };
                forecast.observe(&answering, 150.0, 1.0);
            }
            for _ in 0..3 {
                forecast.observe(&lucebox_engine::LoadSignal::default(), 30.0, 1.0);
            }
        }
        assert!(!forecast.arrives_while_busy());
        forecast
    }

    /// Where prompts come while the engine works, one may land on the work going on: near the
    /// budget that work then needs more than the fan's floor, where for one user who waits for
    /// each answer the same work as it ran needs the floor alone.
    #[test]
    fn the_work_going_on_keeps_room_for_a_prompt_landing_on_it_where_prompts_come_while_busy() {
        // 88 °C under a 95 °C limit: the work as it ran needs the floor alone (the test above
        // needs 90 °C for more), and a prompt on it would not leave room.
        let busy = after_back_to_back_requests(controller(), 88.0);
        assert!(busy.going_on_pct > 30.0 && busy.required_pct >= busy.going_on_pct, "{busy:?}");
        let sequential =
            after_back_to_back_requests(controller().with_forecast(Some(sequential_forecast())), 88.0);
        assert_eq!(sequential.going_on_pct, 20.0, "{sequential:?}");
    }

    /// A junction that stays warmer than the model expects builds a margin; one that follows the
    /// model builds none.
    #[test]
    fn model_bias_grows_only_where_the_model_runs_cool() {
        let mut cool = controller();
        let mut right = controller();
        // 150 W at 60 % settles near 74 °C in the prior; 30 samples leave its fit unchanged.
        let (power_w, duty, held_c) = (150.0, 60.0, 90.0);
        let mut tj = 80.0;
        for k in 0..30 {
            let t = k as f64;
            cool.learn_bias(&obs(t, held_c, power_w, duty));
            cool.junction_est_c = Some(held_c);
            cool.model.observe(held_c, power_w, duty);
            // The model's own one-step prediction is what `right` reads next.
            right.learn_bias(&obs(t, tj, power_w, duty));
            right.junction_est_c = Some(tj);
            right.model.observe(tj, power_w, duty);
            right.model.predict(tj, &[power_w], |_| duty, |_, next| tj = next);
        }
        assert!(right.model_bias_c.abs() < BIAS_DEADBAND_C, "{}", right.model_bias_c);
        assert!(cool.model_bias_c > 1.0, "{}", cool.model_bias_c);
    }
}
