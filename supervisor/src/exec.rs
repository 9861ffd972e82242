//! Starting a program whose file may be busy for a moment.
//!
//! `execve` fails with ETXTBSY while any process holds the file open for writing. That happens
//! for a moment when an operator copies a new hook or engine over the old one, and in any
//! threaded process that writes an executable while another thread forks: the child holds a copy
//! of the write descriptor until its own exec closes it. Both clear within milliseconds, so a
//! spawn that meets ETXTBSY is tried again a few times before the error is reported.

use std::io;
use std::time::Duration;

use tokio::process::{Child, Command};

/// How many times a busy program is tried in all, and the pause between tries: 200 ms at most.
const BUSY_TRIES: u32 = 10;
const BUSY_PAUSE: Duration = Duration::from_millis(20);

/// [`Command::spawn`], tried again while the program's file is busy (ETXTBSY). Any other error,
/// or a file still busy after the last try, is returned as it came.
pub async fn spawn(command: &mut Command) -> io::Result<Child> {
    let mut tries = 1;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < BUSY_TRIES => {
                tries += 1;
                tokio::time::sleep(BUSY_PAUSE).await;
            }
            other => return other,
        }
    }
}
