//! CLI edge of the web layer: `lucebox token` and `lucebox web serve` (the page on its own,
//! for trying it out and for load runs, with a 1 Hz loop whose lateness it reports).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::{serve, ApiToken, NoActions};
use crate::config::Config;
use crate::hardware::{self, DetectOptions, SysRoot};
use crate::status::{Level, StatusModel};

/// Prints the API token, creating it if the supervisor has not yet.
pub fn print_token(config: &Config) -> anyhow::Result<()> {
    let (token, created) = ApiToken::load_or_create(&config.state_dir).context("loading the API token")?;
    if created {
        eprintln!("created {}", token.path().display());
    }
    println!("{}", token.secret());
    Ok(())
}

/// How late the 1 Hz loop woke, over a run.
#[derive(Debug, Default)]
struct TickLateness {
    ticks: u64,
    late_over_10ms: u64,
    worst: Duration,
}

/// Serves the page with no actions until Ctrl-C or `duration`, showing live detection or a
/// captured one (`detection`: the output of `lucebox detect --json`), with a 1 Hz loop that
/// updates the status model as the supervisor's control loop does.
pub fn serve_standalone(
    config: &Config,
    detection: Option<&Path>,
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let detection = match detection {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("{}: not a detection", path.display()))?
        }
        None => {
            let root = config.root.clone().map(SysRoot::new).unwrap_or_else(SysRoot::live);
            hardware::detect(&root, &DetectOptions::default())
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let status = StatusModel::new();
        status.update(|s| s.hardware = Some(detection));
        status.event("web", Level::Info, "standalone status page started");
        let cancel = CancellationToken::new();
        let server = serve(config, status.clone(), Arc::new(NoActions), cancel.clone());
        let ticks = tick_loop(status, cancel.clone());
        let stop = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            cancel.cancel();
        };
        let (served, lateness, ()) = tokio::join!(server, ticks, stop);
        eprintln!(
            "1 Hz loop: {} ticks, {} woke more than 10 ms late, worst {:.1} ms late",
            lateness.ticks,
            lateness.late_over_10ms,
            lateness.worst.as_secs_f64() * 1000.0
        );
        served.context("serving")
    })
}

async fn tick_loop(status: StatusModel, cancel: CancellationToken) -> TickLateness {
    let mut lateness = TickLateness::default();
    let start = tokio::time::Instant::now();
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    loop {
        let scheduled = tokio::select! {
            _ = cancel.cancelled() => return lateness,
            scheduled = interval.tick() => scheduled,
        };
        let late = Instant::now().saturating_duration_since(scheduled.into_std());
        lateness.ticks += 1;
        lateness.worst = lateness.worst.max(late);
        if late > Duration::from_millis(10) {
            lateness.late_over_10ms += 1;
        }
        let uptime_s = start.elapsed().as_secs();
        // A change every second, as the control loop's fresh readings cause: the API's cached
        // encoding and every SSE stream see a new version.
        status.update(|_| {});
        if uptime_s.is_multiple_of(60) {
            status.event("web", Level::Info, format!("up {uptime_s} s"));
        }
    }
}
