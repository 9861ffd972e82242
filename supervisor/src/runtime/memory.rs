//! Which choice of a group the supervisor runs, kept across supervisor restarts: a choice that
//! crash-looped is not tried first again after a restart (or a power cut), which would repeat
//! the whole crash loop, out-of-memory kills included, before serving anything.
//!
//! One file per group, `<state_dir>/runtime/<group>.json`, written atomically on each step-down
//! and read when the group's supervisor starts. It holds the hash of the group's choices: a
//! changed plan (other profiles, a new engine, new flags) starts over at its first choice and
//! the file is removed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::plan::Choice;

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a runtime memory file: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
}

/// What is remembered about one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceMemory {
    /// [`choices_hash`] of the group this was written for.
    pub plan: String,
    /// Index into the group's choices (0: its first choice, then its fallbacks).
    pub choice_index: usize,
    /// `variant/profile` of that choice, for people reading the file.
    pub choice: String,
    /// Why the supervisor is on it.
    pub reason: String,
    pub since_unix_ms: u64,
}

/// Identifies a group's list of choices (first choice, then fallbacks, in order).
pub fn choices_hash(choices: &[Choice]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(choices).unwrap_or_default());
    hex::encode(&hasher.finalize()[..8])
}

pub fn path(state_dir: &Path, group: &str) -> PathBuf {
    state_dir.join("runtime").join(format!("{group}.json"))
}

/// The memory at `path` if it was written for the choices hashed `plan`; one of another plan is
/// removed (the plan changed: start over).
pub fn load(path: &Path, plan: &str) -> Result<Option<ChoiceMemory>, MemoryError> {
    let io = |source| MemoryError::Io { path: path.to_path_buf(), source };
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let memory: ChoiceMemory = serde_json::from_slice(&bytes)
        .map_err(|source| MemoryError::Parse { path: path.to_path_buf(), source })?;
    if memory.plan == plan {
        return Ok(Some(memory));
    }
    clear(path)?;
    Ok(None)
}

pub fn save(path: &Path, memory: &ChoiceMemory) -> Result<(), MemoryError> {
    let json = serde_json::to_vec_pretty(memory)
        .map_err(|source| MemoryError::Parse { path: path.to_path_buf(), source })?;
    crate::fsutil::write_atomic(path, &json)
        .map_err(|source| MemoryError::Io { path: path.to_path_buf(), source })
}

pub fn clear(path: &Path) -> Result<(), MemoryError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(MemoryError::Io { path: path.to_path_buf(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(profile: &str) -> Choice {
        Choice { variant: "cpu".into(), profile: profile.into(), ..Default::default() }
    }

    #[test]
    fn remembered_for_the_same_plan_and_forgotten_for_another() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "engine-0");
        let plan = choices_hash(&[choice("big"), choice("small")]);
        assert_eq!(load(&file, &plan).unwrap(), None);
        let memory = ChoiceMemory {
            plan: plan.clone(),
            choice_index: 1,
            choice: "cpu/small".into(),
            reason: "crash loop on cpu/big".into(),
            since_unix_ms: 1,
        };
        save(&file, &memory).unwrap();
        assert_eq!(load(&file, &plan).unwrap(), Some(memory));
        let changed = choices_hash(&[choice("big"), choice("smaller")]);
        assert_ne!(changed, plan);
        assert_eq!(load(&file, &changed).unwrap(), None);
        assert!(!file.exists(), "a changed plan clears the memory");
    }

    #[test]
    fn a_broken_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "engine-0");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"{").unwrap();
        let err = load(&file, "x").unwrap_err().to_string();
        assert!(err.contains("engine-0.json"), "{err}");
    }
}
