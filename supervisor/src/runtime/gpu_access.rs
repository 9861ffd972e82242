//! Can Docker hand an NVIDIA GPU to an engine container? It needs the NVIDIA Container Toolkit:
//! either its `nvidia` runtime registered with dockerd, or CDI specs naming `nvidia.com/gpu`
//! devices. Without either, `--gpus` fails only when the container starts, so the supervisor
//! asks `docker info` before planning and plans such GPUs out with the fix in the reason.

use std::path::Path;

use bollard::models::SystemInfo;
use serde::Serialize;

use crate::hardware::{Detection, Vendor};
use crate::plan::Plan;

/// The fix a user reads when Docker cannot reach the NVIDIA GPUs.
pub const NVIDIA_TOOLKIT_FIX: &str = "Docker reports neither an `nvidia` runtime nor CDI `nvidia.com/gpu` \
     devices (`docker info`): install the NVIDIA Container Toolkit (package nvidia-container-toolkit), \
     then run `nvidia-ctk runtime configure --runtime=docker` (or `nvidia-ctk cdi generate \
     --output=/etc/cdi/nvidia.yaml`) and restart Docker";

/// What dockerd can give containers in the way of NVIDIA GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DockerGpuAccess {
    /// dockerd lists an `nvidia` runtime (Container Toolkit configured for Docker).
    pub nvidia_runtime: bool,
    /// CDI device names of NVIDIA GPUs, e.g. `nvidia.com/gpu=0`, `nvidia.com/gpu=all`.
    pub cdi_nvidia_devices: Vec<String>,
}

impl DockerGpuAccess {
    /// Reads what `docker info` reports. Docker 28.2+ lists CDI devices itself; older daemons
    /// only name their CDI spec folders, which are then read for `nvidia.com/gpu` specs.
    pub fn from_info(info: &SystemInfo) -> Self {
        let nvidia_runtime = info.runtimes.as_ref().is_some_and(|r| r.contains_key("nvidia"));
        let mut cdi_nvidia_devices: Vec<String> = info
            .discovered_devices
            .iter()
            .flatten()
            .filter(|d| d.source.as_deref() == Some("cdi"))
            .filter_map(|d| d.id.clone())
            .filter(|id| id.starts_with("nvidia.com/gpu="))
            .collect();
        if cdi_nvidia_devices.is_empty() {
            for dir in info.cdi_spec_dirs.iter().flatten() {
                if spec_dir_names_nvidia_gpus(Path::new(dir)) {
                    cdi_nvidia_devices.push("nvidia.com/gpu=all".to_string());
                    break;
                }
            }
        }
        Self { nvidia_runtime, cdi_nvidia_devices }
    }

    pub fn can_reach_nvidia(&self) -> bool {
        self.nvidia_runtime || !self.cdi_nvidia_devices.is_empty()
    }

    /// Marks every NVIDIA GPU unusable, with the fix, when Docker cannot reach them, so the
    /// planner rejects its builds and says why. Returns the ids of the devices it marked.
    pub fn restrict(&self, detection: &mut Detection) -> Vec<String> {
        if self.can_reach_nvidia() {
            return Vec::new();
        }
        let mut marked = Vec::new();
        for device in detection.devices.iter_mut().filter(|d| d.vendor == Vendor::Nvidia && d.accessible) {
            device.accessible = false;
            device.warnings.push(NVIDIA_TOOLKIT_FIX.to_string());
            marked.push(device.id.clone());
        }
        marked
    }

    /// Without the `nvidia` runtime, GPUs are requested by their CDI names instead.
    pub fn apply_to_plan(&self, plan: &mut Plan) {
        let via_cdi = !self.nvidia_runtime && !self.cdi_nvidia_devices.is_empty();
        let launches = plan.groups.iter_mut().flat_map(|g| {
            std::iter::once(&mut g.choice.launch).chain(g.fallbacks.iter_mut().map(|f| &mut f.launch))
        });
        for launch in launches.filter(|l| !l.container.nvidia_gpus.is_empty()) {
            launch.container.nvidia_via_cdi = via_cdi;
        }
    }
}

/// Whether a CDI spec folder holds a spec of kind `nvidia.com/gpu` (YAML or JSON).
fn spec_dir_names_nvidia_gpus(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().take(256).any(|entry| {
        let path = entry.path();
        let is_spec = path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json");
        is_spec
            && std::fs::read_to_string(&path)
                .is_ok_and(|text| text.contains("nvidia.com/gpu") && text.contains("kind"))
    })
}

/// Whether planning must ask dockerd first: the engines will run in Docker containers on this
/// machine. A captured tree (`--root`) describes another machine, so only an explicit
/// `runtime.mode = "docker"` asks there.
pub fn applies(config: &crate::config::Config, root_is_live: bool) -> bool {
    use crate::config::RuntimeMode;
    match config.runtime.mode {
        RuntimeMode::Docker => true,
        RuntimeMode::Process => false,
        RuntimeMode::Auto => {
            root_is_live
                && super::resolve_mode(
                    RuntimeMode::Auto,
                    &config.runtime.docker_socket,
                    super::in_container(),
                ) == super::ResolvedMode::Docker
        }
    }
}

/// Asks the dockerd behind `socket`.
pub async fn query(socket: &Path) -> Result<DockerGpuAccess, super::RuntimeError> {
    let socket_name = socket.display().to_string();
    let docker = bollard::Docker::connect_with_unix(&socket_name, 10, bollard::API_DEFAULT_VERSION)
        .map_err(|source| super::RuntimeError::Connect { socket: socket_name.clone(), source })?;
    let info = docker
        .info()
        .await
        .map_err(|source| super::RuntimeError::Docker { what: "docker info".into(), source })?;
    Ok(DockerGpuAccess::from_info(&info))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(json: &str) -> SystemInfo {
        serde_json::from_str(json).expect("docker info fixture")
    }

    #[test]
    fn plain_docker_cannot_reach_nvidia() {
        // Trimmed from `docker info --format '{{json .}}'` of dockerd 28 without the toolkit.
        let plain = info(
            r#"{"Runtimes":{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}},
                "DefaultRuntime":"runc","CDISpecDirs":["/nonexistent/cdi"],"DiscoveredDevices":[]}"#,
        );
        let access = DockerGpuAccess::from_info(&plain);
        assert!(!access.can_reach_nvidia());
    }

    #[test]
    fn nvidia_runtime_or_cdi_devices_reach_nvidia() {
        let runtime =
            info(r#"{"Runtimes":{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}}"#);
        let access = DockerGpuAccess::from_info(&runtime);
        assert!(access.nvidia_runtime && access.can_reach_nvidia());

        let cdi = info(
            r#"{"Runtimes":{"runc":{"path":"runc"}},
                "DiscoveredDevices":[{"Source":"cdi","ID":"nvidia.com/gpu=0"},{"Source":"cdi","ID":"amd.com/gpu=0"}]}"#,
        );
        let access = DockerGpuAccess::from_info(&cdi);
        assert_eq!(access.cdi_nvidia_devices, vec!["nvidia.com/gpu=0".to_string()]);
        assert!(!access.nvidia_runtime && access.can_reach_nvidia());
    }

    #[test]
    fn cdi_spec_folder_of_an_older_daemon_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("nvidia.yaml"),
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n",
        )
        .expect("write spec");
        let older = info(&format!(r#"{{"CDISpecDirs":["{}"]}}"#, dir.path().display()));
        assert!(DockerGpuAccess::from_info(&older).can_reach_nvidia());
    }
}
