//! The fan's response to a command: a first-order lag, learned from the duty the fan reports a
//! period after each command. The controller's plans follow a raised command through the fan's
//! spin-up instead of taking the new duty at once.

/// The fastest lag ever assumed, and the one assumed before the fan has shown its own: a device
/// that reports its command back at once (a pwm register) shows no lag at all, and real fans take
/// a few seconds to change speed.
pub const FASTEST_LAG_S: f64 = 2.0;
/// The slowest lag a fan is taken to have (a reading stuck below its command is not a fan this
/// slow, but a stalled or absent one, which the safety layer handles).
pub const SLOWEST_LAG_S: f64 = 15.0;
/// A period counts only where the command was at least this far from the reported duty: the
/// duty is reported in whole percent, and a small move says little about the lag.
const MIN_GAP_PCT: f64 = 10.0;
/// Weight of one period's move in the learned share (about five commands' worth of memory).
const GAIN: f64 = 0.2;

/// The duty a fan runs at for a command: the command where it reaches `min_duty_pct`, below it a
/// stop where the fan may stop (`zero_rpm`) and the floor where it may not.
pub fn running_duty(command_pct: f64, min_duty_pct: f64, zero_rpm: bool) -> f64 {
    let command = command_pct.clamp(0.0, 100.0);
    if command >= min_duty_pct {
        command
    } else if zero_rpm {
        0.0
    } else {
        min_duty_pct
    }
}

/// A fan's learned response to its command.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FanResponse {
    dt_s: f64,
    /// Share of the gap between the reported duty and the command that one period closes.
    share: f64,
    /// Whether the lag is the fan's own: resumed from an earlier run, or learned from a command
    /// that moved it in this one.
    own: bool,
}

impl FanResponse {
    /// Starts at [`FASTEST_LAG_S`], for a controller deciding every `dt_s`.
    pub fn new(dt_s: f64) -> Self {
        Self { own: false, ..Self::with_lag(FASTEST_LAG_S, dt_s) }
    }

    /// Starts from a lag learned before (a restart resumes it).
    pub fn with_lag(lag_s: f64, dt_s: f64) -> Self {
        Self { dt_s, share: share_per_period(lag_s.clamp(FASTEST_LAG_S, SLOWEST_LAG_S), dt_s), own: true }
    }

    /// The lag to keep for the next run: none until this fan has shown its own (an assumed lag
    /// is not saved, so a later build's starting point still applies).
    pub fn own_lag_s(&self) -> Option<f64> {
        self.own.then(|| self.lag_s())
    }

    /// Learns from one period: the fan reported `before_pct`, was sent `command_pct` (what it
    /// really runs at: a stop below a zero-rpm floor, the floor below it otherwise) and then
    /// reported `after_pct`.
    pub fn observe(&mut self, command_pct: f64, before_pct: f64, after_pct: f64) {
        let gap = command_pct - before_pct;
        if gap.abs() < MIN_GAP_PCT {
            return;
        }
        let moved = ((after_pct - before_pct) / gap).clamp(0.0, 1.0);
        self.share += (moved - self.share) * GAIN;
        self.own = true;
    }

    /// Time constant of the fan's first-order response, within [`FASTEST_LAG_S`] and the
    /// slowest a working fan is taken to have.
    pub fn lag_s(&self) -> f64 {
        let slowest = share_per_period(SLOWEST_LAG_S, self.dt_s);
        let share = self.share.clamp(slowest, 1.0);
        (-self.dt_s / (1.0 - share).ln()).clamp(FASTEST_LAG_S, SLOWEST_LAG_S)
    }

    /// The duty a plan may count on over each of `steps` periods, from `now_pct` with `command(k)`
    /// (as the fan runs it) sent at the start of period k: the mean over the period while the fan
    /// speeds up, and the command at once where it slows. A slowing fan coasts over its lag too,
    /// but a plan that counted on the coasting would find less of it each period and put its
    /// raise off (a drop judged again from the slower fan needs more than it planned).
    pub fn follow(&self, now_pct: f64, steps: usize, command: impl Fn(usize) -> f64) -> Vec<f64> {
        let lag = self.lag_s();
        let share = share_per_period(lag, self.dt_s);
        // Mean over a period of the part of the gap closed by time t, 1 − e^(−t/lag).
        let mean_share = 1.0 - lag / self.dt_s * share;
        let mut duty = now_pct;
        (0..steps)
            .map(|k| {
                let gap = command(k) - duty;
                if gap <= 0.0 {
                    duty += gap;
                    return duty;
                }
                let mean = duty + gap * mean_share;
                duty += gap * share;
                mean
            })
            .collect()
    }
}

/// Share of the gap to its command a fan with time constant `lag_s` closes in `dt_s`.
fn share_per_period(lag_s: f64, dt_s: f64) -> f64 {
    1.0 - (-dt_s / lag_s).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays a first-order fan with a 3.5 s lag, reported in whole percent once a second,
    /// through a few commands up and down.
    #[test]
    fn learns_a_slow_fans_lag_from_its_reported_duty() {
        let (dt, lag) = (1.0, 3.5);
        let mut fan = FanResponse::new(dt);
        assert_eq!(fan.lag_s(), FASTEST_LAG_S);
        let mut duty: f64 = 0.0;
        for &command in [35.0, 100.0, 40.0, 0.0, 100.0, 60.0, 35.0, 100.0].iter() {
            for _ in 0..15 {
                let before = duty.round();
                duty += (command - duty) * share_per_period(lag, dt);
                fan.observe(command, before, duty.round());
            }
        }
        assert!((fan.lag_s() - lag).abs() < 0.4, "{}", fan.lag_s());
    }

    /// A device that reports its command at once is still taken to need the fastest lag, and a
    /// reading that never moves is taken as the slowest fan, not as an infinitely slow one.
    #[test]
    fn an_echoed_command_or_a_stuck_reading_stays_within_the_bounds() {
        let mut echo = FanResponse::new(1.0);
        let mut stuck = FanResponse::new(1.0);
        for k in 0..50 {
            let command = if k % 2 == 0 { 100.0 } else { 30.0 };
            echo.observe(command, 130.0 - command, command);
            stuck.observe(command, 40.0, 40.0);
        }
        assert_eq!(echo.lag_s(), FASTEST_LAG_S);
        assert_eq!(stuck.lag_s(), SLOWEST_LAG_S);
    }

    /// Only a lag the fan has shown is kept for the next run: one resumed from an earlier run, or
    /// one learned from a command that moved the fan; the assumed starting lag is not.
    #[test]
    fn only_a_lag_the_fan_has_shown_is_kept() {
        let mut fan = FanResponse::new(1.0);
        fan.observe(25.0, 20.0, 25.0);
        assert_eq!(fan.own_lag_s(), None, "a move under the gap teaches nothing");
        fan.observe(60.0, 20.0, 60.0);
        assert_eq!(fan.own_lag_s(), Some(FASTEST_LAG_S));
        assert_eq!(FanResponse::with_lag(6.0, 1.0).own_lag_s().map(|l| (l * 1e6).round() / 1e6), Some(6.0));
    }

    /// The mean duty over each period lies between the duties at its ends, a fan already at its
    /// command stays there, and a slowing fan is counted at its command at once.
    #[test]
    fn following_a_raised_command_spins_up_over_the_lag() {
        let mut fan = FanResponse::new(1.0);
        fan.share = share_per_period(3.0, 1.0);
        let duty = fan.follow(0.0, 12, |_| 100.0);
        let at_end = |k: i32| 100.0 * (1.0 - (-f64::from(k) / 3.0).exp());
        for (k, &mean) in (0..).zip(&duty) {
            assert!(mean > at_end(k) && mean < at_end(k + 1), "period {k}: {mean}");
        }
        assert_eq!(fan.follow(60.0, 5, |_| 60.0), vec![60.0; 5]);
        assert_eq!(fan.follow(90.0, 3, |k| [30.0, 0.0, 0.0][k]), vec![30.0, 0.0, 0.0]);
    }
}
