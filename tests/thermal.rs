//! The thermal CLI end to end: bench output and determinism, offline fit, fan reset on captured
//! sysfs trees, and the SIGKILL path (the fan is left low; `thermal reset` hands it back).

mod common;

use common::repo_root as repo;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const DEV: &str = "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0";

fn lucebox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lucebox")).args(args).output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `lucebox` on the fake NVML described by `config`, which logs the fan writes to `log`.
fn on_fake_nvml(config: &Path, log: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lucebox"));
    command.env("FAKE_NVML_CONFIG", config).env("FAKE_NVML_LOG", log);
    command
}

/// A writable copy of a captured tree (symlinks kept).
fn fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = repo().join("tests/fixtures/thermal").join(name);
    let status = Command::new("cp").arg("-a").arg(&src).arg(dir.path()).status().unwrap();
    assert!(status.success());
    let root = dir.path().join(name);
    (dir, root)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// A short agent-like trace: growing prompts with tool gaps.
fn short_trace(dir: &Path) -> PathBuf {
    let mut csv = String::from("t_s,prompt_tokens,output_tokens,session\n");
    let mut t = 5.0;
    for turn in 0..12 {
        csv.push_str(&format!("{t:.1},{},{},a\n", 3000 + 1500 * turn, 200));
        t += 15.0;
    }
    let path = dir.join("trace.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

/// `lucebox thermal bench` of a plant file on a trace.
fn bench(plant: &Path, trace: &Path, extra: &[&str]) -> Output {
    let mut args =
        vec!["thermal", "bench", "--plant", plant.to_str().unwrap(), "--trace", trace.to_str().unwrap()];
    args.extend_from_slice(extra);
    lucebox(&args)
}

/// The `--json` report of a shipped plant on a trace.
fn bench_json(plant: &str, trace: &Path, extra: &[&str]) -> serde_json::Value {
    let out = bench(&repo().join("thermal/plants").join(plant), trace, &[extra, &["--json"]].concat());
    serde_json::from_str(&ok(out)).unwrap()
}

#[test]
fn bench_reports_every_field_serves_the_same_tokens_and_is_seeded() {
    let dir = tempfile::tempdir().unwrap();
    let trace = short_trace(dir.path());
    let report = bench_json("r9700-blower.toml", &trace, &["--seed", "3"]);
    assert_eq!(report["same_service"], true);
    let controllers = report["controllers"].as_object().unwrap();
    for name in ["stock", "target", "predictive", "oracle"] {
        let c = &controllers[name];
        for key in [
            "mean_duty_pct",
            "p95_duty_pct",
            "noise_db_vs_full",
            "peak_junction_c",
            "p99_junction_c",
            "seconds_over_limit",
            "duty_changes_per_min",
            "quiet_time_pct",
            "tokens_served",
        ] {
            assert!(c[key].is_number(), "{name}.{key} missing: {c}");
        }
        assert_eq!(c["tokens_served"], 12 * 200, "{name}");
    }
    let p = &controllers["predictive"];
    assert!(p["prediction_mae_30s_c"].is_number());
    assert!(p["share_of_achievable_pct"].is_number());
    assert_eq!(p["seconds_over_limit"], 0.0);
    // The oracle is the floor of what holding the limit allows.
    assert!(controllers["oracle"]["mean_duty_pct"].as_f64() <= p["mean_duty_pct"].as_f64());

    assert_eq!(bench_json("r9700-blower.toml", &trace, &["--seed", "3"]), report);
    assert_ne!(bench_json("r9700-blower.toml", &trace, &["--seed", "4"])["controllers"]["predictive"], *p);
}

#[test]
fn stock_peak_ceiling_is_stocks_own_peak_and_predictive_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = short_trace(dir.path());
    let report = bench_json("rtx3090-openair.toml", &trace, &["--ceiling", "stock-peak"]);
    let stock = &report["controllers"]["stock"];
    let (limit, peak) = (report["limit_c"].as_f64().unwrap(), stock["peak_junction_c"].as_f64().unwrap());
    assert!((limit - peak - 0.01).abs() < 1e-9, "{limit} vs {peak}");
    assert_eq!(stock["seconds_over_limit"], 0.0);
    assert_eq!(report["controllers"]["predictive"]["seconds_over_limit"], 0.0);
}

/// Completions while someone types on a zero-rpm card: small requests every second or two for
/// minutes. Each is over in a second or two, but together they heat the heatsink as one long
/// answer would; a plan that saw only the queue kept the fan stopped until full speed came too late
/// (6.4 s over the limit on this run before the forecast counted the stream).
#[test]
fn a_stream_of_small_requests_stays_under_the_limit() {
    assert_predictive_stays_under_the_limit("rtx4090-hot-case.toml", "code-assist-holdout.csv", 1500, 1);
}

/// An office sharing a 575 W card: a document tool sends several large prompts at once while the
/// fan is stopped. Their prefills run back to back; room kept for one large prompt was too little
/// (14.1 s over the limit on this run before the forecast remembered bursts as one surprise).
#[test]
fn prompts_arriving_together_stay_under_the_limit() {
    assert_predictive_stays_under_the_limit("rtx5090-sff.toml", "office-holdout.csv", 1800, 1);
}

/// Completions resuming after a pause on the 575 W card: measured over the last minute, the
/// rate of the burst was diluted by the pause, the plan expected less heat than came, and the fan
/// stayed stopped, then slow, for 40 s (2.2 s over the limit on this run before the rate was
/// measured over the burst's own span).
#[test]
fn a_burst_of_completions_after_a_pause_stays_under_the_limit() {
    assert_predictive_stays_under_the_limit("rtx5090-sff.toml", "code-assist-holdout.csv", 2460, 8);
}

/// A mailing list's sync on a 180 W card in a warm cupboard: two client workers send the emails
/// back to back, each shown in the queue only as it arrives. Every plan expected the queue to
/// drain within seconds, the fan sat at its floor while the heatsink warmed, and the next request
/// lifted the die over the limit before full speed answered (1.3 s over on this run before the
/// plans also had to hold with the last seconds' work going on).
#[test]
fn requests_sent_back_to_back_at_the_fans_floor_stay_under_the_limit() {
    assert_predictive_stays_under_the_limit("rtx5060ti-closet.toml", "email-triage-holdout.csv", 2100, 1);
}

/// The same completions on a blower that never stops: the stream guards a stopped fan's restart,
/// and counted here it ran the fan above target's mean (63.3 % against 61.1 % over these 900 s).
#[test]
fn a_fan_that_never_stops_does_not_pay_for_the_stream() {
    let trace = repo().join("thermal/traces/code-assist-holdout.csv");
    let report = bench_json("rtx2080ti-blower.toml", &trace, &["--duration", "900"]);
    let (p, target) = (&report["controllers"]["predictive"], &report["controllers"]["target"]);
    assert_eq!(p["seconds_over_limit"], 0.0, "{p}");
    let mean = |c: &serde_json::Value| c["mean_duty_pct"].as_f64().unwrap();
    assert!(mean(p) < mean(target), "predictive {p} vs target {target}");
}

/// Every plant and trace in `thermal/` loads as the bench reads it, including a held-out set kept
/// back (whose files nothing else runs until it judges a change): stock alone, one second each.
#[test]
fn every_shipped_plant_and_trace_loads() {
    let files = |dir: &str, ext: &str| -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == ext))
            .collect();
        found.sort();
        found
    };
    let (plants, traces) = (files("thermal/plants", "toml"), files("thermal/traces", "csv"));
    assert!(plants.len() >= 13 && traces.len() >= 11, "{plants:?} {traces:?}");
    let one_second = ["--controller", "stock", "--duration", "1", "--json"];
    for plant in &plants {
        ok(bench(plant, &traces[0], &one_second));
    }
    for trace in &traces {
        ok(bench(&plants[0], trace, &one_second));
    }
}

/// Every trace `thermal/traces/generate.py` writes is the shipped one, byte for byte: a trace
/// edited by hand, or a generator changed without its trace, would leave the README's
/// description of it and the bench's figures from different requests.
#[test]
fn the_shipped_traces_are_what_their_generator_writes() {
    let dir = tempfile::tempdir().unwrap();
    let traces = repo().join("thermal/traces");
    let run =
        Command::new("python3").arg(traces.join("generate.py")).current_dir(dir.path()).output().unwrap();
    ok(run);
    let mut written: Vec<PathBuf> =
        std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().path()).collect();
    written.sort();
    assert!(written.len() >= 20, "{written:?}");
    for path in written {
        let name = path.file_name().unwrap();
        let shipped = std::fs::read(traces.join(name)).unwrap();
        assert!(std::fs::read(&path).unwrap() == shipped, "{name:?} differs from what generate.py writes");
    }
}

/// The predictive controller alone on a shipped plant and trace, cut at `duration_s`.
fn assert_predictive_stays_under_the_limit(plant: &str, trace: &str, duration_s: u32, seed: u32) {
    let trace = repo().join("thermal/traces").join(trace);
    let (duration, seed) = (duration_s.to_string(), seed.to_string());
    let args = ["--controller", "predictive", "--duration", &duration, "--seed", &seed];
    let report = bench_json(plant, &trace, &args);
    let p = &report["controllers"]["predictive"];
    assert_eq!(p["seconds_over_limit"], 0.0, "{plant} on {}: {p}", trace.display());
}

/// `thermal/stock-peak-bound.sh` reads the oracle at a ceiling under stock's peak as the least
/// duty a controller keeping that margin needs: the oracle honours a numeric ceiling and pays for
/// a lower one.
#[test]
fn oracle_under_a_lower_ceiling_holds_it_and_needs_more_duty() {
    let dir = tempfile::tempdir().unwrap();
    let trace = short_trace(dir.path());
    let at_peak = bench_json("r9700-blower.toml", &trace, &["--ceiling", "stock-peak"]);
    let ceiling = at_peak["limit_c"].as_f64().unwrap() - 1.0;
    let oracle_mean =
        |report: &serde_json::Value| report["controllers"]["oracle"]["mean_duty_pct"].as_f64().unwrap();
    let lower = bench_json(
        "r9700-blower.toml",
        &trace,
        &["--ceiling", &format!("{ceiling:.2}"), "--controller", "oracle"],
    );
    let oracle = &lower["controllers"]["oracle"];
    assert_eq!(oracle["seconds_over_limit"], 0.0);
    assert!(oracle["peak_junction_c"].as_f64().unwrap() <= ceiling + 1e-9, "{oracle}");
    assert!(
        oracle_mean(&lower) > oracle_mean(&at_peak) + 0.1,
        "{} vs {}",
        oracle_mean(&lower),
        oracle_mean(&at_peak)
    );
}

/// `--unannounced-oracle` adds the oracle kept to survive unannounced work: it holds the limit,
/// runs no quieter than the oracle, and its share of the gap is reported beside the others'.
#[test]
fn the_oracle_kept_to_survive_unannounced_work_is_reported_beside_the_others() {
    let trace = repo().join("thermal/traces/code-assist-holdout.csv");
    let report = bench_json("rtx5090-fe-warm.toml", &trace, &["--unannounced-oracle", "--duration", "900"]);
    let controllers = report["controllers"].as_object().unwrap();
    let names: Vec<&str> = controllers.keys().map(String::as_str).collect();
    assert_eq!(names, ["oracle", "oracle-unannounced", "predictive", "stock", "target"]);
    let kept = &controllers["oracle-unannounced"];
    let mean = |name: &str| controllers[name]["mean_duty_pct"].as_f64().unwrap();
    assert_eq!(kept["seconds_over_limit"], 0.0);
    assert!(
        mean("oracle-unannounced") > mean("oracle"),
        "{} vs {}",
        mean("oracle-unannounced"),
        mean("oracle")
    );
    let share = kept["share_of_achievable_pct"].as_f64().unwrap();
    assert!(share > 0.0 && share < 100.0, "{share}");
    // Not run without the flag.
    let plain = bench_json("rtx5090-fe-warm.toml", &trace, &["--duration", "60"]);
    assert!(plain["controllers"].get("oracle-unannounced").is_none());
}

/// `--state-dir` resumes the predictive controller's learned state as a restarted device does:
/// the first run starts from the priors (the same run as without it) and saves, the second resumes
/// and so decides differently; the other controllers learn nothing and run the same. A bad state
/// file stops the bench with its name and field.
#[test]
fn bench_state_dir_resumes_what_the_predictive_controller_learned() {
    let dir = tempfile::tempdir().unwrap();
    let trace = short_trace(dir.path());
    let state = dir.path().join("state");
    let with_state = ["--state-dir", state.to_str().unwrap()];
    let plain = bench_json("r9700-blower.toml", &trace, &[]);
    assert!(plain.get("predictive_resumed").is_none(), "{plain}");
    let first = bench_json("r9700-blower.toml", &trace, &with_state);
    assert_eq!(first["predictive_resumed"], false);
    assert_eq!(first["controllers"], plain["controllers"], "saving must not change the run");
    let saved = state.join("thermal");
    let forecast = saved.join("bench-r9700-blower-nouid.forecast.json");
    assert!(saved.join("bench-r9700-blower-nouid.json").is_file() && forecast.is_file());

    let second = bench_json("r9700-blower.toml", &trace, &with_state);
    assert_eq!(second["predictive_resumed"], true);
    for name in ["stock", "target", "oracle"] {
        assert_eq!(second["controllers"][name], first["controllers"][name], "{name}");
    }
    assert_ne!(second["controllers"]["predictive"], first["controllers"]["predictive"]);

    // The forecast is resumed too: the same state but for a far hotter remembered prefill keeps
    // more room for a prompt.
    let model = saved.join("bench-r9700-blower-nouid.json");
    let (learned_model, learned) =
        (std::fs::read(&model).unwrap(), std::fs::read_to_string(&forecast).unwrap());
    let resumed = bench_json("r9700-blower.toml", &trace, &with_state);
    let mut huge: serde_json::Value = serde_json::from_str(&learned).unwrap();
    huge["prefill_w"] = serde_json::json!(1500.0);
    std::fs::write(&forecast, huge.to_string()).unwrap();
    std::fs::write(&model, learned_model).unwrap();
    let wary = bench_json("r9700-blower.toml", &trace, &with_state);
    let mean = |r: &serde_json::Value| r["controllers"]["predictive"]["mean_duty_pct"].as_f64().unwrap();
    assert!(mean(&wary) > mean(&resumed), "{} vs {}", mean(&wary), mean(&resumed));

    std::fs::write(&forecast, learned.replace("\"version\": 1", "\"version\": 9")).unwrap();
    let out = bench(&repo().join("thermal/plants/r9700-blower.toml"), &trace, &with_state);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("blower-nouid.forecast.json: version: format 9"), "{stderr}");
}

#[test]
fn bad_plant_key_is_named_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join("thermal/plants/r9700-blower.toml")).unwrap();
    let plant = dir.path().join("bad.toml");
    std::fs::write(&plant, text.replace("lag_s", "lag_seconds")).unwrap();
    let trace = short_trace(dir.path());
    let out = bench(&plant, &trace, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("lag_seconds"), "{err}");
}

/// Reads a telemetry CSV into rows of named fields.
fn read_telemetry(path: &Path) -> Vec<TelemetryRow> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            assert_eq!(fields.len(), header.len(), "{l}");
            header.iter().cloned().zip(fields.into_iter().map(String::from)).collect()
        })
        .collect()
}

type TelemetryRow = std::collections::HashMap<String, String>;

/// The telemetry of the predictive controller on a shipped plant and trace, cut at `duration_s`
/// (with `extra` bench arguments), with the folder its log is in.
fn predictive_telemetry(
    plant: &str,
    trace: &str,
    duration_s: u32,
    extra: &[&str],
) -> (tempfile::TempDir, Vec<TelemetryRow>) {
    let dir = tempfile::tempdir().unwrap();
    let (plant, trace) = (
        repo().join(format!("thermal/plants/{plant}.toml")),
        repo().join(format!("thermal/traces/{trace}.csv")),
    );
    let log = dir.path().join("predictive.csv");
    let duration = duration_s.to_string();
    let args = ["--controller", "predictive", "--duration", &duration, "--telemetry-of", "predictive"];
    ok(bench(&plant, &trace, &[&args[..], &["--telemetry", log.to_str().unwrap()], extra].concat()));
    let rows = read_telemetry(&log);
    (dir, rows)
}

/// A telemetry field as a number; one that is not is named with its row's time.
fn num(row: &TelemetryRow, key: &str) -> f64 {
    row[key].parse().unwrap_or_else(|_| panic!("{key} = {:?} at t = {}", row[key], row["t_s"]))
}

/// No fan the daemon drives stops on command: a stop hands a zero-rpm fan back to its firmware,
/// whose curve spins it once the junction is warm (on NVIDIA, NVML reaches 0 % only through the
/// driver's auto). On the 4090 with agent turns the junction sits over the firmware's stop
/// between turns. Stopping there would leave the fan on the stock curve: the predictive
/// controller learns where the firmware stops the fan and runs at its floor above it, and the
/// oracle does the same.
#[test]
fn a_zero_rpm_fan_is_stopped_only_where_its_firmware_keeps_it_stopped() {
    let (dir, rows) = predictive_telemetry("rtx4090-hot-case", "agent", 900, &[]);
    let (mut stops, mut spun_while_stopped) = (0, 0);
    for (row, next) in rows.iter().zip(rows.iter().skip(1)) {
        if num(row, "command_pct") == 0.0 {
            stops += 1;
            // Work arriving while stopped, or the firmware's own hysteresis, may spin the fan
            // for a period; the next command takes it back to the floor or above.
            if num(next, "fan_duty_pct") > num(row, "fan_duty_pct") {
                spun_while_stopped += 1;
                assert!(
                    num(next, "command_pct") >= 25.0,
                    "left on the firmware's curve at t = {}",
                    next["t_s"]
                );
            }
        }
    }
    assert!(
        stops > 30 && spun_while_stopped > 0,
        "{stops} stops, {spun_while_stopped} spun up by the firmware"
    );
    let learned = num(&rows[rows.len() - 1], "firmware_stops_below_c");
    assert!(
        (50.0..=53.0).contains(&learned),
        "the 4090's firmware stops its fan under 51.7 °C, learned {learned}"
    );

    let report =
        bench_json("rtx4090-hot-case.toml", &repo().join("thermal/traces/agent.csv"), &["--duration", "900"]);
    let mean = |c: &str| report["controllers"][c]["mean_duty_pct"].as_f64().unwrap();
    assert!(
        mean("predictive") < 0.8 * mean("stock"),
        "predictive {} vs stock {}",
        mean("predictive"),
        mean("stock")
    );
    assert!(
        mean("predictive") < mean("oracle") + 1.0,
        "predictive {} vs oracle {}",
        mean("predictive"),
        mean("oracle")
    );

    let oracle_log = dir.path().join("oracle.csv");
    let (plant, trace) =
        (repo().join("thermal/plants/rtx4090-hot-case.toml"), repo().join("thermal/traces/agent.csv"));
    let args = ["--controller", "oracle", "--duration", "900", "--telemetry-of", "oracle"];
    ok(bench(&plant, &trace, &[&args[..], &["--telemetry", oracle_log.to_str().unwrap()]].concat()));
    let oracle = read_telemetry(&oracle_log);
    let warm_stops =
        oracle.iter().filter(|r| num(r, "command_pct") == 0.0 && num(r, "true_junction_c") > 52.0).count();
    assert_eq!(warm_stops, 0, "the oracle stopped the fan where the firmware spins it");
}

/// The telemetry of a predictive run says, period by period, what its plans weighed, consistent
/// with the command it gave; other controllers leave those columns empty, and `fit` still reads
/// the log (see the next test, which fits a stock log with the same header). The 3090's fan stops
/// only through its firmware, so the run has all three kinds of period: stopped, at the floor
/// where the plans would stop it but the firmware would spin it, and running on its plans.
#[test]
fn telemetry_says_why_the_predictive_controller_chose_each_duty() {
    let (dir, rows) = predictive_telemetry("rtx3090-openair", "code-assist-holdout", 700, &[]);
    assert_eq!(rows.len(), 700);
    let (mut stopped, mut floor_for_stop, mut running_plans) = (0, 0, 0);
    for row in &rows {
        let t = &row["t_s"];
        let (command, floor, required) =
            (num(row, "command_pct"), num(row, "reactive_floor_pct"), num(row, "required_pct"));
        let (stop_safe, stays) = (num(row, "stop_safe"), num(row, "stays_stopped"));
        let firmware_would_spin = num(row, "firmware_would_spin") == 1.0;
        assert!(command >= floor, "command under the reactive floor at t = {t}");
        assert!(num(row, "budget_c") < 93.0, "budget at or over the 93 °C limit at t = {t}");
        assert!(num(row, "reserve_max_c") >= 0.0 && num(row, "stream_w") >= 0.0);
        assert!(stop_safe <= stays, "safe to stop but not to stay stopped at t = {t}");
        let held = num(row, "held") == 1.0;
        // The safety layer's floor may lift the controller's duty near the limit (see the next
        // tests), so a duty at the fan's lowest may be sent higher, never lower.
        let at_floor = num(row, "at_floor") == 1.0;
        assert!(command != 30.0 || at_floor, "30 %, the 3090's lowest duty, not said at t = {t}");
        assert!(!at_floor || command >= 30.0, "under the 3090's lowest duty at t = {t}");
        assert!(!held || command > required, "held at or under what the plans need, t = {t}");
        // A plan stops the fan or runs it at its floor at least; the duty search may also find
        // that staying stopped over the whole horizon holds where the stop plans did not.
        assert!(required == 0.0 || required >= 30.0, "a plan between a stop and the 30 % floor at t = {t}");
        if stays == 1.0 {
            assert_eq!(required, 0.0, "a fan that may stay stopped requires nothing, t = {t}");
        } else if required >= 30.0 {
            running_plans += 1;
        }
        if command == 0.0 {
            assert!(!firmware_would_spin, "stopped where the firmware would spin the fan, t = {t}");
            stopped += 1;
        } else if firmware_would_spin && stays == 1.0 {
            assert!(command >= 30.0, "under the floor where the firmware would spin the fan, t = {t}");
            if command == 30.0 {
                assert!(!held, "the floor for a stop is not the dwell holding the fan, t = {t}");
                floor_for_stop += 1;
            }
        }
        assert!((num(row, "est_c") - num(row, "junction_c")).abs() <= 3.0, "estimate far from reading");
    }
    assert!(
        stopped > 30 && floor_for_stop > 100 && running_plans > 30,
        "{stopped} stopped, {floor_for_stop} at the floor for a stop, {running_plans} running"
    );

    let stock_log = dir.path().join("stock.csv");
    let (plant, trace) = (
        repo().join("thermal/plants/rtx4070-itx.toml"),
        repo().join("thermal/traces/code-assist-holdout.csv"),
    );
    let args = ["--controller", "stock", "--duration", "30", "--telemetry-of", "stock"];
    ok(bench(&plant, &trace, &[&args[..], &["--telemetry", stock_log.to_str().unwrap()]].concat()));
    let stock = read_telemetry(&stock_log);
    assert!(stock.iter().all(|r| r["required_pct"].is_empty() && r["stays_stopped"].is_empty()));
    assert!(stock.iter().all(|r| !r["command_pct"].is_empty()));
}

/// The bench scores the predictive controller as `lucebox run` drives a fan: under the daemon's
/// safety layer, whose reactive floor (from 2 °C under the limit to full speed at it) lifts the
/// duty at once and lets it fall only after 15 readings lower. On the Strix Halo box with agent
/// work the plans ride a degree under the 95 °C limit, so the floor binds; without the layer the
/// bench would score duties the daemon never sends.
#[test]
fn the_bench_drives_the_predictive_controller_under_the_daemons_safety_layer() {
    let (_dir, rows) = predictive_telemetry("strix-halo-box", "agent", 600, &[]);
    let floor_of = |junction_c: f64| ((junction_c - 93.0) / 2.0 * 100.0).clamp(0.0, 100.0);
    // The layer's rules, replayed on the readings: full speed from the limit until 5 °C under it,
    // else the highest floor of the last 15 readings.
    let (mut recent, mut at_full) = (std::collections::VecDeque::new(), false);
    let (mut lifted, mut held_after) = (0, 0);
    for row in &rows {
        let (command, junction, t) = (num(row, "command_pct"), num(row, "junction_c"), &row["t_s"]);
        if junction >= 95.0 || (at_full && junction > 90.0) {
            (at_full, recent) = (true, std::collections::VecDeque::new());
            assert_eq!(command, 100.0, "full speed at the limit, t = {t}");
            continue;
        }
        at_full = false;
        if recent.len() == 15 {
            recent.pop_front();
        }
        recent.push_back(floor_of(junction));
        let floor = recent.iter().copied().fold(0.0, f64::max);
        assert!(command >= floor, "{command} % under the safety floor of {floor} % at t = {t}");
        if floor > 0.0 && num(row, "required_pct") < floor - 10.0 {
            lifted += 1;
            held_after += usize::from(floor_of(junction) < floor);
        }
    }
    assert!(lifted >= 10, "the floor lifted the plans' duty {lifted} times: this run no longer tests it");
    assert!(held_after >= 5, "the floor was held after the reading fell {held_after} times");
}

/// The predictive controller learns each fan's lag from the duty it reports a period after each
/// command (the Strix Halo box's 4 s fan against the 4070's 2 s one), keeps it with the model and
/// resumes it after a restart; a saved lag no fan could have stops the bench with its file and key.
#[test]
fn a_fans_lag_is_learned_from_its_reported_duty_kept_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let trace = repo().join("thermal/traces/code-assist-holdout.csv");
    let state = dir.path().join("state");
    let learned_lag = |plant: &str| -> (f64, f64) {
        let state_dir = ["--state-dir", state.to_str().unwrap()];
        let (_log_dir, rows) = predictive_telemetry(plant, "code-assist-holdout", 600, &state_dir);
        (num(&rows[0], "fan_lag_s"), num(&rows[rows.len() - 1], "fan_lag_s"))
    };
    let (first, strix) = learned_lag("strix-halo-box");
    assert_eq!(first, 2.0, "before any command has moved the fan, the fastest lag is assumed");
    assert!((strix - 4.0).abs() < 0.6, "the Strix Halo box's 4 s fan learned as {strix} s");
    let (_, rtx4070) = learned_lag("rtx4070-itx");
    assert!((rtx4070 - 2.0).abs() < 0.3, "the 4070's 2 s fan learned as {rtx4070} s");

    let model = state.join("thermal/bench-strix-halo-box-nouid.json");
    let saved: serde_json::Value = serde_json::from_str(&read(&model)).unwrap();
    let kept = saved["fan_lag_s"].as_f64().unwrap();
    assert!((kept - strix).abs() < 0.01, "saved {kept} s, learned {strix} s");
    let (resumed, _) = learned_lag("strix-halo-box");
    assert!((resumed - kept).abs() < 0.01, "a restart starts from {resumed} s, not the kept {kept} s");

    let mut bad = saved.clone();
    bad["fan_lag_s"] = serde_json::json!(-1.0);
    std::fs::write(&model, bad.to_string()).unwrap();
    let out = bench(
        &repo().join("thermal/plants/strix-halo-box.toml"),
        &trace,
        &["--duration", "10", "--state-dir", state.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("strix-halo-box-nouid.json: fan_lag_s: -1 is outside 2..=15"), "{stderr}");
}

#[test]
fn fit_recovers_the_junction_resistance_from_bench_telemetry() {
    let dir = tempfile::tempdir().unwrap();
    let trace = short_trace(dir.path());
    let log = dir.path().join("telemetry.csv");
    let plant = repo().join("thermal/plants/rtx3090-openair.toml");
    ok(bench(
        &plant,
        &trace,
        &["--controller", "stock", "--telemetry", log.to_str().unwrap(), "--telemetry-of", "stock"],
    ));
    let saved = dir.path().join("model.json");
    let fit: serde_json::Value = serde_json::from_str(&ok(lucebox(&[
        "thermal",
        "fit",
        "--log",
        log.to_str().unwrap(),
        "--json",
        "--save",
        saved.to_str().unwrap(),
    ])))
    .unwrap();
    let r_js = fit["params"]["r_js_k_per_w"].as_f64().unwrap();
    assert!((r_js - 0.045).abs() < 0.015, "r_js {r_js}");
    // The fitted ambient is reported (a 3-minute log does not pin it down; `model.rs` tests how
    // closely a longer one does), within the fit's range around the prior's 30 °C.
    let ambient = fit["ambient_c"].as_f64().unwrap();
    assert!((5.0..=55.0).contains(&ambient), "ambient {ambient}");
    assert!(saved.exists());
}

#[test]
fn reset_hands_curve_and_pwm_fans_back_to_auto() {
    let (_d1, rdna4) = fixture("r9700-rdna4");
    let (_d2, older) = fixture("rx6800-hwmon");
    let curve = rdna4.join(DEV).join("gpu_od/fan_ctrl/fan_curve");
    std::fs::write(&curve, "c\n").unwrap();
    let enable = older.join(DEV).join("hwmon/hwmon2/pwm1_enable");
    std::fs::write(&enable, "1\n").unwrap();
    ok(lucebox(&["thermal", "reset", "--root", rdna4.to_str().unwrap()]));
    ok(lucebox(&["thermal", "reset", "--root", older.to_str().unwrap()]));
    assert_eq!(read(&curve), "r");
    assert_eq!(read(&enable), "2");
}

/// `lucebox thermal reset` (the unit's `ExecStopPost`) finds the board's hooks in the configured
/// folder, and still resets the fans when the configuration no longer loads, saying why.
#[test]
fn reset_hands_an_ec_fan_back_through_the_configured_hooks_folder() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let dmi = root.join("sys/class/dmi/id");
    std::fs::create_dir_all(&dmi).unwrap();
    std::fs::write(dmi.join("board_vendor"), "Framework\n").unwrap();
    std::fs::write(dmi.join("product_name"), "Desktop (AMD Ryzen AI Max 300 Series)\n").unwrap();
    let hooks = dir.path().join("hooks");
    let fan_auto = hooks.join("framework-desktop/fan-auto");
    let sent = dir.path().join("sent.log");
    std::fs::create_dir_all(fan_auto.parent().unwrap()).unwrap();
    let script = format!("#!/bin/sh\ncat >> '{}'\necho '{{\"ok\":true}}'\n", sent.display());
    std::fs::write(&fan_auto, script).unwrap();
    std::fs::set_permissions(&fan_auto, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.path().join("lucebox.toml");
    std::fs::write(&config, format!("[hooks]\ndir = {hooks:?}\n")).unwrap();
    let reset = |config: &Path| {
        Command::new(env!("CARGO_BIN_EXE_lucebox"))
            .arg("--config")
            .arg(config)
            .args(["thermal", "reset", "--root", root.to_str().unwrap()])
            .output()
            .unwrap()
    };

    let stdout = ok(reset(&config));
    assert!(stdout.contains("hook") && stdout.contains("framework-desktop"), "{stdout}");
    assert_eq!(read(&sent), r#"{"event":"fan-auto"}"#);

    std::fs::write(&config, format!("[hooks]\ndri = {hooks:?}\n")).unwrap();
    let out = reset(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("dri") && stderr.contains(lucebox::hooks::DEFAULT_HOOKS_DIR), "{stderr}");
}

fn wait_for(path: &Path, want: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).map(|s| s.trim() == want).unwrap_or(false) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn sigkill_while_low_then_reset(name: &str, arch: &str, hwmon: &str, file: &str, low: &str, auto: &str) {
    let (_dir, root) = fixture(name);
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lucebox"))
        .args(control_of_tree(&root, state.path(), arch, hwmon, None))
        .spawn()
        .unwrap();
    let target = root.join(DEV).join(file);
    let driven = wait_for(&target, low);
    child.kill().unwrap(); // SIGKILL: no exit path runs.
    child.wait().unwrap();
    assert!(driven, "{name}: the loop never drove the fan ({})", read(&target));
    assert_eq!(read(&target), low, "{name}: SIGKILL leaves the fan where it was");
    ok(lucebox(&["thermal", "reset", "--root", root.to_str().unwrap()]));
    assert_eq!(read(&target), auto, "{name}");
}

#[test]
fn sigkill_while_fans_are_low_is_undone_by_reset() {
    sigkill_while_low_then_reset("rx6800-hwmon", "gfx1030", "hwmon2", "hwmon/hwmon2/pwm1_enable", "1", "2");
    sigkill_while_low_then_reset("r9700-rdna4", "gfx1201", "hwmon3", "gpu_od/fan_ctrl/fan_curve", "c", "r");
}

/// Builds the fake libnvidia-ml.so.1 (tests/fake-nvml) with one two-fan GPU at `temperature_c`.
fn fake_nvml(dir: &Path, temperature_c: u32) -> (PathBuf, PathBuf) {
    let lib = common::build_fake_nvml(dir);
    let config = dir.join("nvml.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"driver_version": "570.124.04", "cuda_driver_version": 12080, "init_error": 0,
 "devices": [{{"name": "NVIDIA GeForce RTX 3090", "pci_bus_id": "00000000:01:00.0",
 "pci_device_id": 571740382, "uuid": "GPU-1", "memory_total_mib": 24576, "memory_used_mib": 310,
 "cc_major": 8, "cc_minor": 6, "temperature_c": {temperature_c}, "power_mw": 28000, "num_fans": 2,
 "fan_speed_pct": 30, "fan_min_pct": 30, "fan_max_pct": 100}}]}}"#
        ),
    )
    .unwrap();
    (lib, config)
}

/// The fake NVML of [`fake_nvml`] with `extra` keys on its GPU (`"key": value, ...`).
fn fake_nvml_with(dir: &Path, temperature_c: u32, extra: &str) -> (PathBuf, PathBuf) {
    let (lib, config) = fake_nvml(dir, temperature_c);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace(r#""num_fans": 2"#, &format!(r#""num_fans": 2, {extra}"#))).unwrap();
    (lib, config)
}

/// `thermal control` of the fake NVML's GPU for `seconds` at 50 ms a period, its state in
/// `dir/state` and its fan writes logged to `dir/fan.log`.
fn control_on_fake_nvml(dir: &Path, lib: &Path, config: &Path, seconds: &str) -> Output {
    on_fake_nvml(config, &dir.join("fan.log"))
        .args(["thermal", "control", "--vendor", "nvidia", "--device-id", "0000:01:00.0", "--nvml-lib"])
        .arg(lib)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--seconds", seconds, "--period-ms", "50"])
        .output()
        .unwrap()
}

/// `thermal sensors` reads what the fan loop reads (hwmon, NVML), with the limit the device
/// publishes, and writes nothing: the tree's fan files and the fake NVML's log stay untouched.
#[test]
fn sensors_reads_what_the_loop_reads_and_writes_nothing() {
    let (_dir, root) = fixture("rx6800-hwmon");
    let hwmon = root.join(DEV).join("hwmon/hwmon2");
    let before: Vec<String> = ["pwm1", "pwm1_enable"].iter().map(|f| read(&hwmon.join(f))).collect();
    let out = ok(lucebox(
        &["thermal", "sensors", "--root", root.to_str().unwrap(), "--device-id", "0000:03:00.0"]
            .iter()
            .copied()
            .chain([
                "--hwmon",
                &format!("{DEV}/hwmon/hwmon2"),
                "--samples",
                "3",
                "--period-ms",
                "1",
                "--json",
            ])
            .collect::<Vec<_>>(),
    ));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["limit_c"], 95.0, "temp2_crit 110 °C less 15: {report:#}");
    assert_eq!(report["readings"].as_array().unwrap().len(), 3, "{report:#}");
    assert_eq!(report["readings"][0]["junction_c"], 52.0, "temp2_input: {report:#}");
    assert_eq!(report["readings"][0]["power_w"], 30.0, "power1_average: {report:#}");
    assert_eq!(report["power_cap_w"], 203.0, "power1_cap: {report:#}");
    assert!(report["cpu_us_per_read"].as_f64().unwrap() > 0.0, "{report:#}");
    let after: Vec<String> = ["pwm1", "pwm1_enable"].iter().map(|f| read(&hwmon.join(f))).collect();
    assert_eq!(before, after);

    let dir = tempfile::tempdir().unwrap();
    let (lib, config) = fake_nvml_with(dir.path(), 71, r#""power_limit_mw": 350000"#);
    let log = dir.path().join("fan.log");
    let out = on_fake_nvml(&config, &log)
        .args(["thermal", "sensors", "--vendor", "nvidia", "--device-id", "0000:01:00.0", "--nvml-lib"])
        .arg(&lib)
        .args(["--samples", "2", "--period-ms", "1"])
        .output()
        .unwrap();
    let text = ok(out);
    assert!(text.contains("junction 71.0 °C  power 28.0 W  fan - rpm / 30.0 %"), "{text}");
    assert!(text.contains("power limit 350 W; 2 reads, 0 failed"), "{text}");
    assert_eq!(std::fs::read_to_string(&log).unwrap_or_default(), "", "NVML was asked to change nothing");

    let missing = lucebox(&["thermal", "sensors", "--device-id", "0000:03:00.0", "--samples", "1"]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("0000:03:00.0") && stderr.contains("no hwmon directory"), "{stderr}");
}

#[test]
fn nvml_fans_are_driven_per_fan_and_handed_back_on_exit_and_by_reset() {
    let dir = tempfile::tempdir().unwrap();
    // Warm enough that the controller and the safety floor both want the fans spinning.
    let (lib, config) = fake_nvml(dir.path(), 80);
    let log = dir.path().join("fan.log");
    let run = |args: &[&str]| {
        let out = on_fake_nvml(&config, &log).args(args).output().unwrap();
        ok(out)
    };
    ok(control_on_fake_nvml(dir.path(), &lib, &config, "0.5"));
    let lines: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(String::from).collect();
    let set: Vec<&String> = lines.iter().filter(|l| l.starts_with("set_fan_speed 0 ")).collect();
    assert!(set.iter().any(|l| l.starts_with("set_fan_speed 0 0 ")), "{lines:?}");
    assert!(set.iter().any(|l| l.starts_with("set_fan_speed 0 1 ")), "{lines:?}");
    assert!(set.iter().all(|l| l.rsplit(' ').next().unwrap().parse::<u32>().unwrap() >= 30), "{lines:?}");
    let tail = &lines[lines.len() - 2..];
    assert_eq!(
        tail,
        ["set_default_fan_speed 0 0", "set_default_fan_speed 0 1"],
        "restored on exit: {lines:?}"
    );

    std::fs::remove_file(&log).unwrap();
    run(&["thermal", "reset", "--nvml-lib", lib.to_str().unwrap()]);
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines.lines().collect::<Vec<_>>(), ["set_default_fan_speed 0 0", "set_default_fan_speed 0 1"]);
}

/// NVML stops a fan only through the driver's auto, whose curve may spin it (the fake's
/// `auto_fan_speed_pct`). The loop stops an NVIDIA fan by handing it back where the driver keeps it
/// stopped, and runs it at its floor instead where the driver spins it: seen at once above the
/// 50 °C the controller starts from, and learned from the fan's speed under it, kept with the
/// model and resumed after a restart.
#[test]
fn an_nvidia_fan_is_stopped_through_the_driver_only_where_the_driver_keeps_it_stopped() {
    let control_in = |dir: &Path, temperature_c: u32, auto_pct: u32| -> Vec<String> {
        let auto = format!(r#""auto_fan_speed_pct": {auto_pct}"#);
        let (lib, config) = fake_nvml_with(dir, temperature_c, &auto);
        let log = dir.join("fan.log");
        let _ = std::fs::remove_file(&log);
        ok(control_on_fake_nvml(dir, &lib, &config, "1"));
        std::fs::read_to_string(log).unwrap().lines().map(String::from).collect()
    };
    let control = |temperature_c: u32, auto_pct: u32| -> Vec<String> {
        control_in(tempfile::tempdir().unwrap().path(), temperature_c, auto_pct)
    };
    let handed_back = |l: &String| l.starts_with("set_default_fan_speed 0 ");
    let driven = |l: &String| l.starts_with("set_fan_speed 0 ");

    // Cool, and the driver keeps the fan stopped: handed back, never driven.
    let cool = control(45, 0);
    assert!(cool.iter().filter(|l| handed_back(l)).count() >= 4, "{cool:?}");
    assert!(!cool.iter().any(driven), "{cool:?}");

    // Warm: the driver would spin the fan, so the loop runs it at its 30 % floor until it exits.
    let warm = control(60, 45);
    let first = warm.iter().position(driven).unwrap_or_else(|| panic!("never driven: {warm:?}"));
    assert!(warm[first..].iter().all(|l| driven(l) && l.ends_with(" 30") || handed_back(l)), "{warm:?}");
    assert!(warm[first..warm.len() - 2].iter().all(driven), "handed back while warm: {warm:?}");

    // Under 50 °C, but this driver spins its fans at 48 °C: one stop shows it, then the floor.
    let dir = tempfile::tempdir().unwrap();
    let spun = control_in(dir.path(), 48, 40);
    let first = spun.iter().position(driven).unwrap_or_else(|| panic!("never driven: {spun:?}"));
    assert!(spun[..first].iter().filter(|l| handed_back(l)).count() >= 4, "stopped first: {spun:?}");
    assert!(spun[first..spun.len() - 2].iter().all(driven), "stopped again at 48 °C: {spun:?}");
    assert_eq!(spun[spun.len() - 2..], ["set_default_fan_speed 0 0", "set_default_fan_speed 0 1"]);

    // Kept with the model, and resumed: after a restart the floor comes first, with no stop to
    // show the driver's curve again (only the hand-back of both fans when NVML opens).
    let model = dir.path().join("state/thermal/0000_01_00.0-nouid.json");
    let saved: serde_json::Value = serde_json::from_str(&read(&model)).unwrap();
    assert_eq!(saved["firmware_stops_below_c"].as_f64(), Some(48.0), "{saved}");
    let resumed = control_in(dir.path(), 48, 40);
    assert_eq!(resumed.iter().position(driven), Some(2), "{resumed:?}");
}

/// Until the engine has shown a prompt's power, the loop plans prompts at the board power limit
/// the device reports (NVML's enforced limit here): having seen none, it saves that limit as
/// the prefill power, and the generic prior where NVML reports no limit.
#[test]
fn the_first_prompts_are_planned_at_the_power_limit_the_device_reports() {
    let prefill_saved = |extra: &str| {
        let dir = tempfile::tempdir().unwrap();
        let (lib, config) = fake_nvml_with(dir.path(), 45, extra);
        ok(control_on_fake_nvml(dir.path(), &lib, &config, "0.5"));
        let forecast = dir.path().join("state/thermal/0000_01_00.0-nouid.forecast.json");
        let saved: serde_json::Value = serde_json::from_str(&read(&forecast)).unwrap();
        saved["prefill_w"].as_f64()
    };
    assert_eq!(prefill_saved(r#""power_limit_mw": 165000"#), Some(165.0));
    assert_eq!(prefill_saved(r#""power_limit_mw": 0"#), Some(300.0), "no limit reported: the generic prior");
}

/// An RDNA3/4 card stops its fan only through its firmware's zero-rpm: the loop resets the curve
/// (`r`) for a stop where the card says zero-rpm is on (`fan_zero_rpm_enable`, as an RX 9070 XT
/// prints it, added to the R9700 tree), and learns where the firmware keeps the fan stopped from
/// the fan's speed (`pwm1`) under it, as for NVML. A card that does not say keeps its floor.
#[test]
fn an_rdna_fan_is_stopped_through_its_firmware_only_where_its_zero_rpm_keeps_it_stopped() {
    // Each state the fan curve file passes through during a 1 s run, in order: "r" for a reset,
    // "c" for a committed curve (the points written before it are left out).
    let control = |zero_rpm: Option<&str>, junction_c: u32, firmware_pwm: u32| -> Vec<String> {
        let (_dir, root) = fixture("r9700-rdna4");
        let state = tempfile::tempdir().unwrap();
        let dev = root.join(DEV);
        if let Some(enable) = zero_rpm {
            let text = format!("FAN_ZERO_RPM_ENABLE:\n{enable}\nOD_RANGE:\nZERO_RPM_ENABLE: 0 1\n");
            std::fs::write(dev.join("gpu_od/fan_ctrl/fan_zero_rpm_enable"), text).unwrap();
        }
        let hwmon = dev.join("hwmon/hwmon3");
        std::fs::write(hwmon.join("temp2_input"), format!("{}\n", junction_c * 1000)).unwrap();
        std::fs::write(hwmon.join("pwm1"), format!("{firmware_pwm}\n")).unwrap();
        std::fs::write(hwmon.join("fan1_input"), format!("{}\n", firmware_pwm * 12)).unwrap();
        let curve = dev.join("gpu_od/fan_ctrl/fan_curve");
        let mut child =
            control_rdna4(&root, state.path(), "1").stderr(std::process::Stdio::piped()).spawn().unwrap();
        let mut seen: Vec<String> = Vec::new();
        loop {
            let exited = child.try_wait().unwrap().is_some();
            let now = std::fs::read_to_string(&curve).unwrap_or_default().trim().to_string();
            if (now == "r" || now == "c") && seen.last() != Some(&now) {
                seen.push(now);
            }
            if exited {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(child.wait_with_output().unwrap().status.success());
        seen
    };

    // Zero-rpm on, cool, and the firmware keeps the fan stopped: reset, never a curve.
    assert_eq!(control(Some("1"), 45, 0), ["r"]);
    // Warm: the firmware would spin the fan, so the loop holds its 15 % floor until it exits.
    assert_eq!(control(Some("1"), 60, 115), ["c", "r"]);
    // Under 50 °C, but this firmware spins its fan at 48 °C: one stop shows it, then the floor.
    assert_eq!(control(Some("1"), 48, 102), ["r", "c", "r"]);
    // Zero-rpm off, or a card that does not say: the floor, cool as it is.
    assert_eq!(control(Some("0"), 45, 0), ["c", "r"]);
    assert_eq!(control(None, 45, 0), ["c", "r"]);

    // A zero-rpm file that says neither: the fan stays with its firmware, the file named.
    let (_dir, root) = fixture("r9700-rdna4");
    let state = tempfile::tempdir().unwrap();
    let garbled = root.join(DEV).join("gpu_od/fan_ctrl/fan_zero_rpm_enable");
    std::fs::write(&garbled, "FAN_ZERO_RPM_ENABLE:\nyes\n").unwrap();
    let out = control_rdna4(&root, state.path(), "0.3").output().unwrap();
    assert_left_to_firmware(&out, "0000:03:00.0", &["fan_zero_rpm_enable: unexpected contents"]);
}

/// The arguments of `thermal control` for the card of a captured tree at `root` (`arch`, its
/// hwmon directory `hwmon`), at 50 ms periods, for `seconds` or until killed.
fn control_of_tree(root: &Path, state: &Path, arch: &str, hwmon: &str, seconds: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = ["thermal", "control", "--root", root.to_str().unwrap()]
        .into_iter()
        .chain(["--state-dir", state.to_str().unwrap()])
        .chain(["--device-id", "0000:03:00.0", "--arch", arch, "--sysfs", DEV])
        .chain(["--hwmon", &format!("{DEV}/hwmon/{hwmon}"), "--period-ms", "50"])
        .map(String::from)
        .collect();
    if let Some(seconds) = seconds {
        args.extend(["--seconds".to_string(), seconds.to_string()]);
    }
    args
}

/// `thermal control` of the R9700 tree's card for `seconds`, at 50 ms periods.
fn control_rdna4(root: &Path, state: &Path, seconds: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lucebox"));
    command.args(control_of_tree(root, state, "gfx1201", "hwmon3", Some(seconds)));
    command
}

/// A `thermal control` run that left `device`'s fan to its firmware, naming why (every part of
/// `why`), and never took it over: no failed actuator, no failed hand-back.
fn assert_left_to_firmware(out: &Output, device: &str, why: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said = stderr.lines().find(|l| l.contains(&format!("{device}: fan left to its firmware: ")));
    assert!(said.is_some_and(|line| why.iter().all(|part| line.contains(part))), "{stderr}");
    assert!(
        !stderr.contains("actuator failed") && !stderr.contains("handing the fan back failed"),
        "{stderr}"
    );
}

/// A process NVML takes no fan commands from (not root) leaves the fans to the driver and says
/// why, rather than taking them over and then failing to command or hand them back.
#[test]
fn nvml_that_refuses_fan_commands_leaves_the_fans_to_the_driver_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, config) = fake_nvml_with(dir.path(), 80, r#""no_permission": 1"#);
    let out = control_on_fake_nvml(dir.path(), &lib, &config, "0.3");
    assert_left_to_firmware(&out, "0000:01:00.0", &["NVML: fan commands refused (fan 0: ", "only from root"]);
    let log = std::fs::read_to_string(dir.path().join("fan.log")).unwrap_or_default();
    assert_eq!(log, "", "no fan command went through");
}

/// A container sees sysfs read-only by default. The loop then leaves the fan to its firmware and
/// says why, rather than taking it over and failing every write, hand-back included. The tree is
/// bind-mounted read-only in a mount namespace of its own (`unshare`), as Docker mounts `/sys`.
#[test]
fn a_read_only_sysfs_leaves_the_fan_to_its_firmware_and_says_why() {
    for (name, arch, hwmon, file) in [
        ("rx6800-hwmon", "gfx1030", "hwmon2", "hwmon/hwmon2/pwm1_enable"),
        ("r9700-rdna4", "gfx1201", "hwmon3", "gpu_od/fan_ctrl/fan_curve"),
    ] {
        let (_dir, root) = fixture(name);
        let state = tempfile::tempdir().unwrap();
        let before = read(&root.join(DEV).join(file));
        let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#;
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
            .arg(&root)
            .arg(env!("CARGO_BIN_EXE_lucebox"))
            .args(control_of_tree(&root, state.path(), arch, hwmon, Some("0.3")))
            .output()
            .unwrap();
        assert_left_to_firmware(&out, "0000:03:00.0", &["Read-only file system"]);
        assert_eq!(read(&root.join(DEV).join(file)), before, "{name}: nothing written");
    }
}

/// A GPU fallen off the bus must not keep `thermal reset` from handing back the next one's fans:
/// the reset goes on, hands back GPU 1's fans, names GPU 0 and exits non-zero.
#[test]
fn reset_goes_on_past_a_lost_nvidia_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let lib = common::build_fake_nvml(dir.path());
    let config = dir.path().join("nvml.json");
    let gpu = |bus: &str, lost: u32| {
        format!(
            r#"{{"name": "NVIDIA GeForce RTX 3090", "pci_bus_id": "00000000:{bus}:00.0", "uuid": "GPU-{bus}",
 "memory_total_mib": 24576, "cc_major": 8, "cc_minor": 6, "num_fans": 2, "lost": {lost}}}"#
        )
    };
    let devices =
        format!(r#"{{"driver_version": "570.124.04", "devices": [{}, {}]}}"#, gpu("01", 1), gpu("02", 0));
    std::fs::write(&config, devices).unwrap();
    let log = dir.path().join("fan.log");
    let out = on_fake_nvml(&config, &log)
        .args(["thermal", "reset", "--nvml-lib", lib.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "a lost GPU is a failed reset: {stdout}");
    assert!(stderr.contains("GPU 0") && stderr.contains("fell off the bus"), "{stderr}");
    assert!(stdout.contains("nvml: 2 fans"), "{stdout}");
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines.lines().collect::<Vec<_>>(), ["set_default_fan_speed 1 0", "set_default_fan_speed 1 1"]);
}
