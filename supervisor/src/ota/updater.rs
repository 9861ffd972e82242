//! One update, step by step: check → download → verify → unpack (+ model files) → swap →
//! activation → commit, or an automatic rollback to the committed set. Every step that changes
//! what the box boots is recorded first in the state file, so [`recover`] can undo an
//! interrupted one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::blocking::off_the_runtime;
use crate::status::{Level, OtaState, StatusModel};
use crate::thermal::priors::{CardPriors, PRIORS_FILE};

use super::activate::{ActivationError, Activator};
use super::archive;
use super::http::HttpClient;
use super::lock::{self, LockError, UpdateLock};
use super::manifest::{Manifest, MANIFEST_FILE};
use super::models::{ModelError, ModelStore};
use super::repo::{self, Offer, RepoError, RepoSource};
use super::state::{Record, SetRef, StateError};
use super::store::{SetStore, StoreError, CURRENT, PREVIOUS};
use super::transport::OtaTransport;

const SOURCE: &str = "ota";
/// Largest profile set accepted (profiles and pins are text; model weights travel separately),
/// so a signed-but-absurd set cannot exhaust memory or disk while it is verified and unpacked.
pub const MAX_SET_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum OtaError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Manifest(#[from] super::manifest::ManifestError),
    #[error("profile set: {0}")]
    Archive(#[from] archive::ArchiveError),
    #[error("offered set v{offered} is older than the committed v{committed}")]
    NotNewer { offered: u64, committed: u64 },
    #[error("downloaded set: {0}")]
    Mismatch(String),
    /// Checked before staging: the health gate cannot see a bad priors file.
    #[error("downloaded set v{version}: {source}")]
    Priors { version: u64, source: crate::thermal::ThermalError },
    #[error("offered set is {length} bytes, more than the {MAX_SET_BYTES} a profile set may have")]
    TooLarge { length: u64 },
    #[error("no previous set to roll back to")]
    NothingToRollBack,
    #[error("restoring the committed set also failed ({restore}) after: {reason}")]
    RestoreFailed { reason: String, restore: ActivationError },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// A step after which `--pause-after` stops the updater (operators and crash tests use it to
/// freeze an install at a known point).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Download,
    Verify,
    Unpack,
    Swap,
    Activation,
}

impl std::str::FromStr for Step {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "download" => Ok(Step::Download),
            "verify" => Ok(Step::Verify),
            "unpack" => Ok(Step::Unpack),
            "swap" => Ok(Step::Swap),
            "activation" => Ok(Step::Activation),
            other => Err(format!("unknown step {other:?} (download, verify, unpack, swap, activation)")),
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Step::Download => "download",
            Step::Verify => "verify",
            Step::Unpack => "unpack",
            Step::Swap => "swap",
            Step::Activation => "activation",
        };
        f.write_str(name)
    }
}

/// Where OTA keeps its files.
#[derive(Debug, Clone)]
pub struct OtaPaths {
    pub state_dir: PathBuf,
    pub models_dir: PathBuf,
}

impl OtaPaths {
    pub fn ota_dir(&self) -> PathBuf {
        self.state_dir.join("ota")
    }
    pub fn datastore(&self) -> PathBuf {
        self.ota_dir().join("datastore")
    }
    fn staged_archive(&self) -> PathBuf {
        self.ota_dir().join("staging").join(repo::SET_TARGET)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum ApplyOutcome {
    UpToDate { version: u64 },
    Committed { version: u64, sha256: String },
    RolledBack { version: u64, reason: String },
}

#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions {
    /// Apply even while engines serve requests.
    pub force: bool,
    /// How long to wait for the engines to go idle before giving up.
    pub idle_wait: Duration,
    pub pause_after: Option<Step>,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self { force: false, idle_wait: Duration::from_secs(600), pause_after: None }
    }
}

pub struct Updater {
    pub paths: OtaPaths,
    pub trusted_root: Vec<u8>,
    pub source: RepoSource,
    pub http: HttpClient,
    pub status: StatusModel,
}

impl Updater {
    /// Verifies the repository and says what it offers; records `available` when it is newer.
    pub async fn check(&self) -> Result<Offer, OtaError> {
        let _lock = UpdateLock::acquire(&self.paths.ota_dir(), "ota check", Some(&self.status))?;
        let mut record = recover_locked(&self.paths, &self.status)?;
        let offer = self.fetch_offer().await?;
        if offer.version > committed_version(&record) && !matches!(record.state, OtaState::Staged { .. }) {
            record.transition(OtaState::Available { version: offer.version })?;
            record.save(&self.paths.ota_dir())?;
        }
        record.publish(&self.status);
        Ok(offer)
    }

    pub async fn apply(
        &self,
        activator: &dyn Activator,
        options: ApplyOptions,
    ) -> Result<ApplyOutcome, OtaError> {
        let _lock = UpdateLock::acquire(&self.paths.ota_dir(), "ota apply", Some(&self.status))?;
        let mut record = recover_locked(&self.paths, &self.status)?;
        if !options.force {
            lock::wait_until_idle(&self.status, options.idle_wait).await?;
        }
        let offer = self.fetch_offer().await?;
        let committed = committed_version(&record);
        if offer.version == committed {
            return Ok(ApplyOutcome::UpToDate { version: committed });
        }
        if offer.version < committed {
            return Err(OtaError::NotNewer { offered: offer.version, committed });
        }
        if offer.length > MAX_SET_BYTES {
            return Err(OtaError::TooLarge { length: offer.length });
        }
        self.status.update(|s| s.ota.state = OtaState::Available { version: offer.version });
        self.status.event(
            SOURCE,
            Level::Info,
            format!("set v{} available ({})", offer.version, offer.sha256),
        );

        let repo = self.load_repo().await?;
        let staged = self.paths.staged_archive();
        repo::download_set(&repo, &staged).await?;
        pause(options.pause_after, Step::Download).await;

        let verified = {
            let (archive, offer) = (staged.clone(), offer.clone());
            off_the_runtime(move || verify_staged(&archive, &offer))
                .await
                .map_err(|source| OtaError::Io { path: staged.clone(), source })
                .and_then(|verified| verified)
        };
        let (bytes, manifest) = match verified {
            Ok(v) => v,
            Err(e) => {
                let _ = std::fs::remove_file(&staged);
                return Err(e);
            }
        };
        pause(options.pause_after, Step::Verify).await;

        let store = SetStore::new(&self.paths.state_dir);
        {
            let (store, sha256) = (store.clone(), offer.sha256.clone());
            let set_dir = store.set_dir(&sha256);
            off_the_runtime(move || store.install(&bytes, &sha256))
                .await
                .map_err(|source| OtaError::Io { path: set_dir, source })??;
        }
        self.pull_models(&manifest).await?;
        let candidate = SetRef { sha256: offer.sha256.clone(), version: offer.version };
        record.candidate = Some(candidate.clone());
        record.transition(OtaState::Staged { version: offer.version })?;
        record.save(&self.paths.ota_dir())?;
        record.publish(&self.status);
        let _ = std::fs::remove_file(&staged);
        pause(options.pause_after, Step::Unpack).await;

        // From here the box boots the new set only once it is committed: the state file says
        // "activating" before the link moves, so recovery knows to move it back.
        record.transition(OtaState::Activating { version: offer.version })?;
        record.save(&self.paths.ota_dir())?;
        record.publish(&self.status);
        if let Some(old) = &record.committed {
            store.point(PREVIOUS, &old.sha256)?;
        }
        store.point(CURRENT, &candidate.sha256)?;
        pause(options.pause_after, Step::Swap).await;

        match activator.activate_candidate(&store.set_dir(&candidate.sha256)).await {
            Ok(()) => {
                pause(options.pause_after, Step::Activation).await;
                record.previous = record.committed.take();
                record.committed = Some(candidate.clone());
                record.candidate = None;
                record.transition(OtaState::Committed { version: candidate.version })?;
                record.save(&self.paths.ota_dir())?;
                record.publish(&self.status);
                self.status.event(SOURCE, Level::Info, format!("set v{} committed", candidate.version));
                let keep: Vec<&str> = [&record.committed, &record.previous]
                    .into_iter()
                    .flatten()
                    .map(|s| s.sha256.as_str())
                    .collect();
                store.prune(&keep)?;
                Ok(ApplyOutcome::Committed { version: candidate.version, sha256: candidate.sha256 })
            }
            Err(e) => {
                let reason = e.to_string();
                self.status.event(
                    SOURCE,
                    Level::Error,
                    format!("set v{} unhealthy, rolling back: {reason}", candidate.version),
                );
                restore_committed(&store, &mut record, &self.paths, &self.status, reason.clone())?;
                let restored = match record.committed.clone() {
                    Some(old) => activator.activate(&store.set_dir(&old.sha256)).await,
                    None => activator.activate_builtin().await,
                };
                if let Err(restore) = restored {
                    return Err(OtaError::RestoreFailed { reason, restore });
                }
                Ok(ApplyOutcome::RolledBack { version: candidate.version, reason })
            }
        }
    }

    async fn load_repo(&self) -> Result<tough::Repository, OtaError> {
        let transport = OtaTransport::new(self.http.clone());
        Ok(repo::load(&self.trusted_root, &self.source, &self.paths.datastore(), transport).await?)
    }

    async fn fetch_offer(&self) -> Result<Offer, OtaError> {
        let repo = self.load_repo().await?;
        Ok(repo::offer(&repo)?)
    }

    async fn pull_models(&self, manifest: &Manifest) -> Result<(), OtaError> {
        let models = ModelStore::new(&self.paths.models_dir);
        for model in &manifest.models {
            let status = self.status.clone();
            let report = move |p: super::models::Progress| {
                let pct = p.percent();
                status.update(|s| s.ota.progress_pct = Some(pct));
            };
            models.pull(&self.http, model, &report).await?;
        }
        self.status.update(|s| s.ota.progress_pct = None);
        Ok(())
    }
}

/// `ota rollback`: makes the previous set the committed one, health-gated like an update.
pub async fn rollback(
    paths: &OtaPaths,
    status: &StatusModel,
    activator: &dyn Activator,
) -> Result<SetRef, OtaError> {
    let _lock = UpdateLock::acquire(&paths.ota_dir(), "ota rollback", Some(status))?;
    rollback_locked(paths, status, activator).await
}

/// Rolls back by hand, with the update lock already held by the caller.
async fn rollback_locked(
    paths: &OtaPaths,
    status: &StatusModel,
    activator: &dyn Activator,
) -> Result<SetRef, OtaError> {
    let mut record = recover_locked(paths, status)?;
    let (Some(previous), Some(committed)) = (record.previous.clone(), record.committed.clone()) else {
        return Err(OtaError::NothingToRollBack);
    };
    let store = SetStore::new(&paths.state_dir);
    record.candidate = Some(previous.clone());
    record.transition(OtaState::Activating { version: previous.version })?;
    record.save(&paths.ota_dir())?;
    store.point(CURRENT, &previous.sha256)?;
    match activator.activate_candidate(&store.set_dir(&previous.sha256)).await {
        Ok(()) => {
            record.committed = Some(previous.clone());
            record.previous = Some(committed.clone());
            record.candidate = None;
            store.point(PREVIOUS, &committed.sha256)?;
            record.transition(OtaState::RolledBack {
                version: committed.version,
                reason: format!("rolled back by hand to v{}", previous.version),
            })?;
            record.save(&paths.ota_dir())?;
            record.publish(status);
            status.event(
                SOURCE,
                Level::Warn,
                format!("rolled back by hand from v{} to v{}", committed.version, previous.version),
            );
            Ok(previous)
        }
        Err(e) => {
            let reason = format!("previous set v{} unhealthy: {e}", previous.version);
            restore_committed(&store, &mut record, paths, status, reason.clone())?;
            if let Err(restore) = activator.activate(&store.set_dir(&committed.sha256)).await {
                return Err(OtaError::RestoreFailed { reason, restore });
            }
            Err(OtaError::Mismatch(reason))
        }
    }
}

/// Boot-time repair: if an update was interrupted after the swap, points `current` back at the
/// committed set and records the rollback. Skipped while another live process holds the lock.
pub fn recover(paths: &OtaPaths, status: &StatusModel) -> Result<Record, OtaError> {
    // A settled box needs no repair, and taking the lock only to find that out would refuse an
    // update that starts at the same moment (`ota status` polled beside an `ota apply`).
    let record = Record::load(&paths.ota_dir())?;
    if !needs_repair(&record, &SetStore::new(&paths.state_dir))? {
        return Ok(publish_unlocked(record, paths, status));
    }
    match UpdateLock::acquire(&paths.ota_dir(), "ota recover", None) {
        Ok(_lock) => recover_locked(paths, status),
        Err(LockError::Locked { .. }) => Ok(publish_unlocked(Record::load(&paths.ota_dir())?, paths, status)),
        Err(e) => Err(e.into()),
    }
}

/// Shows `record`, and whoever holds the update lock, without taking it.
fn publish_unlocked(record: Record, paths: &OtaPaths, status: &StatusModel) -> Record {
    record.publish(status);
    status.update(|s| s.ota.lock = lock::current_holder(&paths.ota_dir()).map(|h| h.to_string()));
    record
}

/// An update was interrupted after its swap: the state says `activating`, or `current` names
/// another set than the committed one.
fn needs_repair(record: &Record, store: &SetStore) -> Result<bool, OtaError> {
    let committed = record.committed.as_ref().map(|c| c.sha256.as_str());
    let interrupted = matches!(record.state, OtaState::Activating { .. });
    Ok(interrupted || store.linked(CURRENT)?.as_deref() != committed)
}

/// How often [`recover_when_settled`] looks at the lock again.
const SETTLE_POLL: Duration = Duration::from_millis(500);

/// [`recover`] for the supervisor's start. While another process activates a set (a CLI
/// `ota apply` in its health gate), `current` names a candidate that it may yet roll back, so
/// planning from it could run engines on a set the box does not keep. This waits, up to
/// `patience`, for that update to settle (committed or rolled back), then recovers as usual. An
/// update still downloading or staging leaves `current` alone and is not waited for. Returns
/// `None` when `cancel` fires first.
pub async fn recover_when_settled(
    paths: &OtaPaths,
    status: &StatusModel,
    patience: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> Option<Result<Record, OtaError>> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut waiting = false;
    loop {
        let record = match Record::load(&paths.ota_dir()) {
            Ok(record) => record,
            Err(e) => return Some(Err(e.into())),
        };
        let activating = match record.state {
            OtaState::Activating { version } => Some(version),
            _ => None,
        };
        // `activating` with a live holder is an update in its gate; without one, a dead one to undo.
        let holder = activating.and_then(|_| lock::current_holder(&paths.ota_dir()));
        let (Some(version), Some(holder)) = (activating, holder) else { return Some(recover(paths, status)) };
        if tokio::time::Instant::now() >= deadline {
            status.event(
                SOURCE,
                Level::Warn,
                format!("{holder} is still activating v{version} after {patience:?}; planning from it"),
            );
            return Some(recover(paths, status));
        }
        if !waiting {
            waiting = true;
            status.event(
                SOURCE,
                Level::Info,
                format!(
                    "{holder} is activating v{version}: planning waits until it is committed or rolled back"
                ),
            );
        }
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(SETTLE_POLL) => {}
        }
    }
}

fn recover_locked(paths: &OtaPaths, status: &StatusModel) -> Result<Record, OtaError> {
    let mut record = Record::load(&paths.ota_dir())?;
    let store = SetStore::new(&paths.state_dir);
    if needs_repair(&record, &store)? {
        let interrupted = matches!(record.state, OtaState::Activating { .. });
        let version = record.candidate.as_ref().map(|c| c.version).unwrap_or(committed_version(&record));
        if !interrupted {
            record.state = OtaState::Activating { version };
        }
        let reason = "update interrupted before commit; restored the committed set".to_string();
        restore_committed(&store, &mut record, paths, status, reason)?;
    }
    record.publish(status);
    Ok(record)
}

/// Points the links back at the committed set and records a rollback with `reason`.
fn restore_committed(
    store: &SetStore,
    record: &mut Record,
    paths: &OtaPaths,
    status: &StatusModel,
    reason: String,
) -> Result<(), OtaError> {
    match &record.committed {
        Some(c) => store.point(CURRENT, &c.sha256)?,
        None => store.unlink(CURRENT)?,
    }
    match &record.previous {
        Some(p) => store.point(PREVIOUS, &p.sha256)?,
        None => store.unlink(PREVIOUS)?,
    }
    let version = record.candidate.take().map(|c| c.version).unwrap_or(committed_version(record));
    record.transition(OtaState::RolledBack { version, reason: reason.clone() })?;
    record.save(&paths.ota_dir())?;
    record.publish(status);
    status.event(SOURCE, Level::Warn, format!("rolled back v{version}: {reason}"));
    Ok(())
}

/// Model hashes the sets a box keeps use: committed, previous, a staged candidate, and whatever
/// the links name. `models gc` deletes everything else.
pub fn referenced_models(paths: &OtaPaths) -> Result<BTreeSet<String>, OtaError> {
    let record = Record::load(&paths.ota_dir())?;
    let store = SetStore::new(&paths.state_dir);
    let mut sets: BTreeSet<String> = [&record.committed, &record.previous, &record.candidate]
        .into_iter()
        .flatten()
        .map(|s| s.sha256.clone())
        .collect();
    sets.extend(store.linked(CURRENT)?);
    sets.extend(store.linked(PREVIOUS)?);
    let mut models = BTreeSet::new();
    for sha in sets {
        let file = store.set_dir(&sha).join(MANIFEST_FILE);
        if file.is_file() {
            models.extend(Manifest::load(&file)?.models.into_iter().map(|m| m.sha256));
        }
    }
    Ok(models)
}

fn committed_version(record: &Record) -> u64 {
    record.committed.as_ref().map(|c| c.version).unwrap_or(0)
}

/// Re-hashes the staged archive against the signed metadata and validates its manifest and card
/// priors.
fn verify_staged(path: &Path, offer: &Offer) -> Result<(Vec<u8>, Manifest), OtaError> {
    use sha2::Digest;
    let bytes = std::fs::read(path).map_err(|source| OtaError::Io { path: path.into(), source })?;
    let sha = hex::encode(sha2::Sha256::digest(&bytes));
    if sha != offer.sha256 || bytes.len() as u64 != offer.length {
        return Err(OtaError::Mismatch(format!(
            "staged archive hash {sha} is not the signed {}",
            offer.sha256
        )));
    }
    let entries = archive::entries(&bytes)?;
    let manifest_entry = entries
        .iter()
        .find(|e| e.path == Path::new(MANIFEST_FILE))
        .ok_or_else(|| OtaError::Mismatch(format!("no {MANIFEST_FILE} in the set")))?;
    let text = std::str::from_utf8(manifest_entry.data)
        .map_err(|_| OtaError::Mismatch(format!("{MANIFEST_FILE} is not UTF-8")))?;
    let manifest = Manifest::parse(text, MANIFEST_FILE)?;
    if manifest.version != offer.version {
        return Err(OtaError::Mismatch(format!(
            "{MANIFEST_FILE} says v{} but the signed target says v{}",
            manifest.version, offer.version
        )));
    }
    if let Some(priors) = entries.iter().find(|e| e.path == Path::new(PRIORS_FILE)) {
        CardPriors::parse(priors.data, Path::new(PRIORS_FILE))
            .map_err(|source| OtaError::Priors { version: offer.version, source })?;
    }
    Ok((bytes, manifest))
}

/// Stops here forever when `pause_after` names this step (the process is then killed or
/// interrupted by the operator).
async fn pause(pause_after: Option<Step>, step: Step) {
    if pause_after == Some(step) {
        use std::io::Write;
        println!("ota: paused after {step}");
        let _ = std::io::stdout().flush();
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn setup() -> (tempfile::TempDir, OtaPaths, SetStore) {
        let dir = tempfile::tempdir().unwrap();
        let paths = OtaPaths { state_dir: dir.path().to_path_buf(), models_dir: dir.path().join("models") };
        let store = SetStore::new(dir.path());
        for sha in [A, B] {
            store
                .install(
                    &archive::build(&[("manifest.toml".into(), b"version = 1\n".to_vec())]).unwrap(),
                    sha,
                )
                .unwrap();
        }
        (dir, paths, store)
    }

    #[test]
    fn an_interrupted_first_install_leaves_no_active_set() {
        let (_dir, paths, store) = setup();
        store.point(CURRENT, A).unwrap();
        let record = Record {
            state: OtaState::Activating { version: 1 },
            committed: None,
            previous: None,
            candidate: Some(SetRef { sha256: A.into(), version: 1 }),
        };
        record.save(&paths.ota_dir()).unwrap();
        let status = StatusModel::new();
        let recovered = recover(&paths, &status).unwrap();
        assert_eq!(store.linked(CURRENT).unwrap(), None);
        assert!(matches!(recovered.state, OtaState::RolledBack { version: 1, .. }));
        assert_eq!(recovered.candidate, None);
        assert_eq!(Record::load(&paths.ota_dir()).unwrap(), recovered, "recovery is persisted");
        assert_eq!(status.snapshot().ota.state, recovered.state);
    }

    #[test]
    fn a_link_that_disagrees_with_the_committed_set_is_restored() {
        let (_dir, paths, store) = setup();
        store.point(CURRENT, B).unwrap();
        let record = Record {
            state: OtaState::Committed { version: 1 },
            committed: Some(SetRef { sha256: A.into(), version: 1 }),
            ..Record::default()
        };
        record.save(&paths.ota_dir()).unwrap();
        recover(&paths, &StatusModel::new()).unwrap();
        assert_eq!(store.linked(CURRENT).unwrap().as_deref(), Some(A));
        // A consistent box is left exactly as it is.
        let before = Record::load(&paths.ota_dir()).unwrap();
        recover(&paths, &StatusModel::new()).unwrap();
        assert_eq!(Record::load(&paths.ota_dir()).unwrap(), before);
    }

    /// A staged archive holding `files` beside a v2 manifest, and the offer that signs it.
    fn staged(dir: &Path, files: &[(&str, &[u8])]) -> (PathBuf, Offer) {
        use sha2::Digest;
        let mut entries = vec![(MANIFEST_FILE.to_string(), b"version = 2\n".to_vec())];
        entries.extend(files.iter().map(|(path, data)| (path.to_string(), data.to_vec())));
        let bytes = archive::build(&entries).unwrap();
        let path = dir.join("staged.tar");
        std::fs::write(&path, &bytes).unwrap();
        let offer = Offer {
            version: 2,
            sha256: hex::encode(sha2::Sha256::digest(&bytes)),
            length: bytes.len() as u64,
        };
        (path, offer)
    }

    #[test]
    fn staged_card_priors_are_checked_as_the_box_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let card = "[[card]]\narch = \"gfx1201\"\nsink_capacity_j_per_k = 650.0\n\
            sink_to_air_stopped_k_per_w = 0.6\nsink_to_air_full_k_per_w = 0.11\n\
            junction_to_sink_k_per_w = 0.06\nambient_c = 30.0\n";
        let (path, offer) = staged(dir.path(), &[(PRIORS_FILE, card.as_bytes())]);
        let (_, manifest) = verify_staged(&path, &offer).unwrap();
        assert_eq!(manifest.version, 2);
        // A set without priors is fine too: devices start from the generic prior.
        let (path, offer) = staged(dir.path(), &[]);
        verify_staged(&path, &offer).unwrap();

        let hot = card.replace("ambient_c = 30.0", "ambient_c = 300.0");
        for (bad, needle) in [
            (hot.as_bytes(), "card[0].ambient_c"),
            (b"[[card]]\nambient = 30.0\n".as_slice(), "unknown field `ambient`"),
            (b"\xff\xfe".as_slice(), "not UTF-8"),
        ] {
            let (path, offer) = staged(dir.path(), &[(PRIORS_FILE, bad)]);
            let err = verify_staged(&path, &offer).unwrap_err();
            assert!(matches!(err, OtaError::Priors { version: 2, .. }), "{err:?}");
            let message = err.to_string();
            assert!(message.contains("set v2") && message.contains(PRIORS_FILE), "{message}");
            assert!(message.contains(needle), "{message}");
        }
    }

    #[test]
    fn steps_parse_and_print() {
        for step in ["download", "verify", "unpack", "swap", "activation"] {
            assert_eq!(step.parse::<Step>().unwrap().to_string(), step);
        }
        assert!("reboot".parse::<Step>().is_err());
    }
}
