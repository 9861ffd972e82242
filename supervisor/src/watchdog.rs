//! systemd's watchdog, fed only while the loops that keep the box safe still turn.
//!
//! A timer that pings on its own proves only that the async runtime runs. The fan loop reads
//! sysfs on its thread, and a wedged GPU driver can block such a read for good: the loop stops
//! while everything else looks alive. So each watched loop beats a [`Heartbeat`] every round, and
//! [`ping_while_alive`] pings only while every heartbeat is recent. When one falls silent it asks
//! systemd to act at once (`WATCHDOG=trigger`) rather than wait out `WatchdogSec` after the last
//! ping: systemd kills the supervisor, `ExecStopPost` hands the fans back to the firmware, and
//! `Restart=always` starts a fresh supervisor.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::status::{Level, StatusModel};

/// The loops being watched, each with when it last beat and how long it may stay silent.
#[derive(Debug, Clone, Default)]
pub struct Heartbeats {
    loops: Arc<Mutex<BTreeMap<String, Beat>>>,
}

#[derive(Debug, Clone, Copy)]
struct Beat {
    last: Instant,
    allowed_silence: Duration,
}

impl Heartbeats {
    /// Starts watching the loop `name`, as if it beat now; it may stay silent for
    /// `allowed_silence` between beats. Watching ends when the returned heartbeat is dropped.
    pub fn watch(&self, name: impl Into<String>, allowed_silence: Duration) -> Heartbeat {
        let name = name.into();
        self.lock().insert(name.clone(), Beat { last: Instant::now(), allowed_silence });
        Heartbeat { loops: self.clone(), name }
    }

    /// The watched loops silent for longer than they may be, with how long each has been.
    pub fn silent(&self) -> Vec<(String, Duration)> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(name, beat)| (name, now.saturating_duration_since(beat.last), beat.allowed_silence))
            .filter(|(_, silent, allowed)| silent > allowed)
            .map(|(name, silent, _)| (name.clone(), silent))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Beat>> {
        // A holder that panicked left a map of instants, which is still consistent.
        self.loops.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One watched loop's heartbeat: [`Heartbeat::beat`] once a round.
#[derive(Debug)]
pub struct Heartbeat {
    loops: Heartbeats,
    name: String,
}

impl Heartbeat {
    pub fn beat(&self) {
        if let Some(beat) = self.loops.lock().get_mut(&self.name) {
            beat.last = Instant::now();
        }
    }
}

impl Drop for Heartbeat {
    /// A loop that ends (no fan to drive, a clean shutdown) is no longer waited for.
    fn drop(&mut self) {
        self.loops.lock().remove(&self.name);
    }
}

/// How often the heartbeats are checked (and systemd pinged): a silent loop is acted on within
/// this of its allowance running out.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What the watchdog tells the service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogNote {
    /// Every watched loop turns (`WATCHDOG=1`).
    Alive,
    /// A loop fell silent: act now (`WATCHDOG=trigger`).
    Stalled,
}

/// Checks the heartbeats every `interval` until `cancel`: tells `notify` [`WatchdogNote::Alive`]
/// while every watched loop has beaten recently. When one falls silent it tells it
/// [`WatchdogNote::Stalled`] and says which loop in the status model, once, and sends nothing
/// more while the loop stays silent; should the loop beat again first, the pings resume.
pub async fn ping_while_alive(
    heartbeats: Heartbeats,
    interval: Duration,
    mut notify: impl FnMut(WatchdogNote),
    status: StatusModel,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    let mut said_silent = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let silent = heartbeats.silent();
        if silent.is_empty() {
            notify(WatchdogNote::Alive);
            said_silent = false;
        } else if !said_silent {
            notify(WatchdogNote::Stalled);
            let named: Vec<String> = silent
                .iter()
                .map(|(name, for_)| format!("{name} (silent for {} s)", for_.as_secs()))
                .collect();
            status.event(
                "watchdog",
                Level::Error,
                format!("{} stopped; asking systemd's watchdog to restart the supervisor", named.join(", ")),
            );
            said_silent = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_is_silent_only_past_its_allowance_and_forgotten_when_it_ends() {
        let heartbeats = Heartbeats::default();
        let fan = heartbeats.watch("fan loop", Duration::from_millis(50));
        let other = heartbeats.watch("other", Duration::from_secs(60));
        assert!(heartbeats.silent().is_empty());
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(heartbeats.silent().iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["fan loop"]);
        fan.beat();
        assert!(heartbeats.silent().is_empty());
        std::thread::sleep(Duration::from_millis(80));
        drop(fan);
        assert!(heartbeats.silent().is_empty(), "an ended loop is not waited for");
        drop(other);
    }

    #[tokio::test]
    async fn pings_stop_while_a_loop_is_silent_and_say_which_once() {
        let (heartbeats, status, cancel) =
            (Heartbeats::default(), StatusModel::new(), CancellationToken::new());
        let fan = heartbeats.watch("fan loop of 0000:03:00.0", Duration::from_millis(300));
        let (pings, stalls) = (Arc::new(Mutex::new(0u32)), Arc::new(Mutex::new(0u32)));
        let (ping_count, stall_count) = (pings.clone(), stalls.clone());
        let ping = move |note| match note {
            WatchdogNote::Alive => *ping_count.lock().unwrap() += 1,
            WatchdogNote::Stalled => *stall_count.lock().unwrap() += 1,
        };
        let watchdog = tokio::spawn(ping_while_alive(
            heartbeats.clone(),
            Duration::from_millis(10),
            ping,
            status.clone(),
            cancel.clone(),
        ));
        let pinged = || *pings.lock().unwrap();
        for _ in 0..10 {
            fan.beat();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(pinged() >= 5, "{} pings while the loop beats", pinged());
        tokio::time::sleep(Duration::from_millis(400)).await;
        let before = pinged();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(pinged(), before, "no pings while the loop is silent");
        assert_eq!(*stalls.lock().unwrap(), 1, "one trigger for a silent loop");
        let said: Vec<String> = status
            .snapshot()
            .events
            .iter()
            .filter(|e| e.source == "watchdog")
            .map(|e| e.message.clone())
            .collect();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("fan loop of 0000:03:00.0 (silent for "), "{said:?}");
        fan.beat();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(pinged() > before, "pings resume when the loop beats again");
        cancel.cancel();
        watchdog.await.unwrap();
    }
}
