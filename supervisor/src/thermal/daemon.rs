//! The 1 Hz control loop of `lucebox run`: per device with a fan actuator, read what the device
//! shows, let the safety layer judge it, run model + forecast + controller, drive the fan and
//! publish [`ThermalStatus`]. Fans go back to firmware auto on cancel, on drop and from a panic
//! hook.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use lucebox_engine::LoadSignal;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::actuator::{self, FanActuator};
use super::controller::{Controller, DeviceLimits, Observation, Predictive};
use super::learned::LearnedFiles;
use super::model::ModelParams;
use super::priors::CardPriors;
use super::safety::{SafetyLayer, Verdict};
use super::sensors::{self, SensorSource};
use crate::blocking::off_the_runtime;
use crate::hardware::{Device, SysRoot};
use crate::status::{Level, StatusModel, ThermalStatus};
use crate::watchdog::{Heartbeat, Heartbeats};

/// Knobs of the loop; the defaults are what `lucebox run` uses.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    pub period: Duration,
    /// Board firmware hook for fans owned by an embedded controller.
    pub hook: Option<PathBuf>,
    pub nvml_lib: Option<PathBuf>,
    /// A duty this close to the last written one is not rewritten ...
    pub rewrite_below_pct: f64,
    /// ... unless this long has passed; a safe mode is written again as often. Something else may
    /// have changed the fan meanwhile: another overdrive commit, a board hook's `engine-crashed`,
    /// a reset from the panic hook or a GPU reset.
    pub refresh: Duration,
    /// How often the learned model and load forecast are saved.
    pub save_every: Duration,
    /// Operator fan-mode overrides (the web API's fan-mode action), read every tick.
    pub overrides: FanOverrides,
    /// Per-card starting points of the model (the active profile set's `thermal/priors.toml`), for
    /// devices that have not learned one yet.
    pub priors: Option<PathBuf>,
    /// Where the loop beats once a round, for systemd's watchdog (`crate::watchdog`) ...
    pub heartbeats: Option<Heartbeats>,
    /// ... and how long it may go without a round before the watchdog gives up on it.
    pub watchdog_silence: Duration,
    /// A round still running this long past its commands' own time (a board hook's timeout, for
    /// each of the command, auto and full speed) is stuck in a read or write the driver does not
    /// answer; the fan is then handed back from a thread of its own.
    pub stall_after: Duration,
}

/// A fan mode an operator asks for instead of the learned controller. Both are safe states; the
/// safety layer's full speed still wins over firmware auto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanOverride {
    FirmwareAuto,
    FullSpeed,
}

/// Shared per-device overrides; no entry means the predictive controller drives the fan.
#[derive(Debug, Clone, Default)]
pub struct FanOverrides {
    inner: std::sync::Arc<Mutex<std::collections::BTreeMap<String, FanOverride>>>,
}

impl FanOverrides {
    /// `None` hands the device back to the predictive controller.
    pub fn set(&self, device: &str, mode: Option<FanOverride>) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match mode {
            Some(mode) => map.insert(device.to_string(), mode),
            None => map.remove(device),
        };
    }

    pub fn get(&self, device: &str) -> Option<FanOverride> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).get(device).copied()
    }
}

/// The reason shown in events when an operator override drives the fan.
const OPERATOR: &str = "operator override";

impl Default for ControlConfig {
    fn default() -> Self {
        let period = Duration::from_secs(1);
        Self {
            period,
            hook: None,
            nvml_lib: None,
            rewrite_below_pct: 1.0,
            refresh: Duration::from_secs(30),
            save_every: Duration::from_secs(300),
            overrides: FanOverrides::default(),
            priors: None,
            heartbeats: None,
            // A few periods, or a round whose fan command, fallback to auto and full speed each
            // ran a board hook to its timeout: 20 s. Then the watchdog asks systemd to act.
            watchdog_silence: 3 * crate::hooks::DEFAULT_TIMEOUT + 5 * period,
            // sysfs and NVML answer in milliseconds: a few periods is a driver that does not.
            stall_after: 5 * period,
        }
    }
}

/// Runs until `cancel`, with the default configuration.
pub async fn control_loop(
    devices: Vec<Device>,
    root: SysRoot,
    state_dir: PathBuf,
    load: watch::Receiver<Option<LoadSignal>>,
    status: StatusModel,
    cancel: CancellationToken,
) {
    control_loop_with(ControlConfig::default(), devices, root, state_dir, load, status, cancel).await
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Predictive,
    FirmwareAuto,
    FullSpeed,
    /// The actuator failed; the fan is handed back (see [`HandBack`]) and no longer driven.
    Failed,
}

/// The first wait before a fan that could not be handed back is tried again; it doubles ...
const HAND_BACK_RETRY_FIRST: Duration = Duration::from_secs(1);
/// ... up to this.
const HAND_BACK_RETRY_MAX: Duration = Duration::from_secs(60);

/// Where a failed actuator left the fan: handed back to firmware auto or full speed, or neither
/// write held yet and the next try is due at `next_try`.
#[derive(Debug, Clone, Copy)]
struct HandBack {
    held: Option<Mode>,
    tries: u32,
    wait: Duration,
    next_try: Instant,
}

impl Mode {
    /// The mode a fan handed back is in.
    fn handed_back(handed: &actuator::HandedBack) -> Self {
        match handed {
            actuator::HandedBack::FirmwareAuto => Mode::FirmwareAuto,
            actuator::HandedBack::FullSpeed { .. } => Mode::FullSpeed,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Predictive => "predictive",
            Mode::FirmwareAuto => "firmware-auto",
            Mode::FullSpeed => "full-speed",
            Mode::Failed => "actuator-failed",
        }
    }
}

struct DeviceLoop {
    id: String,
    actuator: Box<dyn FanActuator>,
    sensors: Box<dyn SensorSource>,
    safety: SafetyLayer,
    controller: Predictive,
    limit_c: f64,
    learned: LearnedFiles,
    mode: Option<Mode>,
    last_duty: Option<(f64, Instant)>,
    /// When the safe mode the loop is in was last written.
    safe_written: Option<Instant>,
    /// Set once the actuator failed.
    hand_back: Option<HandBack>,
    /// The fan was handed back on the way out; dropping the loop need not write it again.
    released: bool,
    /// CPU time spent in this device's ticks.
    cpu: Duration,
}

/// CPU time of the calling thread: a tick runs on one thread without yielding, so the difference
/// around it is the tick's own cost, whatever else the runtime does meanwhile.
pub(super) fn thread_cpu_time() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec.max(0) as u64, now.tv_nsec.clamp(0, 999_999_999) as u32)
}

impl DeviceLoop {
    fn open(
        device: &Device,
        root: &SysRoot,
        state_dir: &Path,
        config: &ControlConfig,
        priors: Option<&CardPriors>,
        status: &StatusModel,
    ) -> Option<Self> {
        let actuator =
            match actuator::for_device(device, root, config.hook.as_deref(), config.nvml_lib.as_deref()) {
                Ok(actuator) => actuator,
                Err(why) => {
                    let level = match why {
                        actuator::NoFanControl::NotOurs(_) => Level::Info,
                        actuator::NoFanControl::Refused(_) => Level::Warn,
                    };
                    status.event("thermal", level, format!("{}: fan left to its firmware: {why}", device.id));
                    return None;
                }
            };
        let sensors = sensors::for_device(device, root, config.nvml_lib.as_deref()).ok()?;
        if let Some(doubt) = sensors.limit_doubt() {
            status.event("thermal", Level::Warn, format!("{}: {doubt}", device.id));
        }
        let learned = LearnedFiles::for_device(state_dir, &device.id, device.uid.as_deref());
        let resumed = learned.load();
        for e in &resumed.errors {
            status.event(
                "thermal",
                Level::Warn,
                format!("{}: {e}; relearning that part from the prior", device.id),
            );
        }
        let params = resumed.params.unwrap_or_else(|| card_prior(device, priors, status));
        let limits = limits(actuator.as_ref(), sensors.as_ref());
        let controller =
            Predictive::new(limits, params, config.period.as_secs_f64()).with_forecast(resumed.forecast);
        Some(Self::driving(device.id.clone(), actuator, sensors, controller, learned))
    }

    /// A loop that drives `actuator` from `sensors` with `controller`, keeping what it learns
    /// in `learned`.
    fn driving(
        id: String,
        actuator: Box<dyn FanActuator>,
        sensors: Box<dyn SensorSource>,
        controller: Predictive,
        learned: LearnedFiles,
    ) -> Self {
        let limit_c = sensors.limit_c();
        Self {
            id,
            actuator,
            sensors,
            safety: SafetyLayer::new(limit_c),
            controller,
            limit_c,
            learned,
            mode: None,
            last_duty: None,
            safe_written: None,
            hand_back: None,
            released: false,
            cpu: Duration::ZERO,
        }
    }

    /// Firmware auto, else full speed: the mode the fan is in now, or why neither write held.
    fn hand_fan_back(&mut self) -> Result<Mode, actuator::HandBackError> {
        self.actuator.hand_back().map(|handed| Mode::handed_back(&handed))
    }

    /// After a failed write the loop stops driving the fan and hands it back. Where neither auto
    /// nor full speed can be written either, it tries again with a doubling wait: the fan must not
    /// stay at the low duty it may have been left at.
    fn fall_back(&mut self, status: &StatusModel, why: String) {
        let held = self.hand_fan_back();
        let message = match &held {
            Ok(mode) => {
                format!("{}: {why}; fan handed back ({}), no longer driven", self.id, describe(*mode))
            }
            Err(e) => format!(
                "{}: {why}; handing the fan back failed too ({e}); trying again in {} s",
                self.id,
                HAND_BACK_RETRY_FIRST.as_secs()
            ),
        };
        status.event("thermal", Level::Error, message);
        self.mode = Some(Mode::Failed);
        self.last_duty = None;
        self.hand_back = Some(HandBack {
            held: held.ok(),
            tries: 1,
            wait: HAND_BACK_RETRY_FIRST,
            next_try: Instant::now() + HAND_BACK_RETRY_FIRST,
        });
    }

    /// A failed actuator's fan that is not handed back yet is tried again when due.
    fn retry_hand_back(&mut self, status: &StatusModel) {
        let Some(mut hand_back) = self.hand_back.filter(|h| h.held.is_none() && Instant::now() >= h.next_try)
        else {
            return;
        };
        hand_back.tries += 1;
        match self.hand_fan_back() {
            Ok(mode) => {
                hand_back.held = Some(mode);
                status.event(
                    "thermal",
                    Level::Warn,
                    format!("{}: fan handed back ({}) at try {}", self.id, describe(mode), hand_back.tries),
                );
            }
            Err(_) => {
                hand_back.wait = (hand_back.wait * 2).min(HAND_BACK_RETRY_MAX);
                hand_back.next_try = Instant::now() + hand_back.wait;
            }
        }
        self.hand_back = Some(hand_back);
    }

    /// What the status page says of a failed actuator's fan.
    fn hand_back_state(&self) -> Option<String> {
        let hand_back = self.hand_back?;
        Some(match hand_back.held {
            Some(mode) => format!("actuator failed; fan handed back ({})", describe(mode)),
            None => format!(
                "actuator failed; fan not handed back after {} tries, trying again every {} s",
                hand_back.tries,
                hand_back.wait.as_secs()
            ),
        })
    }

    /// Hands the fan to firmware auto or full speed on entering that mode, and again every
    /// `refresh` while in it, in case something else has changed the fan since.
    fn enter_safe_mode(&mut self, mode: Mode, why: &str, status: &StatusModel, refresh: Duration) {
        let entering = self.mode != Some(mode);
        if !entering && self.safe_written.is_some_and(|at| at.elapsed() < refresh) {
            return;
        }
        if entering {
            status.event(
                "thermal",
                Level::Warn,
                format!("{}: {why}; {}", self.id, mode.name().replace('-', " ")),
            );
        }
        let written = match mode {
            Mode::FullSpeed => self.actuator.full_speed(),
            _ => self.actuator.restore_auto(),
        };
        match written {
            Ok(()) => {
                self.mode = Some(mode);
                self.safe_written = Some(Instant::now());
            }
            Err(e) => self.fall_back(status, e.to_string()),
        }
        self.last_duty = None;
    }

    /// After a stall the fan was handed back behind this loop's back, so what it last wrote no
    /// longer holds: the next round writes its command (or its safe mode) again.
    fn command_again(&mut self) {
        if self.mode != Some(Mode::Failed) {
            self.mode = None;
        }
        self.last_duty = None;
        self.safe_written = None;
    }

    /// On the way out: the fan handed back, and what it was left in for the status page.
    fn release(&mut self) -> ThermalRelease {
        self.released = true;
        match self.hand_fan_back() {
            Ok(mode) => ThermalRelease { mode: mode.name(), failure: None },
            Err(e) => {
                tracing::error!(
                    "{}: could not hand the fan back to firmware auto or full speed: {e}",
                    self.id
                );
                ThermalRelease {
                    mode: Mode::Failed.name(),
                    failure: Some(format!("fan not handed back: {e}")),
                }
            }
        }
    }

    fn tick(
        &mut self,
        t_s: f64,
        load: Option<LoadSignal>,
        status: &StatusModel,
        config: &ControlConfig,
    ) -> ThermalStatus {
        let cpu_before = thread_cpu_time();
        let reading = self.sensors.read();
        // An operator's safe mode replaces the controller; the safety layer's full speed still wins.
        let verdict = match (config.overrides.get(&self.id), self.safety.judge(&reading)) {
            (_, full @ Verdict::FullSpeed(_)) => full,
            (Some(FanOverride::FullSpeed), _) => Verdict::FullSpeed(OPERATOR.into()),
            (Some(FanOverride::FirmwareAuto), auto @ Verdict::FirmwareAuto(_)) => auto,
            (Some(FanOverride::FirmwareAuto), _) => Verdict::FirmwareAuto(OPERATOR.into()),
            (None, verdict) => verdict,
        };
        let (mut safety, mut why, mut decision) = (None, None, None);
        if self.mode == Some(Mode::Failed) {
            self.retry_hand_back(status);
            safety = self.hand_back_state();
        } else {
            match &verdict {
                Verdict::FirmwareAuto(why) => {
                    safety = (why != OPERATOR).then(|| why.clone());
                    self.enter_safe_mode(Mode::FirmwareAuto, why, status, config.refresh);
                }
                Verdict::FullSpeed(why) => {
                    safety = (why != OPERATOR).then(|| why.clone());
                    self.enter_safe_mode(Mode::FullSpeed, why, status, config.refresh);
                }
                Verdict::Control { floor_pct } => {
                    if let Ok(r) = &reading {
                        let obs = Observation {
                            t_s,
                            junction_c: r.junction_c,
                            power_w: r.power_w.unwrap_or(0.0),
                            fan_duty_pct: fan_duty_seen(r.fan_duty_pct, self.last_duty.map(|(d, _)| d)),
                            load,
                        };
                        self.report_model_change(obs.load.as_ref(), status);
                        let planned = self.controller.decide(&obs);
                        let duty = planned.max(*floor_pct);
                        decision = self.controller.detail();
                        why = if *floor_pct > planned {
                            Some(format!("{duty:.0} %: the safety layer's curve near the limit"))
                        } else {
                            decision.map(|d| d.reason(duty))
                        };
                        let stale = self.last_duty.is_none_or(|(d, at)| {
                            (d - duty).abs() >= config.rewrite_below_pct || at.elapsed() >= config.refresh
                        });
                        if stale || self.mode != Some(Mode::Predictive) {
                            match self.actuator.set_duty(duty, self.limit_c) {
                                Ok(()) => {
                                    self.mode = Some(Mode::Predictive);
                                    self.last_duty = Some((duty, Instant::now()));
                                }
                                Err(e) => self.fall_back(status, e.to_string()),
                            }
                        }
                    }
                }
            }
        }
        self.controller.commanded(match self.mode {
            Some(Mode::Predictive) => self.last_duty.map(|(duty, _)| duty),
            Some(Mode::FullSpeed) => Some(100.0),
            _ => None,
        });
        self.cpu += thread_cpu_time().saturating_sub(cpu_before);
        let loop_cpu_s = self.cpu.as_secs_f64();
        let r = reading.as_ref().ok();
        ThermalStatus {
            device_id: self.id.clone(),
            junction_c: r.map(|r| r.junction_c),
            power_w: r.and_then(|r| r.power_w),
            fan_duty_pct: r.and_then(|r| r.fan_duty_pct),
            fan_rpm: r.and_then(|r| r.fan_rpm),
            limit_c: Some(self.limit_c),
            power_cap_w: self.sensors.power_cap_w(),
            predicted_peak_c: self.controller.predicted_peak_c(),
            mode: self.mode.map(Mode::name).unwrap_or("starting").to_string(),
            actuator: self.actuator.kind().to_string(),
            safety,
            // Only while this loop drives the fan: a safe mode or a failed actuator has no plan.
            why: why.filter(|_| self.mode == Some(Mode::Predictive)),
            decision: decision.filter(|_| self.mode == Some(Mode::Predictive)),
            loop_cpu_s,
            loop_cpu_pct: (t_s > 0.0).then(|| 100.0 * loop_cpu_s / t_s),
        }
    }

    /// Says so when the engine serves another model than the forecast learned with: the next
    /// decision relearns its phase power and rates from the prior (`PowerForecast::observe`).
    fn report_model_change(&self, load: Option<&LoadSignal>, status: &StatusModel) {
        let served = load.and_then(|load| load.model.as_deref());
        if let (Some(served), Some(was)) = (served, self.controller.forecast().learned_with_another(served)) {
            status.event(
                "thermal",
                Level::Info,
                format!(
                    "{}: the engine now serves {served} (was {was}); relearning its power and rates",
                    self.id
                ),
            );
        }
    }

    fn save_learned(&self) {
        let Some((params, forecast)) = self.controller.learned() else { return };
        if let Err(e) = self.learned.save(&params, forecast) {
            tracing::warn!("learned thermal state of {}: {e}", self.id);
        }
    }
}

/// Where a device has not learned a model yet: its card's entry of the priors file, else the
/// generic prior.
fn card_prior(device: &Device, priors: Option<&CardPriors>, status: &StatusModel) -> ModelParams {
    let Some((priors, (card, params))) = priors.and_then(|p| p.for_device(device).map(|c| (p, c))) else {
        return ModelParams::prior();
    };
    status.event(
        "thermal",
        Level::Info,
        format!(
            "{}: no learned thermal model yet; starting from the prior for {} in {}",
            device.id,
            card.describe(),
            priors.path.display()
        ),
    );
    params.clone()
}

/// How a device's fan was left when its loop ended.
struct ThermalRelease {
    mode: &'static str,
    failure: Option<String>,
}

/// "firmware auto" or "full speed".
fn describe(mode: Mode) -> String {
    mode.name().replace('-', " ")
}

impl Drop for DeviceLoop {
    /// Unwinding or a runtime shut down mid-round: the fan goes back all the same.
    fn drop(&mut self) {
        if !self.released {
            self.release();
        }
    }
}

/// What the panic hook needs to reset every fan.
struct PanicReset {
    root: SysRoot,
    hook: Option<PathBuf>,
    nvml_lib: Option<PathBuf>,
}

static PANIC_RESET: OnceLock<Mutex<Option<PanicReset>>> = OnceLock::new();

/// Installs (once per process) a panic hook that hands every fan back to firmware auto before
/// the previous hook runs.
fn arm_panic_reset(root: &SysRoot, config: &ControlConfig) {
    let slot = PANIC_RESET.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(Ok(guard)) = PANIC_RESET.get().map(|m| m.lock()) {
                if let Some(r) = guard.as_ref() {
                    let _ = super::reset::reset_all(&r.root, r.hook.as_deref(), r.nvml_lib.as_deref());
                }
            }
            previous(info);
        }));
        Mutex::new(None)
    });
    if let Ok(mut guard) = slot.lock() {
        *guard = Some(PanicReset {
            root: root.clone(),
            hook: config.hook.clone(),
            nvml_lib: config.nvml_lib.clone(),
        });
    }
}

pub async fn control_loop_with(
    config: ControlConfig,
    devices: Vec<Device>,
    root: SysRoot,
    state_dir: PathBuf,
    load: watch::Receiver<Option<LoadSignal>>,
    status: StatusModel,
    cancel: CancellationToken,
) {
    // Watched from the start: opening a device reads sysfs too.
    let names: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
    let opening = config
        .heartbeats
        .as_ref()
        .map(|h| h.watch(format!("fan loop of {}", names.join(", ")), config.watchdog_silence));
    let config = Arc::new(config);
    let opened = {
        let (config, status, root) = (config.clone(), status.clone(), root.clone());
        off_the_runtime(move || {
            let priors = config.priors.as_deref().filter(|p| p.exists()).and_then(|path| {
                CardPriors::load(path)
                    .map_err(|e| {
                        status.event("thermal", Level::Warn, format!("{e}; using the generic prior"))
                    })
                    .ok()
            });
            let opened: Vec<(DeviceLoop, Device)> = devices
                .into_iter()
                .filter_map(|d| {
                    DeviceLoop::open(&d, &root, &state_dir, &config, priors.as_ref(), &status).map(|l| (l, d))
                })
                .collect();
            if !opened.is_empty() {
                arm_panic_reset(&root, &config);
            }
            opened
        })
        .await
    };
    let Some(opened) = opened.ok().filter(|opened| !opened.is_empty()) else {
        status.event("thermal", Level::Info, "no fan this supervisor can drive; firmware keeps control");
        return;
    };
    // One loop per fan, each with its own rounds: a card whose driver stops answering holds up
    // only its own loop, never the fan of the card beside it. Each is watched under its own
    // name from here (one that may be the opening's: that watch ends first).
    drop(opening);
    let started = Instant::now();
    let loops: Vec<_> = opened
        .into_iter()
        .map(|(device_loop, device)| {
            let heartbeat = config
                .heartbeats
                .as_ref()
                .map(|h| h.watch(format!("fan loop of {}", device.id), config.watchdog_silence));
            let context = RoundContext {
                config: config.clone(),
                root: root.clone(),
                status: status.clone(),
                started,
                device,
                handing_back: Arc::default(),
            };
            drive_fan(device_loop, context, heartbeat, load.clone(), cancel.clone())
        })
        .collect();
    futures_util::future::join_all(loops).await;
}

/// What one fan's loop shares with its rounds and its stall guard.
struct RoundContext {
    config: Arc<ControlConfig>,
    root: SysRoot,
    status: StatusModel,
    started: Instant,
    device: Device,
    /// Set while a stall's hand-back runs: a driver that holds that call too gets one such
    /// thread, however often its loop stalls again.
    handing_back: Arc<std::sync::atomic::AtomicBool>,
}

/// One fan's loop: a round a period (sensor reads, the decision, the actuator write, saving what
/// was learned) on a blocking thread, until `cancel`; then the fan goes back to firmware auto.
async fn drive_fan(
    mut device_loop: DeviceLoop,
    context: RoundContext,
    heartbeat: Option<Heartbeat>,
    load: watch::Receiver<Option<LoadSignal>>,
    cancel: CancellationToken,
) {
    let RoundContext { config, status, .. } = &context;
    let allowance = config.stall_after + 3 * device_loop.actuator.command_timeout();
    let mut last_save = Instant::now();
    let mut ticker = tokio::time::interval(config.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let t_s = context.started.elapsed().as_secs_f64();
        // Connections alone say nothing of prompts or streams: the forecast then sees no queue.
        let signal = load.borrow().clone().filter(LoadSignal::shows_queue);
        let save = last_save.elapsed() >= config.save_every;
        // The round reads sysfs or NVML, writes the fan and may run a board hook: off the async
        // workers, so a read a wedged driver never answers holds a thread of its own.
        let (round_config, round_status) = (config.clone(), status.clone());
        let round = off_the_runtime(move || {
            let published = device_loop.tick(t_s, signal, &round_status, &round_config);
            if save {
                device_loop.save_learned();
            }
            (device_loop, published)
        });
        // Gone when the runtime shuts down, or on cancel while a stalled round holds the loop:
        // the fan was handed back then (the loop's drop, or the stall guard).
        let Some((back, published)) = finish_round(round, allowance, &context, &cancel).await else {
            return;
        };
        device_loop = back;
        if save {
            last_save = Instant::now();
        }
        status.update(|s| {
            s.thermal.insert(published.device_id.clone(), published);
        });
        heartbeat.iter().for_each(Heartbeat::beat);
    }
    // The fan back to firmware auto (else full speed), here, or when the loop is dropped with the
    // work if the runtime is shutting down.
    let id = device_loop.id.clone();
    let released = off_the_runtime(move || {
        device_loop.save_learned();
        device_loop.release()
    })
    .await;
    if let Ok(release) = released {
        publish_not_driven(status, &id, release.mode, release.failure);
    }
}
/// Waits for a fan's round. One still running after `allowance` is stuck in a read or write its
/// driver does not answer, and the loop's actuator is stuck with it: the fan is handed back from
/// a thread of its own ([`hand_back_stalled`]), and the round is waited for on. Once it returns,
/// the loop writes its command again and drives the fan as before.
async fn finish_round(
    round: impl std::future::Future<Output = std::io::Result<(DeviceLoop, ThermalStatus)>>,
    allowance: Duration,
    context: &RoundContext,
    cancel: &CancellationToken,
) -> Option<(DeviceLoop, ThermalStatus)> {
    let began = Instant::now();
    let mut round = std::pin::pin!(round);
    tokio::select! {
        done = &mut round => return done.ok(),
        _ = tokio::time::sleep(allowance) => {}
    }
    hand_back_stalled(context, began.elapsed());
    let (mut device_loop, published) = tokio::select! {
        done = &mut round => done.ok()?,
        _ = cancel.cancelled() => return None,
    };
    device_loop.command_again();
    context.status.event(
        "thermal",
        Level::Warn,
        format!(
            "{}: the fan loop's round returned after {:.1} s; driving the fan again",
            device_loop.id,
            began.elapsed().as_secs_f64()
        ),
    );
    Some((device_loop, published))
}

/// Hands a stalled loop's fan back (firmware auto, else full speed) through an actuator of its
/// own, on a thread of its own: the same driver may hold this write too, and nothing else may
/// wait on it. Says so in the status model, with what the fan was left in.
fn hand_back_stalled(context: &RoundContext, stalled_for: Duration) {
    use std::sync::atomic::Ordering;
    let RoundContext { config, root, status, device, handing_back, .. } = context;
    let id = device.id.clone();
    let stalled = format!(
        "the fan loop's round has not returned for {:.1} s (a read or write the driver does not answer)",
        stalled_for.as_secs_f64()
    );
    if handing_back.swap(true, Ordering::AcqRel) {
        let still = "the hand-back of an earlier stall has not returned either";
        status.event("thermal", Level::Error, format!("{id}: {stalled}; {still}"));
        return;
    }
    status.event("thermal", Level::Error, format!("{id}: {stalled}; handing the fan back"));
    let (device, root, status) = (device.clone(), root.clone(), status.clone());
    let (done, failed_to_start) = (handing_back.clone(), handing_back.clone());
    let (hook, nvml_lib) = (config.hook.clone(), config.nvml_lib.clone());
    let handing = move || {
        let handed = actuator::for_device(&device, &root, hook.as_deref(), nvml_lib.as_deref())
            .map_err(|e| format!("its actuator could not be opened again: {e}"))
            .and_then(|mut fan| fan.hand_back().map_err(|e| e.to_string()));
        match handed {
            Ok(handed) => {
                let mode = Mode::handed_back(&handed);
                status.event("thermal", Level::Warn, format!("{id}: fan handed back ({})", describe(mode)));
                publish_not_driven(&status, &id, mode.name(), Some(stalled));
            }
            Err(e) => {
                status.event("thermal", Level::Error, format!("{id}: handing the fan back failed: {e}"))
            }
        }
        done.store(false, Ordering::Release);
    };
    if let Err(e) = std::thread::Builder::new().name("fan-hand-back".into()).spawn(handing) {
        failed_to_start.store(false, Ordering::Release);
        context.status.event(
            "thermal",
            Level::Error,
            format!("{}: no thread to hand the stalled fan back: {e}", context.device.id),
        );
    }
}

/// Shows a fan its loop no longer drives: the mode it was left in and why, with no plan.
fn publish_not_driven(status: &StatusModel, id: &str, mode: &str, safety: Option<String>) {
    status.update(|s| {
        if let Some(t) = s.thermal.get_mut(id) {
            t.mode = mode.into();
            t.safety = safety;
            t.why = None;
            t.decision = None;
        }
    });
}

/// What a device shows of itself to its controller: the limit its sensors publish, its fan's
/// range and its board power limit.
fn limits(actuator: &dyn FanActuator, sensors: &dyn SensorSource) -> DeviceLimits {
    let range = actuator.range();
    DeviceLimits {
        junction_limit_c: sensors.limit_c(),
        min_duty_pct: range.min_duty_pct,
        zero_rpm: range.zero_rpm,
        power_cap_w: sensors.power_cap_w(),
    }
}

/// The fan duty the controller is told: what the device reports, else the duty last sent. A fan
/// behind an embedded controller reports none; taken as stopped, it would teach the model a fan
/// that never cools and the controller a fan that never answers its commands.
fn fan_duty_seen(reported_pct: Option<f64>, sent_pct: Option<f64>) -> f64 {
    reported_pct.or(sent_pct).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thermal::actuator::{ActuatorError, FanRange};
    use crate::thermal::sensors::{Readings, SensorError};

    /// Sensors that show what the test last set.
    struct Shown(Arc<Mutex<Readings>>);

    impl SensorSource for Shown {
        fn read(&mut self) -> Result<Readings, SensorError> {
            Ok(*self.0.lock().unwrap_or_else(|e| e.into_inner()))
        }

        fn limit_c(&self) -> f64 {
            90.0
        }
    }

    /// A zero-rpm fan (floor 20 %) that takes every command and keeps a log of them.
    struct Logged(Arc<Mutex<Vec<String>>>);

    impl Logged {
        fn log(&self, what: String) -> Result<(), ActuatorError> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(what);
            Ok(())
        }
    }

    impl FanActuator for Logged {
        fn kind(&self) -> &'static str {
            "logged"
        }

        fn range(&self) -> FanRange {
            FanRange { min_duty_pct: 20.0, zero_rpm: true }
        }

        fn set_duty(&mut self, duty_pct: f64, _limit_c: f64) -> Result<(), ActuatorError> {
            self.log(format!("{duty_pct:.0}"))
        }

        fn restore_auto(&mut self) -> Result<(), ActuatorError> {
            self.log("auto".into())
        }

        fn full_speed(&mut self) -> Result<(), ActuatorError> {
            self.log("full".into())
        }
    }

    /// The loop tells its controller what the fan was really sent. It stops a zero-rpm fan at
    /// idle, where the firmware is seen to keep it stopped at 40 °C; then the hard limit runs it
    /// at full speed. Had the controller been left thinking the fan was stopped (handed to its
    /// firmware), the fan's climb would read as its firmware spinning it at 40 °C, and that would
    /// be learned and kept for the next start.
    #[test]
    fn the_controller_is_told_the_full_speed_the_safety_layer_sent() {
        let state = tempfile::tempdir().expect("temp dir");
        let shown = Arc::new(Mutex::new(Readings {
            junction_c: 40.0,
            power_w: Some(15.0),
            fan_rpm: None,
            fan_duty_pct: Some(0.0),
        }));
        let commands = Arc::new(Mutex::new(Vec::new()));
        let (actuator, sensors): (Box<dyn FanActuator>, Box<dyn SensorSource>) =
            (Box::new(Logged(commands.clone())), Box::new(Shown(shown.clone())));
        let controller =
            Predictive::new(limits(actuator.as_ref(), sensors.as_ref()), ModelParams::prior(), 1.0);
        let learned = LearnedFiles::for_device(state.path(), "0000:03:00.0", None);
        let mut device_loop =
            DeviceLoop::driving("0000:03:00.0".into(), actuator, sensors, controller, learned);
        let (status, config) = (StatusModel::new(), ControlConfig::default());
        let mut t_s = 0.0;
        let mut run = |device_loop: &mut DeviceLoop, readings: &[(f64, f64, f64)]| {
            for &(junction_c, power_w, fan_duty_pct) in readings {
                if let Ok(mut r) = shown.lock() {
                    (r.junction_c, r.power_w, r.fan_duty_pct) =
                        (junction_c, Some(power_w), Some(fan_duty_pct));
                }
                device_loop.tick(t_s, None, &status, &config);
                t_s += 1.0;
            }
            device_loop.controller.learned().and_then(|(params, _)| params.firmware_stops_below_c)
        };
        let stops_below_c = run(&mut device_loop, &[(40.0, 15.0, 0.0); 5]);
        assert!(stops_below_c.is_some_and(|c| c > 40.0), "kept stopped at 40 °C: {stops_below_c:?}");
        let hold = [(91.0, 250.0, 0.0), (90.0, 250.0, 60.0), (89.0, 250.0, 90.0), (86.0, 250.0, 100.0)];
        run(&mut device_loop, &hold);
        assert_eq!(
            run(&mut device_loop, &[(80.0, 60.0, 100.0); 3]),
            stops_below_c,
            "the climb taken as the firmware's"
        );
        let log = commands.lock().map(|log| log.clone()).unwrap_or_default();
        assert_eq!(log[..2], ["0", "full"], "stopped, then full speed at the limit: {log:?}");
        assert!(log.len() > 2, "driven again after the hold: {log:?}");
    }

    #[test]
    fn a_fan_that_reports_no_duty_is_taken_to_run_at_the_duty_sent() {
        assert_eq!(fan_duty_seen(Some(35.0), Some(60.0)), 35.0);
        assert_eq!(fan_duty_seen(None, Some(60.0)), 60.0);
        assert_eq!(fan_duty_seen(None, None), 0.0);
    }
}
