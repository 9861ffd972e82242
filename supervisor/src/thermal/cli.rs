//! `lucebox thermal ...`: the bench, the offline model fit and the fan reset.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};

use super::bench::{self, BenchOptions, Ceiling, ControllerKind};
use super::plant::PlantSpec;
use super::trace::{self, TraceShaping};

#[derive(Subcommand)]
pub enum ThermalCommand {
    /// Run controllers against a simulated plant on a request trace.
    Bench(BenchArgs),
    /// Fit the thermal model offline from a telemetry CSV (t_s,junction_c,power_w,fan_duty_pct).
    Fit(FitArgs),
    /// Put every fan under the root back to firmware auto (systemd ExecStopPost runs this).
    Reset(ResetArgs),
    /// Run only the fan control loop on one device, without an engine (bring-up and tests).
    Control(ControlArgs),
    /// Read one device's sensors as the fan loop does, and what a read costs; writes nothing.
    Sensors(SensorsArgs),
}

#[derive(Args)]
pub struct SensorsArgs {
    /// Read sysfs below DIR instead of / (a captured tree).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// PCI address of the device.
    #[arg(long)]
    device_id: String,
    #[arg(long, value_enum, default_value = "amd")]
    vendor: VendorArg,
    /// hwmon directory relative to the root (AMD and CPU devices).
    #[arg(long, value_name = "PATH")]
    hwmon: Option<String>,
    #[arg(long, value_name = "FILE", env = "LUCEBOX_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
    /// How many reads.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    samples: u32,
    /// Time between reads in milliseconds (the loop's period is 1000).
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ResetArgs {
    /// Read and write sysfs below DIR instead of / (a captured tree).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Board firmware hook that owns embedded-controller fans.
    #[arg(long, value_name = "FILE", env = "LUCEBOX_FAN_HOOK")]
    hook: Option<PathBuf>,
    /// NVML library to load instead of the system's.
    #[arg(long, value_name = "FILE", env = "LUCEBOX_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ControlArgs {
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Where the loop keeps what it learns (thermal model and load forecast) across restarts.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/lucebox")]
    state_dir: PathBuf,
    /// PCI address of the device.
    #[arg(long)]
    device_id: String,
    #[arg(long, value_enum, default_value = "amd")]
    vendor: VendorArg,
    /// e.g. gfx1201 (RDNA4: overdrive fan curve) or gfx1030 (hwmon pwm).
    #[arg(long)]
    arch: Option<String>,
    /// Device directory relative to the root (sys/devices/...).
    #[arg(long, value_name = "PATH")]
    sysfs: Option<String>,
    /// hwmon directory relative to the root.
    #[arg(long, value_name = "PATH")]
    hwmon: Option<String>,
    #[arg(long, value_name = "FILE", env = "LUCEBOX_FAN_HOOK")]
    hook: Option<PathBuf>,
    #[arg(long, value_name = "FILE", env = "LUCEBOX_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
    /// Stop after S seconds (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Control period in milliseconds.
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    /// Per-card model priors (a profile set's thermal/priors.toml) for a device without a learned
    /// model.
    #[arg(long, value_name = "FILE")]
    priors: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum VendorArg {
    Amd,
    Nvidia,
    Cpu,
}

#[derive(Args)]
pub struct FitArgs {
    /// Telemetry CSV, e.g. written by `thermal bench --telemetry`.
    #[arg(long, value_name = "FILE")]
    log: PathBuf,
    /// Also save the fitted model here (the daemon's state file format).
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ControllerArg {
    Stock,
    Target,
    Predictive,
    Oracle,
    All,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Plant file (TOML, see thermal/README.md).
    #[arg(long, value_name = "FILE")]
    plant: PathBuf,
    /// Request trace (CSV: t_s,prompt_tokens,output_tokens[,session] or the Azure trace columns).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    #[arg(long, value_enum, default_value = "all")]
    controller: ControllerArg,
    /// Also run the oracle kept to survive unannounced work (`oracle-unannounced`): about the
    /// best a controller that sees only the queue can do. Its share is about the most such a
    /// controller can close of the gap from stock to the oracle.
    #[arg(long)]
    unannounced_oracle: bool,
    /// Junction ceiling in °C, or `stock-peak` for stock's own peak on this trace.
    #[arg(long, value_name = "C|stock-peak")]
    ceiling: Option<String>,
    /// Keep every N-th request of the trace.
    #[arg(long, default_value_t = 1)]
    sample: u32,
    /// Divide the trace's arrival times by X.
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// Simulate S seconds (default: until served plus a cool-down); also cuts the trace.
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Write the per-second telemetry of one controller's run to FILE (the CSV `fit` reads).
    #[arg(long, value_name = "FILE", requires = "telemetry_of")]
    telemetry: Option<PathBuf>,
    /// Which controller's run `--telemetry` records.
    #[arg(long, value_enum, value_name = "CONTROLLER")]
    telemetry_of: Option<ControllerKind>,
    /// The predictive controller resumes what it learned from DIR and saves it there after the
    /// run, as a device does across restarts (default: it starts from the priors).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// `config_file` is the global `--config`; only `reset` reads the configuration (for the board
/// hooks' folder).
pub fn run(cmd: ThermalCommand, config_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    match cmd {
        ThermalCommand::Bench(args) => bench_command(args),
        ThermalCommand::Fit(args) => fit_command(args),
        ThermalCommand::Reset(args) => reset_command(args, config_file),
        ThermalCommand::Control(args) => control_command(args),
        ThermalCommand::Sensors(args) => sensors_command(args),
    }
}

fn kind_of(arg: ControllerArg) -> ControllerKind {
    match arg {
        ControllerArg::Stock => ControllerKind::Stock,
        ControllerArg::Target => ControllerKind::Target,
        ControllerArg::Oracle => ControllerKind::Oracle,
        ControllerArg::Predictive | ControllerArg::All => ControllerKind::Predictive,
    }
}

fn parse_ceiling(text: Option<&str>) -> anyhow::Result<Ceiling> {
    match text {
        None => Ok(Ceiling::PlantLimit),
        Some("stock-peak") => Ok(Ceiling::StockPeak),
        Some(c) => {
            let c: f64 = c.parse().with_context(|| format!("--ceiling {c:?}: expected °C or stock-peak"))?;
            anyhow::ensure!(c.is_finite() && c > 0.0, "--ceiling must be a positive temperature");
            Ok(Ceiling::Fixed(c))
        }
    }
}

fn bench_command(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let spec = PlantSpec::load(&args.plant)?;
    let shaping = TraceShaping { sample: args.sample, speedup: args.speedup, duration_s: args.duration };
    let requests = trace::load(&args.trace, shaping)?;
    let mut controllers = match args.controller {
        ControllerArg::All => ControllerKind::ALL.to_vec(),
        one => vec![kind_of(one)],
    };
    if args.unannounced_oracle {
        controllers.push(ControllerKind::OracleUnannounced);
    }
    let options = BenchOptions {
        controllers,
        ceiling: parse_ceiling(args.ceiling.as_deref())?,
        duration_s: args.duration,
        seed: args.seed,
        telemetry_of: args.telemetry_of,
        state_dir: args.state_dir,
    };
    let report = bench::run(&spec, &requests, &options)?;
    if let Some(path) = &args.telemetry {
        let mut csv = bench::telemetry_header();
        csv.push('\n');
        for row in &report.telemetry {
            csv.push_str(&row.csv());
            csv.push('\n');
        }
        crate::fsutil::write_atomic(path, csv.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("encoding report")?);
    } else {
        print!("{}", bench::render(&report));
    }
    anyhow::ensure!(report.same_service, "controllers did not serve the same tokens");
    Ok(ExitCode::SUCCESS)
}

fn fit_command(args: FitArgs) -> anyhow::Result<ExitCode> {
    let rows = super::fit::read_log(&args.log)?;
    let report = super::fit::fit(&rows, super::model::ModelParams::prior());
    if let Some(path) = &args.save {
        super::learned::write(path, &report.params)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("encoding fit")?);
    } else {
        let opt =
            |v: Option<f64>, unit: &str| v.map(|v| format!("{v:.3} {unit}")).unwrap_or_else(|| "-".into());
        println!("samples                  {}", report.samples);
        println!("junction-to-sink         {:.4} K/W", report.params.r_js_k_per_w);
        println!("sink capacity            {:.0} J/K", report.sink_capacity_j_per_k);
        println!("sink-to-air (stopped)    {}", opt(report.sink_to_air_stopped_k_per_w, "K/W"));
        println!("sink-to-air (full)       {}", opt(report.sink_to_air_full_k_per_w, "K/W"));
        println!("ambient                  {:.1} °C", report.ambient_c);
        println!("30 s-ahead error (MAE)   {}", opt(report.mae_30s_c, "°C"));
    }
    Ok(ExitCode::SUCCESS)
}

fn sys_root(dir: Option<&PathBuf>) -> anyhow::Result<crate::hardware::SysRoot> {
    match dir {
        Some(dir) => {
            anyhow::ensure!(dir.is_dir(), "--root {}: not a directory", dir.display());
            Ok(crate::hardware::SysRoot::new(dir.clone()))
        }
        None => Ok(crate::hardware::SysRoot::live()),
    }
}

fn reset_command(args: ResetArgs, config_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let root = sys_root(args.root.as_ref())?;
    let hook = match &args.hook {
        Some(hook) => Some(hook.clone()),
        None => crate::hooks::installed_board_dir(&hooks_dir(config_file), &root),
    };
    let report = super::reset::reset_all(&root, hook.as_deref(), args.nvml_lib.as_deref());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("encoding reset report")?);
    } else {
        for r in &report.restored {
            println!("firmware auto: {r}");
        }
        for e in &report.errors {
            eprintln!("failed: {e}");
        }
    }
    Ok(if report.errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The configured hooks folder. The reset hands the fans back after any end of the supervisor,
/// a configuration that no longer loads included: then it says so and uses the default folder.
fn hooks_dir(config_file: Option<&std::path::Path>) -> PathBuf {
    match crate::config::Config::load(config_file, figment::Figment::new()) {
        Ok(config) => config.hooks.dir,
        Err(e) => {
            let default = PathBuf::from(crate::hooks::DEFAULT_HOOKS_DIR);
            eprintln!("{e}; looking for board hooks in {}", default.display());
            default
        }
    }
}

fn vendor_of(arg: VendorArg) -> crate::hardware::Vendor {
    use crate::hardware::Vendor;
    match arg {
        VendorArg::Amd => Vendor::Amd,
        VendorArg::Nvidia => Vendor::Nvidia,
        VendorArg::Cpu => Vendor::Cpu,
    }
}

fn sensors_command(args: SensorsArgs) -> anyhow::Result<ExitCode> {
    use crate::hardware::{Device, Telemetry};
    let root = sys_root(args.root.as_ref())?;
    let device = Device {
        telemetry: Telemetry { hwmon_path: args.hwmon.clone(), ..Default::default() },
        ..Device::new(&args.device_id, vendor_of(args.vendor), "")
    };
    let mut sensors = super::sensors::for_device(&device, &root, args.nvml_lib.as_deref())
        .with_context(|| format!("opening the sensors of {}", args.device_id))?;
    let (limit_c, power_cap_w) = (sensors.limit_c(), sensors.power_cap_w());
    let mut readings = Vec::new();
    let mut failures = 0u32;
    let (mut cpu, mut wall) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    for sample in 0..args.samples {
        if sample > 0 {
            std::thread::sleep(std::time::Duration::from_millis(args.period_ms));
        }
        let (cpu_before, wall_before) = (super::daemon::thread_cpu_time(), std::time::Instant::now());
        let reading = sensors.read();
        cpu += super::daemon::thread_cpu_time().saturating_sub(cpu_before);
        wall += wall_before.elapsed();
        match reading {
            Ok(r) => {
                if !args.json {
                    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
                    println!(
                        "junction {:.1} °C  power {} W  fan {} rpm / {} %",
                        r.junction_c,
                        show(r.power_w),
                        show(r.fan_rpm),
                        show(r.fan_duty_pct)
                    );
                }
                readings.push(r);
            }
            Err(e) => {
                failures += 1;
                eprintln!("read {sample}: {e}");
            }
        }
    }
    let per_read_us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / f64::from(args.samples);
    if args.json {
        let report = serde_json::json!({
            "device_id": args.device_id, "limit_c": limit_c, "power_cap_w": power_cap_w,
            "readings": readings, "failures": failures,
            "cpu_us_per_read": per_read_us(cpu), "wall_us_per_read": per_read_us(wall),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let cap = power_cap_w.map_or("none".to_string(), |w| format!("{w:.0} W"));
        println!(
            "limit {limit_c:.1} °C, power limit {cap}; {} reads, {failures} failed; per read {:.0} µs of CPU (this thread), {:.0} µs wall",
            args.samples,
            per_read_us(cpu),
            per_read_us(wall)
        );
    }
    Ok(if failures == args.samples { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn control_command(args: ControlArgs) -> anyhow::Result<ExitCode> {
    use crate::hardware::{Device, Telemetry, Vendor};
    let root = sys_root(args.root.as_ref())?;
    let vendor = vendor_of(args.vendor);
    let device = Device {
        arch: args.arch.clone(),
        integrated: args.hook.is_some() && vendor != Vendor::Nvidia,
        telemetry: Telemetry {
            sysfs_path: args.sysfs.clone(),
            hwmon_path: args.hwmon.clone(),
            ..Default::default()
        },
        ..Device::new(&args.device_id, vendor, "")
    };
    if let Some(path) = &args.priors {
        // Named by hand: a missing or bad file is an error here, not a warning later.
        super::priors::CardPriors::load(path)?;
    }
    let config = super::ControlConfig {
        period: std::time::Duration::from_millis(args.period_ms.max(10)),
        hook: args.hook.clone(),
        nvml_lib: args.nvml_lib.clone(),
        priors: args.priors.clone(),
        ..Default::default()
    };
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting runtime")?;
    runtime.block_on(async move {
        let cancel = tokio_util::sync::CancellationToken::new();
        let stop = cancel.clone();
        let seconds = args.seconds;
        tokio::spawn(async move {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let deadline = async {
                match seconds {
                    Some(s) => tokio::time::sleep(std::time::Duration::from_secs_f64(s.max(0.0))).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
                _ = deadline => {}
            }
            stop.cancel();
        });
        let (_tx, load) = tokio::sync::watch::channel(None);
        let status = crate::status::StatusModel::new();
        super::control_loop_with(config, vec![device], root, args.state_dir, load, status.clone(), cancel).await;
        for (id, t) in status.snapshot().thermal {
            eprintln!("{id}: {} via {} (junction {:?} °C)", t.mode, t.actuator, t.junction_c);
        }
    });
    Ok(ExitCode::SUCCESS)
}
