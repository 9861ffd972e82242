//! The `lucebox ota ...` and `lucebox models ...` commands.

use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use figment::Figment;

use super::activate::CommandActivator;
use super::http::HttpClient;
use super::manifest::{Manifest, MANIFEST_FILE};
use super::models::ModelStore;
use super::publish::{self, Expiry, PublishOptions};
use super::repo::RepoSource;
use super::store::CURRENT;
use super::updater::{self, ApplyOptions, ApplyOutcome, OtaPaths, Step, Updater};
use crate::config::Config;
use crate::status::StatusModel;

#[derive(Subcommand)]
pub enum OtaCommand {
    /// Show the update state, the committed and previous sets and the lock holder.
    Status(JsonArg),
    /// Verify the repository and report what it offers.
    Check(SourceArgs),
    /// Download, verify, install and activate the offered set; commit only if healthy.
    Apply(ApplyArgs),
    /// Make the previous set the active one again (health-gated).
    Rollback(GateArgs),
    /// Build and sign a repository from a profile-set directory.
    Publish(PublishArgs),
    /// Time verify + install of a generated profile set.
    Bench(BenchArgs),
}

#[derive(Subcommand)]
pub enum ModelsCommand {
    /// Fetch the model files a set's manifest names (default: the active set).
    Pull(PullArgs),
    /// List the model store.
    List(JsonArg),
    /// Delete model files no kept set references.
    Gc(JsonArg),
}

#[derive(Args)]
pub struct JsonArg {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SourceArgs {
    /// Repository: `http(s)://host/path` or a directory (overrides `ota.repository`).
    #[arg(long)]
    repo: Option<String>,
    /// Trusted root.json (overrides `ota.trusted_root`).
    #[arg(long)]
    trusted_root: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct GateArgs {
    /// Health gate: PROGRAM is run with the set directory and must exit 0 within the allowance.
    #[arg(long, value_name = "PROGRAM")]
    health_cmd: PathBuf,
    /// Seconds the engines get to become healthy.
    #[arg(long, default_value_t = 300)]
    allowance_s: u64,
}

#[derive(Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    gate: GateArgs,
    /// Apply even while engines serve requests.
    #[arg(long)]
    force: bool,
    /// Seconds to wait for engines to go idle.
    #[arg(long, default_value_t = 600)]
    idle_wait_s: u64,
    /// Stop after STEP (download, verify, unpack, swap, activation) and wait: a debugging aid.
    #[arg(long, value_name = "STEP")]
    pause_after: Option<Step>,
}

#[derive(Args)]
pub struct PublishArgs {
    /// Profile-set directory (manifest.toml, profiles/, variants.toml, thermal/priors.toml).
    #[arg(long)]
    set: PathBuf,
    /// Output repository directory.
    #[arg(long)]
    out: PathBuf,
    /// root.json to sign against; created from the keys when missing.
    #[arg(long)]
    root: PathBuf,
    /// Signing key (PEM) of the current root; repeat for thresholds above 1.
    #[arg(long = "key", required = true)]
    keys: Vec<PathBuf>,
    /// Rotate the root to this key (PEM; repeatable): publishes root version N+1 naming only
    /// the new keys, signed by the --key keys and the new ones, and signs this release with the
    /// new keys. --root is replaced by the new root once the repository is written.
    #[arg(long = "rotate-root-key", value_name = "PEM")]
    rotate_root_keys: Vec<PathBuf>,
    /// Signatures each role needs (when creating or rotating the root).
    #[arg(long, default_value_t = NonZeroU64::MIN)]
    threshold: NonZeroU64,
    /// Days until targets, snapshot and timestamp expire (re-publish before then).
    #[arg(long, default_value_t = 30)]
    expires_days: u32,
    /// Days until a newly created or rotated root expires (boxes refuse an expired root).
    #[arg(long, default_value_t = 1825)]
    root_expires_days: u32,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct BenchArgs {
    #[arg(long = "key", required = true)]
    keys: Vec<PathBuf>,
    #[arg(long, default_value_t = 10)]
    size_mib: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PullArgs {
    /// A manifest.toml (default: the active set's).
    #[arg(long)]
    manifest: Option<PathBuf>,
}

pub fn ota(config_file: Option<&Path>, command: OtaCommand) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_file, Figment::new())?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(run_ota(&config, command))
}

pub fn models(config_file: Option<&Path>, command: ModelsCommand) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_file, Figment::new())?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(run_models(&config, command))
}

fn paths(config: &Config) -> OtaPaths {
    OtaPaths { state_dir: config.state_dir.clone(), models_dir: config.models_dir() }
}

fn updater(config: &Config, source: &SourceArgs) -> anyhow::Result<Updater> {
    let paths = paths(config);
    let repo = source
        .repo
        .clone()
        .or_else(|| config.ota.repository.clone())
        .context("no repository: pass --repo or set ota.repository")?;
    let root = source
        .trusted_root
        .clone()
        .or_else(|| config.ota.trusted_root.clone())
        .unwrap_or_else(|| paths.ota_dir().join("root.json"));
    let trusted_root = std::fs::read(&root).with_context(|| format!("trusted root {}", root.display()))?;
    Ok(Updater {
        paths,
        trusted_root,
        source: RepoSource::parse(&repo)?,
        http: HttpClient::for_config(&config.ota)?,
        status: StatusModel::new(),
    })
}

/// The CLI's gate restarts no engines, so applying beside a running `lucebox run` would swap the
/// profile set under engines that keep the old plan. Refuse, and name the supervisor's own path,
/// whose gate replans and restarts the engines.
async fn refuse_beside_a_running_supervisor(config: &Config, what: &str) -> anyhow::Result<()> {
    let port = config.web.port;
    let url = url::Url::parse(&format!("http://127.0.0.1:{port}/healthz"))?;
    let quick =
        super::http::Timeouts { response: Duration::from_millis(500), chunk: Duration::from_millis(500) };
    let Ok(mut answer) = HttpClient::new(quick, None)?.get(&url, 0).await else { return Ok(()) };
    let mut body = Vec::new();
    while let Some(Ok(chunk)) = answer.body.recv().await {
        body.extend_from_slice(&chunk);
        if body.len() > 4096 {
            break;
        }
    }
    let ours = serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|v| v["ok"] == true);
    anyhow::ensure!(
        !ours,
        "a supervisor (`lucebox run`) answers on 127.0.0.1:{port}: {what} through it, so its engines are \
         replanned and health-gated: `curl -X POST -H \"Authorization: Bearer $(lucebox token)\" \
         http://127.0.0.1:{port}/api/v1/ota/{what}` (add -d '{{\"force\": true}}' to apply while engines serve)"
    );
    Ok(())
}

fn gate(args: &GateArgs) -> CommandActivator {
    CommandActivator { program: args.health_cmd.clone(), allowance: Duration::from_secs(args.allowance_s) }
}

async fn run_ota(config: &Config, command: OtaCommand) -> anyhow::Result<ExitCode> {
    match command {
        OtaCommand::Status(args) => {
            let status = StatusModel::new();
            updater::recover(&paths(config), &status)?;
            let ota = status.snapshot().ota;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&ota)?);
            } else {
                println!("state:    {}", super::state::name(&ota.state));
                println!("active:   {}", ota.active_set.as_deref().unwrap_or("-"));
                println!("previous: {}", ota.previous_set.as_deref().unwrap_or("-"));
                println!("lock:     {}", ota.lock.as_deref().unwrap_or("-"));
                if let crate::status::OtaState::RolledBack { reason, .. } = &ota.state {
                    println!("reason:   {reason}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        OtaCommand::Check(args) => {
            let offer = updater(config, &args)?.check().await?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"version": offer.version, "sha256": offer.sha256, "length": offer.length})
                );
            } else {
                println!("offered: v{} {} ({} bytes)", offer.version, offer.sha256, offer.length);
            }
            Ok(ExitCode::SUCCESS)
        }
        OtaCommand::Apply(args) => {
            refuse_beside_a_running_supervisor(config, "apply").await?;
            let updater = updater(config, &args.source)?;
            let options = ApplyOptions {
                force: args.force,
                idle_wait: Duration::from_secs(args.idle_wait_s),
                pause_after: args.pause_after,
            };
            let outcome = updater.apply(&gate(&args.gate), options).await?;
            if args.source.json {
                println!("{}", serde_json::to_string(&outcome)?);
            } else {
                match &outcome {
                    ApplyOutcome::UpToDate { version } => println!("up to date (v{version})"),
                    ApplyOutcome::Committed { version, sha256 } => {
                        println!("committed v{version} ({sha256})")
                    }
                    ApplyOutcome::RolledBack { version, reason } => {
                        println!("rolled back v{version}: {reason}")
                    }
                }
            }
            let ok = !matches!(outcome, ApplyOutcome::RolledBack { .. });
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(2) })
        }
        OtaCommand::Rollback(args) => {
            refuse_beside_a_running_supervisor(config, "rollback").await?;
            let set = updater::rollback(&paths(config), &StatusModel::new(), &gate(&args)).await?;
            println!("active: v{} ({})", set.version, set.sha256);
            Ok(ExitCode::SUCCESS)
        }
        OtaCommand::Publish(args) => {
            let published = publish::publish(&PublishOptions {
                set_dir: args.set,
                repo_dir: args.out,
                root: args.root,
                keys: args.keys,
                threshold: args.threshold,
                rotate_to: args.rotate_root_keys,
                expiry: Expiry {
                    root: Expiry::days_from_now(args.root_expires_days).root,
                    ..Expiry::days_from_now(args.expires_days)
                },
                metadata_version: None,
            })
            .await?;
            if args.json {
                println!("{}", serde_json::to_string(&published)?);
            } else {
                println!(
                    "published set v{} ({} files, {} bytes, sha256 {})",
                    published.set_version, published.files, published.length, published.sha256
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        OtaCommand::Bench(args) => {
            let scratch = tempfile_dir()?;
            let result = super::bench::run(&scratch, &args.keys, args.size_mib).await;
            let _ = std::fs::remove_dir_all(&scratch);
            let report = result?;
            if args.json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!(
                    "set {} bytes: publish {:.1} ms, check {:.1} ms, verify+install {:.1} ms",
                    report.set_bytes, report.publish_ms, report.check_ms, report.apply_ms
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A fresh scratch directory under the system temp dir (the bench removes it afterwards).
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("lucebox-ota-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    Ok(dir)
}

async fn run_models(config: &Config, command: ModelsCommand) -> anyhow::Result<ExitCode> {
    let store = ModelStore::new(&config.models_dir());
    // Pulling and collecting share the store with an update, which downloads into it before its
    // set is recorded: held apart by the update lock, as two updates are.
    let lock = |purpose| crate::ota::UpdateLock::acquire(&paths(config).ota_dir(), purpose, None);
    match command {
        ModelsCommand::Pull(args) => {
            let _lock = lock("models pull")?;
            let file = args
                .manifest
                .unwrap_or_else(|| config.state_dir.join("sets").join(CURRENT).join(MANIFEST_FILE));
            let manifest = Manifest::load(&file)?;
            let http = HttpClient::for_config(&config.ota)?;
            for model in &manifest.models {
                let name = model.name.clone();
                let last = std::sync::atomic::AtomicU8::new(u8::MAX);
                let report = |p: super::models::Progress| {
                    let pct = p.percent();
                    if last.swap(pct, std::sync::atomic::Ordering::Relaxed) != pct {
                        eprint!("\r{name}: {pct:3}% ({} / {} bytes)", p.done, p.total);
                    }
                };
                let path = store.pull(&http, model, &report).await?;
                eprintln!();
                println!("{} -> {}", model.name, path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelsCommand::List(args) => {
            let models = store.list()?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&models)?);
            } else {
                for m in models {
                    println!("{}  {:>14} bytes", m.sha256, m.size);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelsCommand::Gc(args) => {
            let _lock = lock("models gc")?;
            let referenced = updater::referenced_models(&paths(config))?;
            let removed = store.gc(&referenced)?;
            if args.json {
                println!("{}", serde_json::json!({ "removed": removed }));
            } else {
                for name in &removed {
                    println!("removed {name}");
                }
                println!("{} file(s) removed, {} referenced kept", removed.len(), referenced.len());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
