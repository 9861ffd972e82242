//! The process runtime against the real llama-server: kill -9, SIGSTOP hang, crash loop with
//! step-down, supervisor crash and SIGTERM leave nothing behind.

mod runtime_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lucebox_engine::{LoadSignal, LoadSource};
use runtime_support::*;
use tokio::sync::watch;

const READY: Duration = Duration::from_secs(60);

#[test]
fn serves_chat_and_restarts_after_kill_9() {
    let port = free_port();
    let plan = tiny_plan("p-kill9", port, false);
    let sup = Supervisor::start(&plan, "process");
    let engine = sup.wait_ready("p-kill9", READY);
    assert_eq!(engine["runtime"], "process");
    let reply = chat(port);
    assert!(reply["choices"][0]["message"]["content"].is_string(), "{reply}");

    let pid: i32 = instance(&engine).parse().unwrap();
    assert_eq!(engine_pids(port), vec![pid]);
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let engine =
        sup.wait_engine("p-kill9", READY, "ready after kill -9", |e| restarts(e) == 1 && state(e) == "ready");
    assert!(last_exit(&engine).contains("signal 9"), "{engine}");
    assert_ne!(instance(&engine), pid.to_string());
    assert_eq!(engine_pids(port).len(), 1, "exactly one engine after restart");
    chat(port);
}

#[test]
fn hung_engine_is_restarted_by_liveness_probes() {
    let port = free_port();
    let plan = tiny_plan("p-stop", port, false);
    let sup = Supervisor::start(&plan, "process");
    let engine = sup.wait_ready("p-stop", READY);
    let pid: i32 = instance(&engine).parse().unwrap();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    sup.wait_engine("p-stop", Duration::from_secs(20), "unhealthy", |e| state(e) == "unhealthy");
    let engine = sup.wait_engine("p-stop", Duration::from_secs(30), "restarted", |e| {
        restarts(e) == 1 && state(e) == "ready"
    });
    assert!(last_exit(&engine).contains("hung"), "{engine}");
    assert!(
        eventually(Duration::from_secs(5), || engine_pids(port).len() == 1),
        "stopped engine left behind"
    );
}

/// The step-down is remembered: a restarted supervisor starts at the fallback and says why.
#[test]
fn crash_loop_steps_down_to_the_fallback_and_remembers_it() {
    let port = free_port();
    let mut plan = tiny_plan("p-loop", port, false);
    let good = plan.groups[0].choice.clone();
    // A first choice that can never load: its model does not exist.
    let broken_args = engine_args(std::path::Path::new("/nonexistent/model.gguf"), port);
    plan.groups[0].choice = choice(&server().display().to_string(), broken_args, port, "broken");
    plan.groups[0].fallbacks = vec![good];
    let sup = Supervisor::start(&plan, "process");
    let engine = sup.wait_ready("p-loop", READY);
    assert_eq!(engine["profile"], "tiny", "runs the fallback: {engine}");
    assert!(restarts(&engine) >= 3, "{engine}");
    let reason = engine["fallback_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("crash loop on cpu/broken") && reason.contains("stepped down to cpu/tiny"),
        "{engine}"
    );
    let events = sup.status().unwrap()["events"].to_string();
    assert!(events.contains("stepped down"), "{events}");
    chat(port);

    let memory = sup.state_dir().join("runtime/p-loop.json");
    let remembered: serde_json::Value = serde_json::from_slice(&std::fs::read(&memory).unwrap()).unwrap();
    assert_eq!(remembered["choice_index"], 1, "{remembered}");
    assert_eq!(remembered["choice"], "cpu/tiny", "{remembered}");
    let sup = sup.crash_and_restart("process");
    let engine = sup.wait_ready("p-loop", READY);
    assert_eq!(engine["profile"], "tiny", "starts at the fallback: {engine}");
    assert_eq!(restarts(&engine), 0, "the broken choice was not retried: {engine}");
    let reason = engine["fallback_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("crash loop on cpu/broken") && reason.contains("remembered"), "{engine}");
    chat(port);
}

/// A changed plan starts over at its first choice and forgets the old step-down.
#[test]
fn a_changed_plan_forgets_the_remembered_step_down() {
    let port = free_port();
    let plan = tiny_plan("p-forget", port, false);
    let sup = Supervisor::start(&plan, "process");
    let memory = sup.state_dir().join("runtime/p-forget.json");
    std::fs::create_dir_all(memory.parent().unwrap()).unwrap();
    let stale =
        r#"{"plan":"0000000000000000","choice_index":1,"choice":"cpu/x","reason":"old","since_unix_ms":0}"#;
    std::fs::write(&memory, stale).unwrap();
    let sup = sup.crash_and_restart("process");
    let engine = sup.wait_ready("p-forget", READY);
    assert_eq!(engine["profile"], "tiny");
    assert!(engine["fallback_reason"].is_null(), "{engine}");
    assert!(!memory.exists(), "memory of another plan left behind");
}

/// Load progress comes from the engine's own stderr: what the supervisor shows matches what the
/// real llama-server prints (a dot bar reaches 100; no bar leaves it unknown).
#[test]
fn load_progress_matches_the_engine_output() {
    use lucebox::runtime::progress::DotProgress;
    use lucebox::runtime::{EngineInstance, EngineRuntime, ProcessRuntime};

    // What the engine prints, read directly.
    let port = free_port();
    let direct = std::process::Command::new(server())
        .args(engine_args(&model(), port))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_healthy(port);
    unsafe { libc::kill(direct.id() as i32, libc::SIGTERM) };
    let output = direct.wait_with_output().unwrap();
    let mut parser = DotProgress::default();
    let expected = output.stderr.chunks(1).filter_map(|b| parser.feed(b)).last();
    assert!(matches!(expected, None | Some(100)), "a finished load ends at 100: {expected:?}");

    // What the process runtime parses from the same engine.
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let seen = tokio.block_on(async {
        let port = free_port();
        let choice = choice(&server().display().to_string(), engine_args(&model(), port), port, "tiny");
        let instance = ProcessRuntime::new().start("p-progress", &choice).await.unwrap();
        tokio::task::spawn_blocking(move || wait_healthy(port)).await.unwrap();
        // The bar is printed before /health says 200; give the reader a moment to drain it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let seen = *instance.load_progress().borrow();
        instance.stop(Duration::from_secs(5)).await.unwrap();
        seen
    });
    eprintln!("llama-server load progress: direct {expected:?}, through the runtime {seen:?}");
    assert_eq!(seen, expected);
}

#[test]
fn sigterm_stops_the_engine_and_exits() {
    let port = free_port();
    let plan = tiny_plan("p-term", port, false);
    let mut sup = Supervisor::start(&plan, "process");
    sup.wait_ready("p-term", READY);
    assert_eq!(engine_pids(port).len(), 1);
    sup.signal(libc::SIGTERM);
    let status = sup.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", tail(&sup.log(), 20));
    assert!(engine_pids(port).is_empty(), "engine left after SIGTERM");
    assert_eq!(state(&sup.engine("p-term").unwrap()), "stopped");
}

#[test]
fn killed_supervisor_takes_its_engine_with_it() {
    let port = free_port();
    let plan = tiny_plan("p-crash", port, false);
    let sup = Supervisor::start(&plan, "process");
    sup.wait_ready("p-crash", READY);
    let sup = sup.crash_and_restart("process");
    // The old engine died with its parent (no orphan holding the port); the new one serves.
    let engine = sup.wait_ready("p-crash", READY);
    assert!(eventually(Duration::from_secs(5), || engine_pids(port)
        == vec![instance(&engine).parse::<i32>().unwrap()]));
    chat(port);
}

/// A supervisor killed in the middle of the run (its task aborted) takes its supervision loops
/// with it: the next one restarts faults alone, with no second engine fighting for the port.
#[test]
fn soak_across_supervisor_restarts_leaves_one_engine() {
    let report = soak("process", "supervisor-restart,kill9", 6);
    assert!(report.contains("left at end: 0 processes, 0 containers"), "{report}");
}

/// `lucebox runtime bench` runs end to end: each kill paired with a bare start beside the
/// supervised engine, every figure measured, nothing left running.
#[test]
fn bench_pairs_each_kill_with_a_bare_start() {
    let port = free_ports(2);
    let out = lucebox_runtime(&[
        "bench",
        "--runtime",
        "process",
        "--kills",
        "3",
        "--settle-s",
        "0.3",
        "--json",
        "--port",
        &port.to_string(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["kills"], 3, "{report}");
    let ms = |series: &str, stat: &str| report[series][stat].as_f64().unwrap_or(f64::NAN);
    assert!(ms("bare_start_ms", "min") > 0.0, "{report}");
    assert!(ms("death_seen_ms", "min") > 0.0, "{report}");
    // Healthy again comes after the death is seen, kill by kill.
    assert!(ms("kill_to_healthy_ms", "min") > ms("death_seen_ms", "min"), "{report}");
    let paired = report["paired_ratio_median"].as_f64().unwrap_or(f64::NAN);
    assert!(paired.is_finite() && paired > 0.0, "{report}");
    assert!(engine_pids(port).is_empty() && engine_pids(port + 1).is_empty(), "engines left");
}

/// Where the bare start's port (the engine's port + 1) is taken, the bench says so at once
/// instead of timing whatever answers there or waiting out its 60 s.
#[test]
fn bench_names_a_taken_bare_start_port() {
    let port = free_ports(2);
    let _taken = std::net::TcpListener::bind(("127.0.0.1", port + 1)).unwrap();
    let started = std::time::Instant::now();
    let out =
        lucebox_runtime(&["bench", "--runtime", "process", "--kills", "1", "--port", &port.to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let named = format!("the bare start's port {} (the engine's port + 1) is in use", port + 1);
    assert!(stderr.contains(&named), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(50), "took {:?}", started.elapsed());
    assert!(engine_pids(port).is_empty(), "engine left");
}

/// An engine that answers but publishes no queue (dflash_server: no `/metrics`, no `/slots`): the
/// load publisher counts the requests in flight from the kernel's view of its connections, so
/// the page shows them and an update waits for them. A connection kept open after its answer is
/// idle, and this process's own connections (as the supervisor's probes) are left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_without_a_queue_shows_the_requests_in_flight_on_its_connections() {
    use std::io::Write;

    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/runtime/queueless_engine.py");
    let _engine = KillOnDrop(Command::new("python3").arg(&script).arg(port.to_string()).spawn().unwrap());
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let listening = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(listening.elapsed() < Duration::from_secs(10), "the engine never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut load = lucebox::runtime::load::load_signal(addr, cancel.clone());
    // A user's request from another process, held open for the length of the test.
    let user = |path: &str| {
        let code = format!(
            "import socket, time\ns = socket.create_connection(('127.0.0.1', {port}))\n\
             s.sendall(b'POST {path} HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 0\\r\\n\\r\\n')\ntime.sleep(120)"
        );
        KillOnDrop(Command::new("python3").args(["-c", &code]).spawn().unwrap())
    };
    in_flight(&mut load, 0, Duration::from_secs(5)).await;
    let holding = user("/hold");
    // This process's own request is not a user's.
    let mut own = std::net::TcpStream::connect(addr).unwrap();
    own.write_all(b"POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").unwrap();
    in_flight(&mut load, 1, Duration::from_secs(5)).await;
    // Answered at once and kept open: busy while its answer is fresh, then idle.
    let _kept_open = user("/quick");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    in_flight(&mut load, 1, Duration::from_secs(3)).await;
    let streaming = user("/stream");
    in_flight(&mut load, 2, Duration::from_secs(5)).await;
    drop((holding, streaming));
    in_flight(&mut load, 0, Duration::from_secs(8)).await;
    cancel.cancel();
}

/// A child process killed when the test ends, passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to `within` for the publisher to show `expected` requests in flight on connections.
async fn in_flight(load: &mut watch::Receiver<Option<LoadSignal>>, expected: u32, within: Duration) {
    let deadline = Instant::now() + within;
    let mut seen = None;
    while Instant::now() < deadline {
        seen = load.borrow_and_update().clone();
        if let Some(signal) = seen.as_ref().filter(|s| s.requests_processing == expected) {
            assert_eq!(signal.source, LoadSource::Connections, "{signal:?}");
            assert!(!signal.shows_queue());
            return;
        }
        let _ = tokio::time::timeout(Duration::from_millis(500), load.changed()).await;
    }
    panic!("expected {expected} in flight, last seen {seen:?}");
}
