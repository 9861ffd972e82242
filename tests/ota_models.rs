//! The content-addressed model store against a real HTTP server: a download cut mid-file resumes
//! with a Range request, endless and wrong data are refused, and nothing unverified keeps a
//! final name.

#[path = "ota_support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};

use lucebox::ota::http::HttpClient;
use lucebox::ota::manifest::ModelFile;
use lucebox::ota::models::{ModelError, ModelStore};
use support::{sha256_hex, FileServer};

fn weights(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn model(server: &FileServer, path: &str, data: &[u8]) -> ModelFile {
    ModelFile {
        name: "m.gguf".into(),
        url: server.url(path),
        size: data.len() as u64,
        sha256: sha256_hex(data),
    }
}

#[tokio::test]
async fn a_cut_download_resumes_with_range_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let data = weights(3 * 1024 * 1024 + 17);
    std::fs::write(tmp.path().join("m.gguf"), &data).unwrap();
    let server = FileServer::start(tmp.path()).await;
    server.faults.lock().unwrap().cut_once.insert("m.gguf".into(), 1_000_000);
    let store = ModelStore::new(&tmp.path().join("models"));
    let m = model(&server, "m.gguf", &data);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_c = seen.clone();
    let path = store
        .pull(&HttpClient::new(Default::default(), None).unwrap(), &m, &move |p| {
            seen_c.lock().unwrap().push(p.percent())
        })
        .await
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), data);
    assert_eq!(path, tmp.path().join("models/sha256").join(&m.sha256));
    let log = server.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0].trim(), "m.gguf");
    let resumed_at: u64 =
        log[1].trim().strip_prefix("m.gguf bytes=").unwrap().trim_end_matches('-').parse().unwrap();
    assert!(resumed_at >= 1, "second request must resume, not restart: {log:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(*seen.last().unwrap(), 100);
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "progress went backwards");
    // Pulling again is a no-op: no new request.
    store.pull(&HttpClient::new(Default::default(), None).unwrap(), &m, &|_| {}).await.unwrap();
    assert_eq!(server.log.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn endless_model_data_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = weights(100_000);
    let server = FileServer::start(tmp.path()).await;
    server.faults.lock().unwrap().endless.insert("m.gguf".into());
    let store = ModelStore::new(&tmp.path().join("models"));
    let err = store
        .pull(&HttpClient::new(Default::default(), None).unwrap(), &model(&server, "m.gguf", &data), &|_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Oversized { size: 100_000, .. }), "{err}");
    assert!(store.list().unwrap().is_empty());
    assert_eq!(
        std::fs::read_dir(tmp.path().join("models/sha256")).unwrap().count(),
        0,
        "partial left behind"
    );
}

#[tokio::test]
async fn wrong_content_is_refused_and_not_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let data = weights(50_000);
    let mut tampered = data.clone();
    tampered[100] ^= 1;
    std::fs::write(tmp.path().join("m.gguf"), &tampered).unwrap();
    let server = FileServer::start(tmp.path()).await;
    let store = ModelStore::new(&tmp.path().join("models"));
    let err = store
        .pull(&HttpClient::new(Default::default(), None).unwrap(), &model(&server, "m.gguf", &data), &|_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::HashMismatch { .. }), "{err}");
    assert!(store.list().unwrap().is_empty());
}

/// `lucebox models gc` runs under the update lock: while an update holds it (and may be
/// downloading a model its set does not record yet), gc refuses and removes nothing; free, it
/// collects what no set references.
#[test]
fn models_gc_waits_for_no_update_and_then_collects() {
    let state = tempfile::tempdir().unwrap();
    let models = state.path().join("models/sha256");
    std::fs::create_dir_all(&models).unwrap();
    let partial = models.join(format!("{}.partial", sha256_hex(b"being downloaded")));
    std::fs::write(&partial, b"being down").unwrap();
    let gc = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_lucebox"))
            .args(["models", "gc"])
            .env("LUCEBOX_STATE_DIR", state.path())
            .env_remove("LUCEBOX_CONFIG")
            .env_remove("LUCEBOX_MODELS_DIR")
            .output()
            .unwrap()
    };
    let held = lucebox::ota::UpdateLock::acquire(&state.path().join("ota"), "ota apply", None).unwrap();
    let refused = gc();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "gc ran under an update");
    assert!(stderr.contains("update locked by") && stderr.contains("ota apply"), "{stderr}");
    assert!(partial.exists(), "the update's download was removed");
    drop(held);
    let done = gc();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(!partial.exists(), "nothing references it once the update is gone");
}
