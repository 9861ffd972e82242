//! `lucebox ota publish`: packs a profile-set directory into `profile-set.tar` and writes a
//! signed TUF repository (`metadata/`, `targets/`) with `tough::editor`. Keys are PEM files
//! (PKCS#8 RSA, as `openssl genpkey -algorithm RSA` writes them).

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use aws_lc_rs::rand::SystemRandom;
use tough::editor::signed::{PathExists, SignedRole};
use tough::editor::RepositoryEditor;
use tough::key_source::{KeySource, LocalKeySource};
use tough::schema::{KeyHolder, RoleKeys, RoleType, Root};

use super::archive;
use super::manifest::{Manifest, MANIFEST_FILE};
use super::repo::{chain, SET_TARGET, VERSION_KEY};

/// Most files a set directory may hold (the archive's own bound).
const MAX_FILES: usize = archive::MAX_ENTRIES;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Manifest(#[from] super::manifest::ManifestError),
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error("set directory {dir}: more than {MAX_FILES} files")]
    TooManyFiles { dir: PathBuf },
    #[error("set directory {dir}: {path} is not a regular file or directory")]
    NotAFile { dir: PathBuf, path: PathBuf },
    #[error("key {path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error("signing: {0}")]
    Sign(String),
}

/// When each role's metadata stops being trusted.
#[derive(Debug, Clone, Copy)]
pub struct Expiry {
    pub root: jiff::Timestamp,
    pub targets: jiff::Timestamp,
    pub snapshot: jiff::Timestamp,
    pub timestamp: jiff::Timestamp,
}

impl Expiry {
    /// Every role expires `days` from now.
    pub fn days_from_now(days: u32) -> Self {
        let at = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * i64::from(days));
        Self { root: at, targets: at, snapshot: at, timestamp: at }
    }
}

#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// Directory with `manifest.toml`, `profiles/`, `variants.toml`, `thermal/priors.toml`.
    pub set_dir: PathBuf,
    /// Output repository; `metadata/` and `targets/` are written below it.
    pub repo_dir: PathBuf,
    /// Trusted root; created (version 1, every key in every role) when missing.
    pub root: PathBuf,
    pub keys: Vec<PathBuf>,
    /// Signatures each role needs, used only when the root is created.
    pub threshold: NonZeroU64,
    pub expiry: Expiry,
    /// Version of targets/snapshot/timestamp; defaults to the set version.
    pub metadata_version: Option<NonZeroU64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Published {
    pub set_version: u64,
    pub sha256: String,
    pub length: u64,
    pub files: usize,
}

pub async fn publish(options: &PublishOptions) -> Result<Published, PublishError> {
    let manifest = Manifest::load(&options.set_dir.join(MANIFEST_FILE))?;
    let files = collect_files(&options.set_dir)?;
    let count = files.len();
    let tar = archive::build(&files)?;
    let staging = options.repo_dir.join("staging");
    let tar_path = staging.join(SET_TARGET);
    write(&tar_path, &tar)?;

    let keys: Vec<Box<dyn KeySource>> = options
        .keys
        .iter()
        .map(|path| Box::new(LocalKeySource { path: path.clone() }) as Box<dyn KeySource>)
        .collect();
    if !options.root.exists() {
        create_root(options, &keys).await?;
    }
    let version = match options.metadata_version {
        Some(v) => v,
        None => {
            NonZeroU64::new(manifest.version).ok_or_else(|| PublishError::Sign("set version 0".into()))?
        }
    };
    let sign_err = |e: tough::error::Error| PublishError::Sign(chain(&e));
    let mut editor = RepositoryEditor::new(&options.root).await.map_err(sign_err)?;
    let (name, mut target) = RepositoryEditor::build_target(&tar_path).await.map_err(sign_err)?;
    target.custom.insert(VERSION_KEY.into(), serde_json::Value::from(manifest.version));
    let sha256 = hex::encode(&target.hashes.sha256);
    let length = target.length;
    editor
        .add_target(name, target)
        .map_err(sign_err)?
        .targets_version(version)
        .map_err(sign_err)?
        .targets_expires(options.expiry.targets)
        .map_err(sign_err)?
        .snapshot_version(version)
        .snapshot_expires(options.expiry.snapshot)
        .timestamp_version(version)
        .timestamp_expires(options.expiry.timestamp);
    let signed = editor.sign(&keys).await.map_err(sign_err)?;
    let targets_dir = options.repo_dir.join("targets");
    std::fs::create_dir_all(&targets_dir)
        .map_err(|source| PublishError::Io { path: targets_dir.clone(), source })?;
    signed.write(options.repo_dir.join("metadata")).await.map_err(sign_err)?;
    signed.copy_target(&tar_path, &targets_dir, PathExists::Replace, None).await.map_err(sign_err)?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(Published { set_version: manifest.version, sha256, length, files: count })
}

/// Writes a version-1 root naming every key for every role with `threshold`.
async fn create_root(options: &PublishOptions, keys: &[Box<dyn KeySource>]) -> Result<(), PublishError> {
    let mut tuf_keys = HashMap::new();
    let mut ids = Vec::new();
    for (source, path) in keys.iter().zip(&options.keys) {
        let key_err = |message: String| PublishError::Key { path: path.clone(), message };
        let sign = source.as_sign().await.map_err(|e| key_err(chain(e.as_ref())))?;
        let key = sign.tuf_key();
        let id = key.key_id().map_err(|e| key_err(chain(&e)))?;
        ids.push(id.clone());
        tuf_keys.insert(id, key);
    }
    let role_keys = RoleKeys { keyids: ids, threshold: options.threshold, _extra: HashMap::new() };
    let roles = [RoleType::Root, RoleType::Snapshot, RoleType::Targets, RoleType::Timestamp]
        .into_iter()
        .map(|role| (role, role_keys.clone()))
        .collect();
    let root = Root {
        spec_version: "1.0.0".into(),
        consistent_snapshot: true,
        version: NonZeroU64::MIN,
        expires: options.expiry.root,
        keys: tuf_keys,
        roles,
        _extra: HashMap::new(),
    };
    let signed = SignedRole::new(root.clone(), &KeyHolder::Root(root), keys, &SystemRandom::new())
        .await
        .map_err(|e| PublishError::Sign(chain(&e)))?;
    write(&options.root, signed.buffer())
}

/// Every regular file below `dir`, as (relative path, contents), sorted by path.
fn collect_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, PublishError> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let io = |source| PublishError::Io { path: current.clone(), source };
        for entry in std::fs::read_dir(&current).map_err(io)? {
            let entry = entry.map_err(io)?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io)?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                if out.len() == MAX_FILES {
                    return Err(PublishError::TooManyFiles { dir: dir.into() });
                }
                let data =
                    std::fs::read(&path).map_err(|source| PublishError::Io { path: path.clone(), source })?;
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
                out.push((rel, data));
            } else {
                return Err(PublishError::NotAFile { dir: dir.into(), path });
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn write(path: &Path, data: &[u8]) -> Result<(), PublishError> {
    crate::fsutil::write_atomic(path, data).map_err(|source| PublishError::Io { path: path.into(), source })
}
