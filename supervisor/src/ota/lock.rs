//! The update lock: an exclusive `flock` on `<state_dir>/ota/update.lock`, so the kernel drops it
//! when the holder dies (even by SIGKILL). The file names the holder (pid + process start time +
//! purpose) for the status page; a stale name left by a dead process is ignored.

use std::fs::{self, File};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::status::StatusModel;

pub const LOCK_FILE: &str = "update.lock";
/// How often the idle wait re-reads the engines' load.
const IDLE_POLL: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds the update lock; the web layer answers 423 Locked.
    #[error("update locked by {holder}")]
    Locked { holder: LockHolder },
    #[error("engines still serving requests after {waited:?}; retry later or force the update")]
    Busy { waited: Duration },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    /// Start time of the process in clock ticks since boot (`/proc/<pid>/stat` field 22), so a
    /// reused pid is not mistaken for the holder.
    pub start_ticks: u64,
    pub purpose: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.purpose)
    }
}

/// Held while an update runs; dropping it releases the lock.
pub struct UpdateLock {
    _lock: Flock<File>,
    holder: LockHolder,
    status: Option<StatusModel>,
}

impl UpdateLock {
    /// Takes the lock or says who holds it. `status`, when given, shows the holder while held.
    pub fn acquire(ota_dir: &Path, purpose: &str, status: Option<&StatusModel>) -> Result<Self, LockError> {
        let path = ota_dir.join(LOCK_FILE);
        let io = |source| LockError::Io { path: path.clone(), source };
        fs::create_dir_all(ota_dir).map_err(io)?;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = read_holder(&mut file).unwrap_or(LockHolder {
                    pid: 0,
                    start_ticks: 0,
                    purpose: "unknown holder".into(),
                });
                return Err(LockError::Locked { holder });
            }
            Err((_, errno)) => return Err(io(errno.into())),
        };
        let pid = std::process::id();
        let holder = LockHolder { pid, start_ticks: start_ticks(pid).unwrap_or(0), purpose: purpose.into() };
        let text = serde_json::to_vec(&holder).map_err(|e| io(std::io::Error::other(e)))?;
        lock.set_len(0).map_err(io)?;
        lock.rewind().map_err(io)?;
        lock.write_all(&text).map_err(io)?;
        lock.sync_all().map_err(io)?;
        if let Some(status) = status {
            let shown = holder.to_string();
            status.update(|s| s.ota.lock = Some(shown));
        }
        Ok(Self { _lock: lock, holder, status: status.cloned() })
    }

    pub fn holder(&self) -> &LockHolder {
        &self.holder
    }
}

impl std::fmt::Debug for UpdateLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateLock").field("holder", &self.holder).finish()
    }
}

impl Drop for UpdateLock {
    fn drop(&mut self) {
        if let Some(status) = &self.status {
            status.update(|s| s.ota.lock = None);
        }
    }
}

/// The live holder of the lock, if any (for `ota status` from another process).
pub fn current_holder(ota_dir: &Path) -> Option<LockHolder> {
    let file = File::open(ota_dir.join(LOCK_FILE)).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_free) => None,
        Err((mut file, _)) => {
            let holder = read_holder(&mut file)?;
            (start_ticks(holder.pid) == Some(holder.start_ticks)).then_some(holder)
        }
    }
}

/// Waits until no engine in `status` is serving a request, up to `limit`.
pub async fn wait_until_idle(status: &StatusModel, limit: Duration) -> Result<(), LockError> {
    let started = tokio::time::Instant::now();
    loop {
        let serving = status.read(|s| {
            s.engines
                .values()
                .filter_map(|e| e.load.as_ref())
                .any(|l| l.requests_processing > 0 || l.requests_deferred > 0)
        });
        if !serving {
            return Ok(());
        }
        if started.elapsed() >= limit {
            return Err(LockError::Busy { waited: started.elapsed() });
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
}

fn read_holder(file: &mut File) -> Option<LockHolder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(4096).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Field 22 of `/proc/<pid>/stat` (after the parenthesised command name, which may hold spaces).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{EngineState, EngineStatus, LoadSnapshot};

    #[test]
    fn second_acquire_is_locked_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let status = StatusModel::new();
        let held = UpdateLock::acquire(dir.path(), "ota apply", Some(&status)).unwrap();
        assert_eq!(held.holder().pid, std::process::id());
        assert!(status.snapshot().ota.lock.unwrap().contains("ota apply"));
        match UpdateLock::acquire(dir.path(), "other", None) {
            Err(LockError::Locked { holder }) => assert_eq!(holder.purpose, "ota apply"),
            other => panic!("expected Locked, got {other:?}"),
        }
        assert_eq!(current_holder(dir.path()).unwrap().pid, std::process::id());
        drop(held);
        assert_eq!(status.snapshot().ota.lock, None);
        assert_eq!(current_holder(dir.path()), None);
        UpdateLock::acquire(dir.path(), "again", None).unwrap();
    }

    #[tokio::test]
    async fn idle_wait_gives_up_while_serving() {
        let status = StatusModel::new();
        status.update(|s| {
            s.engines.insert(
                "e0".into(),
                EngineStatus {
                    state: EngineState::Ready,
                    load: Some(LoadSnapshot { requests_processing: 1, ..Default::default() }),
                    ..EngineStatus::new("e0", "process", 0)
                },
            );
        });
        let err = wait_until_idle(&status, Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(err, LockError::Busy { .. }));
        status.update(|s| s.engines.get_mut("e0").unwrap().load = None);
        wait_until_idle(&status, Duration::from_millis(300)).await.unwrap();
    }
}
