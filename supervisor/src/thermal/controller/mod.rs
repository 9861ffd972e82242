//! Fan controllers. Every controller except the bench-only oracle is built only from what a real
//! device shows ([`DeviceLimits`], [`Observation`]); none reads a plant's parameters.

mod oracle;
mod predictive;
mod stock;
mod target;

use lucebox_engine::LoadSignal;
use serde::Serialize;

use super::forecast::PowerForecast;
use super::model::ModelParams;

pub use oracle::Oracle;
pub use predictive::Predictive;
pub use stock::Stock;
pub use target::Target;

/// What the device publishes about itself: its junction limit, fan range and power limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceLimits {
    pub junction_limit_c: f64,
    /// Lowest spinning duty.
    pub min_duty_pct: f64,
    /// Whether the fan may stop (a command below the floor stops it).
    pub zero_rpm: bool,
    /// The board power limit, where the device reports one.
    pub power_cap_w: Option<f64>,
}

impl DeviceLimits {
    /// The lowest duty this device accepts that keeps the fan turning, or 0 where it may stop:
    /// what a command of 0 runs at.
    pub fn lowest_duty(&self) -> f64 {
        self.effective_duty(0.0)
    }

    /// The duty the fan runs at for a command: below the floor it stops where it may, and turns
    /// at the floor where it may not.
    pub fn effective_duty(&self, command_pct: f64) -> f64 {
        super::fan::running_duty(command_pct, self.min_duty_pct, self.zero_rpm)
    }
}

/// One sensor sample, as a device shows it once per period.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Seconds since the controller started.
    pub t_s: f64,
    /// Junction (hotspot) temperature at sensor resolution.
    pub junction_c: f64,
    /// Board power averaged over the last period.
    pub power_w: f64,
    /// Duty the fan reports now.
    pub fan_duty_pct: f64,
    /// The engine's queue, when the engine answers.
    pub load: Option<LoadSignal>,
}

/// Why the predictive controller chose its last duty: the quantities its plans weighed, for the
/// bench's telemetry (`thermal bench --telemetry`, so a run can be read period by period) and the
/// status a device's loop publishes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DecisionDetail {
    /// Filtered junction estimate the plans started from.
    pub junction_est_c: f64,
    /// What the plans had to stay under: the limit less the margin and the model's recent bias.
    pub budget_c: f64,
    /// How much warmer than the replayed model the junction has lately run.
    pub model_bias_c: f64,
    /// Largest room kept over the horizon for a prompt arriving unannounced.
    pub reserve_max_c: f64,
    /// Power the plans expect from requests not yet arrived, right after the queue drains (0
    /// where the queue fills the horizon, or for a fan that never stops: its plans see the queue
    /// alone).
    pub stream_w: f64,
    /// Power of work the queue did not show that every period of the last 20 s drew: the plans
    /// expect it to go on once the queue drains, until the fan has had time to answer.
    pub unforeseen_w: f64,
    /// The lowest duty whose plan holds were the work of the fan's answer time to go on as it
    /// just ran, instead of draining as the queue says: the plans need at least this.
    pub going_on_pct: f64,
    /// A zero-rpm fan could stop with room for a prompt at any time (and the work of the last
    /// seconds going on would let it).
    pub stop_safe: bool,
    /// A stopped fan may stay stopped now (as above).
    pub stays_stopped: bool,
    /// The lowest duty whose plan holds, before rate limits and hysteresis.
    pub required_pct: f64,
    /// What the reactive curve near the limit demanded (the forecast is never trusted below it).
    pub reactive_floor_pct: f64,
    /// The duty is above what the plans need: the down dwell (hysteresis) or a split drop holds it.
    pub held: bool,
    /// The duty is the fan's lowest spinning duty (the plans would take less if the fan could).
    pub at_floor: bool,
    /// The fan's lag as learned from the duty it reports: the plans follow a command through it.
    pub fan_lag_s: f64,
    /// The junction's largest recent rise over the plans' power within the time the fan takes to
    /// answer, which caps the room kept for a surprise; none until a minute of it was seen.
    pub surprise_seen_c: Option<f64>,
    /// For a zero-rpm fan, the reading under which its firmware is taken to keep it stopped when
    /// handed back (the only way it stops).
    pub firmware_stops_below_c: Option<f64>,
    /// A zero-rpm fan's firmware would spin it were it stopped now: it plans as a fan that never
    /// stops.
    pub firmware_would_spin: bool,
}

impl DecisionDetail {
    /// Column names of [`Self::csv`], in order.
    pub const CSV_HEADER: &'static str = "est_c,budget_c,bias_c,reserve_max_c,stream_w,unforeseen_w,going_on_pct,stop_safe,stays_stopped,required_pct,reactive_floor_pct,held,at_floor,fan_lag_s,surprise_seen_c,firmware_stops_below_c,firmware_would_spin";
    /// Empty fields for a controller without a detail, as many as the header names.
    pub fn csv_empty() -> String {
        ",".repeat(Self::CSV_HEADER.matches(',').count())
    }

    /// One line for the status page: why the fan runs at `command_pct` (the duty sent, which a
    /// rate limit or hysteresis may hold above what the plans need).
    pub fn reason(&self, command_pct: f64) -> String {
        if command_pct < 0.5 {
            return if self.stop_safe {
                "stopped: a large prompt arriving at any time would still fit".into()
            } else {
                "stopped: the queued work ends before the fan is needed".into()
            };
        }
        if self.reactive_floor_pct > 0.0 && self.reactive_floor_pct >= command_pct - 0.5 {
            return format!("{command_pct:.0} %: the reactive curve just under the limit");
        }
        if !self.held {
            let mut stream = String::new();
            let going_on_sets_it = !self.at_floor && self.going_on_pct + 0.5 >= self.required_pct;
            if going_on_sets_it {
                stream += ", should the work of the last seconds go on";
            } else if self.stream_w >= 1.0 {
                stream += &format!(", counting {:.0} W of requests still to come", self.stream_w);
            }
            if self.unforeseen_w >= 1.0 && !going_on_sets_it {
                stream += &format!(", and {:.0} W of work the queue does not show", self.unforeseen_w);
            }
            let lowest = match (self.at_floor, self.firmware_would_spin) {
                (true, true) => " (the fan's lowest: stopped, its firmware would spin it faster)",
                (true, false) => " (the fan's lowest)",
                _ => "",
            };
            return format!(
                "{command_pct:.0} %{lowest} keeps the predicted junction under {:.1} °C{stream}",
                self.budget_c
            );
        }
        let needed = if self.required_pct < 0.5 {
            "they would stop it".to_string()
        } else {
            format!("they need {:.0} %", self.required_pct)
        };
        format!("{command_pct:.0} % held until the plans have needed less for a while ({needed})")
    }

    pub fn csv(&self) -> String {
        format!(
            "{:.2},{:.2},{:.2},{:.2},{:.1},{:.1},{:.1},{},{},{:.1},{:.1},{},{},{:.2},{},{},{}",
            self.junction_est_c,
            self.budget_c,
            self.model_bias_c,
            self.reserve_max_c,
            self.stream_w,
            self.unforeseen_w,
            self.going_on_pct,
            u8::from(self.stop_safe),
            u8::from(self.stays_stopped),
            self.required_pct,
            self.reactive_floor_pct,
            u8::from(self.held),
            u8::from(self.at_floor),
            self.fan_lag_s,
            self.surprise_seen_c.map_or(String::new(), |c| format!("{c:.2}")),
            self.firmware_stops_below_c.map_or(String::new(), |c| format!("{c:.1}")),
            u8::from(self.firmware_would_spin)
        )
    }
}

/// A controller the bench and the daemon can run: one duty per observation.
pub trait Controller {
    fn name(&self) -> &'static str;
    /// The duty to command for the next period.
    fn decide(&mut self, obs: &Observation) -> f64;
    /// The junction temperature this controller expects 30 s from now, if it predicts.
    fn prediction_30s_c(&self) -> Option<f64> {
        None
    }
    /// Highest junction temperature expected over the controller's horizon, if it predicts.
    fn predicted_peak_c(&self) -> Option<f64> {
        None
    }
    /// What the controller has learned, to keep across restarts, if it learns.
    fn learned(&self) -> Option<(ModelParams, &PowerForecast)> {
        None
    }
    /// Why the last duty was chosen, if the controller plans.
    fn detail(&self) -> Option<DecisionDetail> {
        None
    }
    /// What the fan was sent after the last decision, where a layer above the controller may
    /// change it (the safety layer's floor or full speed), or `None` where the fan's firmware
    /// drives it: the next observation is read against what the fan was really told.
    fn commanded(&mut self, _duty_pct: Option<f64>) {}
}

/// Piecewise-linear curve (°C → duty %), flat beyond its ends.
pub(crate) fn interpolate(curve: &[(f64, f64)], t: f64) -> f64 {
    let Some(&(t0, d0)) = curve.first() else { return 100.0 };
    if t <= t0 {
        return d0;
    }
    for w in curve.windows(2) {
        let ((ta, da), (tb, db)) = (w[0], w[1]);
        if t <= tb {
            return da + (db - da) * (t - ta) / (tb - ta);
        }
    }
    curve.last().map(|p| p.1).unwrap_or(100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail() -> DecisionDetail {
        DecisionDetail {
            junction_est_c: 70.0,
            budget_c: 87.0,
            reserve_max_c: 5.0,
            required_pct: 34.0,
            ..DecisionDetail::default()
        }
    }

    /// The status page's line names what set the duty: a stop and why, the reactive curve, the
    /// plans (with the stream they counted, or the work of the last seconds going on where that
    /// needs the most), or the hysteresis holding a duty above the plans'.
    #[test]
    fn the_reason_names_what_set_the_duty() {
        let d = detail();
        assert_eq!(d.reason(40.0), "40 % keeps the predicted junction under 87.0 °C");
        let stream = DecisionDetail { stream_w: 185.4, ..d };
        assert_eq!(
            stream.reason(40.0),
            "40 % keeps the predicted junction under 87.0 °C, counting 185 W of requests still to come"
        );
        let going_on = DecisionDetail { going_on_pct: 34.0, ..stream };
        assert_eq!(
            going_on.reason(40.0),
            "40 % keeps the predicted junction under 87.0 °C, should the work of the last seconds go on"
        );
        let floor = DecisionDetail { required_pct: 12.0, at_floor: true, going_on_pct: 12.0, ..d };
        assert_eq!(floor.reason(20.0), "20 % (the fan's lowest) keeps the predicted junction under 87.0 °C");
        let spun = DecisionDetail { required_pct: 0.0, at_floor: true, firmware_would_spin: true, ..d };
        assert_eq!(
            spun.reason(30.0),
            "30 % (the fan's lowest: stopped, its firmware would spin it faster) keeps the predicted \
             junction under 87.0 °C"
        );
        let held = DecisionDetail { held: true, ..d };
        assert_eq!(
            held.reason(100.0),
            "100 % held until the plans have needed less for a while (they need 34 %)"
        );
        let idle = DecisionDetail { required_pct: 0.0, stays_stopped: true, held: true, ..d };
        assert_eq!(
            idle.reason(30.0),
            "30 % held until the plans have needed less for a while (they would stop it)"
        );
        assert_eq!(idle.reason(0.0), "stopped: the queued work ends before the fan is needed");
        let safe = DecisionDetail { stop_safe: true, ..idle };
        assert_eq!(safe.reason(0.0), "stopped: a large prompt arriving at any time would still fit");
        let hot = DecisionDetail { reactive_floor_pct: 60.0, ..d };
        assert_eq!(hot.reason(60.0), "60 %: the reactive curve just under the limit");
    }

    #[test]
    fn interpolation_is_linear_and_flat_outside() {
        let c = [(40.0, 20.0), (60.0, 40.0)];
        assert_eq!(interpolate(&c, 30.0), 20.0);
        assert_eq!(interpolate(&c, 50.0), 30.0);
        assert_eq!(interpolate(&c, 90.0), 40.0);
    }
}
