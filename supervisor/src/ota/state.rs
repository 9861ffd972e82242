//! The update state machine, persisted atomically in `<state_dir>/ota/state.json` and published
//! to the status model. The committed set recorded here is what a box boots, whatever the
//! `current` link says after a crash.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::status::{OtaState, StatusModel};

pub const STATE_FILE: &str = "state.json";

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("update state cannot go from {from} to {to}")]
    Transition { from: &'static str, to: &'static str },
}

/// A set by content hash and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetRef {
    pub sha256: String,
    pub version: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub state: OtaState,
    /// The set the box boots: the last one that passed its health gate.
    pub committed: Option<SetRef>,
    /// The set committed before it, kept for `ota rollback`.
    pub previous: Option<SetRef>,
    /// The set being staged or activated.
    pub candidate: Option<SetRef>,
}

pub fn name(state: &OtaState) -> &'static str {
    match state {
        OtaState::Idle => "idle",
        OtaState::Available { .. } => "available",
        OtaState::Staged { .. } => "staged",
        OtaState::Activating { .. } => "activating",
        OtaState::Committed { .. } => "committed",
        OtaState::RolledBack { .. } => "rolled-back",
    }
}

/// Whether the machine may move `from` → `to`. Settled states (idle, committed, rolled back) may
/// start a new update; an update moves forward only, and an activation always ends settled.
pub fn allowed(from: &OtaState, to: &OtaState) -> bool {
    use OtaState::*;
    let settled = |s: &OtaState| matches!(s, Idle | Committed { .. } | RolledBack { .. } | Available { .. });
    match to {
        Available { .. } => settled(from),
        Staged { .. } => settled(from) || matches!(from, Staged { .. }),
        Activating { .. } => matches!(from, Staged { .. }) || settled(from),
        Committed { .. } | RolledBack { .. } => matches!(from, Activating { .. }),
        Idle => true,
    }
}

impl Record {
    pub fn load(dir: &Path) -> Result<Self, StateError> {
        let path = dir.join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| StateError::Corrupt { path, message: e.to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(StateError::Io { path, source }),
        }
    }

    pub fn save(&self, dir: &Path) -> Result<(), StateError> {
        let path = dir.join(STATE_FILE);
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| StateError::Corrupt { path: path.clone(), message: e.to_string() })?;
        crate::fsutil::write_atomic(&path, &bytes).map_err(|source| StateError::Io { path, source })
    }

    /// Moves to `to` if the machine allows it.
    pub fn transition(&mut self, to: OtaState) -> Result<(), StateError> {
        if !allowed(&self.state, &to) {
            return Err(StateError::Transition { from: name(&self.state), to: name(&to) });
        }
        self.state = to;
        Ok(())
    }

    /// Copies this record into the status model.
    pub fn publish(&self, status: &StatusModel) {
        status.update(|s| {
            s.ota.state = self.state.clone();
            s.ota.active_set = self.committed.as_ref().map(|c| format!("{} (v{})", c.sha256, c.version));
            s.ota.previous_set = self.previous.as_ref().map(|c| format!("{} (v{})", c.sha256, c.version));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_only_and_activation_ends_settled() {
        let mut r = Record::default();
        r.transition(OtaState::Available { version: 2 }).unwrap();
        r.transition(OtaState::Staged { version: 2 }).unwrap();
        r.transition(OtaState::Activating { version: 2 }).unwrap();
        let err = r.transition(OtaState::Staged { version: 3 }).unwrap_err();
        assert_eq!(err.to_string(), "update state cannot go from activating to staged");
        r.transition(OtaState::Committed { version: 2 }).unwrap();
        assert!(r.transition(OtaState::RolledBack { version: 2, reason: "x".into() }).is_err());
    }

    #[test]
    fn persists_atomically_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Record::load(dir.path()).unwrap(), Record::default());
        let r = Record {
            state: OtaState::RolledBack { version: 3, reason: "engine unhealthy".into() },
            committed: Some(SetRef { sha256: "ab".into(), version: 2 }),
            previous: None,
            candidate: None,
        };
        r.save(dir.path()).unwrap();
        assert_eq!(Record::load(dir.path()).unwrap(), r);
        std::fs::write(dir.path().join(STATE_FILE), b"{").unwrap();
        assert!(matches!(Record::load(dir.path()), Err(StateError::Corrupt { .. })));
    }
}
