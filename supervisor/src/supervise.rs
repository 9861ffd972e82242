//! `lucebox run`: the supervisor. Detects the hardware, plans (and smoke-proves) an engine per
//! device, then keeps the engines running, drives the fans from their load and serves the status
//! page until SIGTERM/SIGINT. Data flows one way: hardware → plan → runtime → thermal; every part
//! publishes to the one status model the web layer reads.

use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::control::{Control, EngineSet, Planner};
use crate::hardware::{self, DetectOptions, Detection, SysRoot};
use crate::hooks::{FirmwareHooks, HookEvent};
use crate::plan::inputs::InputError;
use crate::plan::Plan;
use crate::status::{Level, StatusModel};
use crate::watchdog::WatchdogNote;

/// How long the start waits for a set another process is activating: the CLI's health gate
/// allows 300 s by default. A rollback moves `current` back before it checks the old set again,
/// so only the gate itself is waited for.
const ACTIVATION_PATIENCE: std::time::Duration = std::time::Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error(transparent)]
    Inputs(#[from] InputError),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error(transparent)]
    Web(#[from] crate::web::WebError),
    #[error("a part of the supervisor panicked: {0}")]
    Panicked(String),
}

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Skip the smoke start (the plan runs unproven).
    pub no_smoke: bool,
    /// NVML library to use instead of the system's.
    pub nvml_lib: Option<std::path::PathBuf>,
}

/// Runs until `cancel` fires or a part fails, then stops engines and hands fans back; a failed
/// part is the error returned. The board's hooks hear `boot` first and `shutdown` last.
pub async fn run(
    config: Config,
    options: RunOptions,
    cancel: CancellationToken,
) -> Result<(), SuperviseError> {
    let status = StatusModel::new();
    let root = config.root.clone().map(SysRoot::new).unwrap_or_else(SysRoot::live);
    let board = FirmwareHooks::for_this_board(&config.hooks.dir, &root, status.clone());
    match &board {
        Some(board) => board.started(power_limit(&config, &status)).await,
        None if config.hooks.power_limit.is_some() => status.event(
            "hooks",
            Level::Warn,
            format!(
                "hooks.power_limit is set, but this board has no hooks in {}; the firmware's limits stay",
                config.hooks.dir.display()
            ),
        ),
        None => {}
    }
    let result = supervise(config, options, root, status, board.clone(), cancel).await;
    if let Some(board) = &board {
        board.stopping().await;
    }
    result
}

/// The configured `power-limit` event (validated when the configuration loaded).
fn power_limit(config: &Config, status: &StatusModel) -> Option<HookEvent> {
    let event = config.hooks.power_limit.as_ref()?.event();
    event.map_err(|e| status.event("hooks", Level::Error, format!("hooks.power_limit: {e}"))).ok()
}

async fn supervise(
    config: Config,
    options: RunOptions,
    root: SysRoot,
    status: StatusModel,
    board: Option<FirmwareHooks>,
    cancel: CancellationToken,
) -> Result<(), SuperviseError> {
    // An update interrupted by a crash or power cut is undone before anything is planned, so the
    // box boots the last committed profile set; one that another process is activating is waited
    // for.
    let paths = crate::ota::OtaPaths { state_dir: config.state_dir.clone(), models_dir: config.models_dir() };
    match crate::ota::recover_when_settled(&paths, &status, ACTIVATION_PATIENCE, &cancel).await {
        None => return Ok(()),
        Some(Err(e)) => status.event("ota", Level::Error, format!("recovering the update state: {e}")),
        Some(Ok(_)) => {}
    }
    let detection = detect(&root, &options, &status).await;
    let mut smoke = !options.no_smoke && root.is_live();
    if let Some(why) = crate::runtime::smoke_start_unavailable(&config).filter(|_| smoke) {
        status.event("plan", Level::Info, format!("no smoke start: {why}"));
        smoke = false;
    }
    let gpu_access = docker_gpu_access(&config, &root, &status).await;
    let planner = Arc::new(
        Planner::new(config.clone(), detection.clone(), smoke, status.clone()).with_gpu_access(gpu_access),
    );
    let inputs = planner.inputs(None)?;
    let plan = planner.plan(&inputs, planner.pins(), true).await;
    planner.publish(&plan);

    let mut parts = JoinSet::new();
    let web_cancel = cancel.child_token();
    let engines_cancel = cancel.child_token();
    // The runtime is resolved (dockerd connected) before the web starts, so every action the web
    // takes has engines to act on.
    let spawn = crate::runtime::supervisor_spawner(&config, status.clone()).await?;
    let engines = Arc::new(EngineSet::new(spawn, status.clone(), engines_cancel.clone()));
    if let Some(board) = board {
        let (status, cancel) = (status.clone(), engines_cancel.clone());
        parts.spawn(async move {
            crate::hooks::report_engine_crashes(board, status, cancel).await;
            Ok(())
        });
    }
    let fans = crate::thermal::FanOverrides::default();
    let heartbeats = crate::watchdog::Heartbeats::default();
    {
        let (config, status, cancel) = (config.clone(), status.clone(), web_cancel.clone());
        let actions: Arc<dyn crate::web::Actions> =
            Arc::new(Control::new(planner.clone(), engines.clone(), fans.clone(), status.clone()));
        parts.spawn(async move {
            crate::web::serve(&config, status, actions, cancel).await.map_err(SuperviseError::from)
        });
    }

    // The engines' queues feed the fan controllers of their devices.
    let loads = crate::runtime::load_signals(&plan, &engines_cancel);
    for group in &plan.groups {
        let devices: Vec<_> =
            detection.devices.iter().filter(|d| group.devices.contains(&d.id)).cloned().collect();
        let Some(load) = loads.get(&group.name).cloned() else { continue };
        parts.spawn(publish_load(group.name.clone(), load.clone(), status.clone(), engines_cancel.clone()));
        let (root, state_dir, status, cancel) =
            (root.clone(), config.state_dir.clone(), status.clone(), engines_cancel.clone());
        let (nvml_lib, overrides, heartbeats) = (options.nvml_lib.clone(), fans.clone(), heartbeats.clone());
        let priors = config.active_set_dir().join(crate::thermal::priors::PRIORS_FILE);
        let hooks_dir = config.hooks.dir.clone();
        parts.spawn(async move {
            let control = crate::thermal::ControlConfig {
                hook: crate::hooks::installed_board_dir(&hooks_dir, &root),
                nvml_lib: nvml_lib.clone(),
                overrides,
                priors: Some(priors),
                heartbeats: Some(heartbeats),
                ..crate::thermal::ControlConfig::default()
            };
            crate::thermal::control_loop_with(control, devices, root, state_dir, load, status, cancel).await;
            Ok(())
        });
    }
    notify_systemd_ready(&plan, &status);
    if let Some(period) = sd_notify::watchdog_enabled().filter(|p| !p.is_zero()) {
        let (status, cancel) = (status.clone(), engines_cancel.clone());
        // A note that cannot be sent is systemd's to notice: it restarts a silent service.
        let notify = |note| {
            let state = match note {
                WatchdogNote::Alive => sd_notify::NotifyState::Watchdog,
                WatchdogNote::Stalled => sd_notify::NotifyState::WatchdogTrigger,
            };
            let _ = sd_notify::notify(&[state]);
        };
        let interval = (period / 2).min(crate::watchdog::CHECK_EVERY);
        parts.spawn(async move {
            crate::watchdog::ping_while_alive(heartbeats, interval, notify, status, cancel).await;
            Ok(())
        });
    }

    let started = if plan.groups.is_empty() {
        status.event("plan", Level::Error, "no engine can run on this machine; the status page explains why");
        Ok(())
    } else {
        engines.replace(&plan).await.map(drop)
    };
    // Runs until SIGTERM/SIGINT, or until a part fails (the status page's port taken, a fan loop
    // that panicked): then everything stops and `run` returns that error, so the service manager
    // starts a whole supervisor again rather than one running on without the part.
    let mut failed = None;
    let result = match started {
        Ok(()) => {
            tokio::select! {
                _ = cancel.cancelled() => {}
                error = first_failure(&mut parts) => {
                    status.event("supervisor", Level::Error, format!("{error}; stopping"));
                    failed = Some(error);
                }
            }
            engines.stop_all().await
        }
        Err(e) => Err(e),
    };
    // Engines are down (or never started): stop fan control and the web, and wait for them.
    engines_cancel.cancel();
    web_cancel.cancel();
    let mut first_error = failed.or(result.err().map(SuperviseError::from));
    while let Some(joined) = parts.join_next().await {
        if let Err(e) = part_result(joined) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The first part to fail; parts that end well (a fan loop with no fan to drive, a load
/// publisher whose engine is gone) are let go. Pending forever while none fails.
async fn first_failure(parts: &mut JoinSet<Result<(), SuperviseError>>) -> SuperviseError {
    while let Some(joined) = parts.join_next().await {
        if let Err(e) = part_result(joined) {
            return e;
        }
    }
    std::future::pending().await
}

fn part_result(
    joined: Result<Result<(), SuperviseError>, tokio::task::JoinError>,
) -> Result<(), SuperviseError> {
    match joined {
        Ok(result) => result,
        Err(e) if e.is_panic() => Err(SuperviseError::Panicked(e.to_string())),
        // Cancelled: only at shutdown, which is not a failure.
        Err(_) => Ok(()),
    }
}

async fn detect(root: &SysRoot, options: &RunOptions, status: &StatusModel) -> Detection {
    let (root, detect_options) =
        (root.clone(), DetectOptions { nvml_lib: options.nvml_lib.clone(), ..DetectOptions::default() });
    let detection = tokio::task::spawn_blocking(move || hardware::detect(&root, &detect_options))
        .await
        .unwrap_or_else(|_| hardware::Detection::empty());
    for warning in detection.warnings.iter() {
        status.event("hardware", Level::Warn, warning.clone());
    }
    for device in &detection.devices {
        for warning in &device.warnings {
            status.event("hardware", Level::Warn, format!("{} {}: {warning}", device.id, device.model));
        }
    }
    let summary: Vec<String> = detection.devices.iter().map(|d| format!("{} ({})", d.model, d.id)).collect();
    status.event("hardware", Level::Info, format!("found {}", summary.join(", ")));
    status.update(|s| s.hardware = Some(detection.clone()));
    detection
}

/// What dockerd can give engine containers in the way of NVIDIA GPUs, when engines run there.
async fn docker_gpu_access(
    config: &Config,
    root: &SysRoot,
    status: &StatusModel,
) -> Option<crate::runtime::gpu_access::DockerGpuAccess> {
    if !crate::runtime::gpu_access::applies(config, root.is_live()) {
        return None;
    }
    match crate::runtime::gpu_access::query(&config.runtime.docker_socket).await {
        Ok(access) => Some(access),
        Err(e) => {
            status.event("plan", Level::Warn, format!("cannot ask dockerd which GPUs it can hand out: {e}"));
            None
        }
    }
}

/// Copies an engine's queue into its status entry, for the page and `/metrics`.
async fn publish_load(
    engine: String,
    mut load: tokio::sync::watch::Receiver<Option<lucebox_engine::LoadSignal>>,
    status: StatusModel,
    cancel: CancellationToken,
) -> Result<(), SuperviseError> {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            changed = load.changed() => if changed.is_err() { return Ok(()) },
        }
        let snapshot = load.borrow_and_update().as_ref().map(|signal| crate::status::LoadSnapshot {
            requests_processing: signal.requests_processing,
            requests_deferred: signal.requests_deferred,
            waiting_prompt_tokens: signal.waiting_prompt_tokens(),
            active_streams: signal.active_streams(),
            remaining_tokens: signal.remaining_tokens(),
            tokens_per_s: signal.tokens_per_s.unwrap_or(0.0),
            from_connections: !signal.shows_queue(),
        });
        status.update(|s| {
            if let Some(entry) = s.engines.get_mut(&engine) {
                entry.load = snapshot;
            }
        });
    }
}

/// Tells systemd (Type=notify) the supervisor is up; a no-op outside systemd.
fn notify_systemd_ready(plan: &Plan, status: &StatusModel) {
    let text = format!("running {} engine(s)", plan.groups.len());
    if let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&text)])
    {
        status.event("systemd", Level::Warn, format!("sd_notify READY failed: {e}"));
    }
}

/// SIGTERM or SIGINT: cancel, so engines stop with their grace period and fans go back to auto.
pub async fn cancel_on_signals(cancel: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stopping");
        cancel.cancel();
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    cancel.cancel();
}
