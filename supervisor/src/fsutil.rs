//! Small file-system helpers shared by every module that keeps state on disk.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers the temp files of this process, so two writes in flight never share one.
static TEMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Writes `contents` to `path` atomically: a temp file beside it, fsync, rename, fsync of the
/// directory. A crash at any point leaves either the old file or the new one, never a torn one.
/// Writers racing on one path each get their own temp file, so the last rename wins and none fails.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_atomic_with_mode(path, contents, None)
}

/// Like [`write_atomic`], with the file created with `mode` (e.g. 0o600 for secrets) before any
/// byte is written, so the contents are never readable with wider permissions.
pub fn write_atomic_with_mode(path: &Path, contents: &[u8], mode: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let sequence = TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.tmp-{}-{sequence}", name.to_string_lossy(), std::process::id()));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if let Some(mode) = mode {
        options.mode(mode);
    }
    let result = (|| {
        let mut file = options.open(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "temp files left behind: {names:?}");
    }

    /// A status mirror and a final write once raced on one temp name: one renamed it away and the
    /// other's rename failed with ENOENT.
    #[test]
    fn concurrent_writes_to_one_path_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status.json");
        std::thread::scope(|scope| {
            for writer in 0..4 {
                let path = &path;
                scope.spawn(move || {
                    for round in 0..200 {
                        let text = format!("{writer}-{round}");
                        write_atomic(path, text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
                    }
                });
            }
        });
        let last = fs::read_to_string(&path).unwrap();
        assert!(last.ends_with("-199"), "a finished writer's last text: {last}");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "temp files left behind: {names:?}");
    }

    #[test]
    fn mode_is_applied() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        write_atomic_with_mode(&path, b"secret", Some(0o600)).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
