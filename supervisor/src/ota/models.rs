//! The content-addressed model store `<models_dir>/sha256/<hex>`, shared by every profile set.
//! Downloads resume with an HTTP Range request after a cut connection, are sha256-verified before
//! they get their final name, and check free disk first.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use url::Url;

use super::http::HttpClient;
use super::manifest::ModelFile;
use crate::blocking::off_the_runtime;

/// Connection attempts per file before giving up (each resumes where the last stopped).
const MAX_ATTEMPTS: u32 = 8;
const RETRY_DELAY: Duration = Duration::from_millis(200);
/// Disk kept free beyond the file itself so a pull never fills the state partition.
const DISK_MARGIN: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{name}: needs {needed} bytes free in {dir}, {available} available")]
    NoSpace { name: String, dir: PathBuf, needed: u64, available: u64 },
    #[error("{name}: sha256 {actual} does not match {expected}")]
    HashMismatch { name: String, expected: String, actual: String },
    #[error("{name}: server sent more than the {size} bytes the manifest names")]
    Oversized { name: String, size: u64 },
    #[error("{name}: gave up after {attempts} attempts: {last}")]
    Unreachable { name: String, attempts: u32, last: String },
    #[error("{name}: bad url: {message}")]
    Url { name: String, message: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Download progress of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

impl Progress {
    pub fn percent(&self) -> u8 {
        (self.done.saturating_mul(100) / self.total.max(1)).min(100) as u8
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredModel {
    pub sha256: String,
    pub size: u64,
}

#[derive(Debug, Clone)]
pub struct ModelStore {
    dir: PathBuf,
}

impl ModelStore {
    pub fn new(models_dir: &Path) -> Self {
        Self { dir: models_dir.join("sha256") }
    }

    pub fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    fn partial(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.partial"))
    }

    /// Present with the expected size (content was verified before it got this name).
    pub fn has(&self, model: &ModelFile) -> bool {
        fs::metadata(self.path(&model.sha256)).is_ok_and(|m| m.len() == model.size)
    }

    /// Fetches `model` unless present, resuming a partial file, and returns its path.
    pub async fn pull(
        &self,
        http: &HttpClient,
        model: &ModelFile,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<PathBuf, ModelError> {
        let final_path = self.path(&model.sha256);
        if self.has(model) {
            progress(Progress { done: model.size, total: model.size });
            return Ok(final_path);
        }
        fs::create_dir_all(&self.dir).map_err(|source| ModelError::Io { path: self.dir.clone(), source })?;
        let partial = self.partial(&model.sha256);
        let mut have = fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        if have > model.size {
            // Longer than the file can be: not a part of it. Start over, with room for all of it.
            remove(&partial)?;
            have = 0;
        }
        self.check_space(model, have)?;
        let url = Url::parse(&model.url)
            .map_err(|e| ModelError::Url { name: model.name.clone(), message: e.to_string() })?;
        let io = |source| ModelError::Io { path: partial.clone(), source };
        if url.scheme() == "file" {
            let (partial, model) = (partial.clone(), model.clone());
            off_the_runtime(move || copy_local(&url, &partial, &model)).await.map_err(io)??;
        } else {
            self.fetch_with_resume(http, &url, &partial, model, progress).await?;
        }
        // Hashing a file of several GB takes seconds to minutes.
        let (checked, expected) = (partial.clone(), model.clone());
        off_the_runtime(move || verify(&checked, &expected)).await.map_err(io)??;
        fs::rename(&partial, &final_path)
            .map_err(|source| ModelError::Io { path: final_path.clone(), source })?;
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| ModelError::Io { path: self.dir.clone(), source })?;
        progress(Progress { done: model.size, total: model.size });
        Ok(final_path)
    }

    async fn fetch_with_resume(
        &self,
        http: &HttpClient,
        url: &Url,
        partial: &Path,
        model: &ModelFile,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<(), ModelError> {
        let io = |source| ModelError::Io { path: partial.to_path_buf(), source };
        let mut last = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            let mut file = fs::OpenOptions::new().create(true).append(true).open(partial).map_err(io)?;
            let mut done = file.metadata().map_err(io)?.len();
            if done == model.size {
                return Ok(());
            }
            let download = match http.get(url, done).await {
                Ok(d) => d,
                Err(e) => {
                    last = e.to_string();
                    tokio::time::sleep(RETRY_DELAY * attempt).await;
                    continue;
                }
            };
            if !download.partial && done > 0 {
                // The server ignored the range: start over from byte 0.
                file.set_len(0).map_err(io)?;
                file.seek(SeekFrom::Start(0)).map_err(io)?;
                done = 0;
            }
            let mut body = download.body;
            let mut cut = None;
            while let Some(chunk) = body.recv().await {
                match chunk {
                    Ok(bytes) => {
                        if done + bytes.len() as u64 > model.size {
                            drop(file);
                            remove(partial)?;
                            return Err(ModelError::Oversized { name: model.name.clone(), size: model.size });
                        }
                        file.write_all(&bytes).map_err(io)?;
                        done += bytes.len() as u64;
                        progress(Progress { done, total: model.size });
                    }
                    Err(e) => {
                        cut = Some(e.to_string());
                        break;
                    }
                }
            }
            file.sync_all().map_err(io)?;
            if done == model.size {
                return Ok(());
            }
            last = cut.unwrap_or_else(|| format!("connection closed at byte {done} of {}", model.size));
            tracing::warn!(model = %model.name, attempt, "download interrupted: {last}; resuming");
            tokio::time::sleep(RETRY_DELAY).await;
        }
        Err(ModelError::Unreachable { name: model.name.clone(), attempts: MAX_ATTEMPTS, last })
    }

    fn check_space(&self, model: &ModelFile, have: u64) -> Result<(), ModelError> {
        let stat = nix::sys::statvfs::statvfs(&self.dir)
            .map_err(|e| ModelError::Io { path: self.dir.clone(), source: e.into() })?;
        let available = (stat.blocks_available() as u64).saturating_mul(stat.fragment_size() as u64);
        let needed = model.size - have + DISK_MARGIN;
        if available < needed {
            return Err(ModelError::NoSpace {
                name: model.name.clone(),
                dir: self.dir.clone(),
                needed,
                available,
            });
        }
        Ok(())
    }

    /// Complete files in the store.
    pub fn list(&self) -> Result<Vec<StoredModel>, ModelError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(ModelError::Io { path: self.dir.clone(), source }),
        };
        let mut out: Vec<StoredModel> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                super::manifest::is_sha256_hex(&name).then_some(())?;
                Some(StoredModel { sha256: name, size: e.metadata().ok()?.len() })
            })
            .collect();
        out.sort_by(|a, b| a.sha256.cmp(&b.sha256));
        Ok(out)
    }

    /// Removes every file (and partial download) whose hash is not in `referenced`.
    pub fn gc(&self, referenced: &BTreeSet<String>) -> Result<Vec<String>, ModelError> {
        let mut removed = Vec::new();
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
            Err(source) => return Err(ModelError::Io { path: self.dir.clone(), source }),
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let sha = name.strip_suffix(".partial").unwrap_or(&name);
            if super::manifest::is_sha256_hex(sha) && !referenced.contains(sha) {
                remove(&entry.path())?;
                removed.push(name);
            }
        }
        removed.sort();
        Ok(removed)
    }
}

fn copy_local(url: &Url, partial: &Path, model: &ModelFile) -> Result<(), ModelError> {
    let source = url
        .to_file_path()
        .map_err(|_| ModelError::Url { name: model.name.clone(), message: "not a local path".into() })?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Io { path, source }
    };
    let len = fs::metadata(&source).map_err(io(&source))?.len();
    if len > model.size {
        return Err(ModelError::Oversized { name: model.name.clone(), size: model.size });
    }
    fs::copy(&source, partial).map_err(io(partial))?;
    // On disk before the rename that names it verified, as the download path does: a power cut
    // after a journaled rename must not leave an empty model in the store.
    fs::File::open(partial).and_then(|f| f.sync_all()).map_err(io(partial))?;
    Ok(())
}

fn verify(partial: &Path, model: &ModelFile) -> Result<(), ModelError> {
    let io = |source| ModelError::Io { path: partial.to_path_buf(), source };
    let mut file = fs::File::open(partial).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let actual = hex::encode(hasher.finalize());
    if actual != model.sha256 {
        remove(partial)?;
        return Err(ModelError::HashMismatch {
            name: model.name.clone(),
            expected: model.sha256.clone(),
            actual,
        });
    }
    Ok(())
}

fn remove(path: &Path) -> Result<(), ModelError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ModelError::Io { path: path.into(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_for(data: &[u8], path: &Path) -> ModelFile {
        ModelFile {
            name: "m.gguf".into(),
            url: Url::from_file_path(path).unwrap().to_string(),
            size: data.len() as u64,
            sha256: hex::encode(Sha256::digest(data)),
        }
    }

    #[tokio::test]
    async fn local_pull_verifies_and_gc_removes_unreferenced() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.gguf");
        fs::write(&src, b"weights").unwrap();
        let store = ModelStore::new(&dir.path().join("models"));
        let http = HttpClient::new(Default::default(), None).unwrap();
        let model = model_for(b"weights", &src);
        let path = store.pull(&http, &model, &|_| {}).await.unwrap();
        assert_eq!(fs::read(path).unwrap(), b"weights");
        assert!(store.has(&model));
        assert_eq!(store.list().unwrap(), vec![StoredModel { sha256: model.sha256.clone(), size: 7 }]);
        let keep: BTreeSet<String> = [model.sha256.clone()].into();
        assert!(store.gc(&keep).unwrap().is_empty());
        assert_eq!(store.gc(&BTreeSet::new()).unwrap(), vec![model.sha256.clone()]);
        assert!(!store.has(&model));
    }

    #[tokio::test]
    async fn corrupt_source_is_rejected_and_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.gguf");
        fs::write(&src, b"weightz").unwrap();
        let store = ModelStore::new(&dir.path().join("models"));
        let model = model_for(b"weights", &src);
        let err = store
            .pull(&HttpClient::new(Default::default(), None).unwrap(), &model, &|_| {})
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::HashMismatch { .. }), "{err}");
        assert!(store.list().unwrap().is_empty());
        assert!(!store.partial(&model.sha256).exists());
    }
}
