//! Which engine build and which model profile run on which device, and why.
//!
//! The plan is what `run` executes: per device group the chosen variant and profile, the rendered
//! engine command, and the next eligible choices to step down to when the engine crash-loops.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The plan for the whole box: one group per engine that will run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    pub groups: Vec<GroupPlan>,
    /// Devices that got no engine, with the reason.
    pub unplanned: Vec<Unplanned>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GroupPlan {
    /// Engine name, e.g. `engine-0`; stable across restarts (Docker labels use it).
    pub name: String,
    /// Device ids (PCI addresses, or `cpu`).
    pub devices: Vec<String>,
    /// The chosen engine build and profile, ready to start.
    pub choice: Choice,
    /// The next eligible choices, best first: where a crash loop steps down to.
    pub fallbacks: Vec<Choice>,
    /// Every candidate considered, with why it was taken or not.
    pub candidates: Vec<Candidate>,
    /// Whether a smoke start proved the variant on this device (or why not).
    pub proof: Proof,
}

/// One runnable (variant, profile) pair with its rendered launch.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Choice {
    pub variant: String,
    pub profile: String,
    pub launch: Launch,
}

/// Everything a runtime needs to start one engine.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Launch {
    /// Engine kind: `llama-server` or `dflash_server`.
    pub engine: String,
    /// Binary path (inside the image for the Docker runtime).
    pub program: String,
    pub args: Vec<String>,
    /// Device visibility and other variables (`CUDA_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES`, ...).
    pub env: BTreeMap<String, String>,
    pub host: String,
    pub port: u16,
    /// Model files the engine reads (the Docker runtime mounts their directories).
    pub model_files: Vec<String>,
    /// How long loading may take before the engine counts as failed, sized to the model.
    pub startup_allowance_s: u64,
    /// Device nodes and GPU requests for a container.
    pub container: ContainerNeeds,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ContainerNeeds {
    /// NVIDIA GPUs to request (UUIDs or indices), as `--gpus device=...` does.
    pub nvidia_gpus: Vec<String>,
    /// Device nodes to map, e.g. `/dev/kfd`, `/dev/dri`.
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Candidate {
    pub variant: String,
    pub profile: String,
    pub accepted: bool,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Proof {
    /// Not smoke-started (captured tree, `--no-smoke`, or not tried yet).
    #[default]
    Unproven,
    Proven {
        cached: bool,
    },
    Failed {
        reason: String,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Unplanned {
    pub device: String,
    pub reason: String,
}
