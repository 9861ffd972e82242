//! The typed load signal: what the engine's queue shows at one instant. Runtime uses it for
//! status, thermal uses it to forecast power before the heat arrives.

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
}

impl LoadSignal {
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
