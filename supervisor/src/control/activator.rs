//! The OTA health gate inside `lucebox run`: plan from the new set with the supervisor's own
//! planner, restart the engines on it with the supervisor's runtime, and resolve once every
//! engine is ready within its startup allowance (or fail, naming the engine and why).

use std::path::Path;
use std::sync::Arc;

use super::engines::EngineSet;
use super::planner::Planner;
use crate::ota::{ActivationError, ActivationFuture, Activator};

pub struct PlanActivator {
    pub planner: Arc<Planner>,
    pub engines: Arc<EngineSet>,
}

impl PlanActivator {
    async fn run(&self, set_dir: Option<&Path>) -> Result<(), ActivationError> {
        let inputs = self.planner.inputs(set_dir).map_err(|e| ActivationError::Plan(e.to_string()))?;
        let plan = self.planner.plan(&inputs, self.planner.pins(), true).await;
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

impl Activator for PlanActivator {
    fn activate<'a>(&'a self, set_dir: &'a Path) -> ActivationFuture<'a> {
        Box::pin(self.run(Some(set_dir)))
    }

    fn activate_builtin(&self) -> ActivationFuture<'_> {
        Box::pin(self.run(None))
    }
}
