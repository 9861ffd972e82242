//! The process runtime against the real llama-server: kill -9, SIGSTOP hang, crash loop with
//! step-down, supervisor crash and SIGTERM leave nothing behind.

mod runtime_support;

use std::time::Duration;

use runtime_support::*;

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
    assert!(engine["last_exit"].as_str().unwrap().contains("signal 9"), "{engine}");
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
    assert!(engine["last_exit"].as_str().unwrap().contains("hung"), "{engine}");
    assert!(
        eventually(Duration::from_secs(5), || engine_pids(port).len() == 1),
        "stopped engine left behind"
    );
}

#[test]
fn crash_loop_steps_down_to_the_fallback() {
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
