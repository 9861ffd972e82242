//! The web API against an in-process server: the OpenAPI contract, auth, Host/Origin checks,
//! limits, slow and malformed clients, path traversal, SSE, probes and metrics.

mod web_common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lucebox::status::{EngineState, EngineStatus, Level, LoadSnapshot, StatusModel};
use lucebox::web::{Accepted, ActionError, ActionFuture, Actions, FanMode, Limits, NoActions, PinRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use web_common::{send, TestServer};

/// Records every call; answers `Locked` when told to.
#[derive(Default)]
struct Recording {
    calls: Mutex<Vec<String>>,
    locked: bool,
}

impl Recording {
    fn answer(&self, call: String) -> ActionFuture<'_> {
        self.calls.lock().unwrap().push(call.clone());
        let locked = self.locked;
        Box::pin(async move {
            if locked {
                Err(ActionError::Locked("an update is being applied".into()))
            } else {
                Ok(Accepted { message: format!("{call} accepted") })
            }
        })
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Actions for Recording {
    fn restart_engine(&self, engine: String) -> ActionFuture<'_> {
        self.answer(format!("restart {engine}"))
    }
    fn switch_profile(&self, pin: PinRequest) -> ActionFuture<'_> {
        self.answer(format!("pin {} {} {:?}", pin.device, pin.profile, pin.variant))
    }
    fn ota_apply(&self, force: bool) -> ActionFuture<'_> {
        self.answer(if force { "ota apply force".into() } else { "ota apply".into() })
    }
    fn ota_rollback(&self) -> ActionFuture<'_> {
        self.answer("ota rollback".into())
    }
    fn set_fan_mode(&self, device: String, mode: FanMode) -> ActionFuture<'_> {
        self.answer(format!("fan {device} {mode:?}"))
    }
}

fn engine(state: EngineState, tokens_per_s: f64) -> EngineStatus {
    EngineStatus {
        state,
        variant: "cpu-avx2".into(),
        profile: "tiny-test".into(),
        port: 8080,
        restarts: 1,
        load: Some(LoadSnapshot { tokens_per_s, ..LoadSnapshot::default() }),
        ..EngineStatus::new("engine-0", "process", 0)
    }
}

/// (path, method, media type of the first success response) for every operation in the contract.
fn documented_operations() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.yaml")).unwrap();
    let body = text.split_once("\npaths:\n").expect("openapi.yaml has paths").1;
    let mut operations = Vec::new();
    let (mut path, mut method) = (String::new(), None::<String>);
    for line in body.lines() {
        if let Some(p) = line.strip_prefix("  /").and_then(|l| l.strip_suffix(':')) {
            path = format!("/{p}");
        } else if let Some(m) = line.strip_prefix("    ").and_then(|l| l.strip_suffix(':')) {
            if m == "get" || m == "post" {
                method = Some(m.to_string());
            }
        } else if let (Some(m), Some(content)) = (&method, line.split_once("content: { ")) {
            if line.trim_start().starts_with("\"2") {
                let media = content.1.split(':').next().unwrap().trim().to_string();
                operations.push((path.clone(), m.clone(), media));
                method = None;
            }
        }
    }
    operations
}

/// Reads a response head only (enough for endless streams).
async fn head_of(server: &TestServer, path: &str) -> web_common::Reply {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", server.host());
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    while !bytes.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "{path}: closed before the head");
        bytes.extend_from_slice(&chunk[..n]);
    }
    web_common::parse(&bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_path_answers_as_documented() {
    let actions = Arc::new(Recording::default());
    let server = TestServer::start(actions.clone(), Limits::default()).await;
    let operations = documented_operations();
    assert!(operations.len() >= 20, "parsed too few operations: {operations:?}");
    for (path, method, media) in &operations {
        let concrete = path.replace("{name}", "engine-0").replace("{device}", "cpu");
        let reply = if method == "get" {
            head_of(&server, &concrete).await
        } else {
            let body = match concrete.as_str() {
                "/api/v1/pin" => r#"{"device":"cpu","profile":"tiny-test"}"#,
                p if p.ends_with("/fan-mode") => r#"{"mode":"full-speed"}"#,
                _ => "",
            };
            server.post(&concrete, &server.bearer(), body).await
        };
        let expected = if concrete == "/readyz" {
            503
        } else if method == "post" {
            202
        } else {
            200
        };
        assert_eq!(reply.status, expected, "{method} {concrete}: {}", reply.head);
        let content_type = reply.header("content-type").unwrap_or_default();
        assert!(
            content_type.starts_with(media.as_str()),
            "{method} {concrete}: {content_type} is not {media}"
        );
    }
    assert_eq!(
        actions.calls(),
        ["restart engine-0", "pin cpu tiny-test None", "ota apply", "ota rollback", "fan cpu FullSpeed"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_routes_show_the_model() {
    let server = TestServer::start(Arc::new(NoActions), Limits::default()).await;
    server.status.update(|s| {
        s.engines.insert("engine-0".into(), engine(EngineState::Loading { percent: Some(40) }, 0.0));
    });
    server.status.event("runtime", Level::Warn, "engine-0 restarted");
    let status = server.get("/api/v1/status").await.json();
    assert_eq!(status["engines"]["engine-0"]["state"]["state"], "loading");
    assert_eq!(status["engines"]["engine-0"]["state"]["percent"], 40);
    let engines = server.get("/api/v1/engines").await.json();
    assert_eq!(engines["engine-0"]["profile"], "tiny-test");
    let events = server.get("/api/v1/events").await.json();
    assert_eq!(events.as_array().unwrap().last().unwrap()["message"], "engine-0 restarted");
    assert!(server.get("/api/v1/devices").await.json().is_null(), "no detection yet");
    let version = server.get("/api/v1/version").await.json();
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
    // The commit `lucebox version` names; a build from a git checkout (this one) has one.
    assert_eq!(version["commit"], serde_json::json!(lucebox::version::GIT_COMMIT), "{version}");
    if std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.git").exists() {
        assert!(version["commit"].is_string(), "a build from a git checkout names its commit: {version}");
    }
    let page = server.get("/").await;
    assert!(page.body.contains("<title>Lucebox</title>"));
    assert!(page.header("content-security-policy").unwrap().contains("default-src 'self'"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_engines_and_metrics_show_them() {
    let server = TestServer::start(Arc::new(NoActions), Limits::default()).await;
    assert_eq!(server.get("/healthz").await.status, 200);
    let not_ready = server.get("/readyz").await;
    assert_eq!(not_ready.status, 503);
    assert_eq!(not_ready.json()["message"], "no engine planned yet");
    server.status.update(|s| {
        s.engines.insert("engine-0".into(), engine(EngineState::Restarting { in_ms: 2000 }, 0.0));
    });
    assert_eq!(server.get("/readyz").await.json()["engines"][0]["state"]["state"], "restarting");
    server.status.update(|s| {
        s.engines.insert("engine-0".into(), engine(EngineState::Ready, 23.5));
    });
    assert_eq!(server.get("/readyz").await.status, 200);
    let metrics = server.get("/metrics").await.body;
    assert!(
        metrics.contains(r#"lucebox_engine_up{engine="engine-0",variant="cpu-avx2",profile="tiny-test"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"lucebox_engine_tokens_per_second{engine="engine-0"} 23.5"#), "{metrics}");
    assert!(metrics.contains(r#"lucebox_engine_restarts_total{engine="engine-0"} 1"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_need_the_right_token() {
    let actions = Arc::new(Recording::default());
    let server = TestServer::start(actions.clone(), Limits::default()).await;
    let missing = server.post("/api/v1/ota/apply", "", "").await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
    assert_eq!(missing.json()["error"], "unauthorized");
    let wrong =
        server.post("/api/v1/ota/apply", &format!("Authorization: Bearer {}\r\n", "0".repeat(64)), "").await;
    assert_eq!(wrong.status, 401);
    let not_bearer =
        server.post("/api/v1/ota/apply", &format!("Authorization: Basic {}\r\n", server.token), "").await;
    assert_eq!(not_bearer.status, 401);
    assert!(actions.calls().is_empty(), "no action may run without the token");
    let right = server.post("/api/v1/ota/apply", &server.bearer(), "").await;
    assert_eq!(right.status, 202);
    assert_eq!(right.json()["message"], "ota apply accepted");
    assert_eq!(actions.calls(), ["ota apply"]);
    // The body is optional; `force` applies even while engines serve requests.
    let forced = server.post("/api/v1/ota/apply", &server.bearer(), r#"{"force":true}"#).await;
    assert_eq!(forced.status, 202);
    let typo = server.post("/api/v1/ota/apply", &server.bearer(), r#"{"forse":true}"#).await;
    assert_eq!(typo.status, 400);
    assert_eq!(actions.calls(), ["ota apply", "ota apply force"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_is_423_and_no_actions_is_501() {
    let locked =
        TestServer::start(Arc::new(Recording { locked: true, ..Recording::default() }), Limits::default())
            .await;
    let reply = locked.post("/api/v1/engines/engine-0/restart", &locked.bearer(), "").await;
    assert_eq!(reply.status, 423);
    assert_eq!(reply.json()["error"], "locked");
    let none = TestServer::start(Arc::new(NoActions), Limits::default()).await;
    let reply = none.post("/api/v1/ota/rollback", &none.bearer(), "").await;
    assert_eq!(reply.status, 501);
    assert!(reply.json()["message"].as_str().unwrap().contains("rolling back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_host_and_cross_origin_are_refused() {
    let actions = Arc::new(Recording::default());
    let server = TestServer::start(actions.clone(), Limits::default()).await;
    let post = |host: &str, extra: &str| {
        format!(
            "POST /api/v1/ota/apply HTTP/1.1\r\nHost: {host}\r\n{extra}Authorization: Bearer {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            server.token
        )
    };
    let rebinding = send(server.addr, &post(&format!("attacker.example:{}", server.addr.port()), "")).await;
    assert_eq!(rebinding.status, 403, "{}", rebinding.body);
    assert_eq!(rebinding.json()["error"], "forbidden");
    let origin = format!("Origin: http://attacker.example:{}\r\n", server.addr.port());
    let cross = send(server.addr, &post(&server.host(), &origin)).await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    assert!(actions.calls().is_empty());
    let named = format!("lucebox.local:{}", server.addr.port());
    let same = send(server.addr, &post(&named, &format!("Origin: http://{named}\r\n"))).await;
    assert_eq!(same.status, 202, "{}", same.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_and_heads_are_refused() {
    let actions = Arc::new(Recording::default());
    let server = TestServer::start(actions.clone(), Limits::default()).await;
    let big = format!(r#"{{"device":"cpu","profile":"{}"}}"#, "x".repeat(20_000));
    let declared = server.post("/api/v1/pin", &server.bearer(), &big).await;
    assert_eq!(declared.status, 413);
    assert_eq!(declared.json()["error"], "payload-too-large");
    let chunked = format!(
        "POST /api/v1/pin HTTP/1.1\r\nHost: {}\r\n{}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        server.host(),
        server.bearer(),
        big.len()
    );
    assert_eq!(send(server.addr, &chunked).await.status, 413);
    assert!(actions.calls().is_empty());
    let huge_head = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nX-Fill: {}\r\nConnection: close\r\n\r\n",
        server.host(),
        "a".repeat(20_000)
    );
    assert_eq!(send(server.addr, &huge_head).await.status, 431);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_errors_and_the_server_keeps_serving() {
    let server = TestServer::start(Arc::new(Recording::default()), Limits::default()).await;
    let bad_json = server.post("/api/v1/pin", &server.bearer(), "{not json").await;
    assert_eq!(bad_json.status, 400);
    assert!(bad_json.json()["message"].as_str().unwrap().contains("not valid JSON"));
    let unknown_field =
        server.post("/api/v1/pin", &server.bearer(), r#"{"device":"cpu","profile":"p","x":1}"#).await;
    assert_eq!(unknown_field.status, 400);
    let bad_mode = server.post("/api/v1/thermal/cpu/fan-mode", &server.bearer(), r#"{"mode":"turbo"}"#).await;
    assert_eq!(bad_mode.status, 400);
    let unknown = server.get("/api/v1/nope").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"], "not-found");
    let put = send(
        server.addr,
        &format!(
            "PUT /api/v1/status HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            server.host()
        ),
    )
    .await;
    assert_eq!(put.status, 405);
    assert_eq!(put.json()["error"], "method-not-allowed");
    for garbage in [
        "\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03\r\n\r\n",
        "GET\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
        "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    ] {
        let reply = send(server.addr, garbage).await;
        assert!(
            reply.status == 400 || reply.status == 0 || reply.status == 505,
            "{garbage:?}: {}",
            reply.head
        );
    }
    assert_eq!(server.get("/healthz").await.status, 200, "still serving after garbage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_cannot_escape_to_the_file_system() {
    let server = TestServer::start(Arc::new(NoActions), Limits::default()).await;
    for path in [
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/api/v1/../../../etc/passwd",
        "/style.css/../../etc/passwd",
        "/..%2f..%2fetc%2fpasswd",
        "//etc/passwd",
        "/app.js%00.html",
    ] {
        let reply = server.get(path).await;
        assert!(reply.status == 404 || reply.status == 400, "{path}: {}", reply.head);
        assert!(!reply.body.contains("root:"), "{path} leaked a file");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_are_dropped() {
    let limits = Limits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let server = TestServer::start(Arc::new(NoActions), limits).await;

    // Slowloris: a head trickled one byte every 200 ms never completes in time.
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(format!("GET / HTTP/1.1\r\nHost: {}\r\n", server.host()).as_bytes()).await.unwrap();
    let started = Instant::now();
    let closed = loop {
        if slow.write_all(b"X").await.is_err() {
            break true;
        }
        let mut buf = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(200), slow.read(&mut buf)).await {
            Ok(Ok(_)) | Ok(Err(_)) => break true, // 408 or closed
            Err(_) if started.elapsed() > Duration::from_secs(6) => break false,
            Err(_) => {}
        }
    };
    assert!(closed, "slow client still connected after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(4), "dropped only after {:?}", started.elapsed());

    // A kept-alive connection that goes quiet is closed (the head-read timer runs from the end of
    // the previous response).
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", server.host()).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(8), idle.read_to_end(&mut bytes))
        .await
        .expect("idle connection kept open")
        .ok();
    assert!(String::from_utf8_lossy(&bytes).starts_with("HTTP/1.1 200"));
    assert!(started.elapsed() >= Duration::from_millis(900), "closed too early: {:?}", started.elapsed());
    assert_eq!(server.get("/healthz").await.status, 200);
}

/// Reads SSE bytes until `needle` appears.
async fn read_until(stream: &mut TcpStream, seen: &mut String, needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    let mut chunk = [0u8; 8192];
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} within {within:?}; got {seen}"))
            .unwrap();
        assert!(n > 0, "stream closed before {needle:?}");
        seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_sends_the_status_then_changes_and_keep_alives() {
    let limits = Limits {
        sse_keep_alive: Duration::from_millis(300),
        sse_min_interval: Duration::from_millis(50),
        ..Limits::default()
    };
    let server = TestServer::start_with(StatusModel::new(), Arc::new(NoActions), limits).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(format!("GET /api/v1/stream HTTP/1.1\r\nHost: {}\r\n\r\n", server.host()).as_bytes())
        .await
        .unwrap();
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "event: status\ndata: {", Duration::from_secs(5)).await;
    assert!(seen.contains("text/event-stream"));
    server.status.update(|s| {
        s.engines.insert("engine-0".into(), engine(EngineState::Ready, 5.0));
    });
    read_until(&mut stream, &mut seen, "\"state\":\"ready\"", Duration::from_secs(5)).await;
    read_until(&mut stream, &mut seen, ": keep-alive", Duration::from_secs(5)).await;

    // Stopping the server ends the stream and `serve_on` returns.
    server.cancel.cancel();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("stream outlived the server")
        .ok();
    let result =
        tokio::time::timeout(Duration::from_secs(5), server.handle).await.expect("serve_on did not return");
    assert!(result.unwrap().is_ok());
}
