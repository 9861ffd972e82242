//! All sysfs/procfs/dev reads go through a [`SysRoot`], so a captured tree stands in for `/`.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
}

impl SysRoot {
    /// A root directory; resolved once so symlinks inside the tree map back to it.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        Self { root }
    }

    /// The machine we run on.
    pub fn live() -> Self {
        Self { root: PathBuf::from("/") }
    }

    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// `abs` (an absolute path as on a real machine) below this root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.root.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    /// The part of `resolved` below the root, if it is inside it.
    pub fn relative(&self, resolved: &Path) -> Option<PathBuf> {
        resolved.strip_prefix(&self.root).ok().map(Path::to_path_buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let p = root.path("/sys/bus/pci/devices");
        assert!(p.starts_with(root.dir()));
        assert_eq!(root.relative(&p).unwrap(), Path::new("sys/bus/pci/devices"));
        assert!(!root.is_live());
        assert!(SysRoot::live().is_live());
    }
}
