//! Runs one hook executable: JSON in, JSON out, bounded output, killed with everything it started
//! at the timeout. Awaited from async code, or waited for on the calling thread by the synchronous
//! fan loop and the fan reset.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

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

/// Runs the hooks of one board from its folder.
#[derive(Debug, Clone)]
pub struct HookRunner {
    /// The board's folder: one executable per event.
    board_dir: PathBuf,
    root: SysRoot,
    timeout: Duration,
    env: Vec<(OsString, OsString)>,
}

impl HookRunner {
    /// Hooks of `board` under `hooks_dir` (which holds one folder per board); `root` is passed to
    /// the hooks as `LUCEBOX_ROOT` so sysfs hooks act on the same tree the supervisor reads.
    pub fn new(hooks_dir: impl Into<PathBuf>, board: Board, root: SysRoot) -> Self {
        Self::for_board_dir(hooks_dir.into().join(board.dir_name()), root)
    }

    /// Hooks in one board folder, e.g. `/usr/local/lib/lucebox/firmware-hooks/framework-desktop`;
    /// the folder's name is the hooks' `LUCEBOX_BOARD`.
    pub fn for_board_dir(board_dir: impl Into<PathBuf>, root: SysRoot) -> Self {
        Self { board_dir: board_dir.into(), root, timeout: DEFAULT_TIMEOUT, env: Vec::new() }
    }

    /// How long a hook may run before it is killed.
    pub fn timeout(&self) -> Duration {
        self.timeout
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

    /// The executable that handles `event`.
    pub fn hook_path(&self, event: &HookEvent) -> PathBuf {
        self.board_dir.join(event.name())
    }

    /// Runs the hook for `event` and parses its reply.
    pub async fn call(&self, event: &HookEvent) -> Result<HookOutcome, HookError> {
        let Some((path, input)) = self.prepare(event)? else { return Ok(HookOutcome::NotProvided) };
        self.run(&path, &input).await?.outcome(path)
    }

    /// [`Self::call`] on this thread, for callers that have no runtime to wait on: the synchronous
    /// fan loop and the fan reset (which also runs from the panic hook). The same exchange, the
    /// same timeout, the same process-group kill.
    pub fn call_blocking(&self, event: &HookEvent) -> Result<HookOutcome, HookError> {
        let Some((path, input)) = self.prepare(event)? else { return Ok(HookOutcome::NotProvided) };
        self.run_blocking(&path, &input)?.outcome(path)
    }

    /// The hook's path and its input, or `None` where the board has no hook for `event`.
    fn prepare(&self, event: &HookEvent) -> Result<Option<(PathBuf, Vec<u8>)>, HookError> {
        let path = self.hook_path(event);
        if !path.exists() {
            return Ok(None);
        }
        Ok(Some((path, serde_json::to_vec(event).map_err(HookError::Encode)?)))
    }

    fn command(&self, path: &Path) -> std::process::Command {
        let mut command = std::process::Command::new(path);
        command
            .env("LUCEBOX_ROOT", root_env(&self.root))
            .env("LUCEBOX_BOARD", self.board_dir.file_name().unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills the tools the hook started too.
            .process_group(0);
        command
    }

    async fn run(&self, path: &Path, input: &[u8]) -> Result<HookOutput, HookError> {
        let mut command = tokio::process::Command::from(self.command(path));
        command.kill_on_drop(true);
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
                kill_group(pid);
                let _ = child.wait().await;
                Err(HookError::Timeout { path: path.to_path_buf(), timeout: self.timeout })
            }
        }
    }

    fn run_blocking(&self, path: &Path, input: &[u8]) -> Result<HookOutput, HookError> {
        let mut child = crate::exec::spawn_blocking(&mut self.command(path))
            .map_err(|source| HookError::Spawn { path: path.to_path_buf(), source })?;
        let deadline = Instant::now() + self.timeout;
        let exchange = exchange_blocking(&mut child, input, deadline);
        if !matches!(exchange, Ok(Some(_))) {
            // Timed out or failed half way: nothing of the hook may outlive the call.
            kill_group(Some(child.id()));
        }
        let _ = child.wait();
        match exchange {
            Ok(Some(output)) => Ok(output),
            Ok(None) => Err(HookError::Timeout { path: path.to_path_buf(), timeout: self.timeout }),
            Err(source) => Err(HookError::Io { path: path.to_path_buf(), source }),
        }
    }
}

/// Writes the input, drains both pipes on their own threads (a hook that fills one must not
/// stall on it while the other is read) and waits for the exit, all before `deadline`; `None`
/// when the deadline came first.
fn exchange_blocking(
    child: &mut std::process::Child,
    input: &[u8],
    deadline: Instant,
) -> io::Result<Option<HookOutput>> {
    let (sender, pipes) = mpsc::channel();
    drain_on_thread(child.stdout.take(), MAX_STDOUT_BYTES, Pipe::Stdout, sender.clone());
    drain_on_thread(child.stderr.take(), MAX_STDERR_BYTES, Pipe::Stderr, sender);
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input closes the pipe early; that is its choice. The
        // input is one small object, well under a pipe's buffer, so this write does not block.
        match stdin.write_all(input) {
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(e),
            _ => {}
        }
    }
    let (mut stdout, mut stderr) = (None, None);
    while stdout.is_none() || stderr.is_none() {
        let Ok((pipe, text)) = pipes.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            return Ok(None);
        };
        match pipe {
            Pipe::Stdout => stdout = Some(text?),
            Pipe::Stderr => stderr = Some(text?),
        }
    }
    // Both pipes closed: the hook has exited, or is about to.
    loop {
        if let Some(status) = child.try_wait()? {
            let (stdout, stderr) = (stdout.unwrap_or_default(), stderr.unwrap_or_default());
            return Ok(Some(HookOutput { status, stdout, stderr }));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[derive(Debug, Clone, Copy)]
enum Pipe {
    Stdout,
    Stderr,
}

fn drain_on_thread(
    pipe: Option<impl Read + Send + 'static>,
    limit: u64,
    which: Pipe,
    sender: mpsc::Sender<(Pipe, io::Result<String>)>,
) {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let read = match pipe {
            Some(pipe) => pipe.take(limit).read_to_end(&mut buf).map(drop),
            None => Ok(()),
        };
        // The caller may have given up at its deadline; then nobody listens.
        let _ = sender.send((which, read.map(|()| String::from_utf8_lossy(&buf).trim_end().to_string())));
    });
}

/// Kills the hook's process group: the hook and every tool it started. The group may already be
/// gone; there is nothing more to do then.
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

struct HookOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl HookOutput {
    /// What the hook at `path` answered: applied, or why not.
    fn outcome(self, path: PathBuf) -> Result<HookOutcome, HookError> {
        if !self.status.success() {
            return Err(HookError::Exit { path, status: self.status, stderr: self.stderr });
        }
        let reply: HookReply = match serde_json::from_str(self.stdout.trim()) {
            Ok(reply) => reply,
            Err(source) => return Err(HookError::BadReply { path, source, stdout: self.stdout }),
        };
        if !reply.ok {
            let detail = reply.detail.unwrap_or_else(|| "no detail given".to_string());
            return Err(HookError::Refused { path, detail });
        }
        Ok(HookOutcome::Applied(reply))
    }
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
