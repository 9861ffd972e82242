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
    /// The supervisor: detect, plan, keep the engines running, drive the fans, serve the page.
    Run(RunArgs),
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
    /// Fan control: bench, offline model fit, reset to firmware auto.
    Thermal {
        #[command(subcommand)]
        cmd: lucebox::thermal::cli::ThermalCommand,
    },
    /// Build provenance of this binary and, inside the image, of the image.
    Version(VersionArgs),
    /// Install the appliance's systemd unit, firmware hooks, default config and this binary.
    InstallAppliance(InstallApplianceArgs),
}

#[derive(Subcommand)]
enum WebCommand {
    /// Serve the page with live detection and no actions (try-out and load runs).
    Serve {
        /// Stop after this many seconds.
        #[arg(long, value_name = "S")]
        duration: Option<u64>,
    },
}

#[derive(Args)]
struct VersionArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Image provenance file written by the image build.
    #[arg(long, value_name = "FILE", default_value = lucebox::version::DEFAULT_IMAGE_PROVENANCE)]
    image_provenance: PathBuf,
}

#[derive(Args)]
struct InstallApplianceArgs {
    /// Install below DIR instead of / (a staging tree or a test).
    #[arg(long, value_name = "DIR", default_value = "/")]
    prefix: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
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
struct RunArgs {
    /// Do not smoke-start the chosen engines before running them.
    #[arg(long)]
    no_smoke: bool,
    /// Engine runtime: auto (child process in a container, Docker on a host), process or docker.
    #[arg(long, value_name = "MODE")]
    runtime: Option<lucebox::config::RuntimeMode>,
    /// NVML library to load instead of the system's libnvidia-ml.so.1.
    #[arg(long, value_name = "FILE", env = "LUCEBOX_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
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
    /// Print the planning time after detection (median and p99 of 200 runs) to stderr.
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
        Some(Command::Run(args)) => run(cli.config.as_deref(), args),
        Some(Command::Runtime(args)) => lucebox::runtime::cli::dispatch(args, cli.config.as_deref()),
        Some(Command::Token) => {
            lucebox::web::cli::print_token(&load_config(cli.config.as_deref())?)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Web(WebCommand::Serve { duration })) => {
            let config = load_config(cli.config.as_deref())?;
            lucebox::web::cli::serve_standalone(&config, duration.map(std::time::Duration::from_secs))?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Ota(command)) => lucebox::ota::cli::ota(cli.config.as_deref(), command),
        Some(Command::Models(command)) => lucebox::ota::cli::models(cli.config.as_deref(), command),
        Some(Command::Thermal { cmd }) => lucebox::thermal::cli::run(cmd, cli.config.as_deref()),
        Some(Command::Version(args)) => version(args),
        Some(Command::InstallAppliance(args)) => install_appliance(args),
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
    let options = DetectOptions { nvml_lib: args.root.nvml_lib.clone(), ..DetectOptions::default() };
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

/// How often `plan --timing` repeats the planning step.
const PLAN_TIMING_RUNS: usize = 200;

fn plan(config: &Config, args: PlanArgs) -> anyhow::Result<ExitCode> {
    let root = sys_root(&args.root)?;
    let options = DetectOptions { nvml_lib: args.root.nvml_lib.clone(), ..DetectOptions::default() };
    let mut detection = hardware::detect(&root, &options);
    let inputs = PlanInputs::load(config, args.profiles.as_deref(), args.variants.as_deref())?;
    let settings = inputs.settings(config, args.models.clone(), root.is_live());
    let gpu_access = docker_gpu_access(config, root.is_live())?;
    if let Some(access) = &gpu_access {
        access.restrict(&mut detection);
    }
    let mut plan = lucebox::plan::make_plan(&detection, &inputs.manifest, &inputs.profiles, &settings);
    if let Some(access) = &gpu_access {
        access.apply_to_plan(&mut plan);
    }
    if args.timing {
        // Repeated so one preempted run on a busy machine does not decide the figure.
        let mut times: Vec<f64> = (0..PLAN_TIMING_RUNS)
            .map(|_| {
                let started = std::time::Instant::now();
                std::hint::black_box(lucebox::plan::make_plan(
                    &detection,
                    &inputs.manifest,
                    &inputs.profiles,
                    &settings,
                ));
                started.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        eprintln!(
            "planning after detection, {} profiles, {PLAN_TIMING_RUNS} runs: median {:.3} ms, p99 {:.3} ms",
            inputs.profiles.len(),
            times[times.len() / 2],
            times[times.len() * 99 / 100]
        );
    }
    if !args.no_smoke && root.is_live() {
        match lucebox::runtime::smoke_start_unavailable(config) {
            None => lucebox::plan::prove(
                &mut plan,
                &detection,
                &inputs.manifest,
                &inputs.profiles,
                &settings,
                &inputs.smoke_settings(config),
            ),
            Some(why) => eprintln!("lucebox plan: no smoke start: {why}"),
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).context("encoding plan")?);
    } else {
        print!("{}", lucebox::plan::table::render(&plan, args.verbose));
    }
    Ok(ExitCode::SUCCESS)
}

/// When engines run in Docker here, what dockerd can hand them (NVIDIA runtime or CDI devices).
fn docker_gpu_access(
    config: &Config,
    root_is_live: bool,
) -> anyhow::Result<Option<lucebox::runtime::gpu_access::DockerGpuAccess>> {
    use lucebox::runtime::gpu_access;
    if !gpu_access::applies(config, root_is_live) {
        return Ok(None);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    match runtime.block_on(gpu_access::query(&config.runtime.docker_socket)) {
        Ok(access) => Ok(Some(access)),
        Err(e) => {
            eprintln!("warning: cannot ask dockerd which GPUs it can hand to engine containers: {e}");
            Ok(None)
        }
    }
}

fn run(config_file: Option<&std::path::Path>, args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut overrides = figment::Figment::new();
    if let Some(mode) = args.runtime {
        overrides = overrides.merge(figment::providers::Serialized::default("runtime.mode", mode));
    }
    let config = Config::load(config_file, overrides)?;
    let options = lucebox::supervise::RunOptions { no_smoke: args.no_smoke, nvml_lib: args.nvml_lib };
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    let result = tokio.block_on(async move {
        let cancel = tokio_util::sync::CancellationToken::new();
        tokio::spawn(lucebox::supervise::cancel_on_signals(cancel.clone()));
        lucebox::supervise::run(config, options, cancel).await
    });
    // A fan loop's round that a wedged driver never answers holds a blocking thread; the exit
    // does not wait for it (the unit's ExecStopPost hands the fans back to the firmware).
    tokio.shutdown_timeout(std::time::Duration::from_secs(5));
    result?;
    Ok(ExitCode::SUCCESS)
}

fn version(args: VersionArgs) -> anyhow::Result<ExitCode> {
    let provenance = lucebox::version::Provenance::load(&args.image_provenance)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&provenance).context("encoding provenance")?);
    } else {
        print!("{}", provenance.render());
    }
    Ok(ExitCode::SUCCESS)
}

fn install_appliance(args: InstallApplianceArgs) -> anyhow::Result<ExitCode> {
    let binary = std::env::current_exe().context("locating this binary")?;
    let report = lucebox::appliance::install(&args.prefix, &binary)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("encoding install report")?);
    } else {
        for path in &report.written {
            println!("wrote  {}", path.display());
        }
        for path in &report.kept {
            println!("kept   {}", path.display());
        }
        println!("next: systemctl daemon-reload && systemctl enable --now lucebox.service");
    }
    Ok(ExitCode::SUCCESS)
}
