//! Engines as Docker containers (the appliance host), through bollard on the local socket.
//!
//! Containers carry `lucebox.engine=<name>` and `lucebox.plan=<hash of the choice and image>`:
//! a restarted supervisor adopts the running container of its plan instead of starting a
//! duplicate, and removes any other container of that engine. Death is seen first on a pidfd of
//! the container's process (`container_process.rs`), then with its exit code on Docker's event
//! stream (only `die`/`destroy` of our container are asked for, so health-check `exec_*` noise
//! never arrives); when dockerd goes away the watcher reconnects and asks for the state again.
//! The container's output is followed from its start into the supervisor log, and again after
//! the last line forwarded when a dockerd restart leaves it running (`live-restore`).
//! A crashed run's container is kept, stopped, as the next restart's target (see [`dispose`]):
//! one running container per engine, at most one stopped beside it, none after a clean stop.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, DeviceMapping, DeviceRequest, EventMessage, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, EventsOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    StopContainerOptions,
};
use bollard::{Docker, API_DEFAULT_VERSION};
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::container_process;
use super::engine::{plan_hash, EngineInstance, EngineRuntime};
use super::loglines::{self, LineBuffer};
use super::progress::ProgressSink;
use super::{Exit, RuntimeError};
use crate::plan::{Choice, Launch};

pub const LABEL_ENGINE: &str = "lucebox.engine";
pub const LABEL_PLAN: &str = "lucebox.plan";
/// Seconds bollard waits for one API answer.
const API_TIMEOUT_S: u64 = 30;
/// Reconnect delays while dockerd is away: 100 ms doubling to 2 s.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Resource limits every engine container gets.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerLimits {
    /// Memory limit; the engine is OOM-killed (exit 137, a crash-loop signal) before the host is.
    pub memory_bytes: Option<i64>,
    pub pids: i64,
}

impl ContainerLimits {
    /// Host memory less 2 GiB for the OS and the supervisor (or no limit on a tiny host).
    pub fn for_this_host() -> Self {
        let reserve = 2 * 1024 * 1024 * 1024u64;
        let total = sysinfo::System::new()
            .map(|mut system| {
                system.refresh_memory();
                system.total_memory()
            })
            .unwrap_or(0);
        let memory_bytes = (total > 2 * reserve).then(|| (total - reserve) as i64);
        Self { memory_bytes, pids: 4096 }
    }
}

#[derive(Clone)]
pub struct DockerRuntime {
    docker: Docker,
    image: String,
    limits: ContainerLimits,
    /// Containers whose death the watchers saw. The list still shows them running while
    /// dockerd cleans up, so a restart trusts this over the list: a dead container is never
    /// force-removed as a duplicate, and one whose exit dockerd reported is started again.
    deaths: Arc<Mutex<HashMap<String, Death>>>,
}

/// What the watchers saw of a container's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Death {
    /// Its process ended; dockerd has not reported the exit yet and would refuse a start.
    ProcessEnded,
    /// dockerd reported the exit (`die`): it can be started again in place.
    Reported,
}

impl DockerRuntime {
    /// Connects to dockerd on `socket` and checks it answers.
    pub async fn connect(socket: &Path, image: &str, limits: ContainerLimits) -> Result<Self, RuntimeError> {
        let socket_name = socket.display().to_string();
        let connect_error = |source| RuntimeError::Connect { socket: socket_name.clone(), source };
        let docker = Docker::connect_with_unix(&socket_name, API_TIMEOUT_S, API_DEFAULT_VERSION)
            .map_err(connect_error)?;
        docker.ping().await.map_err(connect_error)?;
        Ok(Self { docker, image: image.to_string(), limits, deaths: Arc::default() })
    }

    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// Containers of engine `name`, in any state.
    pub async fn containers_of(&self, name: &str) -> Result<Vec<EngineContainer>, RuntimeError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_ENGINE}={name}")])]);
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let found =
            self.docker.list_containers(Some(options)).await.map_err(docker_error("list containers"))?;
        Ok(found
            .into_iter()
            .filter_map(|c| {
                let plan = c.labels.as_ref().and_then(|l| l.get(LABEL_PLAN)).cloned().unwrap_or_default();
                let running = c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
                Some(EngineContainer { id: c.id?, plan, running, image_id: c.image_id.unwrap_or_default() })
            })
            .collect())
    }

    /// Removes container `id` whatever its state (a running one is killed first).
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.deaths().remove(id);
        let options = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()), // gone, or removal already under way
            Err(e) => Err(docker_error("remove container")(e)),
        }
    }

    fn deaths(&self) -> std::sync::MutexGuard<'_, HashMap<String, Death>> {
        self.deaths.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn container_body(&self, name: &str, hash: &str, launch: &Launch) -> ContainerCreateBody {
        let labels = HashMap::from([
            (LABEL_ENGINE.to_string(), name.to_string()),
            (LABEL_PLAN.to_string(), hash.to_string()),
        ]);
        ContainerCreateBody {
            image: Some(self.image.clone()),
            entrypoint: Some(vec![launch.program.clone()]),
            cmd: Some(launch.args.clone()),
            env: Some(launch.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels),
            stop_signal: Some("SIGTERM".into()),
            host_config: Some(host_config(launch, &self.limits)),
            ..Default::default()
        }
    }

    /// Watches container `id` for deaths after `after_nanos` (Unix ns; earlier `die` events are
    /// of an earlier run of the same container). Its output is followed once it runs
    /// ([`DockerInstance::watch_running`]); `logs_from` skips output older than that (Unix ns), of
    /// a container started again in place.
    fn instance(&self, engine: &str, id: String, after_nanos: i64, logs_from: Option<i64>) -> DockerInstance {
        let (exit_tx, exit_rx) = watch::channel(None);
        let (progress_tx, progress) = watch::channel(None);
        let watcher = CancellationToken::new();
        let (runtime, dead_id, ended_tx) = (self.clone(), id.clone(), exit_tx.clone());
        let publish = move |exit: Exit| {
            let ended_early = exit_tx.borrow().is_some();
            let mut deaths = runtime.deaths();
            match (&exit, deaths.get_mut(&dead_id)) {
                (Exit::Code(_), Some(death)) => *death = Death::Reported,
                // Not once a restart took the early notice (and the container) in hand.
                (Exit::Code(_), None) if !ended_early => {
                    deaths.insert(dead_id.clone(), Death::Reported);
                }
                (Exit::Code(_), None) => {}
                (_, _) => {
                    deaths.remove(&dead_id);
                }
            }
            drop(deaths); // never held with the channel's lock (`process_ended` takes them the other way)
            let _ = exit_tx.send(Some(exit));
        };
        tokio::spawn(watch_container(self.docker.clone(), id.clone(), after_nanos, publish, watcher.clone()));
        DockerInstance {
            runtime: self.clone(),
            engine: engine.to_string(),
            id,
            exit: exit_rx,
            ended: ended_tx,
            progress,
            output: Some(OutputToFollow { from_nanos: logs_from, progress: ProgressSink::new(progress_tx) }),
            watcher,
        }
    }

    /// Creates and starts a new container for `choice`, watched.
    async fn start_fresh(&self, name: &str, choice: &Choice) -> Result<DockerInstance, RuntimeError> {
        let after = unix_nanos();
        let id = self.create(name, choice).await?;
        // Watched from before the start: a death right after it is not missed.
        let mut instance = self.instance(name, id.clone(), after, None);
        self.start_created(&id).await?;
        instance.watch_running();
        Ok(instance)
    }

    /// Creates and starts a container for `choice` with nothing of the supervisor around it (no
    /// watchers, no listing): what Docker itself takes, the bench's bare start. Its id; remove it
    /// with [`Self::remove`].
    pub async fn start_bare(&self, name: &str, choice: &Choice) -> Result<String, RuntimeError> {
        let id = self.create(name, choice).await?;
        self.start_created(&id).await?;
        Ok(id)
    }

    async fn create(&self, name: &str, choice: &Choice) -> Result<String, RuntimeError> {
        let hash = plan_hash(choice, &self.image);
        let body = self.container_body(name, &hash, &choice.launch);
        // Unique per start: a dead predecessor may still be being removed.
        let options = CreateContainerOptions {
            name: Some(format!("lucebox-{name}-{}-{:04x}", &hash[..8], unique_suffix())),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(docker_error("create container"))?;
        Ok(created.id)
    }

    /// Starts a container just created; one that will not start is removed.
    async fn start_created(&self, id: &str) -> Result<(), RuntimeError> {
        if let Err(e) = self.docker.start_container(id, None).await {
            self.remove(id).await?;
            return Err(docker_error("start container")(e));
        }
        Ok(())
    }

    /// Starts the stopped container `id` again (same configuration, no create): the fast path of
    /// a restart. `None` when Docker refuses (removed meanwhile, broken): the caller creates one.
    async fn start_again(&self, name: &str, id: &str) -> Option<DockerInstance> {
        let after = unix_nanos();
        let mut instance = self.instance(name, id.to_string(), after, Some(after));
        match self.docker.start_container(id, None).await {
            Ok(()) => {
                instance.watch_running();
                Some(instance)
            }
            Err(e) => {
                tracing::info!(engine = name, container = %short(id), "cannot start it again ({e}); creating a new one");
                None
            }
        }
    }

    /// The id of the configured image (`None` if Docker does not know it).
    async fn image_id(&self) -> Option<String> {
        self.docker.inspect_image(&self.image).await.ok().and_then(|i| i.id)
    }
}

/// What a start does with the containers left of an engine (with what the watchers saw of
/// their end).
#[derive(Debug, Default, PartialEq)]
struct Disposal {
    /// Running but not ours (ours has ended): removed before the start, it would hold the port.
    duplicates: Vec<String>,
    /// Started again instead of creating one (same plan, same image, exit processed).
    target: Option<String>,
    /// The run that just ended, kept stopped as the next restart's target: started again then,
    /// long after dockerd has cleaned it up, it puts no `create` on the restart path.
    keep: Option<String>,
    /// Everything else: removed once the new engine runs.
    remove: Vec<String>,
}

/// Prefers an older run's container as the target (dockerd finished with it long ago), then
/// the one that just ended if dockerd has reported its exit; a just-ended one not started is
/// kept. So at most one stopped container stays beside the running one.
fn dispose(left: Vec<(EngineContainer, Option<Death>)>, hash: &str, image_id: Option<&str>) -> Disposal {
    let mut disposal = Disposal::default();
    let mut just_ended = None;
    for (c, death) in left {
        let same_plan = c.plan == hash && image_id == Some(c.image_id.as_str());
        match death {
            None if c.running => disposal.duplicates.push(c.id),
            None if same_plan && disposal.target.is_none() => disposal.target = Some(c.id),
            Some(death) if same_plan && just_ended.is_none() => just_ended = Some((c.id, death)),
            _ => disposal.remove.push(c.id),
        }
    }
    match just_ended {
        Some((id, Death::Reported)) if disposal.target.is_none() => disposal.target = Some(id),
        Some((id, _)) => disposal.keep = Some(id),
        None => {}
    }
    disposal
}

/// Host network, read-only model directories, GPUs and device nodes, limits.
fn host_config(launch: &Launch, limits: &ContainerLimits) -> HostConfig {
    let mut model_dirs: Vec<String> = launch
        .model_files
        .iter()
        .filter_map(|f| Path::new(f).parent().map(|d| d.display().to_string()))
        .filter(|d| !d.is_empty())
        .collect();
    model_dirs.sort();
    model_dirs.dedup();
    let gpus = &launch.container.nvidia_gpus;
    let device_requests = (!gpus.is_empty()).then(|| {
        let request = if launch.container.nvidia_via_cdi {
            DeviceRequest {
                driver: Some("cdi".into()),
                device_ids: Some(gpus.iter().map(|id| format!("nvidia.com/gpu={id}")).collect()),
                ..Default::default()
            }
        } else {
            DeviceRequest {
                driver: Some("nvidia".into()),
                device_ids: Some(gpus.clone()),
                capabilities: Some(vec![vec!["gpu".into()]]),
                ..Default::default()
            }
        };
        vec![request]
    });
    let devices: Vec<DeviceMapping> = launch
        .container
        .devices
        .iter()
        .map(|d| DeviceMapping {
            path_on_host: Some(d.clone()),
            path_in_container: Some(d.clone()),
            cgroup_permissions: Some("rwm".into()),
        })
        .collect();
    HostConfig {
        network_mode: Some("host".into()),
        binds: Some(model_dirs.iter().map(|d| format!("{d}:{d}:ro")).collect()),
        devices: Some(devices),
        device_requests,
        group_add: Some(device_groups(&launch.container.devices)),
        memory: limits.memory_bytes,
        pids_limit: Some(limits.pids),
        ..Default::default()
    }
}

/// The host groups owning the mapped device nodes (`video`, `render` for /dev/kfd and
/// /dev/dri/*), by number: the engine image runs unprivileged and has no such names.
fn device_groups(devices: &[String]) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut gids: Vec<u32> = Vec::new();
    for device in devices {
        let path = Path::new(device);
        let nodes: Vec<std::path::PathBuf> = match std::fs::read_dir(path) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => vec![path.to_path_buf()],
        };
        gids.extend(
            nodes.iter().filter_map(|n| std::fs::metadata(n).ok()).map(|m| m.gid()).filter(|g| *g != 0),
        );
    }
    gids.sort_unstable();
    gids.dedup();
    gids.into_iter().map(|g| g.to_string()).collect()
}

/// One container of an engine, as listed.
#[derive(Debug, Clone)]
pub struct EngineContainer {
    pub id: String,
    /// Its `lucebox.plan` label.
    pub plan: String,
    pub running: bool,
    pub image_id: String,
}

pub struct DockerInstance {
    runtime: DockerRuntime,
    engine: String,
    id: String,
    exit: watch::Receiver<Option<Exit>>,
    /// Publishes [`Exit::Ended`] when the process is seen gone before dockerd reports the exit.
    ended: watch::Sender<Option<Exit>>,
    progress: watch::Receiver<Option<u8>>,
    /// What following its output needs, until it runs.
    output: Option<OutputToFollow>,
    /// Ends the watcher and log tasks when the instance is done.
    watcher: CancellationToken,
}

/// The container's output from `from_nanos` (Unix ns) on, and where its load progress goes.
struct OutputToFollow {
    from_nanos: Option<i64>,
    progress: ProgressSink,
}

impl DockerInstance {
    /// Once the container runs: follows its output, and watches its process to see it end
    /// before dockerd reports it. Not before the start: dockerd follows the output of a running
    /// container only, and a follow asked for earlier ends at once, with nothing.
    fn watch_running(&mut self) {
        if let Some(OutputToFollow { from_nanos, progress }) = self.output.take() {
            tokio::spawn(forward_logs(
                self.runtime.docker.clone(),
                self.engine.clone(),
                self.id.clone(),
                from_nanos,
                self.exit.clone(),
                progress,
                self.watcher.clone(),
            ));
        }
        let (runtime, id, ended) = (self.runtime.clone(), self.id.clone(), self.ended.clone());
        let cancel = self.watcher.clone();
        tokio::spawn(async move {
            let watched = tokio::select! {
                _ = cancel.cancelled() => return,
                watched = container_process::ended(&runtime.docker, &id) => watched,
            };
            if let Err(why) = watched {
                tracing::debug!(container = %short(&id), "death seen by events only: {why}");
                return;
            }
            ended.send_if_modified(|exit| {
                if exit.is_some() {
                    return false; // dockerd told first
                }
                runtime.deaths().entry(id).or_insert(Death::ProcessEnded);
                *exit = Some(Exit::Ended);
                true
            });
        });
    }
}

impl Drop for DockerInstance {
    fn drop(&mut self) {
        self.watcher.cancel();
    }
}

impl EngineRuntime for DockerRuntime {
    type Instance = DockerInstance;

    fn kind(&self) -> &'static str {
        "docker"
    }

    async fn available(&self) {
        if self.docker.ping().await.is_err() {
            tracing::warn!("dockerd does not answer; waiting for it before starting engines");
            wait_for_daemon(&self.docker, &CancellationToken::new()).await;
            tracing::info!("dockerd answers again");
        }
    }

    async fn adopt(&self, name: &str, choice: &Choice) -> Result<Option<DockerInstance>, RuntimeError> {
        let hash = plan_hash(choice, &self.image);
        // The tag names the image; a new build pulled under the same tag must not keep the old
        // engine. An image that cannot be inspected right now does not cost a running engine.
        let image_id = self.image_id().await;
        let mut adopted = None;
        // A die after this instant is of the run being adopted (it was running when listed);
        // one between listing and subscribing is replayed, and the watcher's first inspect
        // catches it too.
        let listed = unix_nanos();
        for c in self.containers_of(name).await? {
            let same_image = image_id.as_deref().is_none_or(|id| id == c.image_id);
            if adopted.is_none() && c.running && c.plan == hash && same_image {
                adopted = Some(c.id);
            } else {
                tracing::info!(engine = name, container = %c.id, "removing stale engine container");
                self.remove(&c.id).await?;
            }
        }
        // Its log from now on: what it printed before was forwarded by the supervisor that
        // started it, and a container up for weeks has a long history.
        let mut adopted = adopted.map(|id| self.instance(name, id, listed, Some(listed)));
        if let Some(instance) = &mut adopted {
            instance.watch_running();
        }
        Ok(adopted)
    }

    async fn start(&self, name: &str, choice: &Choice) -> Result<DockerInstance, RuntimeError> {
        let hash = plan_hash(choice, &self.image);
        let (containers, image_id) = tokio::join!(self.containers_of(name), self.image_id());
        let left: Vec<(EngineContainer, Option<Death>)> = containers?
            .into_iter()
            .map(|c| {
                let death = self.deaths().remove(&c.id);
                (c, death)
            })
            .collect();
        let Disposal { duplicates, target, keep, mut remove } = dispose(left, &hash, image_id.as_deref());
        for id in &duplicates {
            // Would hold the port: gone before the new one starts.
            self.remove(id).await?;
        }
        let reused = match target {
            Some(id) => match self.start_again(name, &id).await {
                Some(instance) => Some(instance),
                None => {
                    remove.push(id);
                    None
                }
            },
            None => None,
        };
        let started = match reused {
            Some(instance) => Ok(instance),
            None => self.start_fresh(name, choice).await,
        };
        if let Some(id) = keep {
            tracing::debug!(engine = name, container = %short(&id), "kept as the next restart's container");
        }
        // The rest go once the new engine runs: removing them must not delay it. (Not later: a
        // supervisor stopped right after a restart would leave them behind.)
        let runtime = self.clone();
        tokio::spawn(async move {
            for id in remove {
                if let Err(err) = runtime.remove(&id).await {
                    tracing::warn!(container = %short(&id), "removing dead engine container: {err}");
                }
            }
        });
        started
    }

    async fn clean_up(&self, name: &str) -> Result<(), RuntimeError> {
        for c in self.containers_of(name).await? {
            self.remove(&c.id).await?;
        }
        Ok(())
    }
}

impl EngineInstance for DockerInstance {
    fn id(&self) -> &str {
        &self.id
    }

    async fn exited(&mut self) -> Exit {
        match self.exit.wait_for(Option::is_some).await {
            Ok(exit) => exit.clone().unwrap_or_else(|| Exit::Gone("unknown".into())),
            Err(_) => Exit::Gone("container watcher ended".into()),
        }
    }

    async fn final_exit(&mut self, within: Duration) -> Exit {
        let reported = self.exit.wait_for(|exit| exit.as_ref().is_some_and(|e| *e != Exit::Ended));
        if let Ok(Ok(exit)) = tokio::time::timeout(within, reported).await {
            if let Some(exit) = exit.clone() {
                return exit;
            }
        }
        self.exit.borrow().clone().unwrap_or_else(|| Exit::Gone("container watcher ended".into()))
    }

    fn load_progress(&self) -> watch::Receiver<Option<u8>> {
        self.progress.clone()
    }

    async fn stop(mut self, grace: Duration) -> Result<Exit, RuntimeError> {
        let already = self.exit.borrow().clone();
        if already.is_none() {
            let options = StopContainerOptions { t: Some(grace.as_secs().max(1) as i32), signal: None };
            match self.runtime.docker.stop_container(&self.id, Some(options)).await {
                Ok(()) => {}
                Err(e) if is_status(&e, 304) || is_status(&e, 404) => {}
                Err(e) => return Err(docker_error("stop container")(e)),
            }
        }
        // The die event arrives right after stop returns; do not wait long for it.
        let exit = match tokio::time::timeout(Duration::from_secs(2), self.exited()).await {
            Ok(Exit::Ended) => self.final_exit(Duration::from_secs(2)).await,
            Ok(exit) => exit,
            Err(_) => Exit::Stopped(format!("container {} stopped", short(&self.id))),
        };
        self.runtime.remove(&self.id).await?;
        tracing::debug!(engine = %self.engine, container = %short(&self.id), "removed");
        Ok(exit)
    }
}

/// Follows the container's events until it dies or is removed, reconnecting while dockerd is
/// away; publishes the exit once.
async fn watch_container(
    docker: Docker,
    id: String,
    after_nanos: i64,
    publish: impl Fn(Exit),
    cancel: CancellationToken,
) {
    // Whole seconds, a second back: the nanosecond filter below drops what is older.
    let mut since = after_nanos / 1_000_000_000 - 1;
    let mut resubscribe = Resubscribe::default();
    loop {
        let subscribed = std::time::Instant::now();
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("container".to_string(), vec![id.clone()]),
            ("event".to_string(), vec!["die".to_string(), "destroy".to_string()]),
        ]);
        let options =
            EventsOptions { since: Some(since.to_string()), filters: Some(filters), ..Default::default() };
        let mut events = docker.events(Some(options));
        // The stream connects on its first poll; the container's state is checked once it is
        // connected, so a death in between is never missed.
        let mut checked = false;
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return,
                next = events.next() => next,
                _ = tokio::time::sleep(Duration::from_millis(200)), if !checked => {
                    checked = true;
                    if let Some(exit) = inspect_exit(&docker, &id).await {
                        publish(exit);
                        return;
                    }
                    continue;
                }
            };
            match next {
                Some(Ok(event)) => {
                    // A die of an earlier run of this container (started again in place).
                    if event.time_nano.is_some_and(|t| t < after_nanos) {
                        continue;
                    }
                    if let Some(exit) = exit_of(&event) {
                        publish(exit);
                        return;
                    }
                }
                Some(Err(err)) => {
                    tracing::warn!(container = %short(&id), "docker event stream broke: {err}");
                    break;
                }
                None => break,
            }
        }
        match resubscribe.after_break(&docker, &id, subscribed, &cancel).await {
            AfterBreak::Running { checked_nanos } => since = checked_nanos / 1_000_000_000 - 1,
            AfterBreak::Ended(exit) => return publish(exit),
            AfterBreak::Cancelled => return,
        }
    }
}

/// What a broken stream of a container's events or output leaves to do.
enum AfterBreak {
    /// The container still ran at `checked_nanos` (Unix ns): follow it again.
    Running {
        checked_nanos: i64,
    },
    Ended(Exit),
    Cancelled,
}

/// Paces the followers of one container's streams after a break: dockerd went away (a restart,
/// a crash) or the stream ended. Waits for dockerd, asks whether the container still runs, and
/// backs off when streams keep breaking as soon as they connect, which would otherwise be a hot
/// loop while dockerd answers pings.
struct Resubscribe {
    pause: Duration,
}

impl Default for Resubscribe {
    fn default() -> Self {
        Self { pause: RECONNECT_FIRST }
    }
}

impl Resubscribe {
    async fn after_break(
        &mut self,
        docker: &Docker,
        id: &str,
        subscribed: std::time::Instant,
        cancel: &CancellationToken,
    ) -> AfterBreak {
        if !wait_for_daemon(docker, cancel).await {
            return AfterBreak::Cancelled;
        }
        let checked_nanos = unix_nanos();
        if let Some(exit) = inspect_exit(docker, id).await {
            return AfterBreak::Ended(exit);
        }
        if subscribed.elapsed() >= STREAM_HELD {
            self.pause = RECONNECT_FIRST;
            return AfterBreak::Running { checked_nanos };
        }
        tokio::select! {
            _ = cancel.cancelled() => return AfterBreak::Cancelled,
            _ = tokio::time::sleep(self.pause) => {}
        }
        self.pause = (self.pause * 2).min(RECONNECT_MAX);
        AfterBreak::Running { checked_nanos }
    }
}

/// A stream that lasted this long was a working one: the next break is met at once.
const STREAM_HELD: Duration = Duration::from_secs(1);

fn exit_of(event: &EventMessage) -> Option<Exit> {
    let attributes = event.actor.as_ref().and_then(|a| a.attributes.as_ref());
    match event.action.as_deref()? {
        "die" => {
            let code = attributes.and_then(|a| a.get("exitCode")).and_then(|c| c.parse().ok()).unwrap_or(-1);
            Some(Exit::Code(code))
        }
        "destroy" => Some(Exit::Gone("container removed".into())),
        _ => None,
    }
}

/// `Some(exit)` if the container is no longer running (or no longer exists).
async fn inspect_exit(docker: &Docker, id: &str) -> Option<Exit> {
    match docker.inspect_container(id, None).await {
        Ok(info) => {
            let state = info.state?;
            if state.running == Some(true) {
                return None;
            }
            if state.oom_killed == Some(true) {
                return Some(Exit::Code(137));
            }
            Some(Exit::Code(state.exit_code.unwrap_or(-1) as i32))
        }
        Err(e) if is_status(&e, 404) => Some(Exit::Gone("container removed".into())),
        // dockerd answers again but not for this call: treat it as still running; the event
        // stream (re-subscribed next) will tell.
        Err(_) => None,
    }
}

/// Pings dockerd with backoff until it answers (true) or `cancel` fires (false).
async fn wait_for_daemon(docker: &Docker, cancel: &CancellationToken) -> bool {
    let mut delay = RECONNECT_FIRST;
    loop {
        if docker.ping().await.is_ok() {
            return true;
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(RECONNECT_MAX);
    }
}

/// The container's output into the supervisor log, prefixed with the engine name; stderr also
/// feeds the load-progress parser. `from_nanos`: skip output older than that (Unix ns), i.e.
/// that of earlier runs of a container started again in place. Every line is asked for with its
/// time, so that a stream broken under a run that goes on (dockerd restarted with `live-restore`)
/// is followed again after the last line forwarded, and Docker's `since`, in whole seconds, is
/// refined here. Once `run_exit` holds the run's end, a container running again is a later run,
/// started in place and followed by its own instance.
async fn forward_logs(
    docker: Docker,
    engine: String,
    id: String,
    from_nanos: Option<i64>,
    run_exit: watch::Receiver<Option<Exit>>,
    mut progress: ProgressSink,
    cancel: CancellationToken,
) {
    let (mut stdout, mut stderr) = (LineBuffer::default(), LineBuffer::default());
    let mut last_forwarded: Option<i64> = None;
    let mut resubscribe = Resubscribe::default();
    'follow: loop {
        let since_nanos = last_forwarded.or(from_nanos);
        let options = LogsOptions {
            follow: true,
            stdout: true,
            stderr: true,
            tail: "all".into(),
            timestamps: true,
            since: since_nanos.map_or(0, |n| (n / 1_000_000_000) as i32),
            ..Default::default()
        };
        let subscribed = std::time::Instant::now();
        let mut logs = docker.logs(&id, Some(options));
        loop {
            let chunk = tokio::select! {
                _ = cancel.cancelled() => break 'follow,
                chunk = logs.next() => chunk,
            };
            let output = match chunk {
                Some(Ok(output)) => output,
                Some(Err(err)) if is_status(&err, 404) => break 'follow, // removed
                // A logging driver that cannot be read back (`none`, a remote one): asking again
                // would not change dockerd's answer.
                Some(Err(err)) if is_status(&err, 501) => {
                    tracing::warn!(engine = %engine, container = %short(&id), "engine output not followed: {err}");
                    break 'follow;
                }
                Some(Err(_)) | None => break,
            };
            let is_stderr = matches!(output, bollard::container::LogOutput::StdErr { .. });
            let frame = output.into_bytes();
            // "<RFC 3339 time> <output>"
            let space = frame.iter().position(|&b| b == b' ').unwrap_or(0);
            let stamp = std::str::from_utf8(&frame[..space]).ok().and_then(parse_rfc3339_nanos);
            if let Some(stamp) = stamp {
                let seen = last_forwarded.is_some_and(|last| stamp <= last);
                if seen || from_nanos.is_some_and(|from| stamp < from) {
                    continue;
                }
                last_forwarded = Some(stamp);
            }
            let bytes = &frame[(space + 1).min(frame.len())..];
            if is_stderr {
                progress.feed(bytes);
                stderr.push(bytes, |line| loglines::log_line(&engine, "stderr", line));
            } else {
                stdout.push(bytes, |line| loglines::log_line(&engine, "stdout", line));
            }
        }
        // A partial last line stays buffered: the stream followed again goes on after it.
        match resubscribe.after_break(&docker, &id, subscribed, &cancel).await {
            AfterBreak::Running { .. } if run_exit.borrow().is_none() => {}
            _ => break,
        }
    }
    stdout.flush(|line| loglines::log_line(&engine, "stdout", line));
    stderr.flush(|line| loglines::log_line(&engine, "stderr", line));
}

/// Unix nanoseconds of an RFC 3339 time in UTC as Docker writes it
/// (`2026-12-03T02:11:36.123456789Z`); `None` for anything else.
fn parse_rfc3339_nanos(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || frac.len() > 9 {
        return None;
    }
    let nanos: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<9}").parse().ok()? };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + min * 60 + sec) * 1_000_000_000) + nanos)
}

fn is_status(err: &BollardError, code: u16) -> bool {
    matches!(err, BollardError::DockerResponseServerError { status_code, .. } if *status_code == code)
}

fn docker_error(what: &'static str) -> impl Fn(BollardError) -> RuntimeError {
    move |source| RuntimeError::Docker { what: what.to_string(), source }
}

fn unix_nanos() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

fn unique_suffix() -> u16 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    (nanos ^ (nanos >> 16)) as u16
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ContainerNeeds;

    #[test]
    fn host_config_maps_models_devices_and_gpus() {
        let launch = Launch {
            model_files: vec!["/models/a/x.gguf".into(), "/models/a/draft.gguf".into(), "/m/b.gguf".into()],
            container: ContainerNeeds {
                nvidia_gpus: vec!["GPU-1234".into()],
                devices: vec!["/dev/kfd".into(), "/dev/dri".into()],
                nvidia_via_cdi: false,
            },
            ..Default::default()
        };
        let limits = ContainerLimits { memory_bytes: Some(1 << 30), pids: 64 };
        let hc = host_config(&launch, &limits);
        assert_eq!(hc.network_mode.as_deref(), Some("host"));
        assert_eq!(hc.binds.unwrap(), ["/m:/m:ro", "/models/a:/models/a:ro"]);
        let devices = hc.devices.unwrap();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0].path_in_container.as_deref(), Some("/dev/kfd"));
        let gpus = hc.device_requests.unwrap();
        assert_eq!(gpus[0].device_ids.as_deref(), Some(&["GPU-1234".to_string()][..]));
        assert_eq!(gpus[0].driver.as_deref(), Some("nvidia"));
        assert_eq!(hc.memory, Some(1 << 30));
        assert_eq!(hc.pids_limit, Some(64));
    }

    #[test]
    fn gpus_are_requested_by_cdi_name_without_the_nvidia_runtime() {
        let mut launch = Launch::default();
        launch.container.nvidia_gpus = vec!["GPU-1234".into()];
        launch.container.nvidia_via_cdi = true;
        let hc = host_config(&launch, &ContainerLimits { memory_bytes: None, pids: 64 });
        let gpus = hc.device_requests.unwrap();
        assert_eq!(gpus[0].driver.as_deref(), Some("cdi"));
        assert_eq!(gpus[0].device_ids.as_deref(), Some(&["nvidia.com/gpu=GPU-1234".to_string()][..]));
    }

    #[test]
    fn device_owner_groups_are_added_by_number() {
        use std::os::unix::fs::{chown, MetadataExt};
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("renderD128");
        std::fs::write(&node, b"").unwrap();
        // Root can give it a group like a render node's; otherwise it keeps the caller's group.
        let _ = chown(&node, None, Some(4242));
        let gid = std::fs::metadata(&node).unwrap().gid();
        let groups = device_groups(&[dir.path().display().to_string(), "/nonexistent/kfd".into()]);
        if gid == 0 {
            assert!(groups.is_empty(), "{groups:?}");
        } else {
            assert_eq!(groups, [gid.to_string()]);
        }
    }

    #[test]
    fn cpu_launch_requests_no_gpu() {
        let hc = host_config(&Launch::default(), &ContainerLimits { memory_bytes: None, pids: 1 });
        assert!(hc.device_requests.is_none());
        assert!(hc.devices.unwrap().is_empty());
    }

    #[test]
    fn docker_log_times_parse_to_unix_nanos() {
        assert_eq!(parse_rfc3339_nanos("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_nanos("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        // date -u -d 2026-12-03T02:11:36Z +%s → 1796263896
        assert_eq!(parse_rfc3339_nanos("2026-12-03T02:11:36.000000123Z"), Some(1_796_263_896_000_000_123));
        assert_eq!(parse_rfc3339_nanos("2000-02-29T00:00:00Z"), Some(951_782_400_000_000_000));
        assert_eq!(parse_rfc3339_nanos("2026-12-03T02:11:36+01:00"), None);
        assert_eq!(parse_rfc3339_nanos("garbage"), None);
    }

    #[test]
    fn die_and_destroy_events_give_exits() {
        let event = |action: &str, code: Option<&str>| EventMessage {
            action: Some(action.into()),
            actor: Some(bollard::models::EventActor {
                id: Some("c".into()),
                attributes: code.map(|c| HashMap::from([("exitCode".to_string(), c.to_string())])),
            }),
            ..Default::default()
        };
        assert_eq!(exit_of(&event("die", Some("137"))), Some(Exit::Code(137)));
        assert!(matches!(exit_of(&event("destroy", None)), Some(Exit::Gone(_))));
        assert_eq!(exit_of(&event("exec_start", None)), None);
    }

    fn left(id: &str, plan: &str, running: bool, death: Option<Death>) -> (EngineContainer, Option<Death>) {
        let c = EngineContainer { id: id.into(), plan: plan.into(), running, image_id: "img".into() };
        (c, death)
    }

    #[test]
    fn a_lone_crash_creates_and_keeps_the_dead_container_for_the_next_restart() {
        // dockerd still lists it running: its exit is not processed yet.
        let d = dispose(vec![left("a", "p", true, Some(Death::ProcessEnded))], "p", Some("img"));
        assert_eq!(d, Disposal { keep: Some("a".into()), ..Default::default() });
    }

    #[test]
    fn the_next_crash_starts_the_kept_container_and_keeps_the_new_dead_one() {
        let d = dispose(
            vec![left("b", "p", true, Some(Death::ProcessEnded)), left("a", "p", false, None)],
            "p",
            Some("img"),
        );
        assert_eq!(d, Disposal { target: Some("a".into()), keep: Some("b".into()), ..Default::default() });
        // Also once dockerd has reported the new death (a restart after a backoff).
        let d = dispose(
            vec![left("b", "p", false, Some(Death::Reported)), left("a", "p", false, None)],
            "p",
            Some("img"),
        );
        assert_eq!(d, Disposal { target: Some("a".into()), keep: Some("b".into()), ..Default::default() });
    }

    #[test]
    fn a_reported_death_alone_is_started_again_in_place() {
        let d = dispose(vec![left("a", "p", false, Some(Death::Reported))], "p", Some("img"));
        assert_eq!(d, Disposal { target: Some("a".into()), ..Default::default() });
    }

    #[test]
    fn duplicates_go_first_other_plans_and_extra_stopped_ones_go_later() {
        let d = dispose(
            vec![
                left("run", "p", true, None),
                left("old-plan", "q", false, None),
                left("a", "p", false, None),
                left("extra", "p", false, None),
                left("dead-old-plan", "q", true, Some(Death::ProcessEnded)),
            ],
            "p",
            Some("img"),
        );
        assert_eq!(
            d,
            Disposal {
                duplicates: vec!["run".into()],
                target: Some("a".into()),
                keep: None,
                remove: vec!["old-plan".into(), "extra".into(), "dead-old-plan".into()],
            }
        );
        // Another image: nothing is started again.
        let d = dispose(vec![left("a", "p", false, None)], "p", Some("other"));
        assert_eq!(d, Disposal { remove: vec!["a".into()], ..Default::default() });
    }
}
