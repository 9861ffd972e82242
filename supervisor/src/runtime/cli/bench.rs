//! `lucebox runtime bench`: how fast a killed engine is seen dead and is healthy again, against
//! the engine's bare start in the same runtime, with no supervisor: for `process` a spawn of
//! llama-server until its first 200 from `/health`; for `docker` what Docker itself takes to bring
//! the engine container from nothing to healthy (create + start of the same container, with none
//! of the supervisor's watchers, until the first 200 from `/health`). `/health` is polled at the
//! supervisor's startup cadence in both.
//!
//! Kills and bare starts alternate, so both see the machine as it is at that moment (a shared
//! machine's speed drifts over a run): half `--settle-s` after the supervised engine is ready, one
//! bare start runs beside it on the next port and is removed, then after `--settle-s` the engine
//! is killed. The
//! settle time is also the policy's reset period for the run: every kill is a first failure,
//! restarted at once, as a lone crash is.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::harness::{self, EngineArgs, Kind, Target};
use crate::plan::Choice;
use crate::runtime::probe::{self, Health};
use crate::runtime::process::ProcessInstance;
use crate::runtime::{
    run_with, EngineInstance, EngineRuntime, ProcessRuntime, RuntimeError, SupervisionPolicy,
};
use crate::status::StatusModel;

/// The bare starts' engine name: apart from the supervised one.
const BARE: &str = "bench-bare";

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Engine kills to time, each paired with a bare start.
    #[arg(long, default_value_t = 20)]
    kills: u32,
    /// Seconds the engine stays ready before each kill (and the policy's reset period).
    #[arg(long, default_value_t = 2.0)]
    settle_s: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    runtime: String,
    /// What the bare start measures.
    bare_start: &'static str,
    kills: usize,
    bare_start_ms: Summary,
    death_seen_ms: Summary,
    kill_to_healthy_ms: Summary,
    /// median(kill → healthy) / median(bare start).
    ratio_median: f64,
    /// The median over kills of kill → healthy / the bare start just before it.
    paired_ratio_median: f64,
}

#[derive(Serialize)]
struct Summary {
    median: f64,
    p95: f64,
    max: f64,
    min: f64,
}

impl Summary {
    fn of(values: Vec<f64>) -> Self {
        let v = harness::sorted(values);
        Summary {
            median: harness::percentile(&v, 50.0),
            p95: harness::percentile(&v, 95.0),
            max: v.last().copied().unwrap_or(f64::NAN),
            min: v.first().copied().unwrap_or(f64::NAN),
        }
    }
}

pub async fn bench(args: BenchArgs, config_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let config = super::load_config(config_file, None)?;
    let report = match args.engine.runtime {
        Kind::Process => {
            let runtime = ProcessRuntime::new();
            let bare = Bare {
                what: "spawn llama-server -> first /health 200",
                start: async |choice: &Choice| runtime.start(BARE, choice).await,
                stop: async |instance: ProcessInstance| instance.stop(Duration::from_secs(5)).await.map(drop),
            };
            measure(runtime.clone(), &args, Target::Process, bare).await?
        }
        Kind::Docker => {
            let docker = args.engine.docker(&config).await?;
            let target = Target::Docker(docker.client().clone());
            let bare = Bare {
                what: "docker create + start of the engine container -> first /health 200",
                start: async |choice: &Choice| docker.start_bare(BARE, choice).await,
                stop: async |id: String| docker.remove(&id).await,
            };
            measure(docker.clone(), &args, target, bare).await?
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("runtime {}: {} kills", report.runtime, report.kills);
        println!("  bare start = {}", report.bare_start);
        for (name, s) in [
            ("bare start", &report.bare_start_ms),
            ("kill -> death seen", &report.death_seen_ms),
            ("kill -> healthy", &report.kill_to_healthy_ms),
        ] {
            println!(
                "  {name:<20} median {:>8.1} ms  p95 {:>8.1}  min {:>8.1}  max {:>8.1}",
                s.median, s.p95, s.min, s.max
            );
        }
        println!("  kill->healthy / bare start (medians): {:.3}", report.ratio_median);
        println!("  kill->healthy / bare start (median of pairs): {:.3}", report.paired_ratio_median);
    }
    Ok(ExitCode::SUCCESS)
}

/// The engine brought up by the runtime alone: `start` it, `stop` it again.
struct Bare<Start, Stop> {
    what: &'static str,
    start: Start,
    stop: Stop,
}

async fn measure<R: EngineRuntime + Clone, T>(
    runtime: R,
    args: &BenchArgs,
    target: Target,
    bare_start: Bare<
        impl AsyncFn(&Choice) -> Result<T, RuntimeError>,
        impl AsyncFn(T) -> Result<(), RuntimeError>,
    >,
) -> anyhow::Result<Report> {
    let plan = args.engine.plan()?;
    let bare_choice = args.engine.plan_on(args.engine.port + 1)?.groups[0].choice.clone();
    let bare_addr = probe::engine_addr(&bare_choice.launch.host, bare_choice.launch.port)?;
    let settle = Duration::from_secs_f64(args.settle_s);

    let mut policy = SupervisionPolicy::default();
    policy.restart.reset_after = settle;
    let status = StatusModel::new();
    let cancel = CancellationToken::new();
    let task = {
        let (runtime, status, cancel) = (runtime.clone(), status.clone(), cancel.clone());
        tokio::spawn(async move { run_with(runtime, &plan, policy, status, cancel).await })
    };
    let mut bare = Vec::new();
    let mut death_seen = Vec::new();
    let mut healthy = Vec::new();
    let outcome: anyhow::Result<()> = async {
        for _ in 0..args.kills {
            harness::wait_for(&status, Duration::from_secs(60), "ready", harness::is_ready).await?;
            // The restart's own aftermath (watchers connecting, removals) is over first.
            tokio::time::sleep(settle / 2).await;
            bare.push(time_bare_start(&bare_choice, bare_addr, &bare_start).await?);
            tokio::time::sleep(settle + Duration::from_millis(100)).await;
            let engine = harness::engine(&status).context("engine missing from status")?;
            let id = engine.instance.clone().context("ready engine without instance id")?;
            let pid = target.host_pid(&id).await?;
            let before = engine.restarts;
            let killed = Instant::now();
            kill(Pid::from_raw(pid), Signal::SIGKILL).context("kill -9 engine")?;
            let seen =
                harness::wait_for(&status, Duration::from_secs(10), "death seen", |e| e.restarts > before)
                    .await?;
            let up = harness::wait_for(&status, Duration::from_secs(60), "healthy again", |e| {
                e.restarts > before && harness::is_ready(e)
            })
            .await?;
            death_seen.push((seen - killed).as_secs_f64() * 1e3);
            healthy.push((up - killed).as_secs_f64() * 1e3);
        }
        Ok(())
    }
    .await;
    cancel.cancel();
    task.await.context("supervisor task")??;
    outcome?;

    let pairs: Vec<f64> = healthy.iter().zip(&bare).map(|(h, b)| h / b).collect();
    let bare_start_ms = Summary::of(bare);
    let kill_to_healthy_ms = Summary::of(healthy);
    Ok(Report {
        runtime: runtime.kind().to_string(),
        bare_start: bare_start.what,
        kills: death_seen.len(),
        ratio_median: kill_to_healthy_ms.median / bare_start_ms.median,
        paired_ratio_median: Summary::of(pairs).median,
        bare_start_ms,
        death_seen_ms: Summary::of(death_seen),
        kill_to_healthy_ms,
    })
}

/// Times one bare start: start, poll `/health` at the supervisor's startup cadence until ready,
/// stop.
async fn time_bare_start<T>(
    choice: &Choice,
    addr: SocketAddr,
    bare: &Bare<
        impl AsyncFn(&Choice) -> Result<T, RuntimeError>,
        impl AsyncFn(T) -> Result<(), RuntimeError>,
    >,
) -> anyhow::Result<f64> {
    // Something else answering there would be timed instead, or never turn healthy.
    anyhow::ensure!(
        std::net::TcpListener::bind(addr).is_ok(),
        "the bare start's port {} (the engine's port + 1) is in use",
        addr.port()
    );
    let poll = SupervisionPolicy::default().health;
    let started = Instant::now();
    let engine = (bare.start)(choice).await?;
    let mut healthy = true;
    while probe::health(addr, Duration::from_secs(1)).await != Health::Ready {
        if started.elapsed() > Duration::from_secs(60) {
            healthy = false;
            break;
        }
        // The supervisor's own startup cadence: the comparison is of restart overhead only.
        tokio::time::sleep(poll.startup_poll(started.elapsed())).await;
    }
    let elapsed = started.elapsed();
    (bare.stop)(engine).await?;
    anyhow::ensure!(healthy, "bare start not healthy within 60 s");
    Ok(elapsed.as_secs_f64() * 1e3)
}
