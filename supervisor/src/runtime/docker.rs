//! Engines as Docker containers (the appliance host), through bollard on the local socket.
//!
//! Containers carry `lucebox.engine=<name>` and `lucebox.plan=<hash of the choice and image>`:
//! a restarted supervisor adopts the running container of its plan instead of starting a
//! duplicate, and removes any other container of that engine. Death is seen on Docker's event
//! stream (only `die`/`destroy` of our container are asked for, so health-check `exec_*` noise
//! never arrives); when dockerd goes away the watcher reconnects and asks for the state again.

use std::collections::HashMap;
use std::path::Path;
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

use super::engine::{plan_hash, EngineInstance, EngineRuntime};
use super::{loglines, Exit, RuntimeError};
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
}

impl DockerRuntime {
    /// Connects to dockerd on `socket` and checks it answers.
    pub async fn connect(socket: &Path, image: &str, limits: ContainerLimits) -> Result<Self, RuntimeError> {
        let socket_name = socket.display().to_string();
        let connect_error = |source| RuntimeError::Connect { socket: socket_name.clone(), source };
        let docker = Docker::connect_with_unix(&socket_name, API_TIMEOUT_S, API_DEFAULT_VERSION)
            .map_err(connect_error)?;
        docker.ping().await.map_err(connect_error)?;
        Ok(Self { docker, image: image.to_string(), limits })
    }

    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// Containers of engine `name`, in any state: (id, plan hash, running).
    pub async fn containers_of(&self, name: &str) -> Result<Vec<(String, String, bool)>, RuntimeError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_ENGINE}={name}")])]);
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let found =
            self.docker.list_containers(Some(options)).await.map_err(docker_error("list containers"))?;
        Ok(found
            .into_iter()
            .filter_map(|c| {
                let plan = c.labels.as_ref().and_then(|l| l.get(LABEL_PLAN)).cloned().unwrap_or_default();
                let running = c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
                Some((c.id?, plan, running))
            })
            .collect())
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()), // gone, or removal already under way
            Err(e) => Err(docker_error("remove container")(e)),
        }
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

    fn instance(&self, engine: &str, id: String, since_unix_s: i64) -> DockerInstance {
        let (exit_tx, exit_rx) = watch::channel(None);
        let watcher = CancellationToken::new();
        tokio::spawn(watch_container(
            self.docker.clone(),
            id.clone(),
            since_unix_s,
            exit_tx,
            watcher.clone(),
        ));
        tokio::spawn(forward_logs(self.docker.clone(), engine.to_string(), id.clone(), watcher.clone()));
        DockerInstance { runtime: self.clone(), engine: engine.to_string(), id, exit: exit_rx, watcher }
    }
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

pub struct DockerInstance {
    runtime: DockerRuntime,
    engine: String,
    id: String,
    exit: watch::Receiver<Option<Exit>>,
    /// Ends the watcher and log tasks when the instance is done.
    watcher: CancellationToken,
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
        let mut adopted = None;
        for (id, plan, running) in self.containers_of(name).await? {
            if adopted.is_none() && running && plan == hash {
                adopted = Some(id);
            } else {
                tracing::info!(engine = name, container = %id, "removing stale engine container");
                self.remove(&id).await?;
            }
        }
        // Replay from a minute back: a die between listing and subscribing is not missed.
        Ok(adopted.map(|id| self.instance(name, id, unix_s() - 60)))
    }

    async fn start(&self, name: &str, choice: &Choice) -> Result<DockerInstance, RuntimeError> {
        let mut dead = Vec::new();
        for (id, _, running) in self.containers_of(name).await? {
            if running {
                // Would hold the port (and be a duplicate): gone before the new one starts.
                self.remove(&id).await?;
            } else {
                dead.push(id);
            }
        }
        let hash = plan_hash(choice, &self.image);
        let body = self.container_body(name, &hash, &choice.launch);
        // Unique per start: a dead predecessor may still be being removed.
        let options = CreateContainerOptions {
            name: Some(format!("lucebox-{name}-{}-{:04x}", &hash[..8], unique_suffix())),
            ..Default::default()
        };
        let since = unix_s() - 1;
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(docker_error("create container"))?;
        let instance = self.instance(name, created.id.clone(), since);
        let started = self.docker.start_container(&created.id, None).await;
        // Dead predecessors go once the new engine runs: removing them must not delay it.
        let runtime = self.clone();
        tokio::spawn(async move {
            for id in dead {
                if let Err(err) = runtime.remove(&id).await {
                    tracing::warn!(container = %short(&id), "removing dead engine container: {err}");
                }
            }
        });
        if let Err(e) = started {
            self.remove(&created.id).await?;
            return Err(docker_error("start container")(e));
        }
        Ok(instance)
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
    since_unix_s: i64,
    exit_tx: watch::Sender<Option<Exit>>,
    cancel: CancellationToken,
) {
    let mut since = since_unix_s;
    loop {
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
                        let _ = exit_tx.send(Some(exit));
                        return;
                    }
                    continue;
                }
            };
            match next {
                Some(Ok(event)) => {
                    if let Some(exit) = exit_of(&event) {
                        let _ = exit_tx.send(Some(exit));
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
        // dockerd went away (restart, crash): wait for it, then ask for the container's state.
        if !wait_for_daemon(&docker, &cancel).await {
            return;
        }
        if let Some(exit) = inspect_exit(&docker, &id).await {
            let _ = exit_tx.send(Some(exit));
            return;
        }
        since = unix_s() - 1;
    }
}

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

/// The container's output into the supervisor log, prefixed with the engine name.
async fn forward_logs(docker: Docker, engine: String, id: String, cancel: CancellationToken) {
    let options =
        LogsOptions { follow: true, stdout: true, stderr: true, tail: "all".into(), ..Default::default() };
    let mut logs = docker.logs(&id, Some(options));
    loop {
        let chunk = tokio::select! {
            _ = cancel.cancelled() => return,
            chunk = logs.next() => chunk,
        };
        match chunk {
            Some(Ok(output)) => {
                let stream = match &output {
                    bollard::container::LogOutput::StdErr { .. } => "stderr",
                    _ => "stdout",
                };
                for line in output.into_bytes().split(|&b| b == b'\n') {
                    loglines::log_line(&engine, stream, &line[..line.len().min(loglines::MAX_LINE)]);
                }
            }
            Some(Err(_)) | None => return,
        }
    }
}

fn is_status(err: &BollardError, code: u16) -> bool {
    matches!(err, BollardError::DockerResponseServerError { status_code, .. } if *status_code == code)
}

fn docker_error(what: &'static str) -> impl Fn(BollardError) -> RuntimeError {
    move |source| RuntimeError::Docker { what: what.to_string(), source }
}

fn unix_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
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
}
