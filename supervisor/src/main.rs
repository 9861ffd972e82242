//! `lucebox`: the CLI edge. Parses flags, loads configuration and hands off to the modules.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use lucebox::hardware::{self, DetectOptions, SysRoot};

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
    /// Print the API bearer token for state-changing requests (created if absent).
    Token,
    /// The status page on its own.
    #[command(subcommand)]
    Web(WebCommand),
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
        Some(Command::Token) => {
            lucebox::web::cli::print_token(&load_config(cli.config.as_deref())?)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Web(WebCommand::Serve { duration })) => {
            let config = load_config(cli.config.as_deref())?;
            lucebox::web::cli::serve_standalone(&config, duration.map(std::time::Duration::from_secs))?;
            Ok(ExitCode::SUCCESS)
        }
        None => anyhow::bail!("no command given; try `lucebox --help`"),
    }
}

fn load_config(file: Option<&std::path::Path>) -> anyhow::Result<lucebox::config::Config> {
    Ok(lucebox::config::Config::load(file, figment::Figment::new())?)
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
