//! The CPU image (`ci/build-cpu-image.sh`, tag `lucebox/lucebox-cpu:test`) under the real dockerd,
//! always with `--network host` and only on 127.0.0.1.
//!
//! - its layout, labels and provenance (runs now);
//! - end to end: `docker run` with no flags serves a chat completion on 8080 and the status page
//!   on 8090, survives a kill -9 of the engine inside, and stops cleanly; prints the cold start to
//!   first token (needs `lucebox run`);
//! - a mounted config file pins the profile, and an env var beats the file;
//! - a host tree that shows an NVIDIA and an AMD GPU the container cannot use: the message names
//!   `--gpus all` and `--device /dev/kfd --device /dev/dri` (needs detection's container checks).
//!
//! Needs dockerd (`ci/docker.sh`); builds the image with `ci/build-cpu-image.sh` when it is missing.
//! The end-to-end test mounts the tiny model from `ci/make-tiny-model.sh` (`LUCEBOX_TINY_MODEL`
//! overrides its path).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const IMAGE: &str = "lucebox/lucebox-cpu:test";
const ENGINE_PORT: u16 = 8080;
const STATUS_PORT: u16 = 8090;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Tests that bind the fixed ports run one at a time.
fn ports_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("docker client (ci/docker.sh installs docker.io)")
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The image exists (built once per test run if it does not).
fn image() -> &'static str {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        assert!(docker(&["info"]).status.success(), "no dockerd answers: run `bash ci/docker.sh`");
        if !docker(&["image", "inspect", IMAGE]).status.success() {
            let status = Command::new("bash")
                .arg(repo().join("ci/build-cpu-image.sh"))
                .status()
                .expect("running ci/build-cpu-image.sh");
            assert!(status.success(), "ci/build-cpu-image.sh failed");
        }
    });
    IMAGE
}

/// A container removed however the test ends.
struct Container(String);

impl Container {
    fn run(args: &[&str]) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("lucebox-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let _ = docker(&["rm", "-f", &name]);
        let mut full = vec!["run", "-d", "--network", "host", "--name", &name];
        full.extend_from_slice(args);
        docker_ok(&full);
        Container(name)
    }

    fn logs(&self) -> String {
        let out = docker(&["logs", &self.0]);
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }

    fn exec(&self, command: &str) -> String {
        docker_ok(&["exec", &self.0, "sh", "-c", command])
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

/// One HTTP/1.0 exchange on 127.0.0.1 (1.0 so the reply is never chunked); (status, body).
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let status = reply.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn wait_for<T>(
    what: &str,
    timeout: Duration,
    container: &Container,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} not within {timeout:?}; logs:\n{}", container.logs());
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn chat() -> Option<serde_json::Value> {
    let request = r#"{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":4,"temperature":0}"#;
    match http(ENGINE_PORT, "POST", "/v1/chat/completions", Some(request)) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

#[test]
fn cpu_image_has_the_release_layout_labels_and_provenance() {
    let image = image();
    let labels: serde_json::Value =
        serde_json::from_str(&docker_ok(&["image", "inspect", "-f", "{{json .Config.Labels}}", image]))
            .unwrap();
    let revision = labels["org.opencontainers.image.revision"].as_str().unwrap().to_string();
    assert_eq!(labels["dev.lucebox.engine.variants"], "cpu");
    let entrypoint =
        docker_ok(&["image", "inspect", "-f", "{{json .Config.Entrypoint}} {{json .Config.Cmd}}", image]);
    assert_eq!(entrypoint, r#"["/usr/local/bin/lucebox"] ["run"]"#);
    let health = docker_ok(&["image", "inspect", "-f", "{{json .Config.Healthcheck.Test}}", image]);
    assert!(health.contains("8090/healthz"), "{health}");

    // `lucebox version --json` inside reports what the labels say.
    let version: serde_json::Value =
        serde_json::from_str(&docker_ok(&["run", "--rm", "--network", "host", image, "version", "--json"]))
            .unwrap();
    assert_eq!(version["image"]["revision"], revision.as_str());
    assert_eq!(version["image"]["variants"], serde_json::json!(["cpu"]));
    assert_eq!(version["git_commit"], revision.as_str(), "binary and image built from one commit");
    assert_eq!(
        version["image"]["engine_commits"]["llama.cpp"],
        labels["dev.lucebox.engine.llama-cpp.commit"]
    );

    // Every library the engine needs is in the image: it starts and prints its version.
    let out = docker(&[
        "run",
        "--rm",
        "--network",
        "host",
        "--entrypoint",
        "/usr/lib/lucebox/engines/cpu/bin/llama-server",
        image,
        "--version",
    ]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("version"), "llama-server --version: {text}");
    let layout = docker_ok(&[
        "run",
        "--rm",
        "--network",
        "host",
        "--entrypoint",
        "/bin/sh",
        image,
        "-c",
        "test -f /usr/share/lucebox/variants.toml && test -d /usr/share/lucebox/profiles && echo ok",
    ]);
    assert_eq!(layout, "ok");
}

#[test]
fn cpu_image_serves_chat_and_status_recovers_the_engine_and_stops_cleanly() {
    let image = image();
    let _ports = ports_lock();
    let model = std::env::var("LUCEBOX_TINY_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/var/cache/lucebox-ci/models/lucebox-tiny.gguf"));
    assert!(model.is_file(), "{}: run `bash ci/make-tiny-model.sh`", model.display());
    // The model volume, holding the file the `tiny-cpu-test` profile names.
    let models = tempfile::tempdir().unwrap();
    std::fs::copy(&model, models.path().join("tiny-llama.gguf")).unwrap();
    let volume = format!("{}:/var/lib/lucebox/models:ro", models.path().display());

    let started = Instant::now();
    let container = Container::run(&["-v", &volume, image]);
    let first = wait_for("first chat completion", Duration::from_secs(180), &container, chat);
    let cold_start = started.elapsed();
    eprintln!(
        "FIGURE cold start to first token (docker run -> chat reply): {:.2} s",
        cold_start.as_secs_f64()
    );
    assert!(first["choices"][0]["message"].is_object(), "{first}");

    let (status, page) = http(STATUS_PORT, "GET", "/", None).expect("status page");
    assert_eq!(status, 200, "{page}");
    assert!(page.to_lowercase().contains("lucebox"), "status page: {page}");

    // Kill the engine inside; the supervisor brings it back.
    let before = container.exec("pidof llama-server");
    assert!(!before.is_empty(), "no llama-server inside");
    container.exec(&format!("kill -9 {before}"));
    wait_for("engine restart", Duration::from_secs(120), &container, || {
        let now = docker(&["exec", &container.0, "pidof", "llama-server"]);
        let pid = String::from_utf8_lossy(&now.stdout).trim().to_string();
        (!pid.is_empty() && pid != before).then_some(())
    });
    wait_for("chat after the engine restart", Duration::from_secs(120), &container, chat);

    // A clean stop: SIGTERM, the engine stopped with it, exit code 0, well inside the grace period.
    let stop_started = Instant::now();
    docker_ok(&["stop", "-t", "30", &container.0]);
    let stop_took = stop_started.elapsed();
    let exit = docker_ok(&["inspect", "-f", "{{.State.ExitCode}}", &container.0]);
    assert_eq!(exit, "0", "exit code after docker stop; logs:\n{}", container.logs());
    assert!(stop_took < Duration::from_secs(25), "stop took {stop_took:?} (killed at the timeout?)");
    eprintln!("FIGURE docker stop: {:.2} s", stop_took.as_secs_f64());
}

/// The profile the image's `lucebox plan --json` picks for the CPU, with `extra` docker run flags.
fn planned_cpu_profile(models: &Path, extra: &[&str]) -> String {
    let volume = format!("{}:/var/lib/lucebox/models:ro", models.display());
    let mut args = vec!["run", "--rm", "--network", "host", "-v", &volume];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[image(), "plan", "--json", "--no-smoke"]);
    let plan: serde_json::Value = serde_json::from_str(&docker_ok(&args)).expect("plan --json");
    plan["groups"][0]["choice"]["profile"]
        .as_str()
        .unwrap_or_else(|| panic!("no CPU engine planned: {plan}"))
        .into()
}

#[test]
fn a_mounted_config_file_and_env_vars_override_the_plan() {
    // Both CPU profiles' model files present (the tiny model under both names: plan checks that
    // the files exist, it does not load them with --no-smoke).
    let models = tempfile::tempdir().unwrap();
    let tiny = std::env::var("LUCEBOX_TINY_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/var/cache/lucebox-ci/models/lucebox-tiny.gguf"));
    for name in ["tiny-llama.gguf", "Qwen3-4B-Q4_K_M.gguf"] {
        std::fs::copy(&tiny, models.path().join(name)).unwrap();
    }
    assert_eq!(planned_cpu_profile(models.path(), &[]), "qwen3-4b-cpu", "the image's own choice");

    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("lucebox.toml");
    std::fs::write(&file, "[pin.default]\nprofile = \"tiny-cpu-test\"\n").unwrap();
    let mount = format!("{}:/etc/lucebox/lucebox.toml:ro", file.display());
    assert_eq!(planned_cpu_profile(models.path(), &["-v", &mount]), "tiny-cpu-test", "the file's pin");
    let env = ["-v", &mount, "-e", "LUCEBOX_PIN__DEFAULT__PROFILE=qwen3-4b-cpu"];
    assert_eq!(planned_cpu_profile(models.path(), &env), "qwen3-4b-cpu", "env beats the file");
}

#[test]
fn a_gpu_the_container_cannot_use_is_named_with_the_flag_that_fixes_it() {
    let image = image();
    let _ports = ports_lock();
    let tree = repo().join("tests/fixtures/hosts/container-no-gpu-access");
    assert!(tree.is_dir(), "{} missing", tree.display());
    let mount = format!("{}:/host:ro", tree.canonicalize().unwrap().display());

    let out = docker(&[
        "run",
        "--rm",
        "--network",
        "host",
        "-v",
        &mount,
        image,
        "detect",
        "--root",
        "/host",
        "--json",
    ]);
    let detect = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "detect: {}", String::from_utf8_lossy(&out.stderr));
    assert!(detect.contains("--gpus all"), "detect names no NVIDIA fix: {detect}");
    assert!(detect.contains("--device /dev/kfd --device /dev/dri"), "detect names no AMD fix: {detect}");

    // `run` says the same in its log, and falls back to CPU instead of failing.
    let container = Container::run(&["-v", &mount, "-e", "LUCEBOX_ROOT=/host", image]);
    let logs = wait_for("the GPU-access messages in the log", Duration::from_secs(60), &container, || {
        let logs = container.logs();
        (logs.contains("--gpus all") && logs.contains("--device /dev/kfd --device /dev/dri")).then_some(logs)
    });
    assert!(logs.to_lowercase().contains("cpu"), "no CPU fallback mentioned:\n{logs}");
    let running = docker_ok(&["inspect", "-f", "{{.State.Running}}", &container.0]);
    assert_eq!(running, "true", "the supervisor exited instead of falling back:\n{logs}");
}
