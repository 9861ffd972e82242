//! `lucebox ota bench`: publishes a profile set of a given size into a scratch repository and
//! times verify + install (metadata verification, target download and hash check, unpack, swap,
//! commit) through the real updater. Activation is excluded: the health gate here passes at once.

use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::Digest;

use super::activate::{ActivationFuture, Activator};
use super::http::HttpClient;
use super::publish::{self, Expiry, PublishOptions};
use super::repo::RepoSource;
use super::updater::{ApplyOptions, ApplyOutcome, OtaError, OtaPaths, Updater};
use crate::status::StatusModel;

const FILE_MIB: usize = 1;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
    #[error(transparent)]
    Ota(#[from] OtaError),
    #[error(transparent)]
    Http(super::http::HttpError),
    #[error("bench update did not commit: {0:?}")]
    NotCommitted(ApplyOutcome),
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub set_bytes: u64,
    pub publish_ms: f64,
    /// Metadata verification only (`ota check`).
    pub check_ms: f64,
    /// Verify + install: metadata, download with hash check, re-verify, unpack, swap, commit.
    pub apply_ms: f64,
}

/// Passes the health gate at once, so the bench times only verify + install.
struct PassingGate;

impl Activator for PassingGate {
    fn activate<'a>(&'a self, _set_dir: &'a Path) -> ActivationFuture<'a> {
        Box::pin(async { Ok(()) })
    }
}

/// A published bench repository, ready to be served (or read from disk) and measured.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The repository (`metadata/`, `targets/`, `root.json`).
    pub repo_dir: PathBuf,
    pub set_bytes: u64,
    pub publish_ms: f64,
}

/// Verify + install from the scratch repository on disk (the `lucebox ota bench` figure).
pub async fn run(scratch: &Path, keys: &[PathBuf], size_mib: usize) -> Result<BenchReport, BenchError> {
    let prepared = prepare(scratch, keys, size_mib).await?;
    let source = RepoSource::parse(&prepared.repo_dir.to_string_lossy()).map_err(OtaError::from)?;
    let http = HttpClient::new(Default::default(), None).map_err(BenchError::Http)?;
    measure(&prepared, source, http, &scratch.join("state")).await
}

/// Publishes a set of `size_mib` MiB of incompressible profile files into `<scratch>/repo`.
pub async fn prepare(scratch: &Path, keys: &[PathBuf], size_mib: usize) -> Result<Prepared, BenchError> {
    let set_dir = scratch.join("set");
    let repo_dir = scratch.join("repo");
    std::fs::create_dir_all(set_dir.join("profiles")).map_err(io(&set_dir))?;
    std::fs::write(set_dir.join("manifest.toml"), "version = 1\n").map_err(io(&set_dir))?;
    let mut seed = sha2::Sha256::digest(b"lucebox ota bench").to_vec();
    for i in 0..size_mib.div_ceil(FILE_MIB) {
        // Incompressible, reproducible content: a hash chain.
        let mut data = Vec::with_capacity(FILE_MIB << 20);
        while data.len() < FILE_MIB << 20 {
            seed = sha2::Sha256::digest(&seed).to_vec();
            data.extend_from_slice(&seed);
        }
        let path = set_dir.join("profiles").join(format!("bulk-{i:03}.toml"));
        std::fs::write(&path, &data).map_err(io(&path))?;
    }
    let started = Instant::now();
    let published = publish::publish(&PublishOptions {
        set_dir,
        repo_dir: repo_dir.clone(),
        root: repo_dir.join("root.json"),
        keys: keys.to_vec(),
        threshold: NonZeroU64::MIN,
        rotate_to: Vec::new(),
        expiry: Expiry::days_from_now(7),
        metadata_version: None,
    })
    .await?;
    Ok(Prepared { repo_dir, set_bytes: published.length, publish_ms: ms(started.elapsed()) })
}

/// Checks, then applies, the prepared set from `source` into a fresh box at `state_dir`.
pub async fn measure(
    prepared: &Prepared,
    source: RepoSource,
    http: HttpClient,
    state_dir: &Path,
) -> Result<BenchReport, BenchError> {
    let root_path = prepared.repo_dir.join("root.json");
    let updater = Updater {
        paths: OtaPaths { state_dir: state_dir.to_path_buf(), models_dir: state_dir.join("models") },
        trusted_root: std::fs::read(&root_path).map_err(io(&root_path))?,
        source,
        http,
        status: StatusModel::new(),
    };
    let started = Instant::now();
    updater.check().await?;
    let check_ms = ms(started.elapsed());
    let started = Instant::now();
    let outcome = updater.apply(&PassingGate, ApplyOptions { force: true, ..Default::default() }).await?;
    let apply_ms = ms(started.elapsed());
    if !matches!(outcome, ApplyOutcome::Committed { .. }) {
        return Err(BenchError::NotCommitted(outcome));
    }
    Ok(BenchReport { set_bytes: prepared.set_bytes, publish_ms: prepared.publish_ms, check_ms, apply_ms })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError {
    let path = path.to_path_buf();
    move |source| BenchError::Io { path, source }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
