//! The numbers supervision runs by. Why these values: `README.md` in this folder.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct SupervisionPolicy {
    pub restart: RestartPolicy,
    pub health: HealthPolicy,
    /// SIGTERM → SIGKILL grace when the supervisor stops an engine (Docker's default too).
    pub stop_grace: Duration,
    /// Grace for an engine the supervisor gave up on (hung, never got ready): short, since it
    /// is already failing and every second here delays the restart.
    pub hung_grace: Duration,
}

impl Default for SupervisionPolicy {
    fn default() -> Self {
        Self {
            restart: RestartPolicy::default(),
            health: HealthPolicy::default(),
            stop_grace: Duration::from_secs(10),
            hung_grace: Duration::from_secs(2),
        }
    }
}

/// Restart delays: the first restart is immediate, then `initial` doubling up to `cap`.
/// A run that stayed ready for `reset_after` clears the failure count.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    pub initial: Duration,
    pub cap: Duration,
    pub reset_after: Duration,
    /// This many failures in a row (no stable run between them) is a crash loop: step down to
    /// the plan's next fallback.
    pub crash_loop_failures: u32,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            cap: Duration::from_secs(60),
            reset_after: Duration::from_secs(30),
            crash_loop_failures: 3,
        }
    }
}

impl RestartPolicy {
    /// Delay before restart number `failures` (1 = the first failure in a row).
    pub fn delay(&self, failures: u32) -> Duration {
        match failures {
            0 | 1 => Duration::ZERO,
            n => {
                let doublings = (n - 2).min(31);
                self.initial.saturating_mul(1u32 << doublings).min(self.cap)
            }
        }
    }

    pub fn is_crash_loop(&self, failures: u32) -> bool {
        failures >= self.crash_loop_failures
    }
}

/// Health probing: fast `/health` polls while the engine loads (up to the plan's startup
/// allowance), then liveness probes; `failures` misses in a row restart a live but hung engine.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthPolicy {
    /// Poll interval while loading, for the first second (a tiny model is ready in ~50 ms).
    pub startup_fast_interval: Duration,
    /// Poll interval while loading after that.
    pub startup_interval: Duration,
    pub liveness_interval: Duration,
    pub liveness_timeout: Duration,
    pub liveness_failures: u32,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            startup_fast_interval: Duration::from_millis(10),
            startup_interval: Duration::from_millis(250),
            liveness_interval: Duration::from_secs(2),
            liveness_timeout: Duration::from_secs(1),
            liveness_failures: 3,
        }
    }
}

impl HealthPolicy {
    pub fn startup_poll(&self, since_start: Duration) -> Duration {
        if since_start < Duration::from_secs(1) {
            self.startup_fast_interval
        } else {
            self.startup_interval
        }
    }
}

/// Consecutive-failure bookkeeping for one engine.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FailureCount {
    pub in_a_row: u32,
}

impl FailureCount {
    /// Records a failure of a run that was ready for `ready_for` (None: never got ready).
    /// Returns the new count.
    pub fn record(&mut self, policy: &RestartPolicy, ready_for: Option<Duration>) -> u32 {
        if ready_for.is_some_and(|d| d >= policy.reset_after) {
            self.in_a_row = 0;
        }
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.in_a_row
    }

    pub fn clear(&mut self) {
        self.in_a_row = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_restart_is_immediate_then_doubles_to_the_cap() {
        let p = RestartPolicy::default();
        let delays: Vec<u64> = (1..=10).map(|n| p.delay(n).as_millis() as u64).collect();
        assert_eq!(delays, [0, 500, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]);
    }

    #[test]
    fn a_stable_run_resets_the_count() {
        let p = RestartPolicy::default();
        let mut count = FailureCount::default();
        assert_eq!(count.record(&p, None), 1);
        assert_eq!(count.record(&p, Some(Duration::from_secs(1))), 2);
        assert!(!p.is_crash_loop(2));
        assert_eq!(count.record(&p, None), 3);
        assert!(p.is_crash_loop(3));
        assert_eq!(count.record(&p, Some(p.reset_after)), 1);
    }

    proptest! {
        #[test]
        fn delay_is_monotonic_and_capped(n in 1u32..1000) {
            let p = RestartPolicy::default();
            prop_assert!(p.delay(n) <= p.delay(n + 1));
            prop_assert!(p.delay(n) <= p.cap);
        }
    }
}
