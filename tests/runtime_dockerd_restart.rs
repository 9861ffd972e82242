//! dockerd restarts under a running supervisor: the engine comes back, once. Its own test
//! binary, because it takes the daemon away from every other Docker test. Restarts only a
//! daemon that ci/docker.sh started (its pid file), never a system-managed one.

mod runtime_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use runtime_support::*;

#[test]
fn engine_comes_back_once_after_a_dockerd_restart() {
    require_docker();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/restart-dockerd.sh");
    let name = "d-dockerd";
    let _cleanup = ContainerCleanup(name.to_string());
    let port = free_port();
    let sup = Supervisor::start(&tiny_plan(name, port, true), "docker");
    let id = instance(&sup.wait_ready(name, Duration::from_secs(90)));
    let pid = container_pid(&id);

    let out = Command::new("bash").arg(&script).output().unwrap();
    assert!(out.status.success(), "restart-dockerd.sh: {}", String::from_utf8_lossy(&out.stderr));

    let engine = sup.wait_engine(name, Duration::from_secs(120), "ready after dockerd restart", |e| {
        restarts(e) >= 1 && state(e) == "ready"
    });
    // A new engine process (in the same container started again, or a new one).
    assert_ne!(container_pid(&instance(&engine)), pid);
    assert!(
        eventually(Duration::from_secs(10), || containers(name).len() == 1 && engine_pids(port).len() == 1),
        "{:?} {:?}",
        containers(name),
        engine_pids(port)
    );
    chat(port);
}
