//! Work that blocks a thread (hashing a download, unpacking a set, a sysfs read a wedged driver
//! may never answer) runs on tokio's blocking pool, not on an async worker: the web, the engines'
//! supervision, the watchdog's pings and every timer share those workers, and a worker held by one
//! such call can stall them all.

use std::io;

/// Runs `work` on the blocking pool and waits for it. A panic in `work` goes on in the caller; an
/// error only where the runtime is shutting down and dropped the work before it ran.
pub async fn off_the_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Ok(value),
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => Err(io::Error::new(io::ErrorKind::Interrupted, "the runtime is shutting down")),
        },
    }
}
