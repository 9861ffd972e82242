//! The one face both runtimes show the supervisor.

use std::future::Future;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Exit, RuntimeError};
use crate::plan::Choice;

/// Starts engines, and finds ones already running for the same plan.
pub trait EngineRuntime: Send + Sync + 'static {
    type Instance: EngineInstance;

    /// `process` or `docker`, for status and logs.
    fn kind(&self) -> &'static str;

    /// Resolves once the runtime can start engines (dockerd answers). A start attempted while
    /// it cannot would fail for reasons that say nothing about the engine.
    fn available(&self) -> impl Future<Output = ()> + Send;

    /// An engine named `name` already running exactly `choice` (left by a previous supervisor),
    /// taken over instead of starting a duplicate. Stale engines of that name are removed.
    fn adopt(
        &self,
        name: &str,
        choice: &Choice,
    ) -> impl Future<Output = Result<Option<Self::Instance>, RuntimeError>> + Send;

    /// Starts `choice` as engine `name`, first removing anything left of an earlier one.
    fn start(
        &self,
        name: &str,
        choice: &Choice,
    ) -> impl Future<Output = Result<Self::Instance, RuntimeError>> + Send;

    /// Removes what is left of engine `name`'s ended runs (an exited container kept to start
    /// again in place). The supervisor calls it when it stops between runs: nothing stays behind.
    fn clean_up(&self, name: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
}

/// One running engine.
pub trait EngineInstance: Send + 'static {
    /// Process id or container id.
    fn id(&self) -> &str;

    /// Resolves when the engine has ended. Cancel-safe: use it in `select!`, call it again.
    fn exited(&mut self) -> impl Future<Output = Exit> + Send;

    /// How the engine ended as the runtime reports it, waiting up to `within` once `exited`
    /// resolved with [`Exit::Ended`]; after that wait, what is known.
    fn final_exit(&mut self, within: Duration) -> impl Future<Output = Exit> + Send {
        let _ = within; // Runtimes that never report `Ended` know the exit at once.
        self.exited()
    }

    /// Model load progress in percent parsed from the engine's output (`None`: not reported).
    fn load_progress(&self) -> tokio::sync::watch::Receiver<Option<u8>>;

    /// Asks the engine to stop (SIGTERM), kills it after `grace`, and cleans up after it.
    fn stop(self, grace: Duration) -> impl Future<Output = Result<Exit, RuntimeError>> + Send;
}

/// Identifies a choice (and the image it runs in): adoption only takes an engine whose label
/// carries the same hash, so a changed plan never keeps an old engine.
pub fn plan_hash(choice: &Choice, image: &str) -> String {
    let mut hasher = Sha256::new();
    // Choice serialises deterministically (env is a BTreeMap).
    hasher.update(serde_json::to_vec(choice).unwrap_or_default());
    hasher.update([0]);
    hasher.update(image.as_bytes());
    hex::encode(&hasher.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_hash_changes_with_the_launch_and_the_image() {
        let mut choice = Choice { variant: "cpu".into(), profile: "tiny".into(), ..Default::default() };
        let base = plan_hash(&choice, "img:a");
        assert_eq!(base, plan_hash(&choice.clone(), "img:a"));
        assert_ne!(base, plan_hash(&choice, "img:b"));
        choice.launch.args.push("-t".into());
        assert_ne!(base, plan_hash(&choice, "img:a"));
        assert_eq!(base.len(), 16);
    }
}
