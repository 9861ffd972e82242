//! The one status model. Every part publishes what it knows here; the web layer only reads it.
//!
//! Writers call [`StatusModel::update`]; readers take a [`StatusModel::snapshot`] or wait for the
//! next change with [`StatusModel::subscribe`]. Events are kept in a bounded ring.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::hardware::Detection;
use crate::plan::Plan;
use crate::thermal::controller::DecisionDetail;

/// How many recent events the model keeps (oldest dropped first).
pub const EVENT_CAPACITY: usize = 256;

/// Everything the supervisor knows, as the status page and `/api/v1/status` show it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub hardware: Option<Detection>,
    pub plan: Option<Plan>,
    /// Keyed by engine name (one engine per plan group).
    pub engines: BTreeMap<String, EngineStatus>,
    /// Keyed by device id (PCI address).
    pub thermal: BTreeMap<String, ThermalStatus>,
    pub ota: OtaStatus,
    pub events: VecDeque<Event>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum EngineState {
    Starting,
    Loading { percent: Option<u8> },
    Ready,
    Unhealthy { failed_probes: u32 },
    Restarting { in_ms: u64 },
    CrashLooping { fell_back_to: Option<String> },
    Stopped,
}

#[derive(Debug, Clone, Serialize)]
pub struct EngineStatus {
    pub name: String,
    pub state: EngineState,
    pub variant: String,
    pub profile: String,
    pub port: u16,
    /// `process` or `docker`.
    pub runtime: String,
    /// Process id or container id of the running engine.
    pub instance: Option<String>,
    pub restarts: u32,
    pub last_exit: Option<String>,
    /// Why this engine runs something other than the plan's first choice, if it does.
    pub fallback_reason: Option<String>,
    pub since_unix_ms: u64,
    pub load: Option<LoadSnapshot>,
}

impl EngineStatus {
    /// An engine published before its first start: no variant, profile or port chosen yet.
    pub fn new(name: impl Into<String>, runtime: impl Into<String>, since_unix_ms: u64) -> Self {
        Self {
            name: name.into(),
            state: EngineState::Starting,
            variant: String::new(),
            profile: String::new(),
            port: 0,
            runtime: runtime.into(),
            instance: None,
            restarts: 0,
            last_exit: None,
            fallback_reason: None,
            since_unix_ms,
            load: None,
        }
    }
}

/// What the engine's queue shows right now.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LoadSnapshot {
    /// Requests being served; for an engine that publishes no queue, its connections serving one.
    pub requests_processing: u32,
    pub requests_deferred: u32,
    pub waiting_prompt_tokens: u64,
    pub active_streams: u32,
    pub remaining_tokens: u64,
    pub tokens_per_s: f64,
    /// The engine publishes no queue: only `requests_processing` is known, from its connections.
    pub from_connections: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ThermalStatus {
    pub device_id: String,
    pub junction_c: Option<f64>,
    pub power_w: Option<f64>,
    pub fan_duty_pct: Option<f64>,
    pub fan_rpm: Option<f64>,
    pub limit_c: Option<f64>,
    /// The board power limit the device reported when the loop opened: what the forecast plans
    /// a prompt's prefill at until the device has shown it.
    pub power_cap_w: Option<f64>,
    /// Highest junction temperature the model predicts over its horizon.
    pub predicted_peak_c: Option<f64>,
    /// `predictive`, `firmware-auto`, `full-speed`, ...
    pub mode: String,
    pub actuator: String,
    /// Set while the safety layer overrides the controller, with the reason.
    pub safety: Option<String>,
    /// While the predictive controller drives the fan: why it runs at this duty, in one line ...
    pub why: Option<String>,
    /// ... and the quantities its plans weighed.
    pub decision: Option<DecisionDetail>,
    /// CPU time this device's control loop has used since it started: reading the sensors, the
    /// safety layer, model, forecast and controller, and driving the fan.
    pub loop_cpu_s: f64,
    /// The same as a share of one core over the loop's life.
    pub loop_cpu_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum OtaState {
    #[default]
    Idle,
    Available {
        version: u64,
    },
    Staged {
        version: u64,
    },
    Activating {
        version: u64,
    },
    Committed {
        version: u64,
    },
    RolledBack {
        version: u64,
        reason: String,
    },
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct OtaStatus {
    pub state: OtaState,
    pub active_set: Option<String>,
    pub previous_set: Option<String>,
    pub lock: Option<String>,
    /// Download progress of model files, 0..=100, while a pull runs.
    pub progress_pct: Option<u8>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub unix_ms: u64,
    pub source: String,
    pub level: Level,
    pub message: String,
}

/// Shared handle to the status; cheap to clone.
#[derive(Clone)]
pub struct StatusModel {
    inner: Arc<RwLock<Status>>,
    changes: watch::Sender<u64>,
}

impl Default for StatusModel {
    fn default() -> Self {
        Self::new()
    }
}

impl StatusModel {
    pub fn new() -> Self {
        let (changes, _) = watch::channel(0);
        Self { inner: Arc::new(RwLock::new(Status::default())), changes }
    }

    /// Applies `change` and wakes every subscriber.
    pub fn update(&self, change: impl FnOnce(&mut Status)) {
        {
            // A panic while holding the lock must not take the status page down with it.
            let mut status = self.inner.write().unwrap_or_else(|e| e.into_inner());
            change(&mut status);
        }
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub fn snapshot(&self) -> Status {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads part of the status without cloning all of it.
    pub fn read<T>(&self, f: impl FnOnce(&Status) -> T) -> T {
        f(&self.inner.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// A receiver that sees a new version number after every update.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Records an event in the bounded ring and logs it.
    pub fn event(&self, source: &str, level: Level, message: impl Into<String>) {
        let message = message.into();
        match level {
            Level::Info => tracing::info!(source, "{message}"),
            Level::Warn => tracing::warn!(source, "{message}"),
            Level::Error => tracing::error!(source, "{message}"),
        }
        let event = Event { unix_ms: unix_ms(), source: source.to_string(), level, message };
        self.update(|s| {
            if s.events.len() == EVENT_CAPACITY {
                s.events.pop_front();
            }
            s.events.push_back(event);
        });
    }
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_bounded_and_keep_the_newest() {
        let model = StatusModel::new();
        for i in 0..EVENT_CAPACITY + 10 {
            model.event("test", Level::Info, format!("event {i}"));
        }
        let status = model.snapshot();
        assert_eq!(status.events.len(), EVENT_CAPACITY);
        assert_eq!(status.events.back().unwrap().message, format!("event {}", EVENT_CAPACITY + 9));
        assert_eq!(status.events.front().unwrap().message, "event 10");
    }

    #[test]
    fn subscribers_see_updates() {
        let model = StatusModel::new();
        let mut rx = model.subscribe();
        let before = *rx.borrow_and_update();
        model.update(|s| s.ota.lock = Some("test".into()));
        assert!(rx.has_changed().unwrap());
        assert_ne!(*rx.borrow_and_update(), before);
    }
}
