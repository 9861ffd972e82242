//! The supervisor's planner: the same planning `lucebox run` does at start, repeatable for a
//! new profile set (OTA activation) or a new pin (the web API's profile switch).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::config::{Config, Pin};
use crate::hardware::Detection;
use crate::plan::inputs::{InputError, PlanInputs};
use crate::plan::{self, Plan};
use crate::runtime::gpu_access::{DockerGpuAccess, NVIDIA_TOOLKIT_FIX};
use crate::status::{Level, StatusModel};

pub struct Planner {
    config: Config,
    detection: Detection,
    /// Smoke-start the plan's variants (a live machine without `--no-smoke`).
    smoke: bool,
    status: StatusModel,
    /// What dockerd can hand engine containers, when engines run in Docker.
    gpu_access: Option<DockerGpuAccess>,
    /// The pins in force: configuration (with the state dir's pins file) plus API switches.
    pins: Mutex<BTreeMap<String, Pin>>,
}

impl Planner {
    pub fn new(config: Config, detection: Detection, smoke: bool, status: StatusModel) -> Self {
        let pins = Mutex::new(config.pin.clone());
        Self { config, detection, smoke, status, pins, gpu_access: None }
    }

    /// Plans with what dockerd can hand containers: GPUs it cannot reach are planned out, with
    /// the fix in their reason and in an event.
    pub fn with_gpu_access(mut self, access: Option<DockerGpuAccess>) -> Self {
        if let Some(access) = &access {
            for device in access.restrict(&mut self.detection) {
                self.status.event("plan", Level::Warn, format!("{device}: {NVIDIA_TOOLKIT_FIX}"));
            }
        }
        self.gpu_access = access;
        self
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn detection(&self) -> &Detection {
        &self.detection
    }

    pub fn pins(&self) -> BTreeMap<String, Pin> {
        self.pins.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_pins(&self, pins: BTreeMap<String, Pin>) {
        *self.pins.lock().unwrap_or_else(|e| e.into_inner()) = pins;
    }

    /// Profiles and variants: the configured ones, else those of `set_dir` (an installed OTA set),
    /// else what the configuration resolves (the active set, the image's, the source tree's).
    pub fn inputs(&self, set_dir: Option<&Path>) -> Result<PlanInputs, InputError> {
        let in_set = |name: &str| -> Option<PathBuf> { set_dir.map(|d| d.join(name)).filter(|p| p.exists()) };
        let profiles = self.config.profiles_dir.clone().or_else(|| in_set("profiles"));
        let variants = self.config.variants_file.clone().or_else(|| in_set("variants.toml"));
        PlanInputs::load(&self.config, profiles.as_deref(), variants.as_deref())
    }

    /// Plans every device with `pins`; smoke-starts the variants when `smoke` and enabled.
    pub async fn plan(&self, inputs: &PlanInputs, pins: BTreeMap<String, Pin>, smoke: bool) -> Plan {
        let mut settings = inputs.settings(&self.config, None, true);
        settings.pins = pins;
        let mut plan = plan::make_plan(&self.detection, &inputs.manifest, &inputs.profiles, &settings);
        if let Some(access) = &self.gpu_access {
            access.apply_to_plan(&mut plan);
        }
        if smoke && self.smoke {
            let (smoke, detection) = (inputs.smoke_settings(&self.config), self.detection.clone());
            let (manifest, profiles) = (inputs.manifest.clone(), inputs.profiles.clone());
            let unproven = plan.clone();
            plan = tokio::task::spawn_blocking(move || {
                plan::prove(&mut plan, &detection, &manifest, &profiles, &settings, &smoke);
                plan
            })
            .await
            .unwrap_or_else(|e| {
                self.status.event(
                    "plan",
                    Level::Error,
                    format!("the smoke start failed ({e}); the plan runs unproven"),
                );
                unproven
            });
        }
        plan
    }

    /// Shows the plan on the status page, one event per engine and per unplanned device.
    pub fn publish(&self, plan: &Plan) {
        for group in &plan.groups {
            self.status.event(
                "plan",
                Level::Info,
                format!(
                    "{}: {} build with profile {} on {} (port {}; {})",
                    group.name,
                    group.choice.variant,
                    group.choice.profile,
                    group.devices.join(", "),
                    group.choice.launch.port,
                    group.candidates.iter().find(|c| c.accepted).map(|c| c.reason.as_str()).unwrap_or("")
                ),
            );
        }
        for unplanned in &plan.unplanned {
            self.status.event(
                "plan",
                Level::Warn,
                format!("{}: no engine: {}", unplanned.device, unplanned.reason),
            );
        }
        self.status.update(|s| s.plan = Some(plan.clone()));
    }
}
