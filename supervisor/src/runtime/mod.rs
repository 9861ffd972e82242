//! Keep the engines running: one [`Supervisor`] per plan group drives an [`EngineRuntime`]
//! (a child process, or a Docker container), probes its health, restarts it with backoff and
//! steps down to the plan's fallbacks when it crash-loops. Everything it sees goes to the
//! [`StatusModel`]. Policy numbers and how they compare with Docker and Kubernetes: `README.md`.

pub mod cli;
mod container_process;
pub mod docker;
mod engine;
mod exit;
pub mod gpu_access;
pub mod in_flight;
pub mod load;
mod loglines;
pub mod memory;
mod policy;
pub mod probe;
pub mod process;
pub mod progress;
mod supervisor;

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::config::{Config, RuntimeMode};
use crate::plan::{GroupPlan, Plan};
use crate::status::StatusModel;

pub use docker::{ContainerLimits, DockerRuntime};
pub use engine::{plan_hash, EngineInstance, EngineRuntime};
pub use exit::Exit;
pub use load::load_signals;
pub use policy::{HealthPolicy, RestartPolicy, SupervisionPolicy};
pub use process::ProcessRuntime;
pub use supervisor::{Supervisor, DEFAULT_STARTUP_ALLOWANCE};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("engine {engine}: cannot start {program}: {source}")]
    Spawn {
        engine: String,
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("engine {engine}: cannot signal process group {pgid}: {source}")]
    Signal { engine: String, pgid: i32, source: nix::Error },
    #[error("engine {engine}: waiting for exit: {source}")]
    Wait {
        engine: String,
        #[source]
        source: std::io::Error,
    },
    #[error("docker socket {socket}: {source}")]
    Connect {
        socket: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("docker: {what}: {source}")]
    Docker {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("plan: group {engine}: {message}")]
    InvalidLaunch { engine: String, message: String },
    #[error("engine {engine}: supervisor task failed: {message}")]
    Task { engine: String, message: String },
}

/// Which runtime `auto` resolves to, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedMode {
    Process,
    Docker,
}

/// `auto`: inside a container the engine is our child; on a host with a Docker socket it runs
/// in containers; anywhere else as a child process.
pub fn resolve_mode(mode: RuntimeMode, docker_socket: &Path, in_container: bool) -> ResolvedMode {
    match mode {
        RuntimeMode::Process => ResolvedMode::Process,
        RuntimeMode::Docker => ResolvedMode::Docker,
        RuntimeMode::Auto if in_container => ResolvedMode::Process,
        RuntimeMode::Auto if docker_socket.exists() => ResolvedMode::Docker,
        RuntimeMode::Auto => ResolvedMode::Process,
    }
}

/// Where the engine builds a smoke start runs are: on this filesystem when the engines run as
/// child processes (inside the image, or a host that runs them directly), or only inside the
/// engine image when this supervisor runs them in containers. `None` where a smoke start here can
/// prove them; else why it cannot.
pub fn smoke_start_unavailable(config: &Config) -> Option<String> {
    match resolve_mode(config.runtime.mode, &config.runtime.docker_socket, in_container()) {
        ResolvedMode::Process => None,
        ResolvedMode::Docker => Some(format!(
            "engines run in containers of {}, whose builds are not on this host: each one's first start \
             proves it, and a crash loop steps down to the next fallback",
            config.runtime.engine_image
        )),
    }
}

/// Whether this process runs inside a container (the marker files Docker and Podman create).
pub fn in_container() -> bool {
    Path::new("/.dockerenv").exists() || Path::new("/run/.containerenv").exists()
}

/// Runs every group of `plan` on the configured runtime until `cancel` fires, then stops the
/// engines with their grace period. Returns once nothing is left running. Each group's
/// crash-loop step-down is remembered under the state directory (`memory.rs`).
pub async fn run_plan(
    plan: &Plan,
    config: &Config,
    status: StatusModel,
    cancel: CancellationToken,
) -> Result<(), RuntimeError> {
    validate_plan(plan)?;
    let spawn = supervisor_spawner(config, status.clone()).await?;
    run_groups(plan, spawn, status, cancel).await
}

/// Starts one engine's supervision loop as a task on the runtime `lucebox run` resolved once at
/// start, so callers that restart single engines (the web API's actions, an OTA activation)
/// need not know whether engines are processes or containers.
pub type SpawnSupervisor = std::sync::Arc<
    dyn Fn(GroupPlan, CancellationToken) -> tokio::task::JoinHandle<Result<(), RuntimeError>> + Send + Sync,
>;

/// Resolves the runtime from the configuration (connecting to dockerd in Docker mode) and returns
/// a [`SpawnSupervisor`] for it with the default policy, remembering step-downs in the state
/// directory.
pub async fn supervisor_spawner(
    config: &Config,
    status: StatusModel,
) -> Result<SpawnSupervisor, RuntimeError> {
    let policy = SupervisionPolicy::default();
    let memory = Some(config.state_dir.clone());
    match resolve_mode(config.runtime.mode, &config.runtime.docker_socket, in_container()) {
        ResolvedMode::Process => Ok(spawner(ProcessRuntime::new(), policy, status, memory)),
        ResolvedMode::Docker => {
            let runtime = DockerRuntime::connect(
                &config.runtime.docker_socket,
                &config.runtime.engine_image,
                ContainerLimits::for_this_host(),
            )
            .await?;
            Ok(spawner(runtime, policy, status, memory))
        }
    }
}

/// With a `state_dir`, each group's crash-loop step-down is remembered there; without, nothing
/// outlives the run.
fn spawner<R: EngineRuntime>(
    runtime: R,
    policy: SupervisionPolicy,
    status: StatusModel,
    state_dir: Option<PathBuf>,
) -> SpawnSupervisor {
    let runtime = std::sync::Arc::new(runtime);
    std::sync::Arc::new(move |group: GroupPlan, cancel: CancellationToken| {
        let supervisor = Supervisor::new(runtime.clone(), group, policy.clone(), status.clone(), cancel);
        let supervisor = match &state_dir {
            Some(dir) => supervisor.remember_in(dir),
            None => supervisor,
        };
        tokio::spawn(supervisor.run())
    })
}

/// Runs `plan` on a given runtime with a given policy (benchmarks and tests pick both); nothing
/// is remembered across runs.
pub async fn run_with<R: EngineRuntime>(
    runtime: R,
    plan: &Plan,
    policy: SupervisionPolicy,
    status: StatusModel,
    cancel: CancellationToken,
) -> Result<(), RuntimeError> {
    validate_plan(plan)?;
    let spawn = spawner(runtime, policy, status.clone(), None);
    run_groups(plan, spawn, status, cancel).await
}

async fn run_groups(
    plan: &Plan,
    spawn: SpawnSupervisor,
    status: StatusModel,
    cancel: CancellationToken,
) -> Result<(), RuntimeError> {
    status.update(|s| s.plan = Some(plan.clone()));
    let mut tasks = tokio::task::JoinSet::new();
    for group in &plan.groups {
        // Dropping this run (an aborted task, a dropped future) must end its supervision loops
        // too, or they would go on restarting engines nobody owns.
        let handle = AbortOnDropHandle::new(spawn(group.clone(), cancel.child_token()));
        tasks.spawn(async move { handle.await.unwrap_or_else(|e| Err(task_failed(e))) });
    }
    join_supervisors(tasks, &cancel).await
}

fn task_failed(e: tokio::task::JoinError) -> RuntimeError {
    RuntimeError::Task { engine: "?".into(), message: e.to_string() }
}

/// Waits for every supervision loop; the first that fails for good cancels the others.
async fn join_supervisors(
    mut tasks: tokio::task::JoinSet<Result<(), RuntimeError>>,
    cancel: &CancellationToken,
) -> Result<(), RuntimeError> {
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        if let Err(err) = joined.map_err(task_failed).and_then(|r| r) {
            // One engine failing for good must not leave the others running unsupervised.
            cancel.cancel();
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Names and ports unique, launches complete: what every runtime relies on.
pub fn validate_plan(plan: &Plan) -> Result<(), RuntimeError> {
    let mut names = std::collections::BTreeSet::new();
    let mut ports = std::collections::BTreeSet::new();
    for group in &plan.groups {
        let invalid = |message: String| RuntimeError::InvalidLaunch { engine: group.name.clone(), message };
        if group.name.is_empty()
            || !group.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(format!("name {:?} must be non-empty [A-Za-z0-9_-]", group.name)));
        }
        if !names.insert(group.name.as_str()) {
            return Err(invalid("name used by two groups".into()));
        }
        for choice in std::iter::once(&group.choice).chain(&group.fallbacks) {
            let launch = &choice.launch;
            if launch.program.is_empty() {
                return Err(invalid(format!(
                    "{}/{}: launch.program is empty",
                    choice.variant, choice.profile
                )));
            }
            if launch.port == 0 {
                return Err(invalid(format!("{}/{}: launch.port is 0", choice.variant, choice.profile)));
            }
        }
        if !ports.insert(group.choice.launch.port) {
            return Err(invalid(format!("port {} used by two groups", group.choice.launch.port)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Choice, GroupPlan, Launch};

    #[test]
    fn auto_mode_prefers_process_inside_a_container() {
        let socket = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(resolve_mode(RuntimeMode::Auto, socket.path(), true), ResolvedMode::Process);
        assert_eq!(resolve_mode(RuntimeMode::Auto, socket.path(), false), ResolvedMode::Docker);
        assert_eq!(
            resolve_mode(RuntimeMode::Auto, Path::new("/nonexistent/sock"), false),
            ResolvedMode::Process
        );
        assert_eq!(resolve_mode(RuntimeMode::Docker, Path::new("/nonexistent"), true), ResolvedMode::Docker);
    }

    fn group(name: &str, port: u16) -> GroupPlan {
        GroupPlan {
            name: name.into(),
            choice: Choice {
                variant: "cpu".into(),
                profile: "tiny".into(),
                launch: Launch { program: "/bin/true".into(), port, ..Default::default() },
            },
            ..Default::default()
        }
    }

    #[test]
    fn plan_validation_names_the_group_and_field() {
        let ok =
            Plan { groups: vec![group("engine-0", 8080), group("engine-1", 8081)], ..Default::default() };
        assert!(validate_plan(&ok).is_ok());
        let clash =
            Plan { groups: vec![group("engine-0", 8080), group("engine-1", 8080)], ..Default::default() };
        assert!(validate_plan(&clash).unwrap_err().to_string().contains("engine-1: port 8080"));
        let mut no_port = group("engine-0", 0);
        no_port.choice.launch.port = 0;
        let err = validate_plan(&Plan { groups: vec![no_port], ..Default::default() }).unwrap_err();
        assert!(err.to_string().contains("launch.port"), "{err}");
        let bad_name = Plan { groups: vec![group("a b", 1)], ..Default::default() };
        assert!(validate_plan(&bad_name).is_err());
    }
}
