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

/// A part that fails stops the whole supervisor: with the status page's port taken, `run` stops
/// the engine it started and exits non-zero naming the address, so the service manager starts it
/// again (rather than it running on with no status page, API or OTA).
#[test]
fn run_stops_with_the_error_of_a_part_that_fails() {
    let mut rig = RunRig::new();
    let _taken = std::net::TcpListener::bind(("127.0.0.1", rig.web_port)).expect("bind the web port first");
    let log = rig.dir.path().join("run.log");
    let mut command = rig.command();
    command.env("LUCEBOX_WEB__BIND", "127.0.0.1").stderr(std::fs::File::create(&log).unwrap());
    rig.spawn(command);
    let child = rig.child.as_mut().expect("spawned");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(std::time::Instant::now() < deadline, "run kept running with its web part failed");
        std::thread::sleep(Duration::from_millis(100));
    };
    rig.child = None;
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!exit.success(), "{exit}: {stderr}");
    let named = format!("web: cannot listen on 127.0.0.1:{}", rig.web_port);
    assert!(stderr.lines().last().is_some_and(|l| l.contains(&named)), "{stderr}");
    assert!(http(rig.engine_port, "GET", "/health", "").is_none(), "engine port still answers");
}

/// `thermal/loop-cpu.sh` runs `lucebox run` on a copy of the captured R9700 host with the CPU
/// llama-server standing in for its Vulkan build: the fan loop must drive the card under the
/// engine's load and account its own CPU time. A short run; the figure itself is the script's job.
/// The card starts from its entry in the active profile set's thermal priors, and what the loop
/// learned is left in `<state_dir>/thermal/` when the supervisor stops, its forecast naming the model
/// the engine served.
#[test]
fn run_drives_a_captured_cards_fan_under_engine_load_and_accounts_its_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let priors = dir.path().join("priors.toml");
    std::fs::write(
        &priors,
        "[[card]]\narch = \"gfx1201\"\nsink_capacity_j_per_k = 650.0\nsink_to_air_stopped_k_per_w = 0.6\n\
         sink_to_air_full_k_per_w = 0.11\njunction_to_sink_k_per_w = 0.06\nambient_c = 30.0\n",
    )
    .unwrap();
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("thermal/loop-cpu.sh"))
        .arg("5")
        .env("THERMAL_PRIORS", &priors)
        .env("ENGINE_PORT", free_port().to_string())
        .env("WEB_PORT", free_port().to_string())
        .env("LUCEBOX", env!("CARGO_BIN_EXE_lucebox"))
        .env("LUCEBOX_LLAMA_SERVER", llama_server())
        .env("LUCEBOX_TINY_MODEL", tiny_model(dir.path()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(report["device"], "0000:03:00.0");
    assert_eq!(report["mode"], "predictive", "{report}");
    assert!(report["requests"].as_u64().unwrap() > 0, "no request served: {report}");
    assert!(report["loop_cpu_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["loop_cpu_pct"].as_f64().unwrap() > 0.0, "{report}");
    let from_card =
        "0000:03:00.0: no learned thermal model yet; starting from the prior for arch = \"gfx1201\"";
    let events = report["thermal_events"].as_array().unwrap();
    assert!(events.iter().any(|e| e.as_str().unwrap().starts_with(from_card)), "{report}");
    let mut learned: Vec<&str> =
        report["learned_files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    learned.sort();
    let [forecast, model] = learned[..] else { panic!("{report}") };
    assert!(model.starts_with("0000_03_00.0-") && model.ends_with(".json"), "{report}");
    assert_eq!(forecast, model.replace(".json", ".forecast.json"), "{report}");
    // The load publisher named the served model, and the forecast was learned with it.
    assert_eq!(report["forecast_models"], serde_json::json!(["tiny-llama.gguf"]), "{report}");
}

/// On a board with firmware hooks (the captured Framework Desktop, its Strix Halo iGPU served by
/// the CPU llama-server standing in for the Vulkan build), `lucebox run` tells the board's hooks
/// what it does: `boot` and the configured power limits before anything else, `engine-crashed`
/// naming the engine when it is killed, and `shutdown` last, after the fan loop has handed the
/// EC's fan back. The hooks here record each event they are sent and agree to it.
#[test]
fn run_tells_the_boards_hooks_of_its_start_an_engine_crash_and_its_stop() {
    let mut rig = RunRig::new();
    let (root, profiles) = rig.on_captured_host("strix-halo-128g", "vulkan");

    let events_log = rig.dir.path().join("hook-events.log");
    let board = rig.dir.path().join("hooks/framework-desktop");
    std::fs::create_dir_all(&board).unwrap();
    for event in ["boot", "power-limit", "set-fan", "fan-auto", "engine-crashed", "shutdown"] {
        let hook = board.join(event);
        let script = format!(
            "#!/bin/sh\nevent=$(cat)\nprintf '%s\\n' \"$event\" >> '{}'\necho '{{\"ok\":true}}'\n",
            events_log.display()
        );
        std::fs::write(&hook, script).unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let config = rig.dir.path().join("lucebox.toml");
    std::fs::write(
        &config,
        format!(
            "[hooks]\ndir = {:?}\npower_limit = {{ stapm_w = 85, fast_w = 120, slow_w = 100 }}\n",
            board.parent().unwrap()
        ),
    )
    .unwrap();
    let mut command = rig.command();
    command.env("LUCEBOX_CONFIG", &config).env("LUCEBOX_ROOT", &root).env("LUCEBOX_PROFILES_DIR", &profiles);
    rig.spawn(command);
    let events = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&events_log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
            .collect()
    };

    fn named(name: &'static str) -> impl Fn(&serde_json::Value) -> bool {
        move |e| e["event"] == name
    }
    let engine = "engine-0000-c3-00-0";
    let engine_pid = || -> Option<i32> {
        let (_, body) = http(rig.web_port, "GET", "/api/v1/engines", "")?;
        let engines: serde_json::Value = serde_json::from_str(&body).ok()?;
        (engines[engine]["state"]["state"] == "ready").then_some(())?;
        engines[engine]["instance"].as_str()?.parse().ok()
    };
    wait_for("the engine to be ready", Duration::from_secs(60), || engine_pid().is_some());
    let started = events();
    assert_eq!(started.first(), Some(&serde_json::json!({"event": "boot"})), "{started:?}");
    let limits =
        serde_json::json!({"event": "power-limit", "stapm_mw": 85000, "fast_mw": 120000, "slow_mw": 100000});
    assert_eq!(started.get(1), Some(&limits), "{started:?}");
    assert!(!started.iter().any(named("engine-crashed")), "{started:?}");

    let pid = engine_pid().expect("ready");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    wait_for("engine-crashed sent to the board", Duration::from_secs(20), || {
        events().iter().any(named("engine-crashed"))
    });
    let crashed = events().into_iter().find(|e| named("engine-crashed")(e)).unwrap();
    assert_eq!(crashed["engine"], engine, "{crashed}");
    assert!(crashed["exit"].as_str().is_some_and(|exit| !exit.is_empty()), "{crashed}");
    wait_for("the engine back after its crash", Duration::from_secs(60), || {
        engine_pid().is_some_and(|p| p != pid)
    });

    let exit = rig.terminate(Duration::from_secs(30));
    assert!(exit.success(), "{exit}");
    let all = events();
    assert_eq!(all.iter().filter(|e| e["event"] == "boot").count(), 1, "{all:?}");
    assert_eq!(all.last(), Some(&serde_json::json!({"event": "shutdown"})), "{all:?}");
    assert_eq!(
        all.iter().filter(|e| e["event"] == "engine-crashed").count(),
        1,
        "one crash, one event: {all:?}"
    );
    // The fan loop drove the EC's fan through the same hooks, and handed it back before `shutdown`.
    let last_set_fan = all.iter().rposition(named("set-fan")).expect("the fan loop sent set-fan");
    let last_fan_auto = all.iter().rposition(named("fan-auto")).expect("the fan loop sent fan-auto");
    assert!(last_set_fan < last_fan_auto && last_fan_auto < all.len() - 1, "{all:?}");
}

/// Docker Desktop on Windows (WSL2): the supervisor serves the GPU Windows lends through
/// `/dev/dxg` (the CPU llama-server stands in for the Vulkan build: the CUDA build is
/// dflash_server, which the tiny profile does not run), hands it to the engine by its UUID, and
/// never touches its fans, which the Windows driver keeps, though NVML offers one.
#[test]
fn run_serves_a_gpu_lent_by_windows_and_leaves_its_fans_alone() {
    let mut rig = RunRig::new();
    let (root, profiles) = rig.on_captured_host("wsl2-rtx4090", "vulkan");
    let lib = build_fake_nvml(rig.dir.path());
    let fan_log = rig.dir.path().join("nvml-fan.log");
    let mut command = rig.command();
    command
        .env("LUCEBOX_ROOT", &root)
        .env("LUCEBOX_PROFILES_DIR", &profiles)
        .env("LUCEBOX_NVML_LIB", &lib)
        .env("FAKE_NVML_CONFIG", root.join("nvml.json"))
        .env("FAKE_NVML_LOG", &fan_log);
    rig.spawn(command);
    let engine = "engine-0000-01-00-0";
    let status = || -> Option<serde_json::Value> {
        let (_, body) = http(rig.web_port, "GET", "/api/v1/status", "")?;
        serde_json::from_str(&body).ok()
    };
    wait_for("the lent GPU's engine to be ready", Duration::from_secs(60), || {
        status().is_some_and(|s| s["engines"][engine]["state"]["state"] == "ready")
    });
    let status = status().unwrap();
    let pid: i32 = status["engines"][engine]["instance"].as_str().unwrap().parse().unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let uuid = b"CUDA_VISIBLE_DEVICES=GPU-3f9b2c71-8e4d-4a06-b5c2-7d1e0a9f6c43".as_slice();
    assert!(environ.split(|b| *b == 0).any(|v| v == uuid), "the engine reaches the card by its UUID");
    // A fan loop would have driven NVML's fan within a few periods of the engine's start.
    std::thread::sleep(Duration::from_secs(3));
    let exit = rig.terminate(Duration::from_secs(30));
    assert!(exit.success(), "{exit}");
    let writes = std::fs::read_to_string(&fan_log).unwrap_or_default();
    assert_eq!(writes, "", "NVML was asked to change a fan Windows keeps");
}
