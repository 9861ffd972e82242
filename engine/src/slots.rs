//! Parser for the engine's `/slots`: one JSON object per parallel slot.
//!
//! Field layouts differ between llama.cpp versions, so the parser is tolerant: `next_token` is an
//! array of one object (current) or a bare object (older); activity is `is_processing` (current) or a
//! numeric `state` where 0 is idle (older); counters that are absent read as 0. A slot without an
//! `id`, or a body that is not an array of objects, is an error.
//!
//! In llama.cpp 0c1e57098bba `n_prompt_tokens` counts the tokens in the slot's KV cache (cached,
//! prefilled and generated), not the request's prompt, and the prompt's total length is not shown
//! while it is being prefilled. So the prompt size is the KV size less the generated tokens, and a
//! slot that has generated nothing yet is still prefilling. For such a slot the report keeps the
//! request's prompt text (which `/slots` carries), so the client can size it with `/tokenize`.

use serde::Deserialize;
use serde_json::Value;

use crate::load::SlotLoad;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SlotsError {
    #[error("slots: body is not a JSON array of slots")]
    NotAnArray,
    #[error("slots: entry {index}: {reason}")]
    BadSlot { index: usize, reason: String },
}

/// One slot as the engine reports it, before interpretation. Every field is optional so that a
/// version that drops or renames one still parses.
#[derive(Debug, Deserialize)]
struct RawSlot {
    id: Option<u32>,
    is_processing: Option<bool>,
    state: Option<i64>,
    n_prompt_tokens: Option<i64>,
    n_prompt_tokens_processed: Option<i64>,
    n_prompt_tokens_cache: Option<i64>,
    next_token: Option<Value>,
    id_task: Option<i64>,
    prompt: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct RawNextToken {
    n_decoded: Option<i64>,
    n_remain: Option<i64>,
}

/// One slot as parsed, with what sizing a prompt that is still being prefilled needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotReport {
    pub load: SlotLoad,
    /// The request in the slot, so its prompt is sized once, not on every poll.
    pub task_id: Option<i64>,
    /// The request's prompt text while it is being prefilled; `None` once decoding started.
    pub pending_prompt: Option<String>,
}

/// Parses a `/slots` body into per-slot load.
pub fn parse_slots(body: &[u8]) -> Result<Vec<SlotLoad>, SlotsError> {
    Ok(parse_slot_reports(body)?.into_iter().map(|r| r.load).collect())
}

/// Parses a `/slots` body, keeping the prompt text of slots that are prefilling.
pub fn parse_slot_reports(body: &[u8]) -> Result<Vec<SlotReport>, SlotsError> {
    let entries: Vec<Value> = serde_json::from_slice(body).map_err(|_| SlotsError::NotAnArray)?;
    entries.into_iter().enumerate().map(|(index, entry)| slot_from_value(index, entry)).collect()
}

fn slot_from_value(index: usize, entry: Value) -> Result<SlotReport, SlotsError> {
    let bad = |reason: String| SlotsError::BadSlot { index, reason };
    let raw: RawSlot = serde_json::from_value(entry).map_err(|e| bad(e.to_string()))?;
    let id = raw.id.ok_or_else(|| bad("no `id`".into()))?;
    let next = next_token(raw.next_token).map_err(|e| bad(format!("next_token: {e}")))?;

    let is_processing = raw.is_processing.unwrap_or(raw.state.unwrap_or(0) != 0);
    let decoded = non_negative(next.n_decoded);
    let kv_tokens = non_negative(raw.n_prompt_tokens);
    let prompt_tokens = kv_tokens.saturating_sub(decoded);
    let prompt_processed = if decoded > 0 {
        prompt_tokens
    } else {
        (non_negative(raw.n_prompt_tokens_cache) + non_negative(raw.n_prompt_tokens_processed))
            .min(prompt_tokens)
    };
    let prefilling = is_processing && decoded == 0;
    let load = SlotLoad {
        id,
        is_processing,
        prompt_tokens,
        prompt_processed,
        decoded_tokens: decoded,
        // -1 means the request has no generation limit.
        remaining_tokens: next.n_remain.and_then(|n| u64::try_from(n).ok()),
    };
    let pending_prompt = match raw.prompt {
        Some(Value::String(text)) if prefilling && !text.is_empty() => Some(text),
        _ => None,
    };
    Ok(SlotReport { load, task_id: raw.id_task, pending_prompt })
}

/// `next_token` is `[{...}]` in current llama.cpp and `{...}` in older builds.
fn next_token(value: Option<Value>) -> Result<RawNextToken, serde_json::Error> {
    match value {
        None | Some(Value::Null) => Ok(RawNextToken::default()),
        Some(Value::Array(items)) => match items.into_iter().next() {
            Some(first) => serde_json::from_value(first),
            None => Ok(RawNextToken::default()),
        },
        Some(other) => serde_json::from_value(other),
    }
}

fn non_negative(value: Option<i64>) -> u64 {
    value.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: &str = include_str!("../tests/fixtures/slots-idle.json");
    const BUSY: &str = include_str!("../tests/fixtures/slots-busy.json");

    #[test]
    fn idle_engine_has_no_processing_slot() {
        let slots = parse_slots(IDLE.as_bytes()).unwrap();
        assert!(!slots.is_empty());
        assert!(slots.iter().all(|s| !s.is_processing));
        assert_eq!(slots[0].id, 0);
    }

    #[test]
    fn busy_engine_shows_a_decoding_slot_with_remaining_tokens() {
        let slots = parse_slots(BUSY.as_bytes()).unwrap();
        let busy: Vec<_> = slots.iter().filter(|s| s.is_processing).collect();
        assert_eq!(busy.len(), 1);
        let slot = busy[0];
        assert!(slot.decoded_tokens > 0);
        assert!(slot.remaining_tokens.unwrap() > 0);
        assert!(slot.prompt_tokens > 0);
        assert_eq!(slot.prompt_processed, slot.prompt_tokens);
    }

    #[test]
    fn current_layout_is_read_field_by_field() {
        let body = br#"[{"id":3,"n_ctx":4096,"is_processing":true,"n_prompt_tokens":130,
            "n_prompt_tokens_processed":100,"n_prompt_tokens_cache":0,
            "next_token":[{"has_next_token":true,"n_remain":70,"n_decoded":30}]}]"#;
        let slots = parse_slots(body).unwrap();
        assert_eq!(
            slots,
            vec![SlotLoad {
                id: 3,
                is_processing: true,
                prompt_tokens: 100,
                prompt_processed: 100,
                decoded_tokens: 30,
                remaining_tokens: Some(70),
            }]
        );
    }

    #[test]
    fn prefilling_slot_counts_cache_and_processed_tokens() {
        let body = br#"[{"id":0,"is_processing":true,"n_prompt_tokens":300,
            "n_prompt_tokens_processed":200,"n_prompt_tokens_cache":100,
            "next_token":[{"n_remain":64,"n_decoded":0}]}]"#;
        let slot = &parse_slots(body).unwrap()[0];
        assert_eq!((slot.prompt_tokens, slot.prompt_processed, slot.decoded_tokens), (300, 300, 0));
    }

    #[test]
    fn prompt_text_is_kept_only_while_prefilling() {
        let body = br#"[{"id":0,"id_task":7,"is_processing":true,"n_prompt_tokens":64,"prompt":"<s>hello",
            "next_token":[{"n_remain":10,"n_decoded":0}]},
            {"id":1,"id_task":8,"is_processing":true,"n_prompt_tokens":90,"prompt":"<s>hi",
            "next_token":[{"n_remain":10,"n_decoded":4}]}]"#;
        let reports = parse_slot_reports(body).unwrap();
        assert_eq!((reports[0].task_id, reports[0].pending_prompt.as_deref()), (Some(7), Some("<s>hello")));
        assert_eq!((reports[1].task_id, reports[1].pending_prompt.as_deref()), (Some(8), None));
        let busy = parse_slot_reports(BUSY.as_bytes()).unwrap();
        assert!(busy.iter().all(|r| r.pending_prompt.is_none()), "the captured stream was decoding");
    }

    #[test]
    fn older_layout_with_state_and_bare_next_token() {
        let body = br#"[{"id":0,"state":1,"next_token":{"n_remain":-1,"n_decoded":5}},
                        {"id":1,"state":0}]"#;
        let slots = parse_slots(body).unwrap();
        assert!(slots[0].is_processing);
        assert_eq!(slots[0].decoded_tokens, 5);
        assert_eq!(slots[0].remaining_tokens, None, "-1 means unlimited");
        assert!(!slots[1].is_processing);
        assert_eq!(slots[1].prompt_tokens, 0);
    }

    #[test]
    fn slot_without_id_is_an_error_naming_its_index() {
        let err = parse_slots(br#"[{"id":0},{"is_processing":false}]"#).unwrap_err();
        assert_eq!(err, SlotsError::BadSlot { index: 1, reason: "no `id`".into() });
    }

    #[test]
    fn wrong_types_and_non_arrays_are_errors() {
        assert_eq!(parse_slots(br#"{"id":0}"#).unwrap_err(), SlotsError::NotAnArray);
        assert!(matches!(
            parse_slots(br#"[{"id":"zero"}]"#).unwrap_err(),
            SlotsError::BadSlot { index: 0, .. }
        ));
        assert!(matches!(
            parse_slots(br#"[{"id":0,"next_token":[{"n_decoded":"x"}]}]"#).unwrap_err(),
            SlotsError::BadSlot { index: 0, .. }
        ));
    }
}
