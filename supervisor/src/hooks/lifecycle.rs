//! What `lucebox run` tells the board's hooks about itself: `boot` and the configured
//! `power-limit` when it starts, `engine-crashed` when an engine ends on its own, `shutdown` when
//! it stops. The fan loops send `set-fan` and `fan-auto` themselves (`thermal/actuator/hook.rs`).

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;

use super::{FirmwareHooks, HookEvent, HookOutcome, SOURCE};
use crate::status::{EngineStatus, Level, StatusModel};

impl FirmwareHooks {
    /// `boot`, then the power limits when some are configured. Awaited before any fan loop
    /// starts, so the board is in its known state before it is sent a duty.
    pub async fn started(&self, power_limit: Option<HookEvent>) {
        let _ = self.dispatch(&HookEvent::Boot).await;
        if let Some(event) = power_limit {
            if let (HookEvent::PowerLimit { stapm_mw, fast_mw, slow_mw }, Ok(HookOutcome::Applied(_))) =
                (&event, self.dispatch(&event).await)
            {
                self.status.event(
                    SOURCE,
                    Level::Info,
                    format!(
                        "{}: power limits {} / {} / {} W (sustained / fast / slow)",
                        self.board().display_name(),
                        stapm_mw / 1000,
                        fast_mw / 1000,
                        slow_mw / 1000
                    ),
                );
            }
        }
    }

    /// `shutdown`: sent once the engines are stopped and the fan loops have handed their fans back.
    pub async fn stopping(&self) {
        let _ = self.dispatch(&HookEvent::Shutdown).await;
    }
}

/// Sends `engine-crashed` each time an engine ends without being asked to (its restart count in
/// the status model grows), until `cancel`. Crashes that come while a hook runs are sent next,
/// one event per engine: the hook's job is the board's safe state, not a count.
pub async fn report_engine_crashes(hooks: FirmwareHooks, status: StatusModel, cancel: CancellationToken) {
    let mut changes = status.subscribe();
    let mut seen = status.read(|s| restart_counts(&s.engines));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let crashed = status.read(|s| crashes_since(&mut seen, &s.engines));
        for event in crashed {
            let _ = hooks.dispatch(&event).await;
        }
    }
}

fn restart_counts(engines: &BTreeMap<String, EngineStatus>) -> BTreeMap<String, u32> {
    engines.iter().map(|(name, engine)| (name.clone(), engine.restarts)).collect()
}

/// The engines whose restart count grew since `seen`, which then holds the counts now. An engine
/// started again by a new plan begins at zero, which is not a crash.
fn crashes_since(
    seen: &mut BTreeMap<String, u32>,
    engines: &BTreeMap<String, EngineStatus>,
) -> Vec<HookEvent> {
    let crashed = engines
        .iter()
        .filter(|(name, engine)| engine.restarts > seen.get(*name).copied().unwrap_or(0))
        .map(|(name, engine)| HookEvent::EngineCrashed {
            engine: name.clone(),
            exit: engine.last_exit.clone(),
        })
        .collect();
    *seen = restart_counts(engines);
    crashed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engines(counts: &[(&str, u32)]) -> BTreeMap<String, EngineStatus> {
        counts
            .iter()
            .map(|&(name, restarts)| {
                let mut engine = EngineStatus::new(name, "process", 0);
                engine.restarts = restarts;
                engine.last_exit = (restarts > 0).then(|| format!("signal 9 (#{restarts})"));
                (name.to_string(), engine)
            })
            .collect()
    }

    #[test]
    fn a_crash_is_a_restart_count_that_grew() {
        let mut seen = restart_counts(&engines(&[("a", 0), ("b", 2)]));
        assert_eq!(crashes_since(&mut seen, &engines(&[("a", 0), ("b", 2)])), vec![], "no change");
        let crashed = crashes_since(&mut seen, &engines(&[("a", 1), ("b", 4)]));
        assert_eq!(
            crashed,
            vec![
                HookEvent::EngineCrashed { engine: "a".into(), exit: Some("signal 9 (#1)".into()) },
                HookEvent::EngineCrashed { engine: "b".into(), exit: Some("signal 9 (#4)".into()) },
            ],
            "two crashes of b while a hook ran are one event"
        );
        assert_eq!(crashes_since(&mut seen, &engines(&[("a", 1), ("b", 4)])), vec![]);
        assert_eq!(crashes_since(&mut seen, &engines(&[("a", 0)])), vec![], "a new plan starts at zero");
        let crashed = crashes_since(&mut seen, &engines(&[("a", 0), ("c", 1)]));
        assert_eq!(
            crashed,
            vec![HookEvent::EngineCrashed { engine: "c".into(), exit: Some("signal 9 (#1)".into()) }]
        );
    }
}
