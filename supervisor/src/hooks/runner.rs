//! Runs one hook executable: JSON in, JSON out, bounded output, killed at the timeout.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::board::Board;
use super::event::{EventError, HookEvent, HookReply};
use crate::hardware::SysRoot;

/// Long enough for `framework_tool` to talk to the EC, short enough that a hung hook cannot stall
/// the control loop for a noticeable time.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// A reply is one small JSON object; anything longer is cut off and fails to parse.
const MAX_STDOUT_BYTES: u64 = 64 * 1024;
/// How much of stderr an error message keeps.
const MAX_STDERR_BYTES: u64 = 4 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("invalid event: {0}")]
    Event(#[from] EventError),
    #[error("encoding the event: {0}")]
    Encode(serde_json::Error),
    #[error("{path}: could not start: {source}")]
    Spawn { path: PathBuf, source: io::Error },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: no reply within {timeout:?}; killed")]
    Timeout { path: PathBuf, timeout: Duration },
    #[error("{path}: exited with {status}: {stderr}")]
    Exit { path: PathBuf, status: ExitStatus, stderr: String },
    #[error("{path}: reply is not a JSON hook reply ({source}): {stdout:?}")]
    BadReply { path: PathBuf, source: serde_json::Error, stdout: String },
    #[error("{path}: refused: {detail}")]
    Refused { path: PathBuf, detail: String },
}

/// A hook call that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    Applied(HookReply),
    /// The board folder has no executable for this event.
    NotProvided,
}

/// Runs the hooks of one board from one hooks folder.
#[derive(Debug, Clone)]
pub struct HookRunner {
    hooks_dir: PathBuf,
    board: Board,
    root: SysRoot,
    timeout: Duration,
    env: Vec<(OsString, OsString)>,
}

impl HookRunner {
    /// Hooks of `board` under `hooks_dir` (which holds one folder per board); `root` is passed to
    /// the hooks as `LUCEBOX_ROOT` so sysfs hooks act on the same tree the supervisor reads.
    pub fn new(hooks_dir: impl Into<PathBuf>, board: Board, root: SysRoot) -> Self {
        Self { hooks_dir: hooks_dir.into(), board, root, timeout: DEFAULT_TIMEOUT, env: Vec::new() }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// An extra environment variable for every hook (e.g. a `PATH` with the board's tools).
    pub fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn board(&self) -> Board {
        self.board
    }

    /// The executable that handles `event`.
    pub fn hook_path(&self, event: &HookEvent) -> PathBuf {
        self.hooks_dir.join(self.board.dir_name()).join(event.name())
    }

    /// Runs the hook for `event` and parses its reply.
    pub async fn call(&self, event: &HookEvent) -> Result<HookOutcome, HookError> {
        let path = self.hook_path(event);
        if !path.exists() {
            return Ok(HookOutcome::NotProvided);
        }
        let input = serde_json::to_vec(event).map_err(HookError::Encode)?;
        let output = self.run(&path, &input).await?;
        if !output.status.success() {
            return Err(HookError::Exit { path, status: output.status, stderr: output.stderr });
        }
        let reply: HookReply = serde_json::from_str(output.stdout.trim()).map_err(|source| {
            HookError::BadReply { path: path.clone(), source, stdout: output.stdout.clone() }
        })?;
        if !reply.ok {
            let detail = reply.detail.unwrap_or_else(|| "no detail given".to_string());
            return Err(HookError::Refused { path, detail });
        }
        Ok(HookOutcome::Applied(reply))
    }

    async fn run(&self, path: &Path, input: &[u8]) -> Result<HookOutput, HookError> {
        let mut command = Command::new(path);
        command
            .env("LUCEBOX_ROOT", root_env(&self.root))
            .env("LUCEBOX_BOARD", self.board.dir_name())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills the tools the hook started too.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = crate::exec::spawn(&mut command)
            .await
            .map_err(|source| HookError::Spawn { path: path.to_path_buf(), source })?;
        let pid = child.id();
        let io_error = |source| HookError::Io { path: path.to_path_buf(), source };

        let exchange = async {
            if let Some(mut stdin) = child.stdin.take() {
                // A hook that does not read its input closes the pipe early; that is its choice.
                match stdin.write_all(input).await {
                    Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(io_error(e)),
                    _ => {}
                }
            }
            let stdout = read_bounded(child.stdout.take(), MAX_STDOUT_BYTES);
            let stderr = read_bounded(child.stderr.take(), MAX_STDERR_BYTES);
            let (stdout, stderr) = tokio::join!(stdout, stderr);
            let status = child.wait().await.map_err(io_error)?;
            Ok(HookOutput { status, stdout: stdout.map_err(io_error)?, stderr: stderr.map_err(io_error)? })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => {
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    // The group may already be gone; nothing more to do then.
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.wait().await;
                Err(HookError::Timeout { path: path.to_path_buf(), timeout: self.timeout })
            }
        }
    }
}

struct HookOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// `LUCEBOX_ROOT` for hooks: empty on a live machine, so `"$LUCEBOX_ROOT/sys/..."` is the real path.
fn root_env(root: &SysRoot) -> OsString {
    if root.is_live() {
        OsString::new()
    } else {
        root.path("/").into_os_string()
    }
}

async fn read_bounded(pipe: Option<impl AsyncRead + Unpin>, limit: u64) -> io::Result<String> {
    let mut buf = Vec::new();
    if let Some(pipe) = pipe {
        pipe.take(limit).read_to_end(&mut buf).await?;
    }
    Ok(String::from_utf8_lossy(&buf).trim_end().to_string())
}
