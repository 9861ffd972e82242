//! dockerd taken away under a running engine: restarted under a running supervisor (the engine
//! comes back, once; with `--live-restore` it is kept and its output still followed), and frozen
//! while the engine dies (the death is still seen at once). Its own
//! test binary, because it takes the daemon away from every other Docker test; the tests here
//! take turns. Touches only a daemon that ci/docker.sh started (its pid file), never a
//! system-managed one.

mod runtime_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use lucebox::runtime::{ContainerLimits, DockerRuntime, EngineInstance, EngineRuntime, Exit};
use runtime_support::*;

/// One test at a time has the daemon.
static DOCKERD: Mutex<()> = Mutex::new(());

fn dockerd_pid() -> i32 {
    let dir = std::env::var_os("LUCEBOX_CI_LOG_DIR")
        .map_or_else(|| PathBuf::from("/tmp/lucebox-ci"), PathBuf::from);
    let file = dir.join("dockerd.pid");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}: dockerd was not started by ci/docker.sh", file.display()));
    text.trim().parse().unwrap()
}

/// `ci/restart-dockerd.sh`, with `flags` added to the daemon it starts.
fn restart_dockerd(flags: &str) {
    if let Err(why) = try_restart_dockerd(flags) {
        panic!("{why}");
    }
}

fn try_restart_dockerd(flags: &str) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/restart-dockerd.sh");
    let out = Command::new("bash").arg(&script).env("LUCEBOX_DOCKERD_FLAGS", flags).output();
    match out {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("restart-dockerd.sh {flags}: {}", String::from_utf8_lossy(&out.stderr))),
        Err(e) => Err(format!("restart-dockerd.sh {flags}: {e}")),
    }
}

/// dockerd restarted with extra flags; restarted as CI started it when dropped, even when the
/// test fails (the other tests expect the daemon CI starts: a restart ends the containers).
struct RestartedDockerd;

impl RestartedDockerd {
    fn with(flags: &str) -> Self {
        restart_dockerd(flags);
        RestartedDockerd
    }
}

impl Drop for RestartedDockerd {
    /// Never panics: it may run while a failed test unwinds.
    fn drop(&mut self) {
        if let Err(why) = try_restart_dockerd("") {
            eprintln!("dockerd not restarted as CI started it: {why}");
        }
    }
}

/// A supervisor with engine `name` ready in a container. Fields drop in order: the supervisor
/// first, then every container of the engine.
struct ReadyEngine {
    sup: Supervisor,
    port: u16,
    id: String,
    pid: i32,
    _cleanup: ContainerCleanup,
}

impl ReadyEngine {
    fn start(name: &str) -> Self {
        let cleanup = ContainerCleanup(name.to_string());
        let port = free_port();
        let sup = Supervisor::start(&tiny_plan(name, port, true), "docker");
        let id = instance(&sup.wait_ready(name, Duration::from_secs(90)));
        let pid = container_pid(&id);
        ReadyEngine { sup, port, id, pid, _cleanup: cleanup }
    }
}

/// SIGSTOPs dockerd; SIGCONT when dropped, even when the test fails.
struct Frozen(i32);

impl Frozen {
    fn dockerd() -> Self {
        let pid = dockerd_pid();
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "cannot stop dockerd {pid}");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// The engine's process is watched, not only Docker's events: killed while dockerd cannot say
/// so, it is still seen gone at once; the exit code follows when dockerd is back.
#[test]
fn a_container_death_is_seen_while_dockerd_is_frozen() {
    let _turn = DOCKERD.lock().unwrap_or_else(|e| e.into_inner());
    require_docker();
    let name = "d-frozen";
    let _cleanup = ContainerCleanup(name.to_string());
    let port = free_port();
    let choice = tiny_plan(name, port, true).groups.remove(0).choice;
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let limits = ContainerLimits { memory_bytes: None, pids: 256 };
        let socket = lucebox::config::Config::default().runtime.docker_socket;
        let runtime = DockerRuntime::connect(&socket, IMAGE, limits).await.unwrap();
        let mut engine = runtime.start(name, &choice).await.unwrap();
        tokio::task::spawn_blocking(move || wait_healthy(port)).await.unwrap();
        // The process watch is armed right after the start (one inspect); leave it ample time.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let pid = container_pid(engine.id());

        let frozen = Frozen::dockerd();
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let seen = tokio::time::timeout(Duration::from_secs(5), engine.exited()).await;
        drop(frozen);
        assert_eq!(seen.ok(), Some(Exit::Ended), "death not seen while dockerd was frozen");

        let reported = engine.final_exit(Duration::from_secs(30)).await;
        assert_eq!(reported, Exit::Code(137));
        engine.stop(Duration::from_secs(1)).await.unwrap();
    });
    assert!(containers(name).is_empty(), "{:?}", containers(name));
}

#[test]
fn engine_comes_back_once_after_a_dockerd_restart() {
    let _turn = DOCKERD.lock().unwrap_or_else(|e| e.into_inner());
    require_docker();
    let name = "d-dockerd";
    let ready = ReadyEngine::start(name);
    let (sup, port, pid) = (&ready.sup, ready.port, ready.pid);

    restart_dockerd("");

    let engine = sup.wait_engine(name, Duration::from_secs(120), "ready after dockerd restart", |e| {
        restarts(e) >= 1 && state(e) == "ready"
    });
    // A new engine process (in the same container started again, or a new one).
    assert_ne!(container_pid(&instance(&engine)), pid);
    assert!(
        eventually(Duration::from_secs(10), || one_engine(name, port)),
        "{:?} running of {:?} / {:?}",
        running_containers(name),
        containers(name),
        engine_pids(port)
    );
    chat(port);
}

/// An engine whose output dockerd cannot give back (logging driver `none`) still runs and
/// serves; the supervisor says once that its output is not followed, and does not ask again.
#[test]
fn an_engine_whose_output_cannot_be_read_back_runs_and_is_asked_for_it_once() {
    let _turn = DOCKERD.lock().unwrap_or_else(|e| e.into_inner());
    require_docker();
    let _no_logs = RestartedDockerd::with("--log-driver none");
    let ready = ReadyEngine::start("d-nologs");
    chat(ready.port);
    std::thread::sleep(Duration::from_secs(3));
    let log = ready.sup.log();
    assert_eq!(log.matches("engine output not followed").count(), 1, "{}", tail(&log, 30));
    assert!(!log.contains("model loaded"), "{}", tail(&log, 30));
    let engine = ready.sup.engine("d-nologs").unwrap();
    assert_eq!((state(&engine), restarts(&engine)), ("ready", 0));
}

/// With dockerd's `live-restore` the container outlives a dockerd restart: the supervisor keeps
/// the same engine (no restart) and its output still reaches the supervisor's log.
#[test]
fn a_live_restored_engine_is_kept_and_its_output_still_followed() {
    let _turn = DOCKERD.lock().unwrap_or_else(|e| e.into_inner());
    require_docker();
    // Dropped last: dockerd as CI started it again once the engine and its container are gone.
    let _live_restore = RestartedDockerd::with("--live-restore");
    let name = "d-live";
    let ready = ReadyEngine::start(name);
    let (sup, port, id, pid) = (&ready.sup, ready.port, ready.id.clone(), ready.pid);
    let loaded = |log: &str| log.matches("llama_server: model loaded").count();
    assert!(eventually(Duration::from_secs(10), || loaded(&sup.log()) == 1), "{}", tail(&sup.log(), 30));

    restart_dockerd("--live-restore");
    assert_eq!(container_pid(&id), pid, "the engine did not live through the dockerd restart");

    // llama-server writes one of these per request it serves.
    let served = |log: &str| log.matches("prompt eval time").count();
    let before = served(&sup.log());
    chat(port);
    assert!(
        eventually(Duration::from_secs(30), || served(&sup.log()) > before),
        "the engine's output of a request after the dockerd restart never reached the log ({before} before):\n{}",
        tail(&sup.log(), 30)
    );
    // Followed again after the last line forwarded: nothing is forwarded twice.
    assert_eq!(loaded(&sup.log()), 1, "{}", tail(&sup.log(), 30));
    let engine = sup.engine(name).unwrap();
    assert_eq!((state(&engine), restarts(&engine), instance(&engine)), ("ready", 0, id));
}
