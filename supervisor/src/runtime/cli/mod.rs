//! `lucebox runtime …`: run a plan file under supervision, and the runtime's benchmark and soak
//! commands. The CLI edge of the runtime module (anyhow lives here only).

mod bench;
mod harness;
mod soak;

pub use harness::engine_pids;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use figment::providers::Serialized;
use figment::Figment;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, RuntimeMode};
use crate::plan::Plan;
use crate::status::StatusModel;

#[derive(Args)]
pub struct RuntimeArgs {
    #[command(subcommand)]
    command: RuntimeCommand,
}

#[derive(Subcommand)]
enum RuntimeCommand {
    /// Run the engines of a plan file under supervision until SIGTERM/SIGINT: the runtime alone,
    /// without planning, fans or the web (`lucebox run` is the whole supervisor).
    Run(RunArgs),
    /// Time from engine kill to death seen and to healthy again, against a bare start.
    Bench(bench::BenchArgs),
    /// Inject faults (kill -9, exit 137, SIGSTOP, container removal, supervisor and dockerd
    /// restarts) and check the supervisor keeps exactly one healthy engine.
    Soak(soak::SoakArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Plan as `lucebox plan --json` writes it.
    #[arg(long, value_name = "FILE")]
    plan_json: PathBuf,
    /// Override `runtime.mode`.
    #[arg(long, value_enum)]
    runtime: Option<ModeArg>,
    /// Write the status as JSON to FILE (atomically) after every change.
    #[arg(long, value_name = "FILE")]
    status_file: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Auto,
    Process,
    Docker,
}

impl From<ModeArg> for RuntimeMode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::Auto => RuntimeMode::Auto,
            ModeArg::Process => RuntimeMode::Process,
            ModeArg::Docker => RuntimeMode::Docker,
        }
    }
}

pub fn dispatch(args: RuntimeArgs, config_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    tokio.block_on(async move {
        match args.command {
            RuntimeCommand::Run(args) => run(args, config_file).await,
            RuntimeCommand::Bench(args) => bench::bench(args, config_file).await,
            RuntimeCommand::Soak(args) => soak::soak(args, config_file).await,
        }
    })
}

pub(crate) fn load_config(config_file: Option<&Path>, mode: Option<RuntimeMode>) -> anyhow::Result<Config> {
    let mut overrides = Figment::new();
    if let Some(mode) = mode {
        overrides = overrides.merge(Serialized::default("runtime.mode", mode));
    }
    Ok(Config::load(config_file, overrides)?)
}

async fn run(args: RunArgs, config_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let config = load_config(config_file, args.runtime.map(Into::into))?;
    let text =
        std::fs::read(&args.plan_json).with_context(|| format!("reading {}", args.plan_json.display()))?;
    let plan: Plan =
        serde_json::from_slice(&text).with_context(|| format!("{}: not a plan", args.plan_json.display()))?;
    let status = StatusModel::new();
    let cancel = CancellationToken::new();
    tokio::spawn(crate::supervise::cancel_on_signals(cancel.clone()));
    let mirror = args
        .status_file
        .clone()
        .map(|path| tokio::spawn(write_status_file(status.clone(), path, cancel.clone())));
    super::run_plan(&plan, &config, status.clone(), cancel.clone()).await?;
    // The last word is the final status: the mirror has stopped before it is written.
    cancel.cancel();
    if let Some(mirror) = mirror {
        let _ = mirror.await;
    }
    if let Some(path) = &args.status_file {
        write_status(&status, path)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Mirrors the status into a file for outside observers (tests, scripts), at most every 20 ms.
async fn write_status_file(status: StatusModel, path: PathBuf, cancel: CancellationToken) {
    let mut changes = status.subscribe();
    loop {
        if let Err(err) = write_status(&status, &path) {
            tracing::warn!("status file {}: {err:#}", path.display());
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn write_status(status: &StatusModel, path: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_vec_pretty(&status.snapshot())?;
    crate::fsutil::write_atomic(path, &json)?;
    Ok(())
}
