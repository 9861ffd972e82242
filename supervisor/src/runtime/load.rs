//! The load publisher: per engine, a watch channel with what its queue shows, sampled at 1 Hz
//! through the engine client (`None` while the engine does not answer). An engine that answers
//! but publishes no queue (dflash_server) shows the requests in flight on its connections
//! ([`super::in_flight`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use lucebox_engine::{ClientError, EngineClient, LoadSignal};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::probe;
use crate::plan::Plan;

pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
const SAMPLE_TIMEOUT: Duration = Duration::from_millis(800);

/// One receiver per plan group, keyed by engine name. Publishers stop when `cancel` fires.
pub fn load_signals(
    plan: &Plan,
    cancel: &CancellationToken,
) -> BTreeMap<String, watch::Receiver<Option<LoadSignal>>> {
    plan.groups
        .iter()
        .filter_map(|group| {
            let launch = &group.choice.launch;
            let addr = probe::engine_addr(&launch.host, launch.port).ok()?;
            Some((group.name.clone(), load_signal(addr, cancel.child_token())))
        })
        .collect()
}

/// Samples the engine at `addr` once a second until `cancel` fires.
pub fn load_signal(addr: SocketAddr, cancel: CancellationToken) -> watch::Receiver<Option<LoadSignal>> {
    let (tx, rx) = watch::channel(None);
    // One client per engine: it keeps the counters that turn into tokens per second.
    let client = EngineClient::with_timeout(addr, SAMPLE_TIMEOUT);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tx.closed() => return,
                _ = tick.tick() => {}
            }
            let signal = match client.load().await {
                Ok(signal) => Some(signal),
                Err(ClientError::NoLoadSurface { addr }) => connections_in_flight(addr).await,
                Err(_) => None,
            };
            tx.send_if_modified(|current| {
                let changed = *current != signal;
                *current = signal;
                changed
            });
        }
    });
    rx
}

/// The requests in flight at an engine with no queue to read, from the kernel's view of its
/// connections (a netlink dump, off the async workers); none where the kernel does not answer.
async fn connections_in_flight(engine: SocketAddr) -> Option<LoadSignal> {
    let requests =
        tokio::task::spawn_blocking(move || super::in_flight::requests_in_flight(engine)).await.ok()?.ok()?;
    Some(LoadSignal::from_connections(requests))
}
