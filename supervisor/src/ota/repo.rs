//! The signed repository of profile sets, verified with `tough`. The datastore under
//! `<state_dir>/ota/datastore` keeps the newest trusted metadata and the latest known time, so
//! rollback and freeze protection survive reboots.

use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tough::{ExpirationEnforcement, Repository, RepositoryLoader, TargetName};
use url::Url;

use super::transport::OtaTransport;

/// The one target a profile-set repository carries.
pub const SET_TARGET: &str = "profile-set.tar";
/// `custom` key of the target holding the set version, readable before downloading.
pub const VERSION_KEY: &str = "version";

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("repository source {source_text:?}: {message}")]
    Source { source_text: String, message: String },
    #[error("trusted root {path}: {source}")]
    TrustedRoot { path: PathBuf, source: std::io::Error },
    #[error("repository rejected: {0}")]
    Rejected(String),
    #[error("repository has no target {SET_TARGET}")]
    NoSet,
    #[error("target {SET_TARGET} has no numeric custom.{VERSION_KEY}")]
    NoVersion,
    #[error("target {SET_TARGET} rejected: {0}")]
    Target(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Where a repository lives: an `http://` base URL or a local directory, each holding
/// `metadata/` and `targets/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoSource {
    pub metadata: Url,
    pub targets: Url,
}

impl RepoSource {
    /// Parses `http://host/path` or a directory path (absolute or relative to the cwd).
    pub fn parse(text: &str) -> Result<Self, RepoError> {
        let err = |message: &str| RepoError::Source { source_text: text.into(), message: message.into() };
        let base =
            if text.starts_with("http://") || text.starts_with("https://") || text.starts_with("file://") {
                Url::parse(text).map_err(|e| err(&e.to_string()))?
            } else {
                let dir = std::path::absolute(text).map_err(|e| err(&e.to_string()))?;
                Url::from_directory_path(&dir).map_err(|_| err("not an absolute directory path"))?
            };
        let base = if base.path().ends_with('/') {
            base
        } else {
            let mut b = base.clone();
            b.set_path(&format!("{}/", base.path()));
            b
        };
        Ok(Self {
            metadata: base.join("metadata/").map_err(|e| err(&e.to_string()))?,
            targets: base.join("targets/").map_err(|e| err(&e.to_string()))?,
        })
    }
}

/// What the repository offers now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub version: u64,
    pub sha256: String,
    pub length: u64,
}

/// Loads and verifies the repository's metadata against the trusted root and the datastore.
pub async fn load(
    trusted_root: &[u8],
    source: &RepoSource,
    datastore: &Path,
    transport: OtaTransport,
) -> Result<Repository, RepoError> {
    std::fs::create_dir_all(datastore).map_err(|source| RepoError::Io { path: datastore.into(), source })?;
    let root = newest_root(trusted_root, datastore);
    let repo = RepositoryLoader::new(&root, source.metadata.clone(), source.targets.clone())
        .transport(transport)
        .datastore(datastore)
        .expiration_enforcement(ExpirationEnforcement::Safe)
        .load()
        .await
        .map_err(|e| RepoError::Rejected(chain(&e)))?;
    keep_newest_root(&repo, datastore)?;
    Ok(repo)
}

/// Our own copy of the newest verified root, beside tough's. tough rewrites its `root.json` in
/// place on every load (no temp file, no fsync), so a power cut can leave it empty; this copy is
/// written atomically and only ever moves forward.
const NEWEST_ROOT: &str = "lucebox-newest-root.json";

fn root_version(data: &[u8]) -> Option<u64> {
    serde_json::from_slice::<tough::schema::Signed<tough::schema::Root>>(data)
        .ok()
        .map(|r| r.signed.version.get())
}

fn keep_newest_root(repo: &Repository, datastore: &Path) -> Result<(), RepoError> {
    let version = repo.root().signed.version.get();
    let ours = datastore.join(NEWEST_ROOT);
    if std::fs::read(&ours).ok().and_then(|d| root_version(&d)).is_some_and(|kept| kept >= version) {
        return Ok(());
    }
    let bytes = match std::fs::read(datastore.join("root.json")) {
        Ok(bytes) if root_version(&bytes) == Some(version) => bytes,
        _ => serde_json::to_vec(repo.root()).map_err(|e| RepoError::Target(format!("encoding root: {e}")))?,
    };
    crate::fsutil::write_atomic(&ours, &bytes).map_err(|source| RepoError::Io { path: ours, source })
}

/// The root to start from: the one shipped with the box, or the newer one tough persisted in the
/// datastore after following a rotation (it stores only roots that verified along the chain).
/// tough always starts from the root it is given, so without this a box would keep trusting a
/// rotated-out (perhaps compromised) key whenever a server withholds the newer `N.root.json`.
/// Of the shipped root, our atomic copy and tough's, the newest that parses (tough's may be torn).
fn newest_root(shipped: &[u8], datastore: &Path) -> Vec<u8> {
    let Some(shipped_version) = root_version(shipped) else { return shipped.to_vec() };
    let stored =
        [NEWEST_ROOT, "root.json"].into_iter().filter_map(|name| std::fs::read(datastore.join(name)).ok());
    stored
        .filter_map(|data| root_version(&data).map(|v| (v, data)))
        .filter(|(v, _)| *v > shipped_version)
        .max_by_key(|(v, _)| *v)
        .map_or_else(|| shipped.to_vec(), |(_, data)| data)
}

/// The profile set the verified repository offers.
pub fn offer(repo: &Repository) -> Result<Offer, RepoError> {
    let name = TargetName::new(SET_TARGET).map_err(|e| RepoError::Target(e.to_string()))?;
    let target = repo.targets().signed.targets.get(&name).ok_or(RepoError::NoSet)?;
    let version = target.custom.get(VERSION_KEY).and_then(|v| v.as_u64()).ok_or(RepoError::NoVersion)?;
    Ok(Offer { version, sha256: hex::encode(&target.hashes.sha256), length: target.length })
}

/// Streams the set into `dest`: written to `dest.partial`, renamed only after tough verified the
/// length and hash. Returns the sha256 of what was written.
pub async fn download_set(repo: &Repository, dest: &Path) -> Result<String, RepoError> {
    let name = TargetName::new(SET_TARGET).map_err(|e| RepoError::Target(e.to_string()))?;
    let partial = dest.with_extension("partial");
    let result = stream_to(repo, &name, &partial).await;
    match result {
        Ok(sha) => {
            tokio::fs::rename(&partial, dest)
                .await
                .map_err(|source| RepoError::Io { path: dest.into(), source })?;
            Ok(sha)
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            Err(e)
        }
    }
}

async fn stream_to(repo: &Repository, name: &TargetName, path: &Path) -> Result<String, RepoError> {
    let io = |source| RepoError::Io { path: path.into(), source };
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(io)?;
    }
    let mut stream =
        repo.read_target(name).await.map_err(|e| RepoError::Target(chain(&e)))?.ok_or(RepoError::NoSet)?;
    let mut file = tokio::fs::File::create(path).await.map_err(io)?;
    let mut hasher = Sha256::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| RepoError::Target(chain(&e)))?;
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(io)?;
    }
    file.sync_all().await.map_err(io)?;
    Ok(hex::encode(hasher.finalize()))
}

/// An error and its causes on one line: tough's top-level messages alone hide the reason.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_to_metadata_and_targets() {
        let s = RepoSource::parse("http://127.0.0.1:9/repo").unwrap();
        assert_eq!(s.metadata.as_str(), "http://127.0.0.1:9/repo/metadata/");
        assert_eq!(s.targets.as_str(), "http://127.0.0.1:9/repo/targets/");
        let s = RepoSource::parse("/media/usb/lucebox").unwrap();
        assert_eq!(s.metadata.as_str(), "file:///media/usb/lucebox/metadata/");
    }
}
