//! `lucebox`: the CLI edge. Parses flags, loads configuration and hands off to the modules.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use lucebox::config::Config;
use lucebox::hardware::{self, DetectOptions, SysRoot};
use lucebox::plan::inputs::PlanInputs;

#[derive(Parser)]
#[command(name = "lucebox", version, about = "Lucebox inference appliance supervisor")]
struct Cli {
    /// Configuration file (default /etc/lucebox/lucebox.toml).
    #[arg(long, global = true, env = "LUCEBOX_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// List the devices found and host facts.
    Detect(DetectArgs),
    /// Choose the engine build and model profile for each device, and say why.
    Plan(PlanArgs),
    /// Engine runtime: run a plan file, benchmark restarts, soak with injected faults.
    Runtime(lucebox::runtime::cli::RuntimeArgs),
    /// Print the API bearer token for state-changing requests (created if absent).
    Token,
    /// The status page on its own.
    #[command(subcommand)]
    Web(WebCommand),
    /// Signed profile updates: status, check, apply, rollback, publish, bench.
    #[command(subcommand)]
    Ota(lucebox::ota::cli::OtaCommand),
    /// The content-addressed model store: pull, list, gc.
    #[command(subcommand)]
    Models(lucebox::ota::cli::ModelsCommand),
}

#[derive(Subcommand)]
enum WebCommand {
    /// Serve the page with live detection and no actions (try-out and load runs).
    Serve {
        /// Show this captured detection (`lucebox detect --json` output) instead of probing.
        #[arg(long, value_name = "FILE")]
        detection: Option<PathBuf>,
        /// Stop after this many seconds.
        #[arg(long, value_name = "S")]
        duration: Option<u64>,
    },
}

#[derive(Args)]
struct RootArgs {
    /// Read sysfs/procfs below DIR instead of / (a captured tree).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// NVML library to load instead of the system's libnvidia-ml.so.1.
    #[arg(long, value_name = "FILE", env = "LUCEBOX_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
}

#[derive(Args)]
struct DetectArgs {
    #[command(flatten)]
    root: RootArgs,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    root: RootArgs,
    /// Profiles directory (default: the active OTA set, the image's, or the source tree's).
    #[arg(long, value_name = "DIR")]
    profiles: Option<PathBuf>,
    /// Variants manifest (default: engine/variants.toml of the image or source tree).
    #[arg(long, value_name = "FILE")]
    variants: Option<PathBuf>,
    /// Check that model files exist in DIR (default: on for this machine, off for --root).
    #[arg(long, value_name = "DIR")]
    models: Option<PathBuf>,
    /// Do not smoke-start the chosen engines (the plan is then unproven).
    #[arg(long)]
    no_smoke: bool,
    /// Show every rejected profile, not only the variants.
    #[arg(long, short)]
    verbose: bool,
    /// Print the planning time (after detection) to stderr.
    #[arg(long)]
    timing: bool,
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("lucebox: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LUCEBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Some(Command::Detect(args)) => detect(args),
        Some(Command::Plan(args)) => plan(&load_config(cli.config.as_deref())?, args),
        Some(Command::Runtime(args)) => lucebox::runtime::cli::dispatch(args, cli.config.as_deref()),
        Some(Command::Token) => {
            lucebox::web::cli::print_token(&load_config(cli.config.as_deref())?)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Web(WebCommand::Serve { detection, duration })) => {
            let config = load_config(cli.config.as_deref())?;
            lucebox::web::cli::serve_standalone(
                &config,
                detection.as_deref(),
                duration.map(std::time::Duration::from_secs),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Ota(command)) => lucebox::ota::cli::ota(cli.config.as_deref(), command),
        Some(Command::Models(command)) => lucebox::ota::cli::models(cli.config.as_deref(), command),
        None => anyhow::bail!("no command given; try `lucebox --help`"),
    }
}

fn sys_root(args: &RootArgs) -> anyhow::Result<SysRoot> {
    match &args.root {
        Some(dir) => {
            anyhow::ensure!(dir.is_dir(), "--root {}: not a directory", dir.display());
            Ok(SysRoot::new(dir.clone()))
        }
        None => Ok(SysRoot::live()),
    }
}

fn detect(args: DetectArgs) -> anyhow::Result<ExitCode> {
    let root = sys_root(&args.root)?;
    let options = DetectOptions { nvml_lib: args.root.nvml_lib.clone() };
    let detection = hardware::detect(&root, &options);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&detection).context("encoding detection")?);
    } else {
        print!("{}", hardware::table::render(&detection));
    }
    Ok(ExitCode::SUCCESS)
}

fn load_config(file: Option<&std::path::Path>) -> anyhow::Result<Config> {
    Ok(Config::load(file, figment::Figment::new())?)
}

fn plan(config: &Config, args: PlanArgs) -> anyhow::Result<ExitCode> {
    let root = sys_root(&args.root)?;
    let options = DetectOptions { nvml_lib: args.root.nvml_lib.clone() };
    let detection = hardware::detect(&root, &options);
    let inputs = PlanInputs::load(config, args.profiles.as_deref(), args.variants.as_deref())?;
    let settings = inputs.settings(config, args.models.clone(), root.is_live());
    let started = std::time::Instant::now();
    let mut plan = lucebox::plan::make_plan(&detection, &inputs.manifest, &inputs.profiles, &settings);
    if args.timing {
        eprintln!(
            "planning took {:.3} ms for {} profiles",
            started.elapsed().as_secs_f64() * 1000.0,
            inputs.profiles.len()
        );
    }
    if !args.no_smoke && root.is_live() {
        lucebox::plan::smoke::prove(&mut plan, &detection, &inputs.smoke_settings(config));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).context("encoding plan")?);
    } else {
        print!("{}", lucebox::plan::table::render(&plan, args.verbose));
    }
    Ok(ExitCode::SUCCESS)
}
