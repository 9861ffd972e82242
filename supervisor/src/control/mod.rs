//! The web API's state-changing actions inside `lucebox run`: restart an engine, switch a
//! device's profile (persisted pin), apply or roll back an OTA update under the supervisor's own
//! health gate, and override a device's fan mode.
//!
//! One action runs at a time (a second answers 423); so does anything holding the OTA update
//! lock. Actions answer once accepted; the work finishes in the background and shows in the
//! status model (engine states, OTA state, events from source `control`).

pub mod activator;
pub mod engines;
pub mod planner;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{Pin, PinsFile, PINS_FILE};
use crate::ota::http::HttpClient;
use crate::ota::repo::RepoSource;
use crate::ota::state::Record;
use crate::ota::{ApplyOptions, ApplyOutcome, OtaPaths, Updater};
use crate::plan::Plan;
use crate::status::{Level, StatusModel};
use crate::thermal::{FanOverride, FanOverrides};
use crate::web::{Accepted, ActionError, ActionFuture, Actions, FanMode, PinRequest};

pub use activator::PlanActivator;
pub use engines::{EngineSet, Started};
pub use planner::Planner;

const SOURCE: &str = "control";
/// An update the caller did not force waits at most this long for the engines to go idle
/// (the API call has already checked they are idle, so this only covers a request racing it).
const OTA_IDLE_WAIT: Duration = Duration::from_secs(30);
/// How long an unforced update request waits for the engines to look idle before answering 423.
const IDLE_GRACE: Duration = Duration::from_millis(2200);

pub struct Control {
    planner: Arc<Planner>,
    engines: Arc<EngineSet>,
    fans: FanOverrides,
    status: StatusModel,
    /// Held by the action in progress; its name answers a concurrent one.
    busy: Arc<tokio::sync::Mutex<()>>,
    doing: Arc<Mutex<String>>,
}

/// The running action; dropping it frees the control plane.
struct Busy {
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Control {
    pub fn new(
        planner: Arc<Planner>,
        engines: Arc<EngineSet>,
        fans: FanOverrides,
        status: StatusModel,
    ) -> Self {
        Self {
            planner,
            engines,
            fans,
            status,
            busy: Arc::new(tokio::sync::Mutex::new(())),
            doing: Arc::new(Mutex::new(String::new())),
        }
    }

    fn paths(&self) -> OtaPaths {
        let config = self.planner.config();
        OtaPaths { state_dir: config.state_dir.clone(), models_dir: config.models_dir() }
    }

    /// Takes the control plane for `what`, or says what holds it.
    fn begin(&self, what: &str) -> Result<Busy, ActionError> {
        if let Some(holder) = crate::ota::lock::current_holder(&self.paths().ota_dir()) {
            return Err(ActionError::Locked(format!("the update lock is held by {holder}")));
        }
        match self.busy.clone().try_lock_owned() {
            Ok(guard) => {
                *self.doing.lock().unwrap_or_else(|e| e.into_inner()) = what.to_string();
                Ok(Busy { _guard: guard })
            }
            Err(_) => {
                let doing = self.doing.lock().unwrap_or_else(|e| e.into_inner()).clone();
                Err(ActionError::Locked(format!("{doing} is in progress")))
            }
        }
    }

    fn event(&self, level: Level, message: String) {
        self.status.event(SOURCE, level, message);
    }

    async fn restart(&self, engine: String) -> Result<Accepted, ActionError> {
        // The lock first: the engines' own lock is held through a whole replace (an OTA
        // activation), and a request must be told 423 at once, not wait that out.
        let busy = self.begin(&format!("a restart of {engine}"))?;
        let Some(group) = self.engines.group(&engine).await else {
            let known = self.engines.names().await.join(", ");
            return Err(ActionError::NotFound(format!("no engine {engine:?} (engines: {known})")));
        };
        self.event(Level::Info, format!("{engine}: restart requested through the API"));
        self.spawn_restart(busy, group);
        Ok(Accepted { message: format!("restarting {engine}") })
    }

    /// Restarts `group`'s engine in the background and reports how long it took to be ready
    /// after the request.
    fn spawn_restart(&self, busy: Busy, group: crate::plan::GroupPlan) {
        let (engines, status) = (self.engines.clone(), self.status.clone());
        tokio::spawn(async move {
            let _busy = busy;
            let begun = Instant::now();
            let name = group.name.clone();
            match engines.restart_until_ready(group).await {
                Ok(()) => status.event(
                    SOURCE,
                    Level::Info,
                    format!(
                        "{name}: restart done, ready {} ms after the request",
                        begun.elapsed().as_millis()
                    ),
                ),
                Err(e) => status.event(SOURCE, Level::Error, format!("{name}: restart: {e}")),
            }
        });
    }

    async fn switch(&self, pin: PinRequest) -> Result<Accepted, ActionError> {
        let detection = self.planner.detection();
        let devices: Vec<&str> = detection.devices.iter().map(|d| d.id.as_str()).collect();
        if pin.device != "default" && !devices.contains(&pin.device.as_str()) {
            return Err(ActionError::NotFound(format!(
                "no device {:?} (devices: {}, or `default`)",
                pin.device,
                devices.join(", ")
            )));
        }
        let inputs = self.planner.inputs(None).map_err(|e| ActionError::Failed(e.to_string()))?;
        if !inputs.profiles.iter().any(|p| p.name == pin.profile) {
            let known: Vec<&str> = inputs.profiles.iter().map(|p| p.name.as_str()).collect();
            return Err(ActionError::Invalid(format!(
                "unknown profile {:?} (profiles: {})",
                pin.profile,
                known.join(", ")
            )));
        }
        if let Some(variant) = &pin.variant {
            if !inputs.manifest.variant.iter().any(|v| &v.name == variant) {
                let known: Vec<&str> = inputs.manifest.variant.iter().map(|v| v.name.as_str()).collect();
                return Err(ActionError::Invalid(format!(
                    "unknown variant {variant:?} (variants: {})",
                    known.join(", ")
                )));
            }
        }
        // `LUCEBOX_PIN__*` outranks the API: a pin set here would hold only until the next start.
        if let Some(env) = crate::config::pins_from_environment().get(&pin.device) {
            let set: Vec<String> = [("PROFILE", &env.profile), ("VARIANT", &env.variant)]
                .iter()
                .filter_map(|(key, value)| {
                    value.as_ref().map(|v| format!("LUCEBOX_PIN__{}__{key}={v}", pin.device.to_uppercase()))
                })
                .collect();
            return Err(ActionError::Conflict(format!(
                "{} in the supervisor's environment pins {}, and it beats pins set through the API; \
                 change it there and restart the supervisor",
                set.join(" and "),
                pin.device
            )));
        }
        let new_pin = Pin { profile: Some(pin.profile.clone()), variant: pin.variant.clone() };
        let mut pins = self.planner.pins();
        pins.insert(pin.device.clone(), new_pin.clone());
        let plan = self.planner.plan(&inputs, pins.clone(), false).await;
        let targets: Vec<&str> =
            if pin.device == "default" { devices.clone() } else { vec![pin.device.as_str()] };
        // A `default` pin must fit every device that gets an engine: one it did not fit would
        // get none at all (the planner honours pins strictly). Devices with their own pin keep
        // it, and devices no engine serves whatever the pin (the CPU beside GPUs) are left out.
        let mut groups = Vec::new();
        for device in targets.iter().filter(|d| pin.device != "default" || !pins.contains_key(**d)) {
            if pin.device == "default" && served_by_none(&plan, device) {
                continue;
            }
            groups.push(eligibility(&plan, device, &pin).map_err(ActionError::Invalid)?);
        }
        if groups.is_empty() {
            return Err(ActionError::Invalid(format!("no device would use the {} pin", pin.device)));
        }
        let busy = self.begin(&format!("a profile switch of {}", pin.device))?;
        // Checked now so a broken pins file answers the request; written once the engines run.
        let path = self.planner.config().state_dir.join(PINS_FILE);
        PinsFile::load(&path).map_err(|e| ActionError::Failed(e.to_string()))?;
        let mut previous = Vec::new();
        for group in &groups {
            previous.push(self.engines.group(&group.name).await);
        }
        let names: Vec<String> = groups
            .iter()
            .map(|g| format!("{} on {}/{}", g.name, g.choice.variant, g.choice.profile))
            .collect();
        self.event(
            Level::Info,
            format!(
                "pinned {} to profile {}{}; restarting {}",
                pin.device,
                pin.profile,
                pin.variant.as_deref().map(|v| format!(" (variant {v})")).unwrap_or_default(),
                names.join(", ")
            ),
        );
        let switch = PinSwitch { device: pin.device.clone(), pin: new_pin, pins, path, groups, previous };
        self.spawn_switch(busy, switch);
        Ok(Accepted {
            message: format!("pinned {} to {}; restarting {}", pin.device, pin.profile, names.join(", ")),
        })
    }

    /// Restarts the switched engines on their new choice. Only once every one is ready is the pin
    /// kept (in memory and in `pins.toml`); if one fails, each goes back to what it ran before
    /// (an engine the switch started is stopped) and the pin is dropped, so the supervisor's next
    /// start does not repeat the failure.
    fn spawn_switch(&self, busy: Busy, switch: PinSwitch) {
        let (engines, planner, status) = (self.engines.clone(), self.planner.clone(), self.status.clone());
        let event = move |level, message: String| status.event(SOURCE, level, message);
        tokio::spawn(async move {
            let _busy = busy;
            let begun = Instant::now();
            let mut failure = None;
            for group in &switch.groups {
                match engines.restart_until_ready(group.clone()).await {
                    Ok(()) => event(
                        Level::Info,
                        format!(
                            "{}: profile switch done, ready {} ms after the request",
                            group.name,
                            begun.elapsed().as_millis()
                        ),
                    ),
                    Err(e) => {
                        failure = Some(format!("{}: {e}", group.name));
                        break;
                    }
                }
            }
            let Some(failure) = failure else {
                planner.set_pins(switch.pins);
                if let Err(e) = PinsFile::record(&switch.path, &switch.device, switch.pin) {
                    event(
                        Level::Error,
                        format!("{}: the pin holds until the supervisor restarts: {e}", switch.device),
                    );
                }
                return;
            };
            event(Level::Error, format!("profile switch of {} failed: {failure}; going back", switch.device));
            let mut back = Vec::new();
            for (group, previous) in switch.groups.iter().zip(switch.previous) {
                match previous {
                    Some(previous) => {
                        let choice = format!("{}/{}", previous.choice.variant, previous.choice.profile);
                        match engines.restart_until_ready(previous).await {
                            Ok(()) => back.push(format!("{} on {choice}", group.name)),
                            Err(e) => {
                                event(Level::Error, format!("{}: going back to {choice}: {e}", group.name))
                            }
                        }
                    }
                    None => {
                        engines.remove(&group.name).await;
                        back.push(format!("{} stopped", group.name));
                    }
                }
            }
            event(
                Level::Warn,
                format!("{}: the pin was not kept; back to {}", switch.device, back.join(", ")),
            );
        });
    }

    fn updater(&self) -> Result<Updater, ActionError> {
        let config = self.planner.config();
        let paths = self.paths();
        let repo =
            config.ota.repository.clone().ok_or_else(|| {
                ActionError::Invalid("no update repository configured (ota.repository)".into())
            })?;
        let root = config.ota.trusted_root.clone().unwrap_or_else(|| paths.ota_dir().join("root.json"));
        let trusted_root = std::fs::read(&root)
            .map_err(|e| ActionError::Failed(format!("trusted root {}: {e}", root.display())))?;
        let source =
            RepoSource::parse(&repo).map_err(|e| ActionError::Invalid(format!("ota.repository: {e}")))?;
        let http = HttpClient::for_config(&config.ota)
            .map_err(|e| ActionError::Failed(format!("ota.ca_file: {e}")))?;
        Ok(Updater { paths, trusted_root, source, http, status: self.status.clone() })
    }

    fn activator(&self) -> PlanActivator {
        PlanActivator { planner: self.planner.clone(), engines: self.engines.clone() }
    }

    async fn apply_update(&self, force: bool) -> Result<Accepted, ActionError> {
        let updater = self.updater()?;
        // The load in the status is sampled once a second: a request that just ended may still
        // show, so wait two samples for idle before refusing.
        if !force && crate::ota::lock::wait_until_idle(&self.status, IDLE_GRACE).await.is_err() {
            let serving: Vec<String> = self.status.read(|s| {
                s.engines
                    .values()
                    .filter(|e| {
                        e.load.as_ref().is_some_and(|l| l.requests_processing > 0 || l.requests_deferred > 0)
                    })
                    .map(|e| e.name.clone())
                    .collect()
            });
            return Err(ActionError::Locked(format!(
                "{} serving requests; retry when idle or apply with {{\"force\": true}}",
                serving.join(", ")
            )));
        }
        self.start_update(updater, force)
    }

    fn start_update(&self, updater: Updater, force: bool) -> Result<Accepted, ActionError> {
        let busy = self.begin("an update")?;
        let (activator, status) = (self.activator(), self.status.clone());
        self.event(Level::Info, "update requested through the API".into());
        tokio::spawn(async move {
            let _busy = busy;
            let begun = Instant::now();
            let options = ApplyOptions { force, idle_wait: OTA_IDLE_WAIT, pause_after: None };
            let ms = || begun.elapsed().as_millis();
            match updater.apply(&activator, options).await {
                Ok(ApplyOutcome::Committed { version, .. }) => status.event(
                    SOURCE,
                    Level::Info,
                    format!("update to v{version} committed {} ms after the request", ms()),
                ),
                Ok(ApplyOutcome::RolledBack { version, reason }) => status.event(
                    SOURCE,
                    Level::Warn,
                    format!("update to v{version} rolled back {} ms after the request: {reason}", ms()),
                ),
                Ok(ApplyOutcome::UpToDate { version }) => {
                    status.event(SOURCE, Level::Info, format!("already up to date (v{version})"))
                }
                Err(e) => status.event(SOURCE, Level::Error, format!("update failed: {e}")),
            }
        });
        Ok(Accepted { message: "applying the offered update; progress in /api/v1/ota and the events".into() })
    }

    async fn roll_back(&self) -> Result<Accepted, ActionError> {
        let paths = self.paths();
        let record = Record::load(&paths.ota_dir()).map_err(|e| ActionError::Failed(e.to_string()))?;
        let Some(previous) = record.previous else {
            return Err(ActionError::Invalid("no previous profile set to roll back to".into()));
        };
        let busy = self.begin("a rollback")?;
        let (activator, status) = (self.activator(), self.status.clone());
        self.event(Level::Info, format!("rollback to v{} requested through the API", previous.version));
        tokio::spawn(async move {
            let _busy = busy;
            let begun = Instant::now();
            match crate::ota::rollback(&paths, &status, &activator).await {
                Ok(set) => status.event(
                    SOURCE,
                    Level::Info,
                    format!("rolled back to v{} in {} ms", set.version, begun.elapsed().as_millis()),
                ),
                Err(e) => status.event(SOURCE, Level::Error, format!("rollback failed: {e}")),
            }
        });
        Ok(Accepted { message: format!("rolling back to v{}", previous.version) })
    }

    fn fan_mode(&self, device: String, mode: FanMode) -> Result<Accepted, ActionError> {
        let driven: Vec<String> = self.status.read(|s| s.thermal.keys().cloned().collect());
        if !driven.contains(&device) {
            let list = if driven.is_empty() { "none".to_string() } else { driven.join(", ") };
            return Err(ActionError::NotFound(format!(
                "no fan control for device {device:?} (devices with fans this supervisor drives: {list})"
            )));
        }
        let (wanted, name) = match mode {
            FanMode::Predictive => (None, "predictive"),
            FanMode::FirmwareAuto => (Some(FanOverride::FirmwareAuto), "firmware-auto"),
            FanMode::FullSpeed => (Some(FanOverride::FullSpeed), "full-speed"),
        };
        self.fans.set(&device, wanted);
        self.status.event(
            "thermal",
            Level::Info,
            format!("{device}: fan mode {name} requested through the API"),
        );
        Ok(Accepted { message: format!("fan mode of {device}: {name}") })
    }
}

/// A profile switch in flight: the pin, where it is saved, and each switched engine's new group
/// beside what it ran before (none for a device the switch gives its first engine).
struct PinSwitch {
    device: String,
    pin: Pin,
    pins: std::collections::BTreeMap<String, Pin>,
    path: std::path::PathBuf,
    groups: Vec<crate::plan::GroupPlan>,
    previous: Vec<Option<crate::plan::GroupPlan>>,
}

/// `device` gets no engine in `plan` and no profile could change that (the CPU beside GPUs).
fn served_by_none(plan: &Plan, device: &str) -> bool {
    plan.unplanned.iter().any(|u| u.device == device && u.candidates.is_empty())
}

/// The group `device` gets in `plan` when it runs what `pin` asks for, or why it does not.
fn eligibility(plan: &Plan, device: &str, pin: &PinRequest) -> Result<crate::plan::GroupPlan, String> {
    let wanted = |variant: &str, profile: &str| {
        profile == pin.profile && pin.variant.as_deref().is_none_or(|v| v == variant)
    };
    if let Some(group) = plan.groups.iter().find(|g| g.devices.iter().any(|d| d == device)) {
        if wanted(&group.choice.variant, &group.choice.profile) {
            return Ok(group.clone());
        }
        return Err(not_eligible(device, pin, &group.candidates));
    }
    let unplanned = plan.unplanned.iter().find(|u| u.device == device);
    match unplanned {
        Some(u) if !u.candidates.is_empty() => Err(not_eligible(device, pin, &u.candidates)),
        Some(u) => Err(format!("device {device} gets no engine: {}", u.reason)),
        None => Err(format!("device {device} is not planned")),
    }
}

fn not_eligible(device: &str, pin: &PinRequest, candidates: &[crate::plan::Candidate]) -> String {
    let reasons: Vec<String> = candidates
        .iter()
        .filter(|c| c.profile == pin.profile && pin.variant.as_deref().is_none_or(|v| v == c.variant))
        .map(|c| format!("{}/{}: {}", c.variant, c.profile, c.reason))
        .collect();
    let why = if reasons.is_empty() { "no variant can run it".to_string() } else { reasons.join("; ") };
    format!("profile {} is not eligible on device {device}: {why}", pin.profile)
}

impl Actions for Control {
    fn restart_engine(&self, engine: String) -> ActionFuture<'_> {
        Box::pin(self.restart(engine))
    }
    fn switch_profile(&self, pin: PinRequest) -> ActionFuture<'_> {
        Box::pin(self.switch(pin))
    }
    fn ota_apply(&self, force: bool) -> ActionFuture<'_> {
        Box::pin(self.apply_update(force))
    }
    fn ota_rollback(&self) -> ActionFuture<'_> {
        Box::pin(self.roll_back())
    }
    fn set_fan_mode(&self, device: String, mode: FanMode) -> ActionFuture<'_> {
        let result = self.fan_mode(device, mode);
        Box::pin(async move { result })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::hardware::Detection;
    use crate::plan::{Candidate, Choice, GroupPlan, Launch, Plan};
    use crate::status::{EngineState, EngineStatus, LoadSnapshot, ThermalStatus};
    use tokio_util::sync::CancellationToken;

    fn group(name: &str, profile: &str) -> GroupPlan {
        GroupPlan {
            name: name.into(),
            devices: vec!["cpu".into()],
            choice: Choice {
                variant: "cpu".into(),
                profile: profile.into(),
                launch: Launch { program: "/bin/true".into(), port: 1, ..Default::default() },
            },
            candidates: vec![
                Candidate {
                    variant: "cpu".into(),
                    profile: profile.into(),
                    accepted: true,
                    reason: "fits".into(),
                },
                Candidate {
                    variant: "cpu".into(),
                    profile: "big".into(),
                    accepted: false,
                    reason: "needs 900000 MiB, device has 16000".into(),
                },
            ],
            ..Default::default()
        }
    }

    /// A control over engines whose supervision loops only wait to be cancelled.
    fn control(dir: &std::path::Path) -> (Control, StatusModel, Arc<EngineSet>) {
        std::fs::write(dir.join("root.json"), b"{}").unwrap();
        let mut config = Config { state_dir: dir.join("state"), ..Config::default() };
        config.ota.repository = Some(dir.display().to_string());
        config.ota.trusted_root = Some(dir.join("root.json"));
        let status = StatusModel::new();
        let spawn: crate::runtime::SpawnSupervisor =
            Arc::new(|_group: GroupPlan, cancel: CancellationToken| {
                tokio::spawn(async move {
                    cancel.cancelled().await;
                    Ok(())
                })
            });
        let engines = Arc::new(EngineSet::new(spawn, status.clone(), CancellationToken::new()));
        let planner = Arc::new(Planner::new(config, Detection::empty(), false, status.clone()));
        let control = Control::new(planner, engines.clone(), FanOverrides::default(), status.clone());
        (control, status, engines)
    }

    fn serving(name: &str) -> EngineStatus {
        EngineStatus {
            state: EngineState::Ready,
            load: Some(LoadSnapshot { requests_processing: 1, ..LoadSnapshot::default() }),
            ..EngineStatus::new(name, "process", 0)
        }
    }

    #[tokio::test]
    async fn an_update_is_locked_while_an_engine_serves_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let (control, status, _engines) = control(dir.path());
        status.update(|s| {
            s.engines.insert("engine-cpu".into(), serving("engine-cpu"));
        });
        match control.apply_update(false).await {
            Err(ActionError::Locked(why)) => {
                assert!(why.contains("engine-cpu") && why.contains("force"), "{why}")
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        control.apply_update(true).await.expect("forced update accepted");
    }

    #[tokio::test]
    async fn one_action_at_a_time_and_unknown_names_are_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let (control, _status, engines) = control(dir.path());
        let plan = Plan { groups: vec![group("engine-cpu", "tiny")], ..Plan::default() };
        engines.replace(&plan).await.unwrap();
        match control.restart("engine-gpu".into()).await {
            Err(ActionError::NotFound(why)) => {
                assert!(why.contains("engine-cpu"), "lists the engines: {why}")
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        let busy = control.begin("an update").unwrap();
        match control.restart("engine-cpu".into()).await {
            Err(ActionError::Locked(why)) => assert_eq!(why, "an update is in progress"),
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(busy);
        control.restart("engine-cpu".into()).await.expect("restart accepted once free");
        engines.stop_all().await.unwrap();
        // An action that reaches the engines after the supervisor stopped them starts nothing.
        match engines.restart(group("engine-cpu", "tiny")).await {
            Err(crate::runtime::RuntimeError::Task { message, .. }) => assert!(message.contains("stopping")),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(engines.names().await.is_empty());
    }

    #[tokio::test]
    async fn fan_modes_reach_the_overrides_of_driven_devices_only() {
        let dir = tempfile::tempdir().unwrap();
        let (control, status, _engines) = control(dir.path());
        status.update(|s| {
            s.thermal.insert("0000:03:00.0".into(), ThermalStatus::default());
        });
        assert!(matches!(
            control.fan_mode("0000:09:00.0".into(), FanMode::FullSpeed),
            Err(ActionError::NotFound(_))
        ));
        control.fan_mode("0000:03:00.0".into(), FanMode::FullSpeed).unwrap();
        assert_eq!(control.fans.get("0000:03:00.0"), Some(FanOverride::FullSpeed));
        control.fan_mode("0000:03:00.0".into(), FanMode::FirmwareAuto).unwrap();
        assert_eq!(control.fans.get("0000:03:00.0"), Some(FanOverride::FirmwareAuto));
        control.fan_mode("0000:03:00.0".into(), FanMode::Predictive).unwrap();
        assert_eq!(control.fans.get("0000:03:00.0"), None);
    }

    #[test]
    fn ineligible_pins_say_why() {
        let plan = Plan { groups: vec![group("engine-cpu", "tiny")], ..Plan::default() };
        let pin = |profile: &str, variant: Option<&str>| PinRequest {
            device: "cpu".into(),
            profile: profile.into(),
            variant: variant.map(Into::into),
        };
        assert_eq!(eligibility(&plan, "cpu", &pin("tiny", None)).unwrap().name, "engine-cpu");
        let why = eligibility(&plan, "cpu", &pin("big", None)).unwrap_err();
        assert!(why.contains("not eligible on device cpu") && why.contains("900000 MiB"), "{why}");
        let why = eligibility(&plan, "cpu", &pin("tiny", Some("vulkan"))).unwrap_err();
        assert!(why.contains("no variant can run it"), "{why}");
        assert!(eligibility(&plan, "0000:03:00.0", &pin("tiny", None)).unwrap_err().contains("not planned"));
    }
}
