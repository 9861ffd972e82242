//! Proof that a chosen engine build really starts on its device: a smoke start with a watchdog
//! (the engine must answer `/health` 200 in time), falling down the plan's ladder on failure.
//! Results are cached per (device, driver, image build, variant, the build's file size and time) so
//! boots stay fast and a replaced build is proven again; a failure is tried again after a day.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Candidate, Choice, Plan, Proof};
use crate::hardware::Detection;

#[derive(Debug, Clone)]
pub struct SmokeSettings {
    /// JSON cache of earlier results (in the state directory).
    pub cache_file: PathBuf,
    /// Identifies the image build; a new image proves its builds again.
    pub image_build: String,
    /// A small model to load instead of the profile's (keeps boots fast); `None` uses the profile's.
    pub smoke_model: Option<PathBuf>,
    pub watchdog: Duration,
}

/// A failed smoke start is tried again after this long. It may have been the moment's fault (GPU
/// memory still held by engines an update was replacing, a driver mid-upgrade) rather than the
/// build's; retrying costs one watchdog's wait at most, once a day.
const FAILURE_KEPT_S: u64 = 24 * 3600;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
struct Cache {
    /// key → `None` when proven, `Some(reason)` when it failed.
    results: BTreeMap<String, Option<String>>,
    /// key → when it failed (Unix seconds). A failure without one (an older cache) is tried again.
    #[serde(default)]
    failed_at: BTreeMap<String, u64>,
}

impl Cache {
    /// What is known of `key` at `now_s`: a proof kept for good, or a failure still recent.
    fn result(&self, key: &str, now_s: u64) -> Option<Option<String>> {
        match self.results.get(key)? {
            None => Some(None),
            Some(reason) => {
                let failed_at = *self.failed_at.get(key)?;
                (now_s.saturating_sub(failed_at) < FAILURE_KEPT_S).then(|| Some(reason.clone()))
            }
        }
    }

    fn record(&mut self, key: String, result: Option<String>, now_s: u64) {
        match result {
            Some(_) => self.failed_at.insert(key.clone(), now_s),
            None => self.failed_at.remove(&key),
        };
        self.results.insert(key, result);
    }
}

fn unix_now_s() -> u64 {
    crate::status::unix_ms() / 1000
}

/// Proves each group's choice, stepping down to the next fallback with another variant when the
/// smoke start fails. Updates `proof`, the choice, and the candidates' reasons.
pub fn prove(plan: &mut Plan, detection: &Detection, settings: &SmokeSettings) {
    let mut cache: Cache = std::fs::read(&settings.cache_file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut dirty = false;
    for group in &mut plan.groups {
        let device = detection.devices.iter().find(|d| group.devices.first() == Some(&d.id));
        let device_key = device
            .map(|d| {
                format!(
                    "{}|{}",
                    d.uid.as_deref().unwrap_or(&d.id),
                    d.driver.version.as_deref().unwrap_or("-")
                )
            })
            .unwrap_or_default();
        let mut ladder: Vec<Choice> =
            std::iter::once(group.choice.clone()).chain(group.fallbacks.drain(..)).collect();
        let mut proof = Proof::Failed { reason: "no candidate could be smoke-started".into() };
        while !ladder.is_empty() {
            let choice = ladder.remove(0);
            let key = format!(
                "{device_key}|{}|{}|{}",
                settings.image_build,
                choice.variant,
                build_identity(Path::new(&choice.launch.program))
            );
            let (result, cached) = match cache.result(&key, unix_now_s()) {
                Some(result) => (result, true),
                None => {
                    let result = smoke_start(&choice, settings).err();
                    cache.record(key, result.clone(), unix_now_s());
                    dirty = true;
                    (result, false)
                }
            };
            match result {
                None => {
                    group.choice = choice;
                    proof = Proof::Proven { cached };
                    break;
                }
                Some(reason) => {
                    let reason = format!("smoke start failed: {reason}");
                    mark_rejected(&mut group.candidates, &choice.variant, &reason);
                    // Every profile on this variant shares its fate on this device.
                    ladder.retain(|c| c.variant != choice.variant);
                }
            }
        }
        group.fallbacks = ladder;
        group.proof = proof;
    }
    if dirty {
        if let Ok(bytes) = serde_json::to_vec_pretty(&cache) {
            if let Err(e) = crate::fsutil::write_atomic(&settings.cache_file, &bytes) {
                tracing::warn!("smoke cache {}: {e}", settings.cache_file.display());
            }
        }
    }
}

/// The engine build's file as it is now (size and modification time): a new image, or a build
/// replaced in place, is proven again rather than judged by an old result, failures included.
fn build_identity(program: &Path) -> String {
    let Ok(meta) = std::fs::metadata(program) else { return "missing".into() };
    let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    format!("{}b@{}", meta.len(), modified.map_or(0, |d| d.as_nanos()))
}

fn mark_rejected(candidates: &mut [Candidate], variant: &str, reason: &str) {
    for c in candidates.iter_mut().filter(|c| c.variant == variant && c.accepted) {
        c.accepted = false;
        c.reason = reason.to_string();
    }
}

/// How long a smoke start may take to be healthy. With the profile's own model (no tiny one to
/// stand in) it loads all of it: the launch's own allowance, not the seconds a tiny model needs.
fn watchdog(settings: &SmokeSettings, launch: &super::Launch) -> Duration {
    match &settings.smoke_model {
        Some(_) => settings.watchdog,
        None => settings.watchdog.max(Duration::from_secs(launch.startup_allowance_s)),
    }
}

/// A smoke start picks a free port and hands it to the engine, and anything on the box may take the
/// port in between (an outgoing connection is given one from the same range). The engine then
/// cannot listen and exits, which says nothing of the build, while a failure is kept for a day and
/// steps the device down to another variant: such a start is made again on another port.
const PORT_TRIES: usize = 3;

/// How one smoke start on a port ended, short of a healthy engine.
enum StartError {
    /// The engine exited and someone else holds its port.
    PortTaken,
    Failed(String),
}

/// Starts the engine on a free loopback port and waits for `/health` 200 under the watchdog.
fn smoke_start(choice: &Choice, settings: &SmokeSettings) -> Result<(), String> {
    for tries in 1..=PORT_TRIES {
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        match smoke_start_on(port, choice, settings) {
            Ok(()) => return Ok(()),
            Err(StartError::Failed(reason)) => return Err(reason),
            Err(StartError::PortTaken) if tries < PORT_TRIES => {
                tracing::info!("smoke start of {}: port {port} was taken; another port", choice.variant);
            }
            Err(StartError::PortTaken) => {}
        }
    }
    Err(format!("the port was taken before the engine listened, {PORT_TRIES} times"))
}

fn smoke_start_on(port: u16, choice: &Choice, settings: &SmokeSettings) -> Result<(), StartError> {
    let launch = &choice.launch;
    let mut args = launch.args.clone();
    replace_after(&mut args, &["--port"], &port.to_string());
    replace_after(&mut args, &["--host"], "127.0.0.1");
    if let Some(model) = &settings.smoke_model {
        let original = launch.model_files.first().cloned().unwrap_or_default();
        for arg in args.iter_mut().filter(|a| **a == original) {
            *arg = model.display().to_string();
        }
    }
    if !Path::new(&launch.program).exists() {
        return Err(StartError::Failed(format!("{} not found", launch.program)));
    }
    let mut command = Command::new(&launch.program);
    command.args(&args).envs(&launch.env).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = crate::exec::spawn_blocking(&mut command)
        .map_err(|e| StartError::Failed(format!("{}: {e}", launch.program)))?;
    let deadline = Instant::now() + watchdog(settings, launch);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let result = loop {
        if let Ok(Some(status)) = child.try_wait() {
            // Its own listener is closed once it has exited: a port still held is someone else's.
            break match TcpListener::bind(addr) {
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(StartError::PortTaken),
                _ => Err(StartError::Failed(format!("engine exited with {status} before it was healthy"))),
            };
        }
        if health_ok(addr) {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(StartError::Failed(format!(
                "not healthy within the {} s watchdog",
                settings.watchdog.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn replace_after(args: &mut [String], flags: &[&str], value: &str) {
    for i in 0..args.len().saturating_sub(1) {
        if flags.contains(&args[i].as_str()) {
            args[i + 1] = value.to_string();
        }
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// A bare `GET /health` (the engine is local; no client library needed for one status line).
fn health_ok(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 16];
    matches!(stream.read(&mut head), Ok(n) if n >= 12 && &head[9..12] == b"200")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_kept_and_a_failure_for_a_day() {
        let mut cache = Cache::default();
        cache.record("gpu|cuda".into(), Some("out of memory".into()), 1_000);
        cache.record("gpu|vulkan".into(), None, 1_000);
        let later = 1_000 + FAILURE_KEPT_S;
        assert_eq!(cache.result("gpu|cuda", later - 1), Some(Some("out of memory".into())));
        assert_eq!(cache.result("gpu|cuda", later), None, "a day-old failure is tried again");
        assert_eq!(cache.result("gpu|vulkan", later * 10), Some(None), "a proof is kept");
        cache.record("gpu|cuda".into(), None, later);
        assert_eq!(cache.result("gpu|cuda", later * 10), Some(None), "proven at the retry");
        assert!(cache.failed_at.is_empty());
    }

    #[test]
    fn a_start_on_the_profiles_own_model_gets_the_launchs_allowance() {
        let launch = crate::plan::Launch { startup_allowance_s: 498, ..Default::default() };
        let mut settings = SmokeSettings {
            cache_file: PathBuf::new(),
            image_build: String::new(),
            smoke_model: Some(PathBuf::from("tiny.gguf")),
            watchdog: Duration::from_secs(60),
        };
        assert_eq!(watchdog(&settings, &launch), Duration::from_secs(60), "the tiny model loads at once");
        settings.smoke_model = None;
        assert_eq!(watchdog(&settings, &launch), Duration::from_secs(498), "93 GB on a cold disk");
        let small = crate::plan::Launch { startup_allowance_s: 35, ..launch };
        assert_eq!(watchdog(&settings, &small), Duration::from_secs(60), "never under the watchdog");
    }

    #[test]
    fn a_failure_in_a_cache_without_its_time_is_tried_again() {
        let older: Cache =
            serde_json::from_str(r#"{"results": {"gpu|cuda": "exited", "gpu|cpu": null}}"#).unwrap();
        assert_eq!(older.result("gpu|cuda", 0), None);
        assert_eq!(older.result("gpu|cpu", 0), Some(None));
    }
}
