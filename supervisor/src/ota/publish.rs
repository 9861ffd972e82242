//! `lucebox ota publish`: packs a profile-set directory into `profile-set.tar` and writes a
//! signed TUF repository (`metadata/`, `targets/`) with `tough::editor`. Keys are PEM files
//! (PKCS#8 RSA, as `openssl genpkey -algorithm RSA` writes them).
//!
//! Root rotation (`--rotate-root-key`): root version N+1 names only the new keys and carries the
//! signatures of a threshold of the current root's keys *and* of the new keys, which is what a
//! box holding root N needs to follow the chain (TUF 5.3.4); the release is then signed under N+1.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use aws_lc_rs::rand::SystemRandom;
use tough::editor::signed::{PathExists, SignedRole};
use tough::editor::RepositoryEditor;
use tough::key_source::{KeySource, LocalKeySource};
use tough::schema::{KeyHolder, RoleKeys, RoleType, Root, Signed};

use super::archive;
use super::manifest::{Manifest, MANIFEST_FILE};
use super::repo::{chain, SET_TARGET, VERSION_KEY};
use crate::thermal::priors::{CardPriors, PRIORS_FILE};

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
    /// The health gate cannot see a bad priors file (the engines run without it), so it is
    /// refused before it is signed.
    #[error(transparent)]
    Priors(#[from] crate::thermal::ThermalError),
    #[error("key {path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error("signing: {0}")]
    Sign(String),
    #[error("root {path}: {message}")]
    Root { path: PathBuf, message: String },
    #[error("rotating root {path} to version {version}: {message}")]
    Rotate { path: PathBuf, version: u64, message: String },
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
    /// Keys of the current root: they sign the release, or only the rotation when `rotate_to`
    /// is not empty.
    pub keys: Vec<PathBuf>,
    /// Signatures each role needs, used when the root is created or rotated.
    pub threshold: NonZeroU64,
    /// New root keys: when not empty, root version N+1 (every one of these keys in every role,
    /// `threshold`, expiring at `expiry.root`) is published, signed by `keys` and by these, and
    /// the release is signed with these. `root` is replaced by N+1 once the repository is written.
    pub rotate_to: Vec<PathBuf>,
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
    if let Some((_, priors)) = files.iter().find(|(path, _)| path == PRIORS_FILE) {
        CardPriors::parse(priors, &options.set_dir.join(PRIORS_FILE))?;
    }
    let count = files.len();
    let tar = archive::build(&files)?;
    let staging = options.repo_dir.join("staging");
    let tar_path = staging.join(SET_TARGET);
    write(&tar_path, &tar)?;

    let keys = key_sources(&options.keys);
    if !options.root.exists() {
        create_root(options, &keys).await?;
    }
    // A rotated root stays in staging until the release signed under it is written, so a
    // failed publish leaves the maintainer's root file as it was.
    let (root_path, keys) = if options.rotate_to.is_empty() {
        (options.root.clone(), keys)
    } else {
        let new_keys = key_sources(&options.rotate_to);
        let rotated = rotate_root(options, &keys, &new_keys).await?;
        let path = staging.join("root.json");
        write(&path, &rotated)?;
        (path, new_keys)
    };
    let version = match options.metadata_version {
        Some(v) => v,
        None => {
            NonZeroU64::new(manifest.version).ok_or_else(|| PublishError::Sign("set version 0".into()))?
        }
    };
    let sign_err = |e: tough::error::Error| PublishError::Sign(chain(&e));
    let mut editor = RepositoryEditor::new(&root_path).await.map_err(sign_err)?;
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
    if root_path != options.root {
        let rotated = std::fs::read(&root_path)
            .map_err(|source| PublishError::Io { path: root_path.clone(), source })?;
        write(&options.root, &rotated)?;
    }
    let _ = std::fs::remove_dir_all(&staging);
    Ok(Published { set_version: manifest.version, sha256, length, files: count })
}

fn key_sources(paths: &[PathBuf]) -> Vec<Box<dyn KeySource>> {
    paths.iter().map(|path| Box::new(LocalKeySource { path: path.clone() }) as Box<dyn KeySource>).collect()
}

/// A root naming every key for every role with `threshold`.
async fn root_of(
    keys: &[Box<dyn KeySource>],
    paths: &[PathBuf],
    threshold: NonZeroU64,
    version: NonZeroU64,
    expires: jiff::Timestamp,
) -> Result<Root, PublishError> {
    let mut tuf_keys = HashMap::new();
    let mut ids = Vec::new();
    for (source, path) in keys.iter().zip(paths) {
        let key_err = |message: String| PublishError::Key { path: path.clone(), message };
        let sign = source.as_sign().await.map_err(|e| key_err(chain(e.as_ref())))?;
        let key = sign.tuf_key();
        let id = key.key_id().map_err(|e| key_err(chain(&e)))?;
        ids.push(id.clone());
        tuf_keys.insert(id, key);
    }
    let role_keys = RoleKeys { keyids: ids, threshold, _extra: HashMap::new() };
    let roles = [RoleType::Root, RoleType::Snapshot, RoleType::Targets, RoleType::Timestamp]
        .into_iter()
        .map(|role| (role, role_keys.clone()))
        .collect();
    Ok(Root {
        spec_version: "1.0.0".into(),
        consistent_snapshot: true,
        version,
        expires,
        keys: tuf_keys,
        roles,
        _extra: HashMap::new(),
    })
}

/// Writes a version-1 root naming every key for every role with `threshold`.
async fn create_root(options: &PublishOptions, keys: &[Box<dyn KeySource>]) -> Result<(), PublishError> {
    let root = root_of(keys, &options.keys, options.threshold, NonZeroU64::MIN, options.expiry.root).await?;
    let signed = SignedRole::new(root.clone(), &KeyHolder::Root(root), keys, &SystemRandom::new())
        .await
        .map_err(|e| PublishError::Sign(chain(&e)))?;
    write(&options.root, signed.buffer())
}

/// Root N+1 for `new_keys`, cross-signed by `old_keys` (under root N) and `new_keys`; checked
/// the way a box checks it before anything is written. Returns the signed file's bytes.
async fn rotate_root(
    options: &PublishOptions,
    old_keys: &[Box<dyn KeySource>],
    new_keys: &[Box<dyn KeySource>],
) -> Result<Vec<u8>, PublishError> {
    let path = &options.root;
    let data = std::fs::read(path).map_err(|source| PublishError::Io { path: path.clone(), source })?;
    let old: Signed<Root> = serde_json::from_slice(&data)
        .map_err(|e| PublishError::Root { path: path.clone(), message: e.to_string() })?;
    let version = old.signed.version.checked_add(1).ok_or_else(|| PublishError::Root {
        path: path.clone(),
        message: "version cannot be raised".into(),
    })?;
    let rotate_err =
        |message: String| PublishError::Rotate { path: path.clone(), version: version.get(), message };
    let new_root =
        root_of(new_keys, &options.rotate_to, options.threshold, version, options.expiry.root).await?;
    let rng = SystemRandom::new();
    let by_new = SignedRole::new(new_root.clone(), &KeyHolder::Root(new_root.clone()), new_keys, &rng)
        .await
        .map_err(|e| rotate_err(chain(&e)))?;
    let not_old = |message: String| {
        rotate_err(format!(
            "the --key keys are not a threshold of version {}'s root keys: {message}",
            old.signed.version
        ))
    };
    let by_old = SignedRole::new(new_root.clone(), &KeyHolder::Root(old.signed.clone()), old_keys, &rng)
        .await
        .map_err(|e| not_old(chain(&e)))?;
    let signed =
        by_new.add_old_signatures(by_old.signed().signatures.clone()).map_err(|e| rotate_err(chain(&e)))?;
    old.signed.verify_role(signed.signed()).map_err(|e| not_old(chain(&e)))?;
    new_root
        .verify_role(signed.signed())
        .map_err(|e| rotate_err(format!("the new keys do not meet the new threshold: {}", chain(&e))))?;
    // A box on an older root walks every N.root.json up to the newest: keep the current one
    // published beside its successor even when `--out` is a fresh directory.
    let previous = options.repo_dir.join("metadata").join(format!("{}.root.json", old.signed.version));
    if !previous.exists() {
        write(&previous, &data)?;
    }
    Ok(signed.buffer().clone())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/ota/keys/{name}.pem"))
    }

    #[tokio::test]
    async fn rotation_needs_a_threshold_of_the_current_root_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let set_dir = tmp.path().join("set");
        std::fs::create_dir_all(&set_dir).unwrap();
        std::fs::write(set_dir.join(MANIFEST_FILE), "version = 1\n").unwrap();
        let repo_dir = tmp.path().join("repo");
        let options = |keys: &[&str], rotate_to: &[&str]| PublishOptions {
            set_dir: set_dir.clone(),
            repo_dir: repo_dir.clone(),
            root: repo_dir.join("root.json"),
            keys: keys.iter().map(|k| key(k)).collect(),
            threshold: NonZeroU64::MIN,
            rotate_to: rotate_to.iter().map(|k| key(k)).collect(),
            expiry: Expiry::days_from_now(7),
            metadata_version: None,
        };
        publish(&options(&["a"], &[])).await.unwrap();
        let root = std::fs::read(repo_dir.join("root.json")).unwrap();
        let err = publish(&options(&["b"], &["c"])).await.unwrap_err();
        assert!(matches!(err, PublishError::Rotate { version: 2, .. }), "{err}");
        assert!(err.to_string().contains("not a threshold of version 1"), "{err}");
        assert_eq!(std::fs::read(repo_dir.join("root.json")).unwrap(), root, "root file unchanged");
        assert!(!repo_dir.join("metadata/2.root.json").exists());
        // With the current key it rotates, and the root file becomes version 2.
        publish(&options(&["a"], &["c"])).await.unwrap();
        assert!(repo_dir.join("metadata/2.root.json").exists());
        let rotated: Signed<Root> =
            serde_json::from_slice(&std::fs::read(repo_dir.join("root.json")).unwrap()).unwrap();
        assert_eq!(rotated.signed.version.get(), 2);
    }
}
