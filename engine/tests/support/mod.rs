//! Starts the real CPU `llama-server` with the tiny model on a free loopback port.
//!
//! Binary: `LUCEBOX_LLAMA_SERVER`, else the cache path `ci/build-engine.sh` builds and prints.
//! Model: `LUCEBOX_TINY_MODEL`, else written by `ci/make-tiny-model.py` into the test's temp dir.

#![allow(dead_code)]

// One port helper for every test in the repository (its module comment says why).
#[path = "../../../tests/common/ports.rs"]
mod ports;
pub use ports::free_port;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lucebox_engine::{EngineClient, Health};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

pub const REPO_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Where the engine binary is, or a message telling how to get it.
pub fn llama_server_path(from_env: Option<String>) -> Result<PathBuf, String> {
    let path = match from_env {
        Some(p) => PathBuf::from(p),
        None => default_llama_server_path()?,
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "llama-server not found at {}: run `bash ci/build-engine.sh` first (or set LUCEBOX_LLAMA_SERVER)",
            path.display()
        ))
    }
}

/// The path `ci/build-engine.sh` installs to: `$LUCEBOX_CACHE/llama-server-<sdist sha256>/llama-server`.
fn default_llama_server_path() -> Result<PathBuf, String> {
    let pins_path = Path::new(REPO_ROOT).join("engine/recipes/upstream.env");
    let pins = std::fs::read_to_string(&pins_path).map_err(|e| format!("{}: {e}", pins_path.display()))?;
    let sha = pins
        .lines()
        .find_map(|l| l.strip_prefix("LLAMA_CPP_PYTHON_SHA256="))
        .ok_or_else(|| format!("{}: no LLAMA_CPP_PYTHON_SHA256", pins_path.display()))?;
    let cache = std::env::var("LUCEBOX_CACHE").unwrap_or_else(|_| "/var/cache/lucebox-ci".into());
    Ok(Path::new(&cache).join(format!("llama-server-{}", sha.trim())).join("llama-server"))
}

/// The tiny model: the given file, or a fresh one written into `dir`.
pub fn tiny_model(dir: &Path) -> PathBuf {
    if let Ok(path) = std::env::var("LUCEBOX_TINY_MODEL") {
        return PathBuf::from(path);
    }
    let out = dir.join("tiny.gguf");
    let script = Path::new(REPO_ROOT).join("ci/make-tiny-model.py");
    let status = std::process::Command::new("python3").arg(&script).arg(&out).status().unwrap();
    assert!(
        status.success(),
        "{} failed (needs python3 with gguf==0.19.0: bash ci/make-tiny-model.sh)",
        script.display()
    );
    out
}

/// A running llama-server; killed and reaped when dropped.
pub struct LiveEngine {
    pub child: Child,
    pub client: EngineClient,
    pub model: PathBuf,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl LiveEngine {
    /// Spawns the engine (2 slots of 4096 tokens, one thread) without waiting for it.
    pub fn spawn() -> Self {
        Self::spawn_with(&[], &[])
    }

    /// As [`spawn`](Self::spawn), with extra engine arguments and environment.
    pub fn spawn_with(extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start(None, free_port(), extra, env)
    }

    /// As [`spawn`](Self::spawn), serving `model` on `port` (an engine restarted with another model).
    pub fn spawn_serving(model: &Path, port: u16) -> Self {
        Self::start(Some(model), port, &[], &[])
    }

    fn start(model: Option<&Path>, port: u16, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let server =
            llama_server_path(std::env::var("LUCEBOX_LLAMA_SERVER").ok()).unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::tempdir().unwrap();
        let model = model.map_or_else(|| tiny_model(dir.path()), Path::to_path_buf);
        let log = std::fs::File::create(dir.path().join("engine.log")).unwrap();
        let child = Command::new(server)
            .args(["-m"])
            .arg(&model)
            .args(["-t", "1", "-c", "8192", "-np", "2", "--host", "127.0.0.1", "--metrics", "--slots"])
            .args(["--port", &port.to_string()])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let client = EngineClient::new(([127, 0, 0, 1], port).into());
        Self { child, client, model, port, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("engine.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Polls `/health` until ready; panics with the engine log after `within`.
    pub async fn wait_ready(&self, within: Duration) {
        let start = Instant::now();
        loop {
            if let Ok(Health::Ready) = self.client.health().await {
                return;
            }
            assert!(start.elapsed() < within, "engine not ready within {within:?}; log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Sends one chat completion over a plain socket and returns the whole response (headers and body).
/// Streaming responses are read to the end, so this returns when generation finishes.
pub async fn chat_completion(port: u16, max_tokens: u32, stream: bool) -> String {
    chat_completion_with(port, "hello there", max_tokens, stream).await
}

/// As [`chat_completion`] with the user message `content` (plain words: no JSON escaping done).
pub async fn chat_completion_with(port: u16, content: &str, max_tokens: u32, stream: bool) -> String {
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"{content}"}}],"max_tokens":{max_tokens},"stream":{stream},"ignore_eos":true}}"#
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    socket.read_to_end(&mut response).await.unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

/// Sends a signal with kill(1): SIGSTOP/SIGCONT make the engine hang and resume.
pub fn signal(pid: u32, name: &str) {
    let status =
        std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Waits until every thread of `pid` is stopped: a group stop reaches each thread on its own, and a
/// thread already running can still answer a request right after kill(1) returns.
pub fn wait_all_threads_stopped(pid: u32) {
    let start = Instant::now();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        let all_stopped = tasks.flatten().all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // Field 3, after the parenthesised command name, is the state.
            stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
        });
        if all_stopped {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "threads of {pid} not all stopped");
        std::thread::sleep(Duration::from_millis(1));
    }
}
