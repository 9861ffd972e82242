//! Installed profile sets: each unpacked once into `<state_dir>/sets/<sha256>/`; `current` and
//! `previous` are symlinks swapped by rename, so a crash leaves one complete set or the other.

use std::fs;
use std::path::{Path, PathBuf};

use super::archive;

pub const CURRENT: &str = "current";
pub const PREVIOUS: &str = "previous";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error("{path}: link points outside the set store")]
    BadLink { path: PathBuf },
    #[error("no installed set {sha256}")]
    Missing { sha256: String },
}

#[derive(Debug, Clone)]
pub struct SetStore {
    dir: PathBuf,
}

impl SetStore {
    pub fn new(state_dir: &Path) -> Self {
        Self { dir: state_dir.join("sets") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn set_dir(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    /// Unpacks `archive` as set `sha256` unless it is already installed. The set appears under
    /// its final name only once every file is on disk.
    pub fn install(&self, archive_bytes: &[u8], sha256: &str) -> Result<PathBuf, StoreError> {
        let dest = self.set_dir(sha256);
        if dest.is_dir() {
            return Ok(dest);
        }
        let tmp = self.dir.join(format!(".unpack-{sha256}-{}", std::process::id()));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        let unpacked = archive::unpack(archive_bytes, &tmp).map_err(StoreError::from).and_then(|_| {
            fs::rename(&tmp, &dest).map_err(io(&dest))?;
            sync_dir(&self.dir)
        });
        if unpacked.is_err() {
            let _ = fs::remove_dir_all(&tmp);
        }
        unpacked.map(|_| dest)
    }

    /// The set a link names, if the link exists.
    pub fn linked(&self, link: &str) -> Result<Option<String>, StoreError> {
        let path = self.dir.join(link);
        match fs::read_link(&path) {
            Ok(target) => {
                let name = target.to_str().filter(|n| super::manifest::is_sha256_hex(n));
                name.map(|n| Some(n.to_string())).ok_or(StoreError::BadLink { path })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    /// Points `link` at set `sha256` atomically: a new symlink beside it renamed over it.
    pub fn point(&self, link: &str, sha256: &str) -> Result<(), StoreError> {
        if !self.set_dir(sha256).is_dir() {
            return Err(StoreError::Missing { sha256: sha256.into() });
        }
        let path = self.dir.join(link);
        let tmp = self.dir.join(format!(".{link}.tmp-{}", std::process::id()));
        let io = |source| StoreError::Io { path: path.clone(), source };
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(sha256, &tmp).map_err(io)?;
        fs::rename(&tmp, &path).map_err(io)?;
        sync_dir(&self.dir)
    }

    pub fn unlink(&self, link: &str) -> Result<(), StoreError> {
        let path = self.dir.join(link);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    /// Installed sets (not the links, not unpack leftovers).
    pub fn installed(&self) -> Result<Vec<String>, StoreError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::Io { path: self.dir.clone(), source }),
        };
        let mut out: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| super::manifest::is_sha256_hex(n))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Removes installed sets other than `keep` and any leftover of an interrupted unpack.
    pub fn prune(&self, keep: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut removed = Vec::new();
        for sha in self.installed()? {
            if !keep.contains(&sha.as_str()) {
                let path = self.set_dir(&sha);
                fs::remove_dir_all(&path).map_err(|source| StoreError::Io { path, source })?;
                removed.push(sha);
            }
        }
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for entry in entries.filter_map(Result::ok) {
                if entry.file_name().to_string_lossy().starts_with(".unpack-") {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(removed)
    }
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|source| StoreError::Io { path: dir.into(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn set(version: &str) -> Vec<u8> {
        archive::build(&[("profiles/p.toml".into(), version.as_bytes().to_vec())]).unwrap()
    }

    #[test]
    fn install_point_and_swap() {
        let dir = tempfile::tempdir().unwrap();
        let store = SetStore::new(dir.path());
        store.install(&set("a"), A).unwrap();
        store.install(&set("b"), B).unwrap();
        assert_eq!(store.linked(CURRENT).unwrap(), None);
        store.point(CURRENT, A).unwrap();
        assert_eq!(fs::read(dir.path().join("sets").join(CURRENT).join("profiles/p.toml")).unwrap(), b"a");
        store.point(PREVIOUS, A).unwrap();
        store.point(CURRENT, B).unwrap();
        assert_eq!(store.linked(CURRENT).unwrap().as_deref(), Some(B));
        assert_eq!(store.linked(PREVIOUS).unwrap().as_deref(), Some(A));
        assert_eq!(fs::read(dir.path().join("sets").join(CURRENT).join("profiles/p.toml")).unwrap(), b"b");
        assert!(matches!(store.point(CURRENT, &"c".repeat(64)), Err(StoreError::Missing { .. })));
        assert_eq!(store.installed().unwrap(), vec![A.to_string(), B.to_string()]);
        assert_eq!(store.prune(&[B]).unwrap(), vec![A.to_string()]);
    }

    #[test]
    fn a_failed_unpack_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SetStore::new(dir.path());
        let mut bad = set("a");
        bad.truncate(600);
        assert!(store.install(&bad, A).is_err());
        assert!(store.installed().unwrap().is_empty());
        assert_eq!(fs::read_dir(store.dir()).unwrap().count(), 0);
    }
}
