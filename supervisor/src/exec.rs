//! Starting a program whose file may be busy for a moment.
//!
//! `execve` fails with ETXTBSY while any process holds the file open for writing. That happens
//! for a moment when an operator copies a new hook or engine over the old one, and in any
//! threaded process that writes an executable while another thread forks: the child holds a copy
//! of the write descriptor until its own exec closes it. Both clear within milliseconds, so a
//! spawn that meets ETXTBSY is tried again a few times before the error is reported.

use std::io;
use std::time::Duration;

/// How many times a busy program is tried in all, and the pause between tries: 200 ms at most.
const BUSY_TRIES: u32 = 10;
const BUSY_PAUSE: Duration = Duration::from_millis(20);

fn busy(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ETXTBSY)
}

/// [`tokio::process::Command::spawn`], tried again while the program's file is busy (ETXTBSY).
/// Any other error, or a file still busy at the last try, is returned as it came.
pub async fn spawn(command: &mut tokio::process::Command) -> io::Result<tokio::process::Child> {
    for _ in 1..BUSY_TRIES {
        match command.spawn() {
            Err(e) if busy(&e) => tokio::time::sleep(BUSY_PAUSE).await,
            other => return other,
        }
    }
    command.spawn()
}

/// [`spawn`] for a [`std::process::Command`], for callers that block anyway.
pub fn spawn_blocking(command: &mut std::process::Command) -> io::Result<std::process::Child> {
    for _ in 1..BUSY_TRIES {
        match command.spawn() {
            Err(e) if busy(&e) => std::thread::sleep(BUSY_PAUSE),
            other => return other,
        }
    }
    command.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    /// A script that exits 0, and a descriptor holding it open for writing that is closed after
    /// 60 ms, as a copy over it or a forked child would.
    fn busy_script(dir: &Path) -> (PathBuf, std::thread::JoinHandle<()>) {
        let path = dir.join("hook");
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let writer: File = OpenOptions::new().append(true).open(&path).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(60));
            drop(writer);
        });
        (path, release)
    }

    #[test]
    fn a_busy_program_starts_once_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let (path, release) = busy_script(dir.path());
        let mut command = std::process::Command::new(&path);
        assert!(busy(&command.spawn().unwrap_err()), "held open for writing: busy at first");
        let status = spawn_blocking(&mut command).unwrap().wait().unwrap();
        release.join().unwrap();
        assert!(status.success());
    }

    #[tokio::test]
    async fn a_busy_program_starts_once_it_is_released_async() {
        let dir = tempfile::tempdir().unwrap();
        let (path, release) = busy_script(dir.path());
        let mut command = tokio::process::Command::new(&path);
        let status = spawn(&mut command).await.unwrap().wait().await.unwrap();
        release.join().unwrap();
        assert!(status.success());
    }

    #[test]
    fn other_errors_are_not_tried_again() {
        let started = std::time::Instant::now();
        let error = spawn_blocking(&mut std::process::Command::new("/nonexistent/hook")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        // Trying again would have slept (BUSY_TRIES - 1) × BUSY_PAUSE = 180 ms at least.
        assert!(started.elapsed() < BUSY_PAUSE * (BUSY_TRIES - 2), "{:?}", started.elapsed());
    }
}
