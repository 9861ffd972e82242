//! The typed load signal: what the engine's queue shows at one instant. Runtime uses it for
//! status, thermal uses it to forecast power before the heat arrives.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One engine slot (a stream being prefilled or decoded).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotLoad {
    pub id: u32,
    pub is_processing: bool,
    /// Prompt tokens of the request in this slot.
    pub prompt_tokens: u64,
    /// Prompt tokens already processed (prefill progress).
    pub prompt_processed: u64,
    pub decoded_tokens: u64,
    /// Tokens left to generate; `None` when the request has no limit.
    pub remaining_tokens: Option<u64>,
}

/// What the engine's queue shows right now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSignal {
    /// Milliseconds since the Unix epoch when this was read.
    pub at_unix_ms: u64,
    pub requests_processing: u32,
    /// Requests queued behind busy slots (their prompts are not in `slots` yet).
    pub requests_deferred: u32,
    pub slots: Vec<SlotLoad>,
    /// Generation rate over the last interval, if the engine reports it.
    pub tokens_per_s: Option<f64>,
    /// File name of the model the engine serves (`/props`), where known: what the power and
    /// rates seen with this signal belong to.
    #[serde(default)]
    pub model: Option<String>,
    /// Where the figures come from: the engine's queue, or only its connections.
    #[serde(default)]
    pub source: LoadSource,
}

/// Where a [`LoadSignal`] comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadSource {
    /// The engine's `/metrics` and `/slots`: requests, slots, prompt and output tokens.
    #[default]
    Queue,
    /// An engine that publishes no queue: `requests_processing` counts the connections serving a
    /// request, and nothing else is known (no slots, no tokens).
    Connections,
}

impl LoadSignal {
    /// What is known of an engine that publishes no queue: `requests` being served now.
    pub fn from_connections(requests: u32) -> Self {
        Self {
            at_unix_ms: crate::client::unix_ms(),
            requests_processing: requests,
            source: LoadSource::Connections,
            ..Self::default()
        }
    }

    /// Whether this shows the engine's queue (what the fan forecast reads), not just connections.
    pub fn shows_queue(&self) -> bool {
        self.source == LoadSource::Queue
    }

    /// Prompt tokens not yet prefilled in the active slots.
    pub fn waiting_prompt_tokens(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.is_processing)
            .map(|s| s.prompt_tokens.saturating_sub(s.prompt_processed))
            .sum()
    }

    /// Slots that are decoding (prompt done, generating).
    pub fn active_streams(&self) -> u32 {
        self.slots.iter().filter(|s| s.is_processing && s.prompt_processed >= s.prompt_tokens).count() as u32
    }

    /// Tokens the active streams still have to generate (unlimited streams count as unknown: 0).
    pub fn remaining_tokens(&self) -> u64 {
        self.slots.iter().filter(|s| s.is_processing).filter_map(|s| s.remaining_tokens).sum()
    }

    pub fn is_idle(&self) -> bool {
        self.requests_processing == 0
            && self.requests_deferred == 0
            && !self.slots.iter().any(|s| s.is_processing)
    }
}

/// Turns a monotonic tally of generated tokens into tokens per second between observations.
///
/// The tally is the engine's finished-request counter plus the tokens the active slots have decoded
/// so far, so the rate moves while long streams run, not only when they end.
#[derive(Debug, Default)]
pub struct TokenRate {
    last: Option<(Instant, f64)>,
}

impl TokenRate {
    /// Records `tally` at `now`; returns the rate since the previous observation. The first
    /// observation, one at the same instant, and one after a tally drop (engine restarted, or a
    /// request moving from slot to counter between reads) give `None` and start a new baseline.
    pub fn observe(&mut self, now: Instant, tally: f64) -> Option<f64> {
        let previous = self.last.replace((now, tally));
        let (then, before) = previous?;
        let seconds = now.checked_duration_since(then)?.as_secs_f64();
        if seconds <= 0.0 || tally < before {
            return None;
        }
        Some((tally - before) / seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn slot(id: u32, processing: bool, prompt: u64, processed: u64, remaining: Option<u64>) -> SlotLoad {
        SlotLoad {
            id,
            is_processing: processing,
            prompt_tokens: prompt,
            prompt_processed: processed,
            decoded_tokens: 0,
            remaining_tokens: remaining,
        }
    }

    #[test]
    fn rate_needs_two_observations_and_restarts_after_a_drop() {
        let t0 = Instant::now();
        let mut rate = TokenRate::default();
        assert_eq!(rate.observe(t0, 100.0), None);
        assert_eq!(rate.observe(t0 + Duration::from_secs(2), 180.0), Some(40.0));
        assert_eq!(rate.observe(t0 + Duration::from_secs(3), 10.0), None, "counter reset");
        assert_eq!(rate.observe(t0 + Duration::from_secs(4), 30.0), Some(20.0));
        assert_eq!(rate.observe(t0 + Duration::from_secs(4), 40.0), None, "no time passed");
    }

    #[test]
    fn queue_figures_count_only_processing_slots() {
        let signal = LoadSignal {
            requests_processing: 2,
            slots: vec![
                slot(0, true, 500, 200, Some(100)),
                slot(1, true, 50, 50, Some(30)),
                slot(2, false, 900, 0, Some(7)),
                slot(3, true, 10, 10, None),
            ],
            ..Default::default()
        };
        assert_eq!(signal.waiting_prompt_tokens(), 300);
        assert_eq!(signal.active_streams(), 2);
        assert_eq!(signal.remaining_tokens(), 130);
        assert!(!signal.is_idle());
        assert!(LoadSignal { slots: vec![slot(0, false, 5, 5, None)], ..Default::default() }.is_idle());
    }
}
