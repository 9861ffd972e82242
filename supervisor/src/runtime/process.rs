//! Engines as child processes (inside the image, for a plain `docker run`). Each engine gets its
//! own process group so stop signals reach all of it, dies with the supervisor (parent-death
//! signal), is killed if its handle is dropped, and is always reaped.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::engine::{EngineInstance, EngineRuntime};
use super::progress::ProgressSink;
use super::{loglines, Exit, RuntimeError};
use crate::plan::Choice;

#[derive(Debug, Default, Clone)]
pub struct ProcessRuntime;

impl ProcessRuntime {
    pub fn new() -> Self {
        Self
    }
}

pub struct ProcessInstance {
    engine: String,
    id: String,
    pgid: i32,
    child: Child,
    exit: Option<Exit>,
    progress: tokio::sync::watch::Receiver<Option<u8>>,
}

impl EngineRuntime for ProcessRuntime {
    type Instance = ProcessInstance;

    fn kind(&self) -> &'static str {
        "process"
    }

    async fn available(&self) {}

    /// A child never outlives its supervisor (parent-death signal), so there is nothing to adopt.
    async fn adopt(&self, _name: &str, _choice: &Choice) -> Result<Option<ProcessInstance>, RuntimeError> {
        Ok(None)
    }

    async fn start(&self, name: &str, choice: &Choice) -> Result<ProcessInstance, RuntimeError> {
        let launch = &choice.launch;
        let mut command = Command::new(&launch.program);
        command
            .args(&launch.args)
            .envs(&launch.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                // Dies with the supervisor even when it is SIGKILLed (no orphan holding the port).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawn_error = |source| RuntimeError::Spawn {
            engine: name.to_string(),
            program: launch.program.clone(),
            source,
        };
        let mut child = crate::exec::spawn(&mut command).await.map_err(spawn_error)?;
        let pid =
            child.id().ok_or_else(|| spawn_error(std::io::Error::other("exited before its pid was read")))?;
        let (progress_tx, progress) = tokio::sync::watch::channel(None);
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(loglines::forward(name.to_string(), "stdout", stdout, None));
        }
        if let Some(stderr) = child.stderr.take() {
            let sink = Some(ProgressSink::new(progress_tx));
            tokio::spawn(loglines::forward(name.to_string(), "stderr", stderr, sink));
        }
        Ok(ProcessInstance {
            engine: name.to_string(),
            id: pid.to_string(),
            pgid: pid as i32,
            child,
            exit: None,
            progress,
        })
    }

    /// An ended child was reaped when its exit was read: nothing is left of it.
    async fn clean_up(&self, _name: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
}

impl ProcessInstance {
    fn signal_group(&self, signal: Signal) -> Result<(), RuntimeError> {
        match killpg(Pid::from_raw(self.pgid), signal) {
            Ok(()) | Err(nix::Error::ESRCH) => Ok(()),
            Err(source) => Err(RuntimeError::Signal { engine: self.engine.clone(), pgid: self.pgid, source }),
        }
    }

    async fn wait(&mut self) -> Result<Exit, RuntimeError> {
        if let Some(exit) = &self.exit {
            return Ok(exit.clone());
        }
        let status = self
            .child
            .wait()
            .await
            .map_err(|source| RuntimeError::Wait { engine: self.engine.clone(), source })?;
        let exit = Exit::from_status(status);
        self.exit = Some(exit.clone());
        Ok(exit)
    }
}

impl EngineInstance for ProcessInstance {
    fn id(&self) -> &str {
        &self.id
    }

    async fn exited(&mut self) -> Exit {
        // Child::wait is cancel-safe; an error here means the child cannot be waited for at all.
        self.wait().await.unwrap_or_else(|e| Exit::Gone(e.to_string()))
    }

    fn load_progress(&self) -> tokio::sync::watch::Receiver<Option<u8>> {
        self.progress.clone()
    }

    async fn stop(mut self, grace: Duration) -> Result<Exit, RuntimeError> {
        if let Some(exit) = &self.exit {
            return Ok(exit.clone());
        }
        // A SIGSTOPped engine never acts on SIGTERM; SIGCONT lets it.
        self.signal_group(Signal::SIGTERM)?;
        self.signal_group(Signal::SIGCONT)?;
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(exit) => exit,
            Err(_) => {
                tracing::warn!(engine = %self.engine, "did not stop within {grace:?}; killing");
                self.signal_group(Signal::SIGKILL)?;
                self.wait().await
            }
        }
    }
}
