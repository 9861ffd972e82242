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

/// Where a zero-rpm fan's firmware is first taken to keep it stopped, until the fan shows its
/// own: NVIDIA's and AMD's stock curves stop the fan under about 50 °C.
pub const FIRMWARE_STOPS_BELOW_PRIOR_C: f64 = 50.0;

/// How far over the reading a fan was seen still stopped at the firmware is taken to keep it
/// stopped.
const STOPPED_OVER_READING_C: f64 = 0.5;

/// Where a learned stop may lie: a reading the safety layer takes as a sensor's, and the margin a
/// stop is put over it.
pub const FIRMWARE_STOPS_BELOW_RANGE_C: std::ops::RangeInclusive<f64> = std::ops::RangeInclusive::new(
    super::safety::JUNCTION_RANGE_C.0,
    super::safety::JUNCTION_RANGE_C.1 + STOPPED_OVER_READING_C,
);

/// Where a zero-rpm fan's stop is silent. No fan the daemon drives stops on command: NVML reaches
/// 0 % only by handing the fan back to the driver's auto, and an RDNA3/4 card stops its fan only
/// under its firmware's zero-rpm temperature. So a stop is a hand-back to the firmware, whose own
/// curve spins the fan again once the junction is warm, often faster than the fan's floor would
/// turn it. Learned from the duty the fan reports while handed back: still stopped at a reading,
/// the firmware keeps it stopped there; spun up, it does not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirmwareStop {
    stops_below_c: f64,
    /// Whether `stops_below_c` is the fan's own (seen, or resumed from an earlier run), not the
    /// prior: only that is kept for the next run.
    shown: bool,
    /// Whether the fan, handed back over the last period, was seen driven by its firmware.
    spinning: bool,
    /// The reading a period ago: what the duty reported now answers.
    last_reading_c: Option<f64>,
}

impl Default for FirmwareStop {
    fn default() -> Self {
        Self {
            stops_below_c: FIRMWARE_STOPS_BELOW_PRIOR_C,
            shown: false,
            spinning: false,
            last_reading_c: None,
        }
    }
}

impl FirmwareStop {
    /// Where an earlier run saw this fan's firmware keep it stopped.
    pub fn resumed(stops_below_c: f64) -> Self {
        Self { stops_below_c, shown: true, ..Self::default() }
    }

    /// Learns from one period: whether the fan was handed back to its firmware over it, the
    /// junction read now, and the duty the fan reported before and after it, against its floor.
    /// A fan coasting down from the daemon's last command only falls; one its firmware drives
    /// rises, or holds at a running duty. The firmware acted on the period's first reading, so
    /// that is the one where it was seen to spin the fan or keep it stopped.
    pub fn observe(
        &mut self,
        handed_back: bool,
        junction_c: f64,
        before_pct: f64,
        after_pct: f64,
        floor_pct: f64,
    ) {
        let acted_on_c = self.last_reading_c.replace(junction_c).unwrap_or(junction_c);
        self.spinning = handed_back
            && after_pct >= 0.5
            && (after_pct >= before_pct + 1.0 || (after_pct >= floor_pct && after_pct >= before_pct));
        if self.spinning {
            self.stops_below_c = self.stops_below_c.min(acted_on_c);
            self.shown = true;
        } else if handed_back && after_pct < 0.5 {
            self.stops_below_c = self.stops_below_c.max(acted_on_c + STOPPED_OVER_READING_C);
            self.shown = true;
        }
    }

    /// Whether a stop sent now leaves the fan stopped: not where its firmware was just seen
    /// spinning it, and only under the reading where the firmware was seen to keep it stopped
    /// unless it is handed back and still quiet.
    pub fn silent(&self, handed_back: bool, junction_c: f64) -> bool {
        !self.spinning && (handed_back || junction_c < self.stops_below_c)
    }

    /// The reading under which the firmware is taken to keep the fan stopped.
    pub fn stops_below_c(&self) -> f64 {
        self.stops_below_c
    }

    /// That reading where the fan has shown it, for the next run; none while it is the prior.
    pub fn own_stops_below_c(&self) -> Option<f64> {
        self.shown.then_some(self.stops_below_c)
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

    /// A fan handed back at a cool junction coasts down and stays stopped: the stop is silent and
    /// the firmware is seen to keep it stopped up to where it was. Warmer, the firmware spins it
    /// up; from then on a stop is not silent, and only a junction under where that happened lets
    /// the next hand-back count on a stop again.
    #[test]
    fn the_firmware_is_seen_to_keep_a_fan_stopped_or_spin_it() {
        let floor = 30.0;
        let mut stop = FirmwareStop::default();
        assert!(stop.silent(false, FIRMWARE_STOPS_BELOW_PRIOR_C - 1.0));
        assert!(!stop.silent(false, FIRMWARE_STOPS_BELOW_PRIOR_C));
        // Coasting down from the floor and from full speed is not the firmware's doing.
        for (before, after) in [(30.0, 20.0), (20.0, 13.0), (100.0, 67.0), (67.0, 45.0), (45.0, 30.0)] {
            stop.observe(true, 48.0, before, after, floor);
            assert!(stop.silent(true, 48.0), "{before} -> {after}");
        }
        stop.observe(true, 52.0, 1.0, 0.0, floor);
        assert_eq!(stop.stops_below_c(), FIRMWARE_STOPS_BELOW_PRIOR_C, "the firmware acted on 48 °C");
        stop.observe(true, 52.0, 0.0, 0.0, floor);
        assert_eq!(stop.stops_below_c(), 52.5, "stopped a period after reading 52 °C");
        assert!(stop.silent(false, 52.0));
        // The firmware spins it after 55 °C: rising from a stop, then holding at a running duty.
        stop.observe(true, 55.0, 0.0, 0.0, floor);
        stop.observe(true, 55.0, 0.0, 12.0, floor);
        assert!(!stop.silent(true, 55.0));
        assert_eq!(stop.stops_below_c(), 52.5, "spun after 55 °C, above where it was seen stopped");
        stop.observe(true, 51.0, 35.0, 35.0, floor);
        assert!(!stop.silent(true, 51.0), "holding at a running duty");
        assert_eq!(stop.stops_below_c(), 52.5);
        stop.observe(true, 51.0, 40.0, 41.0, floor);
        assert_eq!(stop.stops_below_c(), 51.0, "spun after 51 °C");
        // Back at the daemon's floor, the next stop waits for a junction under 51 °C.
        stop.observe(false, 51.0, 41.0, 30.0, floor);
        assert!(!stop.silent(false, 51.0));
        assert!(stop.silent(false, 50.0));
    }

    /// Only a stop the firmware has shown is kept for the next run, and a resumed one is used at
    /// once: a firmware that spins its fan at 45 °C is not tried again at 48 °C after a restart.
    #[test]
    fn only_a_stop_the_firmware_has_shown_is_kept() {
        let mut stop = FirmwareStop::default();
        stop.observe(false, 45.0, 30.0, 30.0, 30.0);
        assert_eq!(stop.own_stops_below_c(), None, "a fan the daemon drives shows nothing of its firmware");
        // Handed back after the 45 °C reading, the firmware spun the fan up on it.
        stop.observe(true, 46.0, 30.0, 35.0, 30.0);
        assert_eq!(stop.own_stops_below_c(), Some(45.0));
        let resumed = FirmwareStop::resumed(45.0);
        assert!(!resumed.silent(false, 48.0) && resumed.silent(false, 44.0));
        assert_eq!(resumed.own_stops_below_c(), Some(45.0));
    }
}
