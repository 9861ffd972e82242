//! `lucebox runtime soak`: inject faults round-robin and check after each that the supervisor
//! brought back exactly one healthy engine; at the end, stop it and check nothing is left.
//!
//! A supervisor restart is simulated in-process: the supervisor task is aborted without any
//! cleanup (as SIGKILL would leave things) and a fresh one started on a fresh status model.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::harness::{self, EngineArgs, Kind, Target};
use crate::plan::Plan;
use crate::runtime::{run_with, EngineRuntime, ProcessRuntime, RuntimeError, SupervisionPolicy};
use crate::status::StatusModel;

/// How long a dead engine container may still be listed once its successor is ready.
const DEAD_CONTAINER_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL the engine's main process.
    Kill9,
    /// Docker: SIGKILL through the API, as the OOM killer shows up (exit 137). Process: SIGKILL
    /// the whole process group.
    Exit137,
    /// SIGSTOP the engine: alive but hung; only liveness probes notice.
    Sigstop,
    /// `docker rm -f` the container from outside.
    Remove,
    /// Kill the supervisor without cleanup and start a new one (Docker: must adopt).
    SupervisorRestart,
    /// Restart dockerd (runs `--dockerd-restart-cmd`).
    DockerdRestart,
}

#[derive(Args)]
pub struct SoakArgs {
    #[command(flatten)]
    engine: EngineArgs,
    #[arg(long, default_value_t = 200)]
    faults: u32,
    /// Fault kinds, round-robin (default: every kind the runtime supports; dockerd-restart only
    /// with --dockerd-restart-cmd).
    #[arg(long, value_enum, value_delimiter = ',')]
    kinds: Option<Vec<Fault>>,
    /// Shell command that restarts dockerd, e.g. `bash ci/restart-dockerd.sh`.
    #[arg(long)]
    dockerd_restart_cmd: Option<String>,
    /// Seconds the engine stays ready before the next fault (also the policy's reset period).
    #[arg(long, default_value_t = 1.0)]
    settle_s: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct KindReport {
    injected: u32,
    recovered: u32,
    recovery_ms_median: f64,
    recovery_ms_max: f64,
    /// Supervisor restarts that adopted the running engine (same instance id).
    adopted: u32,
}

#[derive(Serialize)]
struct Report {
    runtime: String,
    faults: u32,
    wall_s: f64,
    kinds: BTreeMap<String, KindReport>,
    /// Checks after a recovery that saw other than exactly one engine process and running container
    /// (and, besides it, at most one stopped container).
    invariant_violations: Vec<String>,
    supervisor_alive: bool,
    leaked_processes_at_end: usize,
    leaked_containers_at_end: usize,
    /// Recoveries after which a dead container other than the kept one was still listed (being
    /// removed).
    dead_container_seen_after_recovery: u32,
    dead_container_linger_max_ms: f64,
}

pub async fn soak(args: SoakArgs, config_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let config = super::load_config(config_file, None)?;
    let report = match args.engine.runtime {
        Kind::Process => run_soak(ProcessRuntime::new(), &args, Target::Process).await?,
        Kind::Docker => {
            let docker = args.engine.docker(&config).await?;
            let target = Target::Docker(docker.client().clone());
            run_soak(docker, &args, target).await?
        }
    };
    let ok = report.invariant_violations.is_empty()
        && report.supervisor_alive
        && report.leaked_processes_at_end == 0
        && report.leaked_containers_at_end == 0
        && report.kinds.values().all(|k| k.injected == k.recovered);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("runtime {}: {} faults in {:.0} s", report.runtime, report.faults, report.wall_s);
        for (kind, k) in &report.kinds {
            println!(
                "  {kind:<20} injected {:>4} recovered {:>4} adopted {:>3} recovery median {:>8.1} ms max {:>8.1} ms",
                k.injected, k.recovered, k.adopted, k.recovery_ms_median, k.recovery_ms_max
            );
        }
        println!(
            "  dead container besides the kept one listed at recovery: {} times, gone within {:.0} ms at most",
            report.dead_container_seen_after_recovery, report.dead_container_linger_max_ms
        );
        println!("  invariant violations: {}", report.invariant_violations.len());
        for v in report.invariant_violations.iter().take(20) {
            println!("    {v}");
        }
        println!(
            "  supervisor alive: {}; left at end: {} processes, {} containers",
            report.supervisor_alive, report.leaked_processes_at_end, report.leaked_containers_at_end
        );
        println!("  {}", if ok { "PASS" } else { "FAIL" });
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

struct Running {
    status: StatusModel,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), RuntimeError>>,
}

fn spawn_supervisor<R: EngineRuntime + Clone>(
    runtime: &R,
    plan: &Plan,
    policy: &SupervisionPolicy,
) -> Running {
    let status = StatusModel::new();
    let cancel = CancellationToken::new();
    let (runtime, plan, policy) = (runtime.clone(), plan.clone(), policy.clone());
    let task = {
        let (status, cancel) = (status.clone(), cancel.clone());
        tokio::spawn(async move { run_with(runtime, &plan, policy, status, cancel).await })
    };
    Running { status, cancel, task }
}

fn default_kinds(kind: Kind, can_restart_dockerd: bool) -> Vec<Fault> {
    match kind {
        Kind::Process => vec![Fault::Kill9, Fault::Exit137, Fault::Sigstop, Fault::SupervisorRestart],
        Kind::Docker => {
            let mut kinds =
                vec![Fault::Kill9, Fault::Exit137, Fault::Sigstop, Fault::Remove, Fault::SupervisorRestart];
            if can_restart_dockerd {
                kinds.push(Fault::DockerdRestart);
            }
            kinds
        }
    }
}

async fn run_soak<R: EngineRuntime + Clone>(
    runtime: R,
    args: &SoakArgs,
    target: Target,
) -> anyhow::Result<Report> {
    let plan = args.engine.plan()?;
    let port = args.engine.port;
    let settle = Duration::from_secs_f64(args.settle_s);
    let kinds = args
        .kinds
        .clone()
        .unwrap_or_else(|| default_kinds(args.engine.runtime, args.dockerd_restart_cmd.is_some()));
    anyhow::ensure!(!kinds.is_empty(), "no fault kinds");
    let mut policy = SupervisionPolicy::default();
    policy.restart.reset_after = settle;
    policy.health.liveness_interval = Duration::from_millis(500);
    policy.health.liveness_timeout = Duration::from_millis(500);
    policy.hung_grace = Duration::from_secs(1);

    let started = Instant::now();
    let mut running = spawn_supervisor(&runtime, &plan, &policy);
    let mut times: BTreeMap<Fault, Vec<f64>> = BTreeMap::new();
    let mut reports: BTreeMap<Fault, KindReport> = BTreeMap::new();
    let mut violations = Vec::new();
    let mut supervisor_alive = true;
    let (mut lingering, mut max_linger_ms) = (0u32, 0f64);

    // A fault that cannot be injected or observed ends the loop as a violation, not an early
    // return: the supervisor below is still stopped and its engines removed.
    let faults: anyhow::Result<()> = async {
        for n in 0..args.faults {
            let fault = kinds[n as usize % kinds.len()];
            let entry = reports.entry(fault).or_default();
            entry.injected += 1;
            let status = running.status.clone();
            harness::wait_for(&status, Duration::from_secs(120), "ready before fault", harness::is_ready).await?;
            tokio::time::sleep(settle + Duration::from_millis(50)).await;
            if running.task.is_finished() {
                supervisor_alive = false;
                violations.push(format!("fault {n}: supervisor task ended"));
                break;
            }
            let engine = harness::engine(&status).context("engine missing")?;
            let id = engine.instance.clone().context("ready engine has no instance id")?;
            let before = engine.restarts;
            let injected = Instant::now();
            let recovered = match fault {
                Fault::SupervisorRestart => {
                    running.task.abort();
                    let _ = (&mut running.task).await;
                    running = spawn_supervisor(&runtime, &plan, &policy);
                    let up = harness::wait_for(
                        &running.status,
                        Duration::from_secs(60),
                        "ready after supervisor restart",
                        harness::is_ready,
                    )
                    .await;
                    if up.is_ok() && harness::engine(&running.status).and_then(|e| e.instance) == Some(id.clone())
                    {
                        entry.adopted += 1;
                    }
                    up
                }
                _ => {
                    inject(fault, &target, &id, args).await.with_context(|| format!("fault {n} ({fault:?})"))?;
                    harness::wait_for(&status, Duration::from_secs(120), "recovery", |e| {
                        e.restarts > before && harness::is_ready(e)
                    })
                    .await
                }
            };
            match recovered {
                Ok(at) => {
                    entry.recovered += 1;
                    times.entry(fault).or_default().push((at - injected).as_secs_f64() * 1e3);
                }
                Err(err) => violations.push(format!("fault {n} ({fault:?}): {err:#}")),
            }
            let processes = harness::engine_pids(port).len();
            let expected = usize::from(args.engine.runtime == Kind::Docker);
            let (running_now, _) = target.containers().await.unwrap_or((usize::MAX, usize::MAX));
            if processes != 1 || running_now != expected {
                violations.push(format!(
                    "after fault {n} ({fault:?}): {processes} engine processes, {running_now} running containers"
                ));
            }
            // Besides the running container, Docker keeps at most one stopped: the last crashed
            // run, the next restart's target. Any other dead predecessor is removed in the
            // background once the new engine runs.
            let at_most = expected * 2;
            let lingered = Instant::now();
            while target.containers().await.map(|(_, all)| all).unwrap_or(usize::MAX) > at_most {
                if lingered.elapsed() > DEAD_CONTAINER_GRACE {
                    violations.push(format!(
                        "after fault {n} ({fault:?}): more than one dead container still there after {DEAD_CONTAINER_GRACE:?}"
                    ));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let linger_ms = lingered.elapsed().as_secs_f64() * 1e3;
            max_linger_ms = max_linger_ms.max(linger_ms);
            if linger_ms > 25.0 {
                lingering += 1;
            }
        }
        Ok(())
    }
    .await;
    if let Err(err) = faults {
        violations.push(format!("fault loop stopped: {err:#}"));
    }

    if running.task.is_finished() {
        supervisor_alive = false;
    }
    running.cancel.cancel();
    match running.task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            supervisor_alive = false;
            violations.push(format!("supervisor ended with error: {err}"));
        }
        Err(err) => {
            supervisor_alive = false;
            violations.push(format!("supervisor task: {err}"));
        }
    }
    for (fault, values) in times {
        let sorted = harness::sorted(values);
        if let Some(r) = reports.get_mut(&fault) {
            r.recovery_ms_median = harness::percentile(&sorted, 50.0);
            r.recovery_ms_max = sorted.last().copied().unwrap_or(f64::NAN);
        }
    }
    Ok(Report {
        runtime: runtime.kind().to_string(),
        faults: args.faults,
        wall_s: started.elapsed().as_secs_f64(),
        kinds: reports.into_iter().map(|(k, v)| (format!("{k:?}"), v)).collect(),
        invariant_violations: violations,
        supervisor_alive,
        leaked_processes_at_end: harness::engine_pids(port).len(),
        leaked_containers_at_end: target.containers().await?.1,
        dead_container_seen_after_recovery: lingering,
        dead_container_linger_max_ms: max_linger_ms,
    })
}

async fn inject(fault: Fault, target: &Target, id: &str, args: &SoakArgs) -> anyhow::Result<()> {
    let pid = Pid::from_raw(target.host_pid(id).await?);
    match (fault, target) {
        (Fault::Kill9, _) => kill(pid, Signal::SIGKILL)?,
        (Fault::Exit137, Target::Docker(docker)) => {
            let options = bollard::query_parameters::KillContainerOptions { signal: "SIGKILL".into() };
            docker.kill_container(id, Some(options)).await?
        }
        (Fault::Exit137, Target::Process) => killpg(pid, Signal::SIGKILL)?,
        (Fault::Sigstop, _) => kill(pid, Signal::SIGSTOP)?,
        (Fault::Remove, Target::Docker(docker)) => {
            let options =
                bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() };
            docker.remove_container(id, Some(options)).await?
        }
        (Fault::DockerdRestart, Target::Docker(_)) => {
            let cmd = args.dockerd_restart_cmd.as_deref().context("--dockerd-restart-cmd is required")?;
            let status = tokio::process::Command::new("sh").arg("-c").arg(cmd).status().await?;
            anyhow::ensure!(status.success(), "{cmd}: {status}");
        }
        (fault, Target::Process) => anyhow::bail!("{fault:?} does not apply to the process runtime"),
        (Fault::SupervisorRestart, _) => unreachable!("handled by the soak loop"),
    }
    Ok(())
}
