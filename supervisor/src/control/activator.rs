//! The OTA health gate inside `lucebox run`: plan from the new set with the supervisor's own
//! planner, restart the engines on it with the supervisor's runtime, and resolve once every
//! engine is ready within its startup allowance (or fail, naming the engine and why).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use super::engines::EngineSet;
use super::planner::Planner;
use crate::ota::{ActivationError, ActivationFuture, Activator};
use crate::plan::Plan;

pub struct PlanActivator {
    pub planner: Arc<Planner>,
    pub engines: Arc<EngineSet>,
}

impl PlanActivator {
    /// `keep_devices`: a set the box moves to must serve every device the running engines serve
    /// (one whose GPU profile cannot run would otherwise commit with the CPU engine alone).
    async fn run(&self, set_dir: Option<&Path>, keep_devices: bool) -> Result<(), ActivationError> {
        let inputs = self.planner.inputs(set_dir).map_err(|e| ActivationError::Plan(e.to_string()))?;
        let plan = self.planner.plan(&inputs, self.planner.pins(), true).await;
        if keep_devices {
            let lost = lost_devices(&self.engines.served_devices().await, &plan);
            if !lost.is_empty() {
                return Err(ActivationError::Plan(format!("the set gives no engine to {}", lost.join("; "))));
            }
        }
        self.planner.publish(&plan);
        if plan.groups.is_empty() {
            let why: Vec<String> =
                plan.unplanned.iter().map(|u| format!("{}: {}", u.device, u.reason)).collect();
            return Err(ActivationError::Plan(format!("no engine can run ({})", why.join("; "))));
        }
        let started = self
            .engines
            .replace(&plan)
            .await
            .map_err(|e| ActivationError::Start { engine: "plan".into(), detail: e.to_string() })?;
        self.engines.wait_ready(&started).await
    }
}

/// The devices in `served` that `plan` runs no engine on, each with the plan's reason.
fn lost_devices(served: &BTreeSet<String>, plan: &Plan) -> Vec<String> {
    served
        .iter()
        .filter(|device| !plan.groups.iter().any(|g| g.devices.contains(device)))
        .map(|device| match plan.unplanned.iter().find(|u| &u.device == device) {
            Some(u) => format!("{device} ({})", u.reason),
            None => device.clone(),
        })
        .collect()
}

impl Activator for PlanActivator {
    fn activate<'a>(&'a self, set_dir: &'a Path) -> ActivationFuture<'a> {
        Box::pin(self.run(Some(set_dir), false))
    }

    fn activate_candidate<'a>(&'a self, set_dir: &'a Path) -> ActivationFuture<'a> {
        Box::pin(self.run(Some(set_dir), true))
    }

    fn activate_builtin(&self) -> ActivationFuture<'_> {
        Box::pin(self.run(None, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{GroupPlan, Unplanned};

    #[test]
    fn a_device_served_now_and_not_by_the_new_plan_is_lost() {
        let group = |name: &str, devices: &[&str]| GroupPlan {
            name: name.into(),
            devices: devices.iter().map(|d| d.to_string()).collect(),
            ..GroupPlan::default()
        };
        let served: BTreeSet<String> = ["0000:01:00.0", "0000:02:00.0"].map(String::from).into();
        let plan = Plan {
            groups: vec![group("engine-a", &["0000:01:00.0"]), group("engine-cpu", &["cpu"])],
            unplanned: vec![Unplanned {
                device: "0000:02:00.0".into(),
                reason: "model qwen.gguf is missing".into(),
                ..Unplanned::default()
            }],
        };
        assert_eq!(lost_devices(&served, &plan), ["0000:02:00.0 (model qwen.gguf is missing)"]);
        let both =
            Plan { groups: vec![group("engine-ab", &["0000:01:00.0", "0000:02:00.0"])], ..Plan::default() };
        assert!(lost_devices(&served, &both).is_empty(), "one group may serve both");
    }
}
