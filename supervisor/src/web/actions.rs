//! The state-changing operations the web API exposes. The supervisor implements [`Actions`];
//! [`NoActions`] answers every call with "not implemented" until it does.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// A boxed future, so the trait stays object-safe without `async-trait`.
pub type ActionFuture<'a> = Pin<Box<dyn Future<Output = Result<Accepted, ActionError>> + Send + 'a>>;

/// What an accepted action reports back to the caller.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Accepted {
    pub message: String,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ActionError {
    /// Another operation holds the lock (an OTA apply, a restart in progress): HTTP 423.
    #[error("locked: {0}")]
    Locked(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The request is sound but something that outranks the API says otherwise: HTTP 409.
    #[error("conflict: {0}")]
    Conflict(String),
    /// This supervisor cannot do it (yet, or in this mode): HTTP 501.
    #[error("not implemented: {0}")]
    NotImplemented(String),
    #[error("failed: {0}")]
    Failed(String),
}

/// Pin a device (or `default`) to a profile and optionally an engine variant.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PinRequest {
    pub device: String,
    pub profile: String,
    #[serde(default)]
    pub variant: Option<String>,
}

/// Body of `POST /api/v1/ota/apply` (optional: an empty body means `{"force": false}`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OtaApplyRequest {
    /// Apply even while engines serve requests (otherwise that answers 423).
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FanMode {
    /// The learned model drives the fans.
    Predictive,
    /// Hand the fans back to the card's firmware curve.
    FirmwareAuto,
    FullSpeed,
}

/// State-changing operations. Each returns once the operation is accepted (it may finish later;
/// progress shows in the status model).
pub trait Actions: Send + Sync {
    fn restart_engine(&self, engine: String) -> ActionFuture<'_>;
    fn switch_profile(&self, pin: PinRequest) -> ActionFuture<'_>;
    fn ota_apply(&self, force: bool) -> ActionFuture<'_>;
    fn ota_rollback(&self) -> ActionFuture<'_>;
    fn set_fan_mode(&self, device: String, mode: FanMode) -> ActionFuture<'_>;
}

/// Answers every action with [`ActionError::NotImplemented`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoActions;

fn not_implemented(what: &str) -> ActionFuture<'static> {
    let message = format!("{what} is not available in this supervisor");
    Box::pin(async move { Err(ActionError::NotImplemented(message)) })
}

impl Actions for NoActions {
    fn restart_engine(&self, _engine: String) -> ActionFuture<'_> {
        not_implemented("restarting an engine")
    }
    fn switch_profile(&self, _pin: PinRequest) -> ActionFuture<'_> {
        not_implemented("switching the profile")
    }
    fn ota_apply(&self, _force: bool) -> ActionFuture<'_> {
        not_implemented("applying an update")
    }
    fn ota_rollback(&self) -> ActionFuture<'_> {
        not_implemented("rolling back an update")
    }
    fn set_fan_mode(&self, _device: String, _mode: FanMode) -> ActionFuture<'_> {
        not_implemented("setting the fan mode")
    }
}
