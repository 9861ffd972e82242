//! How an engine ended.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Exited with a status code (a container killed by SIGKILL reports 137).
    Code(i32),
    /// Killed by a signal (child processes).
    Signal(i32),
    /// Removed or lost from outside (container deleted, daemon lost it).
    Gone(String),
    /// Stopped by the supervisor (liveness failure, load timeout, shutdown).
    Stopped(String),
    /// The process is gone but the runtime has not said how it ended yet (a container's process
    /// is seen dead before dockerd reports its exit code).
    Ended,
}

impl Exit {
    pub fn from_status(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Gone("unknown exit status".into()),
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(137) => write!(f, "exit code 137 (killed: out of memory or SIGKILL)"),
            Exit::Code(code) => write!(f, "exit code {code}"),
            Exit::Signal(signal) => write!(f, "killed by signal {signal}"),
            Exit::Gone(why) => write!(f, "gone: {why}"),
            Exit::Stopped(why) => write!(f, "stopped: {why}"),
            Exit::Ended => write!(f, "process ended (exit code not reported yet)"),
        }
    }
}
