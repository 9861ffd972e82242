//! A container's engine seen dead the moment its process ends: a pidfd on the host pid Docker
//! reports becomes readable at the exit itself, while dockerd's `die` event comes 35–60 ms later
//! (containerd-shim → containerd → dockerd, each cleaning up first). The event still brings the
//! exit code; this only moves the restart forward.
//!
//! Docker's pid is a host pid. Where the supervisor does not share the host's pid namespace the
//! same number names another process (or none), so the watch is only armed after
//! `/proc/<pid>/cgroup` shows the container's id; otherwise the caller relies on events alone.

use std::os::fd::OwnedFd;

use bollard::Docker;
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

#[derive(Debug, thiserror::Error)]
pub enum Unwatchable {
    #[error("inspect: {0}")]
    Inspect(#[from] bollard::errors::Error),
    #[error("not running")]
    NotRunning,
    #[error("pid {0} is not this container's process here (another pid namespace?)")]
    OtherProcess(i32),
    #[error("pidfd: {0}")]
    Pidfd(#[from] std::io::Error),
}

/// Resolves when the main process of running container `id` has ended.
pub async fn ended(docker: &Docker, id: &str) -> Result<(), Unwatchable> {
    let pidfd = open(docker, id).await?;
    // A pidfd polls readable once the process has exited (Linux ≥ 5.3).
    // SAFETY: the OwnedFd keeps this one open descriptor for the AsyncFd's whole life.
    let watched = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(std::io::Error::from)?;
    let _ready = watched.readable().await?;
    Ok(())
}

/// A pidfd on the container's process, opened before the check that it is the container's:
/// a pid reused after the open cannot pass the check, and one reused before it fails it.
async fn open(docker: &Docker, id: &str) -> Result<OwnedFd, Unwatchable> {
    let state = docker.inspect_container(id, None).await?.state.unwrap_or_default();
    let pid = (state.running == Some(true))
        .then_some(state.pid)
        .flatten()
        .and_then(|p| i32::try_from(p).ok())
        .and_then(Pid::from_raw)
        .ok_or(Unwatchable::NotRunning)?;
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).map_err(std::io::Error::from)?;
    let pid = pid.as_raw_nonzero().get();
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    if !in_container_cgroup(&cgroup, id) {
        return Err(Unwatchable::OtherProcess(pid));
    }
    Ok(pidfd)
}

/// Whether a `/proc/<pid>/cgroup` text places the process in container `id`'s cgroup (cgroupfs
/// driver: `/docker/<id>`; systemd driver: `docker-<id>.scope`).
fn in_container_cgroup(cgroup: &str, id: &str) -> bool {
    id.len() >= 12 && cgroup.lines().any(|line| line.contains(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1c2a9be0d3e1f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9";

    #[test]
    fn container_cgroups_of_both_docker_drivers_are_recognised() {
        assert!(in_container_cgroup(&format!("0::/docker/{ID}\n"), ID));
        assert!(in_container_cgroup(&format!("0::/system.slice/docker-{ID}.scope\n"), ID));
        assert!(in_container_cgroup(&format!("12:memory:/docker/{ID}\n0::/\n"), ID));
    }

    #[test]
    fn other_processes_are_not_taken_for_the_container() {
        assert!(!in_container_cgroup("0::/user.slice/user-0.slice/session-1.scope\n", ID));
        assert!(!in_container_cgroup("", ID));
        // A short id would match too much.
        assert!(!in_container_cgroup("0::/docker/4f\n", "4f"));
    }
}
