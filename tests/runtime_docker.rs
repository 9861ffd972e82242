//! The Docker runtime against the real dockerd and the real llama-server image: kill -9,
//! exit 137, SIGSTOP hang, removal from outside, supervisor restart (adoption, no duplicate),
//! SIGTERM (nothing left). Needs ci/docker.sh and ci/build-engine-image.sh.

mod runtime_support;

use std::time::Duration;

use runtime_support::*;

const READY: Duration = Duration::from_secs(90);

fn start(name: &str) -> (u16, Supervisor, ContainerCleanup) {
    require_docker();
    let cleanup = ContainerCleanup(name.to_string());
    let port = free_port();
    let sup = Supervisor::start(&tiny_plan(name, port, true), "docker");
    (port, sup, cleanup)
}

fn assert_one_engine(name: &str, port: u16) {
    assert!(
        eventually(Duration::from_secs(5), || one_engine(name, port)),
        "expected one engine, one running container and at most one stopped: {:?} running of {:?} / {:?}",
        running_containers(name),
        containers(name),
        engine_pids(port)
    );
}

/// Waits until the engine's start has been forwarded to the supervisor's log `runs` times in all:
/// once per run, none lost and none replayed.
fn assert_starts_forwarded(sup: &Supervisor, runs: usize) {
    let starts = || sup.log().matches("llama_server: model loaded").count();
    eventually(Duration::from_secs(10), || starts() >= runs);
    assert_eq!(starts(), runs, "engine starts forwarded to the log:\n{}", tail(&sup.log(), 40));
}

#[test]
fn serves_chat_in_a_labelled_container_and_restarts_after_kill_9() {
    let (port, mut sup, _cleanup) = start("d-kill9");
    let engine = sup.wait_ready("d-kill9", READY);
    assert_eq!(engine["runtime"], "docker");
    let id = instance(&engine);
    assert_eq!(containers("d-kill9"), vec![id.clone()]);
    assert_eq!(docker(&["inspect", "-f", "{{.HostConfig.NetworkMode}}", &id]), "host");
    assert_eq!(docker(&["inspect", "-f", "{{index .Config.Labels \"lucebox.plan\"}}", &id]).len(), 16);
    assert_starts_forwarded(&sup, 1);
    chat(port);

    unsafe { libc::kill(container_pid(&id), libc::SIGKILL) };
    // Restarted at once; the exit code dockerd reports afterwards reaches the status too.
    let engine = sup.wait_engine("d-kill9", READY, "ready after kill -9, exit reported", |e| {
        restarts(e) == 1 && state(e) == "ready" && last_exit(e).contains("137")
    });
    assert_one_engine("d-kill9", port);
    assert_starts_forwarded(&sup, 2);
    chat(port);

    // The crashed container was kept, stopped, for the next restart.
    let second = instance(&engine);
    assert_ne!(second, id, "a lone crash restarts in a new container");
    assert_eq!(containers("d-kill9").len(), 2);
    assert_eq!(running_containers("d-kill9"), vec![second.clone()]);

    // A second failure within the reset period waits out its backoff, then starts the kept
    // container again (same plan, same image: no create) and keeps the one that just died.
    let pid = container_pid(&second);
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let engine = sup
        .wait_engine("d-kill9", READY, "ready after a 2nd kill", |e| restarts(e) == 2 && state(e) == "ready");
    assert!(last_exit(&engine).contains("137"), "{engine}");
    assert_eq!(instance(&engine), id, "the kept container started again, not a new one");
    assert_one_engine("d-kill9", port);
    let mut kept = containers("d-kill9");
    kept.sort();
    let mut expected = vec![id.clone(), second];
    expected.sort();
    assert_eq!(kept, expected, "the container that just died is kept in turn");
    // Its output from this run on: the first run's, in the same container, is not replayed.
    assert_starts_forwarded(&sup, 3);
    chat(port);
    // Nothing is left after a clean stop, the kept container included.
    sup.signal(libc::SIGTERM);
    assert!(sup.wait_exit(Duration::from_secs(30)).success(), "{}", tail(&sup.log(), 20));
    assert!(containers("d-kill9").is_empty(), "{:?}", containers("d-kill9"));
}

#[test]
fn exit_137_from_docker_kill_is_restarted() {
    let (port, sup, _cleanup) = start("d-137");
    let id = instance(&sup.wait_ready("d-137", READY));
    docker(&["kill", "--signal", "KILL", &id]);
    sup.wait_engine("d-137", READY, "restarted, exit 137 reported", |e| {
        restarts(e) == 1 && state(e) == "ready" && last_exit(e).contains("137")
    });
    assert_one_engine("d-137", port);
}

#[test]
fn hung_container_is_restarted_by_liveness_probes() {
    let (port, sup, _cleanup) = start("d-stop");
    let id = instance(&sup.wait_ready("d-stop", READY));
    unsafe { libc::kill(container_pid(&id), libc::SIGSTOP) };
    let engine = sup.wait_engine("d-stop", Duration::from_secs(40), "restarted", |e| {
        restarts(e) == 1 && state(e) == "ready"
    });
    assert!(last_exit(&engine).contains("hung"), "{engine}");
    assert_one_engine("d-stop", port);
}

#[test]
fn container_removed_from_outside_is_replaced() {
    let (port, sup, _cleanup) = start("d-rm");
    let id = instance(&sup.wait_ready("d-rm", READY));
    docker(&["rm", "-f", &id]);
    let engine = sup.wait_engine("d-rm", READY, "replaced", |e| restarts(e) == 1 && state(e) == "ready");
    assert_ne!(instance(&engine), id);
    assert_one_engine("d-rm", port);
}

#[test]
fn restarted_supervisor_adopts_the_running_container() {
    let (port, sup, _cleanup) = start("d-adopt");
    let id = instance(&sup.wait_ready("d-adopt", READY));
    let sup = sup.crash_and_restart("docker");
    let engine = sup.wait_ready("d-adopt", READY);
    assert_eq!(instance(&engine), id, "adopted, not restarted");
    assert_eq!(restarts(&engine), 0);
    assert!(sup.log().contains("adopted running docker engine"), "{}", tail(&sup.log(), 20));
    assert_one_engine("d-adopt", port);
    chat(port);
    // The adopting supervisor follows the engine's log from the adoption on (the chat's lines),
    // without replaying what the engine printed before (its start).
    let since = || sup.log().split_once("adopted running docker engine").map(|(_, s)| s.to_string()).unwrap();
    let forwarded = eventually(Duration::from_secs(5), || since().contains("launch_slot_"));
    let since = since();
    assert!(forwarded, "the chat's lines are forwarded: {}", tail(&since, 40));
    assert!(!since.contains("model loaded"), "the engine's start is not replayed: {}", tail(&since, 40));
}

/// A new build of the engine image pulled under the same tag is not adopted: the supervisor
/// that comes back removes the old build's container and starts the new one.
#[test]
fn a_new_image_under_the_same_tag_is_started_instead_of_adopting_the_old_one() {
    require_docker();
    struct Untag(&'static str);
    impl Drop for Untag {
        fn drop(&mut self) {
            let _ = std::process::Command::new("docker").args(["rmi", "-f", self.0]).output();
        }
    }
    let (name, tag) = ("d-retag", "lucebox/engine-cpu:retag-test");
    let (_cleanup, _untag) = (ContainerCleanup(name.to_string()), Untag(tag));
    docker(&["tag", IMAGE, tag]);
    let port = free_port();
    let plan = tiny_plan(name, port, true);
    let sup = Supervisor::start_with_image(&plan, tag);
    let old = instance(&sup.wait_ready(name, READY));
    drop(sup); // SIGKILL: the container stays
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!("FROM {IMAGE}\nLABEL lucebox.test=\"a new build\"\n"),
    )
    .unwrap();
    docker(&["build", "-q", "-t", tag, context.path().to_str().unwrap()]);
    let new_image = docker(&["image", "inspect", "-f", "{{.Id}}", tag]);
    assert_ne!(new_image, docker(&["image", "inspect", "-f", "{{.Id}}", IMAGE]), "a new image id");

    let sup = Supervisor::start_with_image(&plan, tag);
    let engine = sup.wait_ready(name, READY);
    let id = instance(&engine);
    assert_ne!(id, old, "the old build's container was adopted: {}", tail(&sup.log(), 20));
    assert_eq!(docker(&["inspect", "-f", "{{.Image}}", &id]), new_image);
    assert_one_engine(name, port);
    chat(port);
}

#[test]
fn changed_plan_replaces_the_old_container_instead_of_adopting_it() {
    let (port, sup, _cleanup) = start("d-replan");
    let old = instance(&sup.wait_ready("d-replan", READY));
    drop(sup); // SIGKILL: the container stays
    let mut plan = tiny_plan("d-replan", port, true);
    plan.groups[0].choice.launch.args.extend(["--ctx-size".to_string(), "256".to_string()]);
    let sup = Supervisor::start(&plan, "docker");
    let engine = sup.wait_ready("d-replan", READY);
    assert_ne!(instance(&engine), old);
    assert_one_engine("d-replan", port);
}

#[test]
fn sigterm_stops_and_removes_the_container() {
    let (port, mut sup, _cleanup) = start("d-term");
    sup.wait_ready("d-term", READY);
    sup.signal(libc::SIGTERM);
    let status = sup.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{}", tail(&sup.log(), 20));
    assert!(containers("d-term").is_empty(), "container left after SIGTERM");
    assert!(engine_pids(port).is_empty(), "engine process left after SIGTERM");
}

#[test]
fn sigterm_during_a_restart_backoff_leaves_no_container() {
    require_docker();
    let _cleanup = ContainerCleanup("d-term-backoff".to_string());
    let port = free_port();
    // An engine that exits at once (unknown flag): restarted with growing delays.
    let mut plan = tiny_plan("d-term-backoff", port, true);
    plan.groups[0].choice.launch.args.push("--no-such-flag".to_string());
    let mut sup = Supervisor::start(&plan, "docker");
    // The 4th failure waits 2 s before the next start: the engine's container has exited then.
    sup.wait_engine("d-term-backoff", Duration::from_secs(60), "a restart delay", |e| {
        restarts(e) >= 4 && state(e) == "crash-looping"
    });
    assert!(!containers("d-term-backoff").is_empty(), "the exited container is there before SIGTERM");
    sup.signal(libc::SIGTERM);
    let status = sup.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{}", tail(&sup.log(), 20));
    assert!(containers("d-term-backoff").is_empty(), "exited container left after SIGTERM");
}

/// After each supervisor restart (its task aborted, the container adopted) exactly one
/// supervisor reacts to the next faults: no duplicate starts, nothing left at the end.
#[test]
fn soak_across_supervisor_restarts_leaves_one_container() {
    require_docker();
    let report = soak("docker", "supervisor-restart,kill9,remove", 6);
    assert!(report.contains("invariant violations: 0"), "{report}");
    assert!(report.contains("left at end: 0 processes, 0 containers"), "{report}");
}
