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
    /// Build provenance of this binary and, inside the image, of the image.
    Version(VersionArgs),
    /// Install the appliance's systemd unit, firmware hooks, default config and this binary.
    InstallAppliance(InstallApplianceArgs),
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
    let options = DetectOptions { nvml_lib: args.root.nvml_lib.clone() };
    let detection = hardware::detect(&root, &options);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&detection).context("encoding detection")?);
    } else {
        print!("{}", hardware::table::render(&detection));
    }
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
