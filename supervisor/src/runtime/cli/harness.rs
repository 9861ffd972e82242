//! What the bench and the soak share: a one-engine plan for the tiny model, the runtime to run
//! it on, status waits, and looking at processes and containers from outside.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::plan::{Choice, GroupPlan, Launch, Plan};
use crate::runtime::{ContainerLimits, DockerRuntime};
use crate::status::{EngineState, EngineStatus, StatusModel};

pub const ENGINE: &str = "bench-engine";

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
pub enum Kind {
    Process,
    Docker,
}

#[derive(Args, Clone)]
pub struct EngineArgs {
    #[arg(long, value_enum)]
    pub runtime: Kind,
    /// llama-server binary (process runtime); the docker runtime runs the image's.
    #[arg(long, env = "LLAMA_SERVER_BIN", value_name = "FILE")]
    pub server: Option<PathBuf>,
    /// GGUF model to serve.
    #[arg(long, env = "TINY_MODEL", value_name = "FILE")]
    pub model: PathBuf,
    #[arg(long, default_value_t = 18180)]
    pub port: u16,
    /// Engine image (docker runtime); default `runtime.engine_image` from the configuration.
    #[arg(long)]
    pub image: Option<String>,
}

impl EngineArgs {
    pub fn plan(&self) -> anyhow::Result<Plan> {
        self.plan_on(self.port)
    }

    /// [`Self::plan`] with the engine on `port`.
    pub fn plan_on(&self, port: u16) -> anyhow::Result<Plan> {
        let model = std::fs::canonicalize(&self.model)
            .with_context(|| format!("--model {}", self.model.display()))?;
        let program = match self.runtime {
            Kind::Docker => "/usr/local/bin/llama-server".to_string(),
            Kind::Process => {
                let server = self.server.as_ref().context("--server (or LLAMA_SERVER_BIN) is required")?;
                std::fs::canonicalize(server)
                    .with_context(|| format!("--server {}", server.display()))?
                    .display()
                    .to_string()
            }
        };
        let model = model.display().to_string();
        let args = [
            "-m",
            &model,
            "-t",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--metrics",
            "--slots",
        ];
        let launch = Launch {
            engine: "llama-server".into(),
            program,
            args: args.iter().map(|a| a.to_string()).collect(),
            host: "127.0.0.1".into(),
            port,
            model_files: vec![model],
            startup_allowance_s: 60,
            ..Default::default()
        };
        let choice = Choice { variant: "cpu".into(), profile: "tiny".into(), launch };
        let group =
            GroupPlan { name: ENGINE.into(), devices: vec!["cpu".into()], choice, ..Default::default() };
        Ok(Plan { groups: vec![group], unplanned: vec![] })
    }

    pub async fn docker(&self, config: &crate::config::Config) -> anyhow::Result<DockerRuntime> {
        let image = self.image.clone().unwrap_or_else(|| config.runtime.engine_image.clone());
        Ok(DockerRuntime::connect(&config.runtime.docker_socket, &image, ContainerLimits::for_this_host())
            .await?)
    }
}

pub fn engine(status: &StatusModel) -> Option<EngineStatus> {
    status.read(|s| s.engines.get(ENGINE).cloned())
}

/// Waits until `done` holds for the engine's status; the instant it was first seen to hold.
pub async fn wait_for(
    status: &StatusModel,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(&EngineStatus) -> bool,
) -> anyhow::Result<Instant> {
    let mut changes = status.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if engine(status).is_some_and(|e| done(&e)) {
            return Ok(Instant::now());
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                anyhow::bail!("timed out after {timeout:?} waiting for {what}; engine: {:?}", engine(status))
            }
            changed = changes.changed() => changed.context("status model dropped")?,
        }
    }
}

pub fn is_ready(e: &EngineStatus) -> bool {
    e.state == EngineState::Ready
}

/// Host pids of processes serving `--port port` (llama-server inside or outside containers).
pub fn engine_pids(port: u16) -> Vec<i32> {
    let needle = format!("--port\0{port}\0");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            // By argv[0]: a command that merely names the binary (`lucebox runtime soak --server
            // …/llama-server --port N`, a `timeout` around it) is not an engine.
            let program = cmdline.split(|b| *b == 0).next().unwrap_or_default();
            let is_engine = program.ends_with(b"/llama-server") || program == b"llama-server";
            is_engine && String::from_utf8_lossy(&cmdline).contains(&needle) && !is_zombie(*pid)
        })
        .collect()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(|a, b| a.total_cmp(b));
    values
}

/// Reaches the engine's processes and containers from outside, as an operator (or a fault) would.
#[derive(Clone)]
pub enum Target {
    Process,
    Docker(bollard::Docker),
}

impl Target {
    /// The host pid of the engine with instance id `id` (a pid, or a container id).
    pub async fn host_pid(&self, id: &str) -> anyhow::Result<i32> {
        match self {
            Target::Process => id.parse().context("process instance id is not a pid"),
            Target::Docker(docker) => {
                let info = docker.inspect_container(id, None).await?;
                let pid =
                    info.state.and_then(|s| s.pid).filter(|p| *p > 0).context("container has no pid")?;
                Ok(pid as i32)
            }
        }
    }

    /// Containers of the engine: (running, all states); always (0, 0) for the process runtime.
    pub async fn containers(&self) -> anyhow::Result<(usize, usize)> {
        match self {
            Target::Process => Ok((0, 0)),
            Target::Docker(docker) => {
                let filters = std::collections::HashMap::from([(
                    "label".to_string(),
                    vec![format!("{}={ENGINE}", crate::runtime::docker::LABEL_ENGINE)],
                )]);
                let options = bollard::query_parameters::ListContainersOptions {
                    all: true,
                    filters: Some(filters),
                    ..Default::default()
                };
                let all = docker.list_containers(Some(options)).await?;
                let running = all
                    .iter()
                    .filter(|c| c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING))
                    .count();
                Ok((running, all.len()))
            }
        }
    }
}
