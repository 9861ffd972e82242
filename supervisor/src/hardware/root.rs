//! All sysfs/procfs/dev reads go through here, relative to a root directory.
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
}

impl SysRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    pub fn live() -> Self {
        Self::new("/")
    }
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.root.join(abs.strip_prefix("/").unwrap_or(abs))
    }
}
