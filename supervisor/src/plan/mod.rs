//! Which engine build and which model profile run on which device, and why.
//!
//! The plan is what `run` executes: per device group the chosen variant and profile, the rendered
//! engine command, and the next eligible choices to step down to when the engine crash-loops.
//! Every candidate considered is kept with the reason it was taken or not.

pub mod inputs;
pub mod profile;
pub mod select;
pub mod smoke;
pub mod table;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lucebox_engine::variants::{Backend, EngineKind, Manifest, Variant};
use serde::{Deserialize, Serialize};

use crate::config::Pin;
use crate::hardware::{Detection, Device, Vendor};
use profile::Profile;

/// Seconds every engine gets to load before counting as failed, plus the time to read the
/// model at a slow disk's pace.
const BASE_STARTUP_ALLOWANCE_S: u64 = 30;
const SLOW_DISK_MIB_PER_S: u64 = 200;
/// How many step-down choices a group keeps: a crash loop never needs more, and only these get
/// rendered launches.
pub const MAX_FALLBACKS: usize = 8;

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
    /// Request the GPUs as CDI devices (`nvidia.com/gpu=<id>`): dockerd has CDI specs but no
    /// `nvidia` runtime. Set from `docker info` by the Docker runtime, never by the planner.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nvidia_via_cdi: bool,
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
    /// Not smoke-started (captured tree, `--no-smoke`, engines in containers whose builds are not
    /// on this host, or not tried yet).
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
    /// Every candidate considered, with why it was not taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
}

/// Everything the planner needs besides detection, manifest and profiles.
#[derive(Debug, Clone)]
pub struct PlanSettings {
    /// Where the image keeps its engine builds (`<engines_dir>/<variant.binary>`).
    pub engines_dir: PathBuf,
    pub models_dir: PathBuf,
    /// Reject profiles whose model files are not in `models_dir` (off for captured trees).
    pub check_models: bool,
    pub host: String,
    pub first_port: u16,
    /// Threads for CPU engines; 0 uses the physical core count.
    pub threads: u32,
    /// Per-device (or `default`) pinned profile and variant.
    pub pins: BTreeMap<String, Pin>,
}

/// Plans every device: GPUs first, each its own engine; the CPU only when no GPU got one.
pub fn make_plan(
    detection: &Detection,
    manifest: &Manifest,
    profiles: &[Profile],
    settings: &PlanSettings,
) -> Plan {
    let ranked = ranked(profiles);

    let mut plan = Plan::default();
    let gpus = detection.devices.iter().filter(|d| d.vendor != Vendor::Cpu);
    let cpus = detection.devices.iter().filter(|d| d.vendor == Vendor::Cpu);
    for device in gpus {
        plan_device(&mut plan, device, detection, manifest, &ranked, settings);
    }
    if plan.groups.is_empty() {
        for device in cpus {
            plan_device(&mut plan, device, detection, manifest, &ranked, settings);
        }
    } else {
        for device in cpus {
            plan.unplanned.push(Unplanned {
                device: device.id.clone(),
                reason: "GPUs serve the models".into(),
                candidates: Vec::new(),
            });
        }
    }
    plan
}

/// Smoke-starts the plan ([`smoke::prove`]). A GPU whose every build then failed gets no engine
/// (it would crash-loop with nothing to step down to), and where no GPU is left serving, the CPU
/// is planned and proven in its place.
pub fn prove(
    plan: &mut Plan,
    detection: &Detection,
    manifest: &Manifest,
    profiles: &[Profile],
    settings: &PlanSettings,
    smoke_settings: &smoke::SmokeSettings,
) {
    smoke::prove(plan, detection, smoke_settings);
    if cpu_instead_of_failed_gpus(plan, detection, manifest, profiles, settings) {
        smoke::prove(plan, detection, smoke_settings);
    }
}

/// Moves the GPU groups whose smoke starts all failed to `unplanned`; when that leaves no group,
/// plans the CPU (which [`make_plan`] left out while GPUs served). Returns whether it planned one.
pub fn cpu_instead_of_failed_gpus(
    plan: &mut Plan,
    detection: &Detection,
    manifest: &Manifest,
    profiles: &[Profile],
    settings: &PlanSettings,
) -> bool {
    let is_cpu = |id: &String| detection.devices.iter().any(|d| &d.id == id && d.vendor == Vendor::Cpu);
    let (failed, kept): (Vec<GroupPlan>, Vec<GroupPlan>) = std::mem::take(&mut plan.groups)
        .into_iter()
        .partition(|g| matches!(g.proof, Proof::Failed { .. }) && !g.devices.iter().any(is_cpu));
    plan.groups = kept;
    for group in &failed {
        let Proof::Failed { reason } = &group.proof else { continue };
        for device in &group.devices {
            plan.unplanned.push(Unplanned {
                device: device.clone(),
                reason: format!("no build passed its smoke start ({reason})"),
                candidates: group.candidates.clone(),
            });
        }
    }
    if failed.is_empty() || !plan.groups.is_empty() {
        return false;
    }
    let cpus: Vec<&Device> = detection.devices.iter().filter(|d| d.vendor == Vendor::Cpu).collect();
    plan.unplanned.retain(|u| !cpus.iter().any(|c| c.id == u.device));
    let ranked = ranked(profiles);
    for device in cpus {
        plan_device(plan, device, detection, manifest, &ranked, settings);
    }
    !plan.groups.is_empty()
}

/// Profiles best first: by rank, then by name (so ties never depend on the order files were read).
fn ranked(profiles: &[Profile]) -> Vec<&Profile> {
    let mut ranked: Vec<&Profile> = profiles.iter().collect();
    ranked.sort_by(|a, b| b.spec.rank.cmp(&a.spec.rank).then_with(|| a.name.cmp(&b.name)));
    ranked
}

fn plan_device(
    plan: &mut Plan,
    device: &Device,
    detection: &Detection,
    manifest: &Manifest,
    ranked: &[&Profile],
    settings: &PlanSettings,
) {
    let pin = settings.pins.get(&device.id).or_else(|| settings.pins.get("default"));
    let mut candidates = Vec::new();
    let mut accepted: Vec<(&Variant, &Profile)> = Vec::new();
    for variant in &manifest.variant {
        if let Some(wanted) = pin.and_then(|p| p.variant.as_deref()) {
            if wanted != variant.name {
                candidates.push(rejected(
                    &variant.name,
                    "*",
                    format!("variant pinned to {wanted} by configuration"),
                ));
                continue;
            }
        }
        let note = match select::variant_fits(variant, device, &detection.host) {
            Ok(note) => note,
            Err(reason) => {
                candidates.push(rejected(&variant.name, "*", reason));
                continue;
            }
        };
        for profile in ranked {
            if let Some(wanted) = pin.and_then(|p| p.profile.as_deref()) {
                if wanted != profile.name {
                    candidates.push(rejected(
                        &variant.name,
                        &profile.name,
                        format!("profile pinned to {wanted}"),
                    ));
                    continue;
                }
            }
            let verdict = select::profile_fits(profile, variant, device)
                .and_then(|()| {
                    select::engine_keeps_its_size(profile, variant, manifest.engine.get(&variant.engine))
                })
                .and_then(|()| model_present(profile, settings));
            match verdict {
                Ok(()) => {
                    candidates.push(Candidate {
                        variant: variant.name.clone(),
                        profile: profile.name.clone(),
                        accepted: true,
                        reason: format!(
                            "{note}; needs {} MiB, device has {}{}",
                            profile.spec.requirements.min_usable_mib,
                            device.memory.usable_mib,
                            wsl_note(profile, device)
                        ),
                    });
                    accepted.push((variant, profile));
                }
                Err(reason) => candidates.push(rejected(&variant.name, &profile.name, reason)),
            }
        }
    }
    let index = plan.groups.len();
    let port = settings.first_port.saturating_add(index as u16);
    let mut choices = accepted.into_iter().take(1 + MAX_FALLBACKS).filter_map(|(variant, profile)| {
        let engine = manifest.engine.get(&variant.engine)?;
        Some(Choice {
            variant: variant.name.clone(),
            profile: profile.name.clone(),
            launch: render_launch(variant, engine, profile, device, detection, settings, port),
        })
    });
    match choices.next() {
        Some(choice) => plan.groups.push(GroupPlan {
            name: engine_name(device),
            devices: vec![device.id.clone()],
            choice,
            fallbacks: choices.collect(),
            candidates,
            proof: Proof::Unproven,
        }),
        None => {
            let reason = unplanned_reason(device, &candidates);
            plan.unplanned.push(Unplanned { device: device.id.clone(), reason, candidates });
        }
    }
}

/// One line for a device that got no engine: unusable, models missing, or the closest miss.
fn unplanned_reason(device: &Device, candidates: &[Candidate]) -> String {
    if !device.accessible {
        let why = device.warnings.last().map(String::as_str).unwrap_or("not usable from here");
        return format!("not usable: {why}");
    }
    let mut missing: Vec<&str> = candidates
        .iter()
        .filter_map(|c| c.reason.strip_prefix("model file ").and_then(|r| r.split(' ').next()))
        .collect();
    missing.dedup();
    if !missing.is_empty() {
        return format!("profiles fit but their model files are missing: {}", missing.join(", "));
    }
    candidates
        .iter()
        .find(|c| c.profile != "*")
        .or(candidates.first())
        .map(|c| format!("no variant and profile fit (e.g. {} / {}: {})", c.variant, c.profile, c.reason))
        .unwrap_or_else(|| "no variant in the manifest".to_string())
}

fn rejected(variant: &str, profile: &str, reason: String) -> Candidate {
    Candidate { variant: variant.to_string(), profile: profile.to_string(), accepted: false, reason }
}

/// `engine-cpu`, `engine-0000-03-00-0`: stable across restarts, so containers can be adopted.
pub fn engine_name(device: &Device) -> String {
    format!("engine-{}", device.id.replace([':', '.'], "-"))
}

/// Where a model file is: a plain file in the store, or its content-addressed copy.
pub fn model_path(models_dir: &Path, model: &profile::ModelFile) -> PathBuf {
    let plain = models_dir.join(&model.file);
    if plain.exists() {
        return plain;
    }
    match &model.sha256 {
        Some(sha) if models_dir.join("sha256").join(sha).exists() => models_dir.join("sha256").join(sha),
        _ => plain,
    }
}

fn model_present(profile: &Profile, settings: &PlanSettings) -> Result<(), String> {
    if !settings.check_models {
        return Ok(());
    }
    for model in std::iter::once(&profile.spec.model).chain(profile.spec.draft.as_ref()) {
        if !model_path(&settings.models_dir, model).exists() {
            return Err(format!(
                "model file {} not in {} (`lucebox models pull` fetches it)",
                model.file,
                settings.models_dir.display()
            ));
        }
    }
    Ok(())
}

/// What `[engine.wsl]` changes on a GPU lent to WSL2, for the candidate's reason.
fn wsl_note(profile: &Profile, device: &Device) -> String {
    let Some(wsl) = profile.spec.engine.wsl.as_ref().filter(|_| device.lent_to_wsl()) else {
        return String::new();
    };
    let changes: Vec<String> = [
        wsl.ctx.map(|c| format!("context {c}")),
        wsl.draft_budget.filter(|_| profile.spec.draft.is_some()).map(|b| format!("DDTree budget {b}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if changes.is_empty() {
        return String::new();
    }
    format!("; under WSL2: {}", changes.join(", "))
}

fn render_launch(
    variant: &Variant,
    engine: &EngineKind,
    profile: &Profile,
    device: &Device,
    detection: &Detection,
    settings: &PlanSettings,
    port: u16,
) -> Launch {
    let e = profile.spec.engine.for_wsl(device.lent_to_wsl());
    let model = model_path(&settings.models_dir, &profile.spec.model);
    let draft = profile.spec.draft.as_ref().map(|d| model_path(&settings.models_dir, d));
    let threads = match (variant.backend, settings.threads) {
        (Backend::Cpu, 0) => Some(detection.host.cores),
        (Backend::Cpu, n) => Some(n),
        _ => None,
    };
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    values.insert("model", model.display().to_string());
    values.insert("host", settings.host.clone());
    values.insert("port", port.to_string());
    values.insert("name", profile.name.clone());
    values.insert("ctx", e.ctx.to_string());
    values.insert("parallel", e.parallel.to_string());
    let optional = [
        ("threads", threads.map(|t| t.to_string())),
        ("cache_type_k", e.cache_type_k.clone()),
        ("cache_type_v", e.cache_type_v.clone()),
        ("draft", draft.as_ref().map(|d| d.display().to_string())),
        ("draft_budget", e.draft_budget.filter(|_| draft.is_some()).map(|b| b.to_string())),
        ("lazy_draft", (e.lazy_draft && draft.is_some()).then(String::new)),
        ("prefix_cache_slots", e.prefix_cache_slots.map(|n| n.to_string())),
        ("think_max_tokens", e.think_max_tokens.map(|n| n.to_string())),
        ("cpu_moe_layers", e.cpu_moe_layers.map(|n| n.to_string())),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            values.insert(key, value);
        }
    }
    // One pass per argument: most have no placeholder, a few have one.
    let substitute = |arg: &String| {
        let mut out = String::with_capacity(arg.len());
        let mut rest = arg.as_str();
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}').map(|c| open + c) else { break };
            out.push_str(&rest[..open]);
            match values.get(&rest[open + 1..close]) {
                Some(value) => out.push_str(value),
                None => out.push_str(&rest[open..=close]),
            }
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    };
    let mut args: Vec<String> = engine.args.iter().map(substitute).collect();
    for (group, group_args) in &engine.optional {
        if values.contains_key(group.as_str()) {
            args.extend(group_args.iter().map(substitute));
        }
    }
    args.extend(variant.args.iter().cloned());
    args.extend(e.extra_args.iter().cloned());

    let mut env = variant.env.clone();
    let mut container = ContainerNeeds::default();
    let same_vendor_index = detection
        .devices
        .iter()
        .filter(|d| d.vendor == device.vendor)
        .position(|d| d.id == device.id)
        .unwrap_or(0);
    match (variant.backend, device.vendor) {
        (Backend::Cuda, _) | (Backend::Vulkan, Vendor::Nvidia) => {
            let id = device
                .uid
                .clone()
                .filter(|u| u.starts_with("GPU-"))
                .unwrap_or_else(|| same_vendor_index.to_string());
            env.insert("CUDA_VISIBLE_DEVICES".into(), id.clone());
            if variant.backend == Backend::Vulkan {
                // CUDA_VISIBLE_DEVICES does not filter Vulkan: Mesa's device-select layer puts
                // this card first (and alone), as on AMD; the container toolkit mounts NVIDIA's
                // Vulkan driver only with the graphics capability.
                if let Some(pci) = &device.pci_id {
                    env.insert("MESA_VK_DEVICE_SELECT".into(), format!("{pci}!"));
                }
                env.insert("NVIDIA_DRIVER_CAPABILITIES".into(), "compute,utility,graphics".into());
                env.insert("GGML_VK_VISIBLE_DEVICES".into(), "0".into());
            }
            container.nvidia_gpus.push(id);
        }
        (Backend::Rocm, _) => {
            // ROCR filters at the runtime level, counting in KFD node order; HIP then numbers the
            // visible GPUs from 0.
            let index = device.rocm_index.map_or(same_vendor_index, |i| i as usize);
            env.insert("ROCR_VISIBLE_DEVICES".into(), index.to_string());
            container.devices = vec!["/dev/kfd".into(), "/dev/dri".into()];
        }
        (Backend::Vulkan, _) => {
            if let Some(pci) = &device.pci_id {
                env.insert("MESA_VK_DEVICE_SELECT".into(), format!("{pci}!"));
            }
            container.devices = vec!["/dev/dri".into()];
        }
        (Backend::Cpu, _) => {}
    }
    let model_mib =
        profile.spec.model.size_mib + profile.spec.draft.as_ref().map(|d| d.size_mib).unwrap_or(0);
    Launch {
        engine: variant.engine.clone(),
        program: settings.engines_dir.join(&variant.binary).display().to_string(),
        args,
        env,
        host: settings.host.clone(),
        port,
        model_files: std::iter::once(model).chain(draft).map(|p| p.display().to_string()).collect(),
        startup_allowance_s: BASE_STARTUP_ALLOWANCE_S + model_mib / SLOW_DISK_MIB_PER_S,
        container,
    }
}
