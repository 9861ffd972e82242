//! The load publisher: per engine, a watch channel with what its queue shows, sampled at 1 Hz
//! from `/metrics` and `/slots` (`None` while the engine does not answer).
//!
//! Seam: sampling goes through [`sample`], written here against llama-server's endpoints with
//! the private probe. When `lucebox_engine::client::EngineClient::load()` lands, `sample`
//! becomes a call to it and this file keeps only the publisher.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use lucebox_engine::{LoadSignal, SlotLoad};
use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::probe;
use crate::plan::Plan;
use crate::status::unix_ms;

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
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tx.closed() => return,
                _ = tick.tick() => {}
            }
            let signal = sample(addr).await;
            tx.send_if_modified(|current| {
                let changed = *current != signal;
                *current = signal;
                changed
            });
        }
    });
    rx
}

/// One reading of the engine's queue; `None` if it does not answer.
pub async fn sample(addr: SocketAddr) -> Option<LoadSignal> {
    let (metrics, slots) = tokio::join!(
        probe::get(addr, "/metrics", SAMPLE_TIMEOUT),
        probe::get(addr, "/slots", SAMPLE_TIMEOUT)
    );
    let (200, metrics) = metrics.ok()? else { return None };
    let metrics = String::from_utf8_lossy(&metrics);
    let slots = match slots {
        Ok((200, body)) => parse_slots(&body),
        _ => Vec::new(),
    };
    Some(LoadSignal {
        at_unix_ms: unix_ms(),
        requests_processing: gauge(&metrics, "llamacpp:requests_processing").unwrap_or(0.0) as u32,
        requests_deferred: gauge(&metrics, "llamacpp:requests_deferred").unwrap_or(0.0) as u32,
        slots,
        tokens_per_s: None,
    })
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        rest.starts_with(' ').then(|| rest.trim().parse().ok()).flatten()
    })
}

#[derive(Deserialize)]
struct RawSlot {
    id: u32,
    #[serde(default)]
    is_processing: bool,
    #[serde(default)]
    n_prompt_tokens: u64,
    #[serde(default)]
    next_token: Vec<RawNextToken>,
}

#[derive(Deserialize)]
struct RawNextToken {
    #[serde(default)]
    n_decoded: u64,
    #[serde(default)]
    n_remain: i64,
}

fn parse_slots(body: &[u8]) -> Vec<SlotLoad> {
    let Ok(raw) = serde_json::from_slice::<Vec<RawSlot>>(body) else { return Vec::new() };
    raw.into_iter()
        .map(|slot| {
            let next = slot.next_token.first();
            let decoded = next.map_or(0, |n| n.n_decoded);
            SlotLoad {
                id: slot.id,
                is_processing: slot.is_processing,
                prompt_tokens: slot.n_prompt_tokens,
                // Decoding only starts once the prompt is in.
                prompt_processed: if decoded > 0 { slot.n_prompt_tokens } else { 0 },
                decoded_tokens: decoded,
                remaining_tokens: next.and_then(|n| u64::try_from(n.n_remain).ok()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_are_read_by_exact_name() {
        let text = "# HELP x\nllamacpp:requests_processing_total 9\nllamacpp:requests_processing 2\nllamacpp:requests_deferred 1\n";
        assert_eq!(gauge(text, "llamacpp:requests_processing"), Some(2.0));
        assert_eq!(gauge(text, "llamacpp:requests_deferred"), Some(1.0));
        assert_eq!(gauge(text, "llamacpp:absent"), None);
    }

    #[test]
    fn slots_give_progress_and_remaining() {
        let body = br#"[{"id":0,"is_processing":true,"n_prompt_tokens":40,"next_token":[{"n_decoded":5,"n_remain":11}]},
                        {"id":1,"is_processing":false,"next_token":[{"n_decoded":0,"n_remain":-1}]}]"#;
        let slots = parse_slots(body);
        assert_eq!(slots.len(), 2);
        assert_eq!(
            (slots[0].prompt_processed, slots[0].decoded_tokens, slots[0].remaining_tokens),
            (40, 5, Some(11))
        );
        assert_eq!(slots[1].remaining_tokens, None);
    }
}
