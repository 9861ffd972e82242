//! One engine's supervision loop: start (or adopt), wait for `/health` within the startup
//! allowance, probe liveness, restart with backoff, step down to fallbacks on a crash loop, stop
//! cleanly on cancellation. Every transition goes to the status model.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::engine::{EngineInstance, EngineRuntime};
use super::memory::{self, ChoiceMemory};
use super::policy::{FailureCount, SupervisionPolicy};
use super::probe::{self, Health};
use super::{Exit, RuntimeError};
use crate::plan::{Choice, GroupPlan};
use crate::status::{unix_ms, EngineState, EngineStatus, Level, StatusModel};

/// Used when the plan gives no startup allowance.
pub const DEFAULT_STARTUP_ALLOWANCE: Duration = Duration::from_secs(300);
/// How long to wait for the runtime to report how an engine ended once its process is seen gone
/// (Docker: the `die` event, normally 35–60 ms after the pidfd).
const EXIT_REPORT_WAIT: Duration = Duration::from_secs(5);

pub struct Supervisor<R: EngineRuntime> {
    runtime: Arc<R>,
    group: GroupPlan,
    policy: SupervisionPolicy,
    status: StatusModel,
    cancel: CancellationToken,
    /// Where the group's crash-loop step-down is remembered (`memory.rs`); `None`: nowhere.
    memory: Option<PathBuf>,
}

/// How one run of the engine ended.
enum RunEnd<I> {
    Cancelled,
    /// `unreported`: the ended instance, kept while the runtime has yet to report how it ended
    /// (`exit` is [`Exit::Ended`]).
    Failed {
        exit: Exit,
        ready_for: Option<Duration>,
        unreported: Option<I>,
    },
}

impl<I> RunEnd<I> {
    fn failed(exit: Exit, ready_for: Option<Duration>) -> Self {
        RunEnd::Failed { exit, ready_for, unreported: None }
    }
}

/// What woke the supervision loop.
enum Step {
    Cancel,
    Exited(Exit),
    Probed(Health),
}

impl<R: EngineRuntime> Supervisor<R> {
    pub fn new(
        runtime: Arc<R>,
        group: GroupPlan,
        policy: SupervisionPolicy,
        status: StatusModel,
        cancel: CancellationToken,
    ) -> Self {
        Self { runtime, group, policy, status, cancel, memory: None }
    }

    /// Remembers a crash-loop step-down in `<state_dir>/runtime/<group>.json`, and starts at the
    /// remembered choice.
    pub fn remember_in(mut self, state_dir: &Path) -> Self {
        self.memory = Some(memory::path(state_dir, &self.group.name));
        self
    }

    /// Runs until cancelled; the engine is stopped when this returns.
    pub async fn run(self) -> Result<(), RuntimeError> {
        let choices: Vec<Choice> =
            std::iter::once(self.group.choice.clone()).chain(self.group.fallbacks.iter().cloned()).collect();
        let plan_hash = memory::choices_hash(&choices);
        let (mut index, recalled) = self.recall(&choices, &plan_hash);
        let mut failures = FailureCount::default();
        let mut may_adopt = true;
        self.publish_choice(&choices[index]);
        if let Some(reason) = recalled {
            self.set_state(EngineState::Starting, |e| e.fallback_reason = Some(reason));
        }
        loop {
            let choice = &choices[index];
            // Waiting for the runtime (dockerd restarting) is not a failure of the engine.
            tokio::select! {
                _ = self.cancel.cancelled() => {
                    self.stopped().await;
                    return Ok(());
                }
                _ = self.runtime.available() => {}
            }
            let end = match self.launch(choice, std::mem::take(&mut may_adopt)).await {
                Ok(instance) => self.supervise(instance, choice).await,
                Err(err) => RunEnd::failed(Exit::Gone(format!("start failed: {err}")), None),
            };
            let (exit, ready_for, unreported) = match end {
                RunEnd::Cancelled => {
                    self.stopped().await;
                    return Ok(());
                }
                RunEnd::Failed { exit, ready_for, unreported } => (exit, ready_for, unreported),
            };
            let failed_at = Instant::now();
            let in_a_row = failures.record(&self.policy.restart, ready_for);
            let crash_loop = self.policy.restart.is_crash_loop(in_a_row);
            let next = choices.get(index + 1).filter(|_| crash_loop);
            let delay = if next.is_some() { Duration::ZERO } else { self.policy.restart.delay(in_a_row) };
            // A lone crash restarts at once, with the exit code reported when the runtime has it;
            // any other restart waits anyway, so its status and reasons carry the code.
            let (exit, report_later) = match unreported {
                Some(instance) if delay.is_zero() && !crash_loop => (exit, Some(instance)),
                Some(mut instance) => {
                    let reported = tokio::select! {
                        _ = self.cancel.cancelled() => exit, // shutdown does not wait for the code
                        reported = instance.final_exit(EXIT_REPORT_WAIT) => reported,
                    };
                    (reported, None)
                }
                None => (exit, None),
            };
            // One update: observers never see the new exit with the old state.
            let state = match (crash_loop, next) {
                (false, _) => EngineState::Restarting { in_ms: delay.as_millis() as u64 },
                (true, next) => EngineState::CrashLooping {
                    fell_back_to: next.map(|n| format!("{}/{}", n.variant, n.profile)),
                },
            };
            let reason = next.map(|next| {
                format!(
                    "crash loop on {}/{} ({in_a_row} failures in a row, last: {exit}); stepped down to {}/{}",
                    choice.variant, choice.profile, next.variant, next.profile
                )
            });
            let mut restarts = 0;
            self.set_state(state, |engine| {
                engine.restarts = engine.restarts.saturating_add(1);
                restarts = engine.restarts;
                engine.last_exit = Some(exit.to_string());
                engine.instance = None;
                if reason.is_some() {
                    engine.fallback_reason = reason.clone();
                }
            });
            self.event(
                Level::Warn,
                format!("{}/{} ended: {exit} ({in_a_row} in a row)", choice.variant, choice.profile),
            );
            if let Some(instance) = report_later {
                self.report_exit_when_known(instance, choice, restarts);
            }
            match (crash_loop, next, reason) {
                (true, Some(next), Some(reason)) => {
                    self.remember(&plan_hash, index + 1, next, &reason);
                    self.event(Level::Error, reason);
                    index += 1;
                    failures.clear();
                    self.publish_choice(next);
                    continue;
                }
                (true, _, _) => self.event(
                    Level::Error,
                    format!(
                        "crash loop on {}/{}: no fallback left; retrying in {} ms",
                        choice.variant,
                        choice.profile,
                        delay.as_millis()
                    ),
                ),
                _ => {}
            }
            tokio::select! {
                _ = self.cancel.cancelled() => {
                    self.stopped().await;
                    return Ok(());
                }
                _ = tokio::time::sleep(delay.saturating_sub(failed_at.elapsed())) => {}
            }
        }
    }

    /// The end of supervision: what is left of ended runs is removed (bounded: a frozen runtime
    /// must not hold up shutdown), and the engine shows as stopped.
    async fn stopped(&self) {
        let name = &self.group.name;
        match tokio::time::timeout(self.policy.stop_grace, self.runtime.clean_up(name)).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => self.event(Level::Error, format!("removing what is left of the engine: {err}")),
            Err(_) => self.event(
                Level::Error,
                format!(
                    "removing what is left of the engine: no answer within {} s",
                    self.policy.stop_grace.as_secs()
                ),
            ),
        }
        self.set_state(EngineState::Stopped, |s| s.instance = None);
        self.event(Level::Info, "stopped".to_string());
    }

    /// Puts the exit code the runtime reports after the restart into the status (unless the
    /// engine failed again meanwhile) and the event log.
    fn report_exit_when_known(&self, mut instance: R::Instance, choice: &Choice, restarts: u32) {
        let (status, name) = (self.status.clone(), self.group.name.clone());
        let run = format!("{}/{}", choice.variant, choice.profile);
        tokio::spawn(async move {
            let exit = instance.final_exit(EXIT_REPORT_WAIT).await;
            if exit == Exit::Ended {
                return;
            }
            status.update(|s| {
                if let Some(engine) = s.engines.get_mut(&name).filter(|e| e.restarts == restarts) {
                    engine.last_exit = Some(exit.to_string());
                }
            });
            status.event(&format!("runtime/{name}"), Level::Warn, format!("{run} had ended: {exit}"));
        });
    }

    async fn launch(&self, choice: &Choice, may_adopt: bool) -> Result<R::Instance, RuntimeError> {
        let name = &self.group.name;
        if may_adopt {
            if let Some(instance) = self.runtime.adopt(name, choice).await? {
                self.event(
                    Level::Info,
                    format!("adopted running {} engine {}", self.runtime.kind(), instance.id()),
                );
                return Ok(instance);
            }
        }
        let instance = self.runtime.start(name, choice).await?;
        self.event(
            Level::Info,
            format!(
                "started {}/{} as {} {}",
                choice.variant,
                choice.profile,
                self.runtime.kind(),
                instance.id()
            ),
        );
        Ok(instance)
    }

    /// Watches one run of the engine until it ends or the supervisor is cancelled.
    async fn supervise(&self, mut instance: R::Instance, choice: &Choice) -> RunEnd<R::Instance> {
        let id = instance.id().to_string();
        self.set_state(EngineState::Starting, |s| s.instance = Some(id));
        let end = match probe::engine_addr(&choice.launch.host, choice.launch.port) {
            Ok(addr) => {
                let progress = self.follow_load_progress(&instance);
                let ready = self.await_ready(&mut instance, choice, addr).await;
                progress.abort();
                match ready {
                    Ok(()) => self.watch_liveness(&mut instance, addr).await,
                    Err(end) => end,
                }
            }
            Err(err) => RunEnd::failed(Exit::Stopped(err.to_string()), None),
        };
        match end {
            RunEnd::Cancelled => self.shutdown(instance).await,
            // The supervisor gave up on a live engine: it goes before the next starts.
            RunEnd::Failed { exit: Exit::Stopped(why), ready_for, .. } => {
                if let Err(err) = instance.stop(self.policy.hung_grace).await {
                    self.event(Level::Error, format!("stopping failed engine: {err}"));
                }
                RunEnd::failed(Exit::Stopped(why), ready_for)
            }
            RunEnd::Failed { exit: Exit::Ended, ready_for, .. } => {
                RunEnd::Failed { exit: Exit::Ended, ready_for, unreported: Some(instance) }
            }
            failed => failed,
        }
    }

    /// Startup phase: polls `/health` until 200, within the plan's allowance; a loading engine is
    /// shown as loading, never killed before its allowance runs out.
    async fn await_ready(
        &self,
        instance: &mut R::Instance,
        choice: &Choice,
        addr: SocketAddr,
    ) -> Result<(), RunEnd<R::Instance>> {
        let allowance = match choice.launch.startup_allowance_s {
            0 => DEFAULT_STARTUP_ALLOWANCE,
            s => Duration::from_secs(s),
        };
        let health = &self.policy.health;
        let started = Instant::now();
        let mut loading_shown = false;
        loop {
            let poll = health.startup_poll(started.elapsed());
            let timeout = health.liveness_timeout.max(poll);
            match self.next_step(instance, poll, addr, timeout).await {
                Step::Cancel => return Err(RunEnd::Cancelled),
                Step::Exited(exit) => return Err(RunEnd::failed(exit, None)),
                Step::Probed(Health::Ready) => {
                    self.set_state(EngineState::Ready, |_| {});
                    self.event(Level::Info, format!("ready after {} ms", started.elapsed().as_millis()));
                    return Ok(());
                }
                Step::Probed(Health::Loading) if !loading_shown => {
                    loading_shown = true;
                    let percent = *instance.load_progress().borrow();
                    self.set_state(EngineState::Loading { percent }, |_| {});
                }
                Step::Probed(_) => {}
            }
            if started.elapsed() > allowance {
                let why = format!("not ready within its startup allowance of {} s", allowance.as_secs());
                return Err(RunEnd::failed(Exit::Stopped(why), None));
            }
        }
    }

    /// Ready phase: liveness probes; `liveness_failures` misses in a row restart the engine even
    /// though its process lives (hung, SIGSTOPped, wedged driver).
    async fn watch_liveness(&self, instance: &mut R::Instance, addr: SocketAddr) -> RunEnd<R::Instance> {
        let health = &self.policy.health;
        let ready_at = Instant::now();
        let mut missed = 0u32;
        loop {
            match self.next_step(instance, health.liveness_interval, addr, health.liveness_timeout).await {
                Step::Cancel => return RunEnd::Cancelled,
                Step::Exited(exit) => return RunEnd::failed(exit, Some(ready_at.elapsed())),
                Step::Probed(Health::Ready) => {
                    if missed > 0 {
                        missed = 0;
                        self.set_state(EngineState::Ready, |_| {});
                    }
                }
                Step::Probed(other) => {
                    missed += 1;
                    self.set_state(EngineState::Unhealthy { failed_probes: missed }, |_| {});
                    if missed >= health.liveness_failures {
                        let why = format!("hung: {missed} liveness probes failed (last: {other:?})");
                        return RunEnd::failed(Exit::Stopped(why), Some(ready_at.elapsed()));
                    }
                }
            }
        }
    }

    async fn next_step(
        &self,
        instance: &mut R::Instance,
        wait: Duration,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Step {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Step::Cancel,
            exit = instance.exited() => Step::Exited(exit),
            health = async {
                tokio::time::sleep(wait).await;
                probe::health(addr, timeout).await
            } => Step::Probed(health),
        }
    }

    async fn shutdown(&self, instance: R::Instance) -> RunEnd<R::Instance> {
        match instance.stop(self.policy.stop_grace).await {
            Ok(exit) => self.event(Level::Info, format!("engine stopped ({exit})")),
            Err(err) => self.event(Level::Error, format!("stopping engine: {err}")),
        }
        RunEnd::Cancelled
    }

    /// Shows the load progress the engine prints while it starts or loads (never over a later
    /// state: the check and the change are one update).
    fn follow_load_progress(&self, instance: &R::Instance) -> tokio::task::JoinHandle<()> {
        let mut progress = instance.load_progress();
        let status = self.status.clone();
        let name = self.group.name.clone();
        tokio::spawn(async move {
            while progress.changed().await.is_ok() {
                let Some(percent) = *progress.borrow_and_update() else { continue };
                status.update(|s| {
                    if let Some(engine) = s.engines.get_mut(&name) {
                        match engine.state {
                            EngineState::Starting => engine.since_unix_ms = unix_ms(),
                            EngineState::Loading { .. } => {}
                            _ => return,
                        }
                        engine.state = EngineState::Loading { percent: Some(percent) };
                    }
                });
            }
        })
    }

    /// The choice to start at, and why: the remembered one if the plan is unchanged, else the
    /// first.
    fn recall(&self, choices: &[Choice], plan_hash: &str) -> (usize, Option<String>) {
        let Some(path) = &self.memory else { return (0, None) };
        match memory::load(path, plan_hash) {
            Ok(Some(memory)) if memory.choice_index < choices.len() => {
                let reason = format!("{} (remembered from before the supervisor restarted)", memory.reason);
                self.event(Level::Warn, format!("starting at {}: {reason}", memory.choice));
                (memory.choice_index, Some(reason))
            }
            Ok(_) => (0, None),
            Err(err) => {
                self.event(Level::Warn, format!("ignoring the remembered choice: {err}"));
                (0, None)
            }
        }
    }

    fn remember(&self, plan_hash: &str, index: usize, choice: &Choice, reason: &str) {
        let Some(path) = &self.memory else { return };
        let memory = ChoiceMemory {
            plan: plan_hash.to_string(),
            choice_index: index,
            choice: format!("{}/{}", choice.variant, choice.profile),
            reason: reason.to_string(),
            since_unix_ms: unix_ms(),
        };
        if let Err(err) = memory::save(path, &memory) {
            self.event(Level::Error, format!("cannot remember the step-down: {err}"));
        }
    }

    fn publish_choice(&self, choice: &Choice) {
        let runtime = self.runtime.kind().to_string();
        let name = self.group.name.clone();
        self.status.update(|s| {
            let engine = s
                .engines
                .entry(name.clone())
                .or_insert_with(|| EngineStatus::new(name, runtime.clone(), unix_ms()));
            engine.variant = choice.variant.clone();
            engine.profile = choice.profile.clone();
            engine.port = choice.launch.port;
            engine.runtime = runtime;
        });
    }

    fn set_state(&self, state: EngineState, also: impl FnOnce(&mut EngineStatus)) {
        self.status.update(|s| {
            if let Some(engine) = s.engines.get_mut(&self.group.name) {
                if engine.state != state {
                    engine.since_unix_ms = unix_ms();
                }
                engine.state = state;
                also(engine);
            }
        });
    }

    fn event(&self, level: Level, message: String) {
        self.status.event(&format!("runtime/{}", self.group.name), level, message);
    }
}
