//! The health gate. After a swap the updater asks an [`Activator`] to plan from the new set and
//! restart the engines; only `Ok` (every engine healthy within its allowance) commits the set.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

/// Most bytes of a health command's stderr kept for the rollback reason.
const REASON_TAIL: usize = 2000;

pub type ActivationFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ActivationError>> + Send + 'a>>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ActivationError {
    #[error("engine {engine} not healthy (startup allowance {allowance:?}): {detail}")]
    Unhealthy { engine: String, allowance: Duration, detail: String },
    #[error("planning from the new set failed: {0}")]
    Plan(String),
    #[error("engine {engine} failed to start: {detail}")]
    Start { engine: String, detail: String },
}

/// Plans from a set and restarts the engines on it, resolving once every engine is healthy.
pub trait Activator: Send + Sync {
    /// `set_dir` is the content-addressed directory of the set (`sets/current` points at it).
    fn activate<'a>(&'a self, set_dir: &'a Path) -> ActivationFuture<'a>;

    /// Activates a set the box is moving to (an update, or a rollback by hand), as opposed to one
    /// it is being restored to: a gate may ask more of it, such as serving every device the
    /// running set serves. By default the same as [`Activator::activate`].
    fn activate_candidate<'a>(&'a self, set_dir: &'a Path) -> ActivationFuture<'a> {
        self.activate(set_dir)
    }

    /// Restarts the engines on the image's built-in profiles: after the first update of a box
    /// (no committed set to go back to) failed its gate. Gates that run nothing need not.
    fn activate_builtin(&self) -> ActivationFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}

/// Runs `program <set_dir>`; exit status 0 within `allowance` means healthy. Lets an operator
/// (or an image without the in-process runtime) gate an update with any health script.
#[derive(Debug, Clone)]
pub struct CommandActivator {
    pub program: PathBuf,
    pub allowance: Duration,
}

impl Activator for CommandActivator {
    fn activate<'a>(&'a self, set_dir: &'a Path) -> ActivationFuture<'a> {
        Box::pin(async move {
            let engine = self.program.display().to_string();
            let mut command = tokio::process::Command::new(&self.program);
            command
                .arg(set_dir)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let child = crate::exec::spawn(&mut command)
                .await
                .map_err(|e| ActivationError::Start { engine: engine.clone(), detail: e.to_string() })?;
            let output = tokio::time::timeout(self.allowance, child.wait_with_output()).await;
            let unhealthy = |detail: String| ActivationError::Unhealthy {
                engine: engine.clone(),
                allowance: self.allowance,
                detail,
            };
            match output {
                Err(_) => Err(unhealthy("timed out".into())),
                Ok(Err(e)) => Err(unhealthy(e.to_string())),
                Ok(Ok(out)) if out.status.success() => Ok(()),
                Ok(Ok(out)) => {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    let skip = stderr.chars().count().saturating_sub(REASON_TAIL);
                    let tail: String = stderr.chars().skip(skip).collect();
                    Err(unhealthy(format!("{}: {}", out.status, tail.trim())))
                }
            }
        })
    }
}
