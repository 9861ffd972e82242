//! The status page in real headless Chromium (driven through chromedriver's WebDriver HTTP API),
//! served in-process (first test) and by a real `lucebox run` (second test), with real hardware
//! detection and the state of a real llama-server running the tiny CPU model. Checks what a user
//! sees: the live indicator, the engine state, the device table, a fan loop's row in the thermal
//! table, and that the page keeps working when the engine goes down. Saves a screenshot to
//! `target/test-output/web-status.png`.
//!
//! Needs `/usr/bin/chromium`, `/usr/bin/chromedriver`, python3 with gguf (ci/make-tiny-model.py)
//! and the engine from `ci/build-engine.sh`.

mod common;
mod web_common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, llama_server as engine_binary, tiny_model};
use lucebox::hardware::{self, DetectOptions, SysRoot};
use lucebox::status::{unix_ms, EngineState, EngineStatus, Level, LoadSnapshot, StatusModel, ThermalStatus};
use lucebox::thermal::controller::DecisionDetail;
use lucebox::web::{Limits, NoActions};
use serde_json::{json, Value};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;
use web_common::{send_within, TestServer};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const ENGINE_NAME: &str = "engine-0";

/// HTTP/1.1 request with a JSON body, answered JSON (chromedriver and llama-server both speak it).
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let reply = send_within(addr, &request, Duration::from_secs(90)).await;
    (reply.status, serde_json::from_str(&reply.body).unwrap_or(Value::Null))
}

/// Polls llama-server's /health and publishes the engine's state, as the runtime does.
async fn publish_engine_state(
    status: StatusModel,
    engine: SocketAddr,
    tokens_per_s: f64,
    stop: CancellationToken,
) {
    let since = unix_ms();
    loop {
        let request = format!("GET /health HTTP/1.1\r\nHost: {engine}\r\nConnection: close\r\n\r\n");
        let state = match tokio::net::TcpStream::connect(engine).await {
            Err(_) => EngineState::Stopped,
            Ok(_) => match send_within(engine, &request, Duration::from_secs(5)).await.status {
                200 => EngineState::Ready,
                503 => EngineState::Loading { percent: None },
                _ => EngineState::Unhealthy { failed_probes: 1 },
            },
        };
        let load =
            (state == EngineState::Ready).then(|| LoadSnapshot { tokens_per_s, ..LoadSnapshot::default() });
        status.update(|s| {
            s.engines.insert(
                ENGINE_NAME.into(),
                EngineStatus {
                    state,
                    variant: "cpu".into(),
                    profile: "tiny-test".into(),
                    port: engine.port(),
                    load,
                    ..EngineStatus::new(ENGINE_NAME, "process", since)
                },
            );
        });
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
}

fn spawn(program: &Path, args: &[String]) -> Child {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()))
}

async fn wait_for_port(addr: SocketAddr, within: Duration) {
    let deadline = Instant::now() + within;
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "nothing listening on {addr} after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One WebDriver session.
struct Browser {
    driver: SocketAddr,
    session: String,
}

impl Browser {
    async fn start(driver: SocketAddr, profile_dir: &Path) -> Self {
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1000,1500",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--user-data-dir={}", profile_dir.display())])
        .collect::<Vec<_>>();
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args }
        }}});
        // On a fresh machine the first Chromium start (two tests start one at once) has been seen
        // to drop the session request with no reply at all; a WebDriver error (a reply) is not
        // tried again.
        let mut tries = 1;
        let (code, reply) = loop {
            let (code, reply) = call(driver, "POST", "/session", Some(&capabilities)).await;
            if code != 0 || tries == 3 {
                break (code, reply);
            }
            tries += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert_eq!(code, 200, "new session (try {tries}): {reply}");
        let session = reply["value"]["sessionId"].as_str().expect("session id").to_string();
        Self { driver, session }
    }

    async fn command(&self, method: &str, what: &str, body: Option<&Value>) -> Value {
        let (code, reply) =
            call(self.driver, method, &format!("/session/{}/{what}", self.session), body).await;
        assert_eq!(code, 200, "{what}: {reply}");
        reply["value"].clone()
    }

    async fn eval(&self, script: &str) -> Value {
        self.command("POST", "execute/sync", Some(&json!({ "script": script, "args": [] }))).await
    }

    /// Evaluates `script` until `accept` takes its value, or fails showing the last one.
    /// Opens `url` and waits until the page says its live updates run.
    async fn open_live(&self, url: String, within: Duration) {
        self.command("POST", "url", Some(&json!({ "url": url }))).await;
        self.wait_for(
            "live indicator",
            "return document.getElementById('live').textContent",
            |v| v == "live",
            within,
        )
        .await;
    }

    async fn wait_for(
        &self,
        what: &str,
        script: &str,
        accept: impl Fn(&Value) -> bool,
        within: Duration,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let value = self.eval(script).await;
            if accept(&value) {
                return value;
            }
            assert!(Instant::now() < deadline, "{what}: still {value} after {within:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn screenshot(&self, path: &Path) {
        let png = self.command("GET", "screenshot", None).await;
        let bytes = decode_base64(png.as_str().expect("screenshot is base64"));
        assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// Ends the session (and so the browser) even when an assertion failed; killing chromedriver
/// alone would leave Chromium running.
impl Drop for Browser {
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.session, self.driver
        );
        if let Ok(mut stream) = std::net::TcpStream::connect_timeout(&self.driver, Duration::from_secs(2)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = stream.write_all(request.as_bytes());
            let _ = stream.read(&mut [0u8; 1024]);
        }
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("bad base64 byte {c}"),
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n =
            chunk.iter().enumerate().fold(0u32, |acc, (i, c)| acc | (u32::from(value(*c)) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

fn screenshot_path() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp; the shot goes beside it, in <target>/test-output.
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("test-output/web-status.png")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_shows_live_engine_state_and_devices_in_chromium() {
    let work = tempfile::tempdir().unwrap();

    // The supervisor side: real detection, the status page on a free port.
    let detection = hardware::detect(&SysRoot::live(), &DetectOptions::default());
    let cpu_model = detection.host.cpu_model.clone();
    let device_count = detection.devices.len();
    assert!(device_count > 0, "detection found nothing: {detection:?}");
    let status = StatusModel::new();
    status.update(|s| s.hardware = Some(detection));
    // A fan loop's report as the thermal daemon publishes it (no fan on this machine).
    status.update(|s| {
        s.thermal.insert(
            "0000:03:00.0".into(),
            ThermalStatus {
                device_id: "0000:03:00.0".into(),
                junction_c: Some(61.0),
                limit_c: Some(95.0),
                mode: "predictive".into(),
                actuator: "od-fan-curve".into(),
                loop_cpu_s: 0.0393,
                loop_cpu_pct: Some(0.0131),
                why: Some(fan_decision().reason(40.0)),
                decision: Some(fan_decision()),
                ..ThermalStatus::default()
            },
        );
    });
    let server = TestServer::start_with(status.clone(), Arc::new(NoActions), Limits::default()).await;

    // A real engine: llama-server with the tiny model; one completion gives a real tokens/s.
    let engine_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let model = tiny_model(work.path());
    let engine_args = [
        "-m",
        model.to_str().unwrap(),
        "--host",
        "127.0.0.1",
        "--port",
        &engine_addr.port().to_string(),
        "-c",
        "256",
        "-t",
        "1",
    ];
    let mut engine = spawn(&engine_binary(), &engine_args.map(String::from));
    wait_for_port(engine_addr, Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let completion = loop {
        let (code, reply) =
            call(engine_addr, "POST", "/completion", Some(&json!({ "prompt": "hello", "n_predict": 16 })))
                .await;
        if code == 200 {
            break reply;
        }
        assert!(Instant::now() < deadline, "engine never completed: {code} {reply}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let tokens_per_s =
        completion["timings"]["predicted_per_second"].as_f64().expect("timings.predicted_per_second");
    status.event("runtime", Level::Info, format!("{ENGINE_NAME} started llama-server on {engine_addr}"));
    let stop_polling = CancellationToken::new();
    tokio::spawn(publish_engine_state(status.clone(), engine_addr, tokens_per_s, stop_polling.clone()));

    // The browser.
    let driver_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let _driver = spawn(Path::new(CHROMEDRIVER), &[format!("--port={}", driver_addr.port())]);
    wait_for_port(driver_addr, Duration::from_secs(30)).await;
    let browser = Browser::start(driver_addr, &work.path().join("chromium-profile")).await;
    let within = Duration::from_secs(30);
    browser.open_live(format!("http://{}/", server.addr), within).await;
    browser
        .wait_for("engine state", "const e = document.querySelector('[data-engine=\"engine-0\"] .state'); return e && e.textContent", |v| v == "ready", within)
        .await;
    let shown_tokens =
        browser.eval("return document.querySelector('[data-engine=\"engine-0\"] .tokens').textContent").await;
    assert_eq!(shown_tokens, format!("{tokens_per_s:.1}"));
    let rows = browser
        .eval("return Array.from(document.querySelectorAll('#devices tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))")
        .await;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), device_count, "one row per detected device: {rows:?}");
    assert!(
        rows.iter().any(|r| r[0] == "cpu" && r[1] == cpu_model.as_str()),
        "no CPU row for {cpu_model}: {rows:?}"
    );
    let events = browser.eval("return document.getElementById('events').textContent").await;
    assert!(events.as_str().unwrap().contains("started llama-server"), "{events}");
    let thermal = browser
        .eval("return Array.from(document.querySelectorAll('#thermal tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))")
        .await;
    assert_eq!(thermal[0][0], "0000:03:00.0", "{thermal}");
    assert_eq!(thermal[0][4], "predictive via od-fan-curve", "{thermal}");
    assert_eq!(thermal[0][6], "0.013 %", "the loop's CPU share: {thermal}");
    assert_eq!(thermal[0][7], fan_decision().reason(40.0).as_str(), "why the fan runs so: {thermal}");
    browser
        .wait_for(
            "tokens chart legend",
            "return document.getElementById('legend-tokens').textContent",
            |v| v == ENGINE_NAME,
            within,
        )
        .await;
    browser.screenshot(&screenshot_path()).await;

    // Phone-sized: everything fits the width (wide tables scroll inside their own box).
    browser.command("POST", "window/rect", Some(&json!({ "width": 412, "height": 915 }))).await;
    let overflow = browser
        .eval("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await;
    assert_eq!(overflow, 0, "the page is wider than a phone screen");
    browser.screenshot(&screenshot_path().with_file_name("web-status-phone.png")).await;
    browser.command("POST", "window/rect", Some(&json!({ "width": 1000, "height": 1500 }))).await;

    // An engine that publishes no queue (dflash_server): the requests counted on its connections.
    status.update(|s| {
        s.engines.insert(
            "engine-1".into(),
            EngineStatus {
                state: EngineState::Ready,
                variant: "cuda".into(),
                profile: "qwen3.6-27b-dflash-24g".into(),
                port: 8081,
                load: Some(LoadSnapshot {
                    requests_processing: 2,
                    from_connections: true,
                    ..LoadSnapshot::default()
                }),
                ..EngineStatus::new("engine-1", "process", unix_ms())
            },
        );
    });
    let queue_of = |engine: &str| {
        format!(
            "const card = document.querySelector('[data-engine=\"{engine}\"]'); if (!card) return null; \
             const dt = Array.from(card.querySelectorAll('dt')).find(d => d.textContent == 'Queue'); \
             return dt.nextElementSibling.textContent + ' | ' + card.querySelector('.tokens').textContent"
        )
    };
    let on_connections = "2 in flight (from its connections: this engine publishes no queue) | —";
    browser.wait_for("requests on connections", &queue_of("engine-1"), |v| v == on_connections, within).await;
    let queue = browser.eval(&queue_of("engine-0")).await;
    assert_eq!(queue, format!("0 running, 0 waiting | {tokens_per_s:.1}"), "an engine with a queue");

    // The engine goes down: the page keeps updating and says so.
    engine.kill().await.unwrap();
    browser
        .wait_for(
            "engine down",
            "return document.querySelector('[data-engine=\"engine-0\"] .state').textContent",
            |v| v == "stopped",
            within,
        )
        .await;
    assert_eq!(browser.eval("return document.getElementById('live').textContent").await, "live");
    browser.screenshot(&screenshot_path().with_file_name("web-status-engine-down.png")).await;

    drop(browser);
    stop_polling.cancel();
    server.cancel.cancel();
}

/// The page as a real `lucebox run` serves it: detection, plan, the tiny CPU engine under
/// supervision, the engine killed from outside and brought back, all seen in Chromium.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_served_by_lucebox_run_shows_the_engine_and_its_recovery() {
    let mut rig = common::RunRig::new();
    rig.spawn(rig.command());
    let work = &rig.dir;
    let web_addr: SocketAddr = ([127, 0, 0, 1], rig.web_port).into();
    wait_for_port(web_addr, Duration::from_secs(60)).await;
    let (_, devices) = call(web_addr, "GET", "/api/v1/devices", None).await;
    let device_count = devices["devices"].as_array().map(Vec::len).unwrap_or(0);
    assert!(device_count > 0, "{devices}");

    let driver_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let _driver = spawn(Path::new(CHROMEDRIVER), &[format!("--port={}", driver_addr.port())]);
    wait_for_port(driver_addr, Duration::from_secs(30)).await;
    let browser = Browser::start(driver_addr, &work.path().join("chromium-profile")).await;
    let within = Duration::from_secs(60);
    let state_js =
        "const e = document.querySelector('[data-engine=\"engine-cpu\"] .state'); return e && e.textContent";
    browser.open_live(format!("http://{web_addr}/"), within).await;
    browser.wait_for("engine ready", state_js, |v| v == "ready", within).await;
    let rows = browser.eval("return document.querySelectorAll('#devices tbody tr').length").await;
    assert_eq!(rows, device_count, "one row per detected device");
    browser
        .wait_for(
            "the plan's choice in the events",
            "return document.getElementById('events').textContent",
            |v| v.as_str().is_some_and(|t| t.contains("tiny-cpu-test")),
            within,
        )
        .await;
    browser.screenshot(&screenshot_path().with_file_name("web-status-run.png")).await;

    // Kill the engine from outside: the supervisor restarts it and the page follows.
    let (_, engines_now) = call(web_addr, "GET", "/api/v1/engines", None).await;
    let pid: i32 =
        engines_now["engine-cpu"]["instance"].as_str().and_then(|p| p.parse().ok()).expect("engine pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let deadline = Instant::now() + within;
    loop {
        let (_, e) = call(web_addr, "GET", "/api/v1/engines", None).await;
        if e["engine-cpu"]["restarts"].as_u64().unwrap_or(0) >= 1
            && e["engine-cpu"]["state"]["state"] == "ready"
        {
            break;
        }
        assert!(Instant::now() < deadline, "engine not back after kill: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.wait_for("engine ready again", state_js, |v| v == "ready", within).await;
    assert_eq!(browser.eval("return document.getElementById('live').textContent").await, "live");
    drop(browser);

    let exit = tokio::task::block_in_place(|| rig.terminate(Duration::from_secs(30)));
    assert!(exit.success(), "{exit}");
}

/// What a predictive fan loop's plans weighed, as the status carries it.
fn fan_decision() -> DecisionDetail {
    DecisionDetail {
        junction_est_c: 61.2,
        budget_c: 94.0,
        model_bias_c: 0.1,
        reserve_max_c: 4.5,
        stream_w: 120.0,
        required_pct: 34.0,
        ..DecisionDetail::default()
    }
}
