//! `lucebox run` end to end on this machine: detect, plan (with a real smoke start), run the real
//! CPU llama-server with the tiny model, answer a chat completion through the plan's port, show it
//! on the status API, and stop cleanly on SIGTERM with nothing left behind.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A minimal HTTP/1.1 exchange on loopback; returns (status, body).
fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

struct Supervisor(Child);

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_serves_a_chat_completion_and_stops_cleanly() {
    let server = std::env::var("LUCEBOX_LLAMA_SERVER")
        .expect("LUCEBOX_LLAMA_SERVER unset: run `bash ci/test.sh` (it builds llama-server and sets it)");
    let model = std::env::var("LUCEBOX_TINY_MODEL")
        .expect("LUCEBOX_TINY_MODEL unset: run `bash ci/test.sh` (it writes the tiny model and sets it)");
    let dir = tempfile::tempdir().unwrap();
    let engines = dir.path().join("engines");
    std::fs::create_dir_all(engines.join("cpu/bin")).unwrap();
    std::os::unix::fs::symlink(&server, engines.join("cpu/bin/llama-server")).unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(&model, models.join("tiny-llama.gguf")).unwrap();
    let (engine_port, web_port) = (free_port(), free_port());

    let child = lucebox()
        .arg("run")
        .env("LUCEBOX_STATE_DIR", dir.path().join("state"))
        .env("LUCEBOX_ENGINES_DIR", &engines)
        .env("LUCEBOX_MODELS_DIR", &models)
        .env("LUCEBOX_ENGINE__PORT", engine_port.to_string())
        .env("LUCEBOX_WEB__PORT", web_port.to_string())
        .env("LUCEBOX_RUNTIME__MODE", "process")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut supervisor = Supervisor(child);

    wait_for("the engine to answer a chat completion", Duration::from_secs(60), || {
        let body = r#"{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}"#;
        matches!(http(engine_port, "POST", "/v1/chat/completions", body), Some((200, b)) if b.contains("\"choices\""))
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
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = supervisor.0.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "supervisor did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit}");
    let engine_alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(engine_pid), None).is_ok();
    assert!(!engine_alive, "engine process {engine_pid} left behind");
    assert!(http(engine_port, "GET", "/health", "").is_none(), "engine port still answers");
}
