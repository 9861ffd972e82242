//! Parser for the engine's `/props`: a typed subset plus the raw JSON for everything else.
//!
//! llama-server puts the context size under `default_generation_settings.n_ctx`; Lucebox's
//! `dflash_server` answers the same endpoint with its own layout, so every typed field is optional
//! and the raw object is kept for callers that need more (model card, speculative settings).

use serde::Serialize;
use serde_json::Value;

/// What the status page and the plan check read from `/props`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineProps {
    pub model_path: Option<String>,
    /// Context length per slot.
    pub n_ctx: Option<u64>,
    pub build_info: Option<String>,
    pub total_slots: Option<u32>,
    /// The whole `/props` object as the engine sent it.
    pub raw: Value,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PropsError {
    #[error("props: body is not a JSON object")]
    NotAnObject,
    #[error("props: field `{field}` has the wrong type (expected {expected})")]
    WrongType { field: &'static str, expected: &'static str },
}

impl EngineProps {
    pub fn parse(body: &[u8]) -> Result<Self, PropsError> {
        let raw: Value = serde_json::from_slice(body).map_err(|_| PropsError::NotAnObject)?;
        if !raw.is_object() {
            return Err(PropsError::NotAnObject);
        }
        let n_ctx = match raw.pointer("/default_generation_settings/n_ctx") {
            Some(v) => Some(as_u64(v, "default_generation_settings.n_ctx")?),
            None => raw.get("n_ctx").map(|v| as_u64(v, "n_ctx")).transpose()?,
        };
        let total_slots = raw
            .get("total_slots")
            .map(|v| as_u64(v, "total_slots"))
            .transpose()?
            .map(|n| {
                u32::try_from(n).map_err(|_| PropsError::WrongType { field: "total_slots", expected: "u32" })
            })
            .transpose()?;
        Ok(Self {
            model_path: optional_str(&raw, "model_path")?,
            n_ctx,
            build_info: optional_str(&raw, "build_info")?,
            total_slots,
            raw,
        })
    }
}

fn optional_str(raw: &Value, field: &'static str) -> Result<Option<String>, PropsError> {
    match raw.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(PropsError::WrongType { field, expected: "string" }),
    }
}

fn as_u64(value: &Value, field: &'static str) -> Result<u64, PropsError> {
    value.as_u64().ok_or(PropsError::WrongType { field, expected: "non-negative integer" })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROPS: &str = include_str!("../tests/fixtures/props.json");

    #[test]
    fn reads_the_typed_subset_of_real_props() {
        let props = EngineProps::parse(PROPS.as_bytes()).unwrap();
        assert!(props.model_path.as_deref().unwrap().ends_with(".gguf"));
        assert_eq!(props.n_ctx, Some(4096));
        assert!(props.build_info.as_deref().unwrap().contains("0c1e57098bba"));
        assert_eq!(props.total_slots, Some(2));
        assert!(props.raw.get("chat_template").is_some(), "raw JSON is kept");
    }

    #[test]
    fn missing_fields_are_none() {
        let props = EngineProps::parse(br#"{"build_info":"dflash 1.0"}"#).unwrap();
        assert_eq!(props.build_info.as_deref(), Some("dflash 1.0"));
        assert_eq!((props.model_path, props.n_ctx, props.total_slots), (None, None, None));
    }

    #[test]
    fn top_level_n_ctx_is_accepted() {
        assert_eq!(EngineProps::parse(br#"{"n_ctx":8192}"#).unwrap().n_ctx, Some(8192));
    }

    #[test]
    fn wrong_types_name_the_field() {
        assert_eq!(
            EngineProps::parse(br#"{"total_slots":"two"}"#).unwrap_err(),
            PropsError::WrongType { field: "total_slots", expected: "non-negative integer" }
        );
        assert_eq!(
            EngineProps::parse(br#"{"model_path":3}"#).unwrap_err(),
            PropsError::WrongType { field: "model_path", expected: "string" }
        );
        assert_eq!(EngineProps::parse(b"[1]").unwrap_err(), PropsError::NotAnObject);
    }
}
