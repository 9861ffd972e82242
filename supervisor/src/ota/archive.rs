//! The profile-set archive: a strict subset of POSIX ustar. Only regular files and directories,
//! relative paths without `..`, bounded entry count. Anything else is rejected rather than
//! interpreted, so an archive can never write outside the directory it is unpacked into.

use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

const BLOCK: usize = 512;
/// Most entries one profile set may hold.
pub const MAX_ENTRIES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive truncated at byte {offset}")]
    Truncated { offset: usize },
    #[error("archive header at byte {offset}: {reason}")]
    BadHeader { offset: usize, reason: &'static str },
    #[error("archive entry {name:?}: unsupported entry type {kind:?} (only files and directories)")]
    UnsupportedEntry { name: String, kind: char },
    #[error("archive entry {name:?}: path must be relative and stay inside the set")]
    UnsafePath { name: String },
    #[error("archive holds more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    #[error("archive entry name {name:?} longer than 100 bytes")]
    NameTooLong { name: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// One regular file in the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    pub path: PathBuf,
    pub data: &'a [u8],
}

/// Parses `bytes` into its regular-file entries (directories are implied by the paths).
pub fn entries(bytes: &[u8]) -> Result<Vec<Entry<'_>>, ArchiveError> {
    let mut out = Vec::new();
    let mut offset = 0;
    let mut seen = 0;
    loop {
        let header = bytes.get(offset..offset + BLOCK).ok_or(ArchiveError::Truncated { offset })?;
        if header.iter().all(|&b| b == 0) {
            return Ok(out);
        }
        seen += 1;
        if seen > MAX_ENTRIES {
            return Err(ArchiveError::TooManyEntries);
        }
        verify_checksum(header, offset)?;
        let name = entry_name(header, offset)?;
        let size = octal(&header[124..136]).ok_or(ArchiveError::BadHeader { offset, reason: "size" })?;
        let size = usize::try_from(size).map_err(|_| ArchiveError::BadHeader { offset, reason: "size" })?;
        let path = safe_path(&name)?;
        let data_start = offset + BLOCK;
        match header[156] {
            b'0' | 0 => {
                let data = bytes
                    .get(data_start..data_start + size)
                    .ok_or(ArchiveError::Truncated { offset: data_start })?;
                out.push(Entry { path, data });
            }
            b'5' => {}
            other => return Err(ArchiveError::UnsupportedEntry { name, kind: other as char }),
        }
        offset = data_start + size.div_ceil(BLOCK) * BLOCK;
    }
}

/// Builds an archive of `files` (relative path, contents) in the given order, with fixed
/// metadata (mode 0644, mtime 0) so the same inputs always give the same bytes and hash.
pub fn build(files: &[(String, Vec<u8>)]) -> Result<Vec<u8>, ArchiveError> {
    let mut out = Vec::new();
    for (name, data) in files {
        safe_path(name)?;
        if name.len() > 100 {
            return Err(ArchiveError::NameTooLong { name: name.clone() });
        }
        let mut header = [0u8; BLOCK];
        header[..name.len()].copy_from_slice(name.as_bytes());
        put_octal(&mut header[100..108], 0o644);
        put_octal(&mut header[108..116], 0);
        put_octal(&mut header[116..124], 0);
        put_octal(&mut header[124..136], data.len() as u64);
        put_octal(&mut header[136..148], 0);
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[148..156].fill(b' ');
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        put_octal(&mut header[148..155], u64::from(sum));
        out.extend_from_slice(&header);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

/// Writes every entry below `dest` (which must exist) and fsyncs each file and then each folder
/// (the deepest first, `dest` last), so a later rename of `dest` publishes complete contents even
/// across a power cut.
pub fn unpack(bytes: &[u8], dest: &Path) -> Result<usize, ArchiveError> {
    let entries = entries(bytes)?;
    let mut folders = std::collections::BTreeSet::from([dest.to_path_buf()]);
    for entry in &entries {
        let path = dest.join(&entry.path);
        let io = |source| ArchiveError::Io { path: path.clone(), source };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io)?;
            folders.extend(parent.ancestors().take_while(|a| a.starts_with(dest)).map(Path::to_path_buf));
        }
        let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(io)?;
        file.write_all(entry.data).map_err(io)?;
        file.sync_all().map_err(io)?;
    }
    let mut folders: Vec<_> = folders.into_iter().collect();
    folders.sort_by_key(|f| std::cmp::Reverse(f.components().count()));
    for folder in folders {
        let io = |source| ArchiveError::Io { path: folder.clone(), source };
        fs::File::open(&folder).and_then(|f| f.sync_all()).map_err(io)?;
    }
    Ok(entries.len())
}

fn entry_name(header: &[u8], offset: usize) -> Result<String, ArchiveError> {
    let field = |range: std::ops::Range<usize>| {
        let raw = &header[range];
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        std::str::from_utf8(&raw[..end])
            .map_err(|_| ArchiveError::BadHeader { offset, reason: "name not UTF-8" })
    };
    let name = field(0..100)?;
    let prefix = if &header[257..262] == b"ustar" { field(345..500)? } else { "" };
    let name = if prefix.is_empty() { name.to_string() } else { format!("{prefix}/{name}") };
    Ok(name.trim_end_matches('/').to_string())
}

fn safe_path(name: &str) -> Result<PathBuf, ArchiveError> {
    let path = Path::new(name);
    let safe =
        !name.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if safe {
        Ok(path.components().filter(|c| matches!(c, Component::Normal(_))).collect())
    } else {
        Err(ArchiveError::UnsafePath { name: name.to_string() })
    }
}

fn verify_checksum(header: &[u8], offset: usize) -> Result<(), ArchiveError> {
    let stored =
        octal(&header[148..156]).ok_or(ArchiveError::BadHeader { offset, reason: "checksum field" })?;
    let sum: u64 = header
        .iter()
        .enumerate()
        .map(|(i, &b)| if (148..156).contains(&i) { u64::from(b' ') } else { u64::from(b) })
        .sum();
    if sum == stored {
        Ok(())
    } else {
        Err(ArchiveError::BadHeader { offset, reason: "checksum mismatch" })
    }
}

fn octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

fn put_octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
    field[width] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(String, Vec<u8>)> {
        vec![
            ("manifest.toml".into(), b"version = 1\n".to_vec()),
            ("profiles/a.toml".into(), vec![b'x'; 1000]),
            ("thermal/priors.toml".into(), Vec::new()),
        ]
    }

    #[test]
    fn round_trips_and_is_deterministic() {
        let bytes = build(&sample()).unwrap();
        assert_eq!(bytes, build(&sample()).unwrap());
        let got = entries(&bytes).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].path, Path::new("profiles/a.toml"));
        assert_eq!(got[1].data, &[b'x'; 1000][..]);
    }

    #[test]
    fn system_tar_reads_what_we_write() {
        let dir = tempfile::tempdir().unwrap();
        let tar = dir.path().join("set.tar");
        fs::write(&tar, build(&sample()).unwrap()).unwrap();
        let out = std::process::Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
        let listing = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success());
        assert_eq!(
            listing.lines().collect::<Vec<_>>(),
            ["manifest.toml", "profiles/a.toml", "thermal/priors.toml"]
        );
    }

    #[test]
    fn rejects_traversal_symlinks_and_corruption() {
        assert!(matches!(build(&[("../evil".into(), vec![])]), Err(ArchiveError::UnsafePath { .. })));
        let mut bytes = build(&sample()).unwrap();
        bytes[156] = b'2';
        assert!(matches!(entries(&bytes), Err(ArchiveError::BadHeader { .. })));
        // A symlink entry with a valid checksum is refused by type.
        let mut header = build(&[("link".into(), vec![])]).unwrap();
        header[156] = b'2';
        header[148..156].fill(b' ');
        let sum: u32 = header[..512].iter().map(|&b| u32::from(b)).sum();
        put_octal(&mut header[148..155], u64::from(sum));
        assert!(matches!(entries(&header), Err(ArchiveError::UnsupportedEntry { kind: '2', .. })));
        let truncated = build(&sample()).unwrap();
        assert!(matches!(entries(&truncated[..1000]), Err(ArchiveError::Truncated { .. })));
    }

    #[test]
    fn unpack_writes_files() {
        let dir = tempfile::tempdir().unwrap();
        let n = unpack(&build(&sample()).unwrap(), dir.path()).unwrap();
        assert_eq!(n, 3);
        assert_eq!(fs::read(dir.path().join("manifest.toml")).unwrap(), b"version = 1\n");
    }
}
