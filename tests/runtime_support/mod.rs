//! Shared by the runtime integration tests: the real llama-server and tiny model, a plan for
//! them, and `lucebox runtime run` as a child process observed through its status file.
#![allow(dead_code)] // each test binary uses a different part

#[path = "../common/ports.rs"]
mod ports;
#[allow(unused_imports)] // each test binary uses a different part
pub use ports::{free_port, free_ports};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lucebox::plan::{Choice, GroupPlan, Launch, Plan};
use serde_json::Value;

pub const IMAGE: &str = "lucebox/engine-cpu:test";
pub const IMAGE_SERVER: &str = "/usr/local/bin/llama-server";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The CPU llama-server: `LLAMA_SERVER_BIN`, else what `ci/build-engine.sh` built (cached).
pub fn server() -> PathBuf {
    static SERVER: OnceLock<PathBuf> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            if let Ok(path) = std::env::var("LLAMA_SERVER_BIN") {
                return PathBuf::from(path);
            }
            let out = Command::new("bash").arg(repo().join("ci/build-engine.sh")).output().unwrap();
            assert!(
                out.status.success(),
                "ci/build-engine.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        })
        .clone()
}

/// The tiny GGUF model: `TINY_MODEL`, else written by `ci/make-tiny-model.py` into a directory
/// the container's unprivileged user can read.
pub fn model() -> PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            if let Ok(path) = std::env::var("TINY_MODEL") {
                return PathBuf::from(path);
            }
            let dir = std::env::temp_dir().join(format!("lucebox-runtime-tests-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let out = dir.join("tiny.gguf");
            let status =
                Command::new("python3").arg(repo().join("ci/make-tiny-model.py")).arg(&out).status().unwrap();
            assert!(status.success(), "ci/make-tiny-model.py failed (or set TINY_MODEL)");
            out
        })
        .clone()
}

/// The engine args every test uses (`-t 1`: CI has 2 cores).
pub fn engine_args(model: &Path, port: u16) -> Vec<String> {
    let model = model.display().to_string();
    ["-m", &model, "-t", "1", "--host", "127.0.0.1", "--port", &port.to_string(), "--metrics", "--slots"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

pub fn choice(program: &str, args: Vec<String>, port: u16, profile: &str) -> Choice {
    Choice {
        variant: "cpu".into(),
        profile: profile.into(),
        launch: Launch {
            engine: "llama-server".into(),
            program: program.into(),
            args,
            host: "127.0.0.1".into(),
            port,
            model_files: vec![model().display().to_string()],
            startup_allowance_s: 30,
            ..Default::default()
        },
    }
}

/// One engine serving the tiny model, for the process (`docker == false`) or Docker runtime.
pub fn tiny_plan(name: &str, port: u16, docker: bool) -> Plan {
    let program = if docker { IMAGE_SERVER.to_string() } else { server().display().to_string() };
    let group = GroupPlan {
        name: name.into(),
        devices: vec!["cpu".into()],
        choice: choice(&program, engine_args(&model(), port), port, "tiny"),
        ..Default::default()
    };
    Plan { groups: vec![group], unplanned: vec![] }
}

/// `lucebox runtime run` as a child, observed through its status file.
pub struct Supervisor {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Supervisor {
    pub fn start(plan: &Plan, runtime: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(plan, runtime, dir, IMAGE)
    }

    /// [`Supervisor::start`] with the Docker runtime's engines run from `image`.
    pub fn start_with_image(plan: &Plan, image: &str) -> Self {
        Self::start_in(plan, "docker", tempfile::tempdir().unwrap(), image)
    }

    fn start_in(plan: &Plan, runtime: &str, dir: tempfile::TempDir, image: &str) -> Self {
        std::fs::write(dir.path().join("plan.json"), serde_json::to_vec(plan).unwrap()).unwrap();
        let _ = std::fs::remove_file(dir.path().join("status.json"));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.path().join("log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_lucebox"))
            .args(["runtime", "run", "--runtime", runtime, "--plan-json"])
            .arg(dir.path().join("plan.json"))
            .arg("--status-file")
            .arg(dir.path().join("status.json"))
            .env("LUCEBOX_LOG", "info")
            // Per test: the remembered step-downs (`<state_dir>/runtime/`) survive a crash_and_restart.
            .env("LUCEBOX_STATE_DIR", dir.path().join("state"))
            .env("LUCEBOX_RUNTIME__ENGINE_IMAGE", image)
            .env_remove("LUCEBOX_CONFIG")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Self { child: Some(child), dir }
    }

    /// SIGKILLs this supervisor (no cleanup) and starts a new one on the same plan.
    pub fn crash_and_restart(mut self, runtime: &str) -> Self {
        self.signal(libc::SIGKILL);
        self.child.take().unwrap().wait().unwrap();
        let plan: Plan =
            serde_json::from_slice(&std::fs::read(self.dir.path().join("plan.json")).unwrap()).unwrap();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        Self::start_in(&plan, runtime, dir, IMAGE)
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn signal(&self, signal: i32) {
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    pub fn status(&self) -> Option<Value> {
        serde_json::from_slice(&std::fs::read(self.dir.path().join("status.json")).ok()?).ok()
    }

    pub fn engine(&self, name: &str) -> Option<Value> {
        self.status()?.get("engines")?.get(name).cloned()
    }

    /// Waits until `pred` holds for engine `name`; panics with the log on timeout.
    pub fn wait_engine(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            if let Some(engine) = self.engine(name) {
                if pred(&engine) {
                    return engine;
                }
            }
            if started.elapsed() > timeout {
                panic!(
                    "timed out after {timeout:?} waiting for {what}\nengine: {:?}\nlog tail:\n{}",
                    self.engine(name),
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn wait_ready(&self, name: &str, timeout: Duration) -> Value {
        self.wait_engine(name, timeout, "ready", |e| state(e) == "ready")
    }

    /// Waits for the supervisor to exit on its own within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let started = Instant::now();
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < timeout,
                "supervisor still running after {timeout:?}\n{}",
                tail(&self.log(), 40)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn state(engine: &Value) -> &str {
    engine["state"]["state"].as_str().unwrap_or("")
}

pub fn restarts(engine: &Value) -> u64 {
    engine["restarts"].as_u64().unwrap_or(0)
}

pub fn last_exit(engine: &Value) -> &str {
    engine["last_exit"].as_str().unwrap_or("")
}

pub fn instance(engine: &Value) -> String {
    engine["instance"].as_str().unwrap_or("").to_string()
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Host pids of live (non-zombie) llama-server processes serving `--port port`: the soak's own
/// count, so the tests and `lucebox runtime soak` agree on what an engine is.
pub use lucebox::runtime::cli::engine_pids;

/// Polls until `cond` holds (true) or `timeout` passes (false).
pub fn eventually(timeout: Duration, cond: impl Fn() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Waits (up to 30 s) until the engine on `port` answers 200 on `/health`.
pub fn wait_healthy(port: u16) {
    let healthy = || {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        let mut response = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut response).is_ok()
            && response.starts_with("HTTP/1.1 200")
    };
    assert!(eventually(Duration::from_secs(30), healthy), "engine on port {port} not healthy within 30 s");
}

/// A chat completion through the engine's OpenAI API: structure only (the model is random).
pub fn chat(port: u16) -> Value {
    let body = r#"{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let json = response.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

// --- Docker ---------------------------------------------------------------------------------

pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker CLI");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Fails loudly (never skips) when the Docker parts CI provides are missing.
pub fn require_docker() {
    let ok =
        Command::new("docker").args(["image", "inspect", IMAGE]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "dockerd or {IMAGE} missing: run ci/docker.sh then ci/build-engine-image.sh");
}

/// Container ids of engine `name` that `docker ps` lists with `flags` (`-q`: running, `-aq`: any
/// state).
fn listed_containers(name: &str, flags: &str) -> Vec<String> {
    let out = docker(&["ps", flags, "--no-trunc", "--filter", &format!("label=lucebox.engine={name}")]);
    out.lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// Container ids (any state) of engine `name`.
pub fn containers(name: &str) -> Vec<String> {
    listed_containers(name, "-aq")
}

/// Running container ids of engine `name`.
pub fn running_containers(name: &str) -> Vec<String> {
    listed_containers(name, "-q")
}

/// One engine for `name` on `port`: one process, one running container, and besides it at most
/// one stopped container (the last crashed run, kept as the next restart's target).
pub fn one_engine(name: &str, port: u16) -> bool {
    running_containers(name).len() == 1 && containers(name).len() <= 2 && engine_pids(port).len() == 1
}

/// Removes every container of engine `name` when dropped (a failed test leaves nothing).
pub struct ContainerCleanup(pub String);

impl Drop for ContainerCleanup {
    fn drop(&mut self) {
        for id in containers(&self.0) {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
}

pub fn container_pid(id: &str) -> i32 {
    docker(&["inspect", "-f", "{{.State.Pid}}", id]).parse().unwrap()
}

/// `lucebox runtime soak` of `faults` faults of `kinds` (comma-separated) on a free port; panics
/// with the tail of its output unless it passes.
pub fn soak(runtime: &str, kinds: &str, faults: u32) -> String {
    let port = free_port().to_string();
    let out = lucebox_runtime(&[
        "soak",
        "--runtime",
        runtime,
        "--kinds",
        kinds,
        "--faults",
        &faults.to_string(),
        "--port",
        &port,
    ]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("PASS"), "soak failed:\n{}", tail(&text, 40));
    text
}

/// `lucebox runtime ARGS… --server … --model …` (the test engine), run to completion.
pub fn lucebox_runtime(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lucebox"))
        .arg("runtime")
        .args(args)
        .arg("--server")
        .arg(server())
        .arg("--model")
        .arg(model())
        .env("LUCEBOX_LOG", "warn")
        .output()
        .unwrap()
}
