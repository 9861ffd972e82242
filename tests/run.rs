//! `lucebox run` end to end on this machine: detect, plan (with a real smoke start), run the real
//! CPU llama-server with the tiny model, answer a chat completion through the plan's port, show it
//! on the status API, and stop cleanly on SIGTERM with nothing left behind.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn run_serves_a_chat_completion_and_stops_cleanly() {
    let mut rig = RunRig::new();
    rig.spawn(rig.command());
    let (engine_port, web_port) = (rig.engine_port, rig.web_port);

    wait_for("the engine to answer a chat completion", Duration::from_secs(60), || {
        let body = r#"{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}"#;
        matches!(http(engine_port, "POST", "/v1/chat/completions", body), Some((200, b)) if b.contains("\"choices\""))
    });
    // The engine's queue reaches the status model through the load publisher (1 Hz).
    wait_for("the engine's load in the status", Duration::from_secs(15), || {
        http(web_port, "GET", "/api/v1/engines", "")
            .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(&b).ok())
            .is_some_and(|e| e["engine-cpu"]["load"].is_object())
    });
    let (status, body) = http(web_port, "GET", "/api/v1/status", "").expect("status API answers");
    assert_eq!(status, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["engines"]["engine-cpu"]["state"]["state"], "ready", "{status:#}");
    assert_eq!(status["engines"]["engine-cpu"]["profile"], "tiny-cpu-test");
    assert_eq!(status["plan"]["groups"][0]["proof"]["state"], "proven", "the plan was smoke-started");
    assert!(status["hardware"]["devices"].as_array().unwrap().iter().any(|d| d["id"] == "cpu"));
    let engine_pid: i32 = status["engines"]["engine-cpu"]["instance"].as_str().unwrap().parse().unwrap();

    // SIGTERM: the supervisor stops the engine and exits 0.
    let exit = rig.terminate(Duration::from_secs(30));
    assert!(exit.success(), "{exit}");
    let engine_alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(engine_pid), None).is_ok();
    assert!(!engine_alive, "engine process {engine_pid} left behind");
    assert!(http(engine_port, "GET", "/health", "").is_none(), "engine port still answers");
}
