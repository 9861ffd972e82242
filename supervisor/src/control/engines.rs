//! The engines `lucebox run` keeps: one supervision loop per plan group, each with its own
//! cancellation, so one engine can be restarted (or moved to a new choice) and the whole set
//! replaced (an OTA activation) while the rest of the supervisor runs on.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::ota::ActivationError;
use crate::plan::{GroupPlan, Plan};
use crate::runtime::{validate_plan, RuntimeError, SpawnSupervisor, DEFAULT_STARTUP_ALLOWANCE};
use crate::status::{EngineState, Level, StatusModel};

/// Past its startup allowance the supervision loop itself gives up; a waiter allows this much
/// more before it stops waiting on its own.
const WAIT_SLACK: Duration = Duration::from_secs(5);

struct Running {
    group: GroupPlan,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), RuntimeError>>,
}

/// What a waiter needs to tell the new run of an engine from the old one.
#[derive(Debug, Clone)]
pub struct Started {
    pub engine: String,
    /// The engine's restart counter when this run started: any increase is a failed run.
    restarts: u32,
    allowance: Duration,
}

pub struct EngineSet {
    spawn: SpawnSupervisor,
    status: StatusModel,
    cancel: CancellationToken,
    running: tokio::sync::Mutex<BTreeMap<String, Running>>,
    /// Set by [`EngineSet::stop_all`]: an action that gets the lock after it starts nothing.
    closed: std::sync::atomic::AtomicBool,
}

impl EngineSet {
    /// Engines stop when `cancel` fires (and with [`EngineSet::stop_all`]).
    pub fn new(spawn: SpawnSupervisor, status: StatusModel, cancel: CancellationToken) -> Self {
        Self {
            spawn,
            status,
            cancel,
            running: tokio::sync::Mutex::new(BTreeMap::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The group an engine runs, if it runs.
    pub async fn group(&self, engine: &str) -> Option<GroupPlan> {
        self.running.lock().await.get(engine).map(|r| r.group.clone())
    }

    /// The devices the running engines serve.
    pub async fn served_devices(&self) -> std::collections::BTreeSet<String> {
        self.running.lock().await.values().flat_map(|r| r.group.devices.iter().cloned()).collect()
    }

    pub async fn names(&self) -> Vec<String> {
        self.running.lock().await.keys().cloned().collect()
    }

    /// Stops every engine, then starts `plan`'s.
    pub async fn replace(&self, plan: &Plan) -> Result<Vec<Started>, RuntimeError> {
        validate_plan(plan)?;
        let mut running = self.running.lock().await;
        self.refuse_when_stopping("*")?;
        for (_, old) in std::mem::take(&mut *running) {
            self.stop(old).await;
        }
        self.status.update(|s| {
            s.plan = Some(plan.clone());
            s.engines.retain(|name, _| plan.groups.iter().any(|g| &g.name == name));
        });
        let mut started = Vec::new();
        for group in &plan.groups {
            let (run, start) = self.spawn_one(group.clone());
            running.insert(group.name.clone(), run);
            started.push(start);
        }
        Ok(started)
    }

    /// Stops the engine `group` names (if it runs) and starts it on `group`'s choice: the same
    /// one for a requested restart, a new one after a profile switch.
    pub async fn restart(&self, group: GroupPlan) -> Result<Started, RuntimeError> {
        let mut running = self.running.lock().await;
        self.refuse_when_stopping(&group.name)?;
        let mut plan = self.status.read(|s| s.plan.clone()).unwrap_or_default();
        match plan.groups.iter_mut().find(|g| g.name == group.name) {
            Some(slot) => *slot = group.clone(),
            None => plan.groups.push(group.clone()),
        }
        plan.unplanned.retain(|u| !group.devices.contains(&u.device));
        validate_plan(&plan)?;
        if let Some(old) = running.remove(&group.name) {
            self.stop(old).await;
        }
        self.status.update(|s| s.plan = Some(plan));
        let (run, started) = self.spawn_one(group.clone());
        running.insert(group.name, run);
        Ok(started)
    }

    /// Stops the engine `name` and forgets it (a profile switch undone on a device that ran none).
    pub async fn remove(&self, name: &str) {
        let mut running = self.running.lock().await;
        if let Some(old) = running.remove(name) {
            self.stop(old).await;
        }
        self.status.update(|s| {
            s.engines.remove(name);
            if let Some(plan) = s.plan.as_mut() {
                plan.groups.retain(|g| g.name != name);
            }
        });
    }

    /// Stops every engine with its grace period, for good: a restart or replace that was waiting
    /// for the lock (an API action racing the supervisor's stop) is refused after it. Returns the
    /// first supervision error.
    pub async fn stop_all(&self) -> Result<(), RuntimeError> {
        let mut running = self.running.lock().await;
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut first = None;
        for (_, old) in std::mem::take(&mut *running) {
            if let Some(e) = self.stop(old).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Restarts one engine and waits until it is ready; the error in words for an event.
    pub async fn restart_until_ready(&self, group: GroupPlan) -> Result<(), String> {
        let started = self.restart(group).await.map_err(|e| e.to_string())?;
        self.wait_ready(std::slice::from_ref(&started)).await.map_err(|e| e.to_string())
    }

    /// Waits until every started engine is ready. Fails on the first run that ends (exit, crash
    /// loop, startup allowance spent), naming the engine and why.
    pub async fn wait_ready(&self, started: &[Started]) -> Result<(), ActivationError> {
        let mut changes = self.status.subscribe();
        let begun = Instant::now();
        loop {
            let _ = changes.borrow_and_update();
            let mut pending = false;
            for start in started {
                let entry = self.status.read(|s| s.engines.get(&start.engine).cloned());
                let unhealthy = |detail: String| ActivationError::Unhealthy {
                    engine: start.engine.clone(),
                    allowance: start.allowance,
                    detail,
                };
                match entry {
                    Some(e)
                        if e.restarts > start.restarts
                            || matches!(e.state, EngineState::CrashLooping { .. }) =>
                    {
                        let exit = e.last_exit.unwrap_or_else(|| "ended".into());
                        return Err(unhealthy(format!("{}/{}: {exit}", e.variant, e.profile)));
                    }
                    Some(e) if e.state == EngineState::Ready => {}
                    Some(e) if e.state == EngineState::Stopped => {
                        return Err(unhealthy("stopped".into()));
                    }
                    _ if begun.elapsed() > start.allowance + WAIT_SLACK => {
                        return Err(unhealthy("not ready within its startup allowance".into()));
                    }
                    _ => pending = true,
                }
            }
            if !pending {
                return Ok(());
            }
            if self.cancel.is_cancelled() {
                return Err(ActivationError::Start {
                    engine: "*".into(),
                    detail: "supervisor stopping".into(),
                });
            }
            // Woken by any status change; the timeout re-checks the allowances.
            let _ = tokio::time::timeout(Duration::from_secs(1), changes.changed()).await;
        }
    }

    /// An action racing shutdown must not start engines nobody will stop.
    fn refuse_when_stopping(&self, engine: &str) -> Result<(), RuntimeError> {
        if self.cancel.is_cancelled() || self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(RuntimeError::Task {
                engine: engine.into(),
                message: "the supervisor is stopping".into(),
            });
        }
        Ok(())
    }

    fn spawn_one(&self, group: GroupPlan) -> (Running, Started) {
        // The old run's Ready must not count for the new one: the entry starts over as starting.
        let restarts = self.status.read(|s| s.engines.get(&group.name).map(|e| e.restarts)).unwrap_or(0);
        self.status.update(|s| {
            if let Some(e) = s.engines.get_mut(&group.name) {
                e.state = EngineState::Starting;
                e.instance = None;
                e.since_unix_ms = crate::status::unix_ms();
            }
        });
        let allowance = match group.choice.launch.startup_allowance_s {
            0 => DEFAULT_STARTUP_ALLOWANCE,
            s => Duration::from_secs(s),
        };
        let cancel = self.cancel.child_token();
        let task = (self.spawn)(group.clone(), cancel.clone());
        let started = Started { engine: group.name.clone(), restarts, allowance };
        (Running { group, cancel, task }, started)
    }

    /// Cancels one supervision loop and waits until its engine is down.
    async fn stop(&self, run: Running) -> Option<RuntimeError> {
        run.cancel.cancel();
        let error = match run.task.await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(e) => Some(RuntimeError::Task { engine: run.group.name.clone(), message: e.to_string() }),
        };
        if let Some(e) = &error {
            self.status.event(&format!("runtime/{}", run.group.name), Level::Error, e.to_string());
        }
        error
    }
}
