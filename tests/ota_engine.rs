//! The health gate with a real engine: each activation starts the CPU llama-server on the model
//! the set names and waits for `/health` 200. A set whose model file is corrupt (correctly
//! signed and hashed, but not a loadable model) never gets healthy and is rolled back
//! automatically; the engine comes back on the committed set's model.

#[path = "common/ports.rs"]
mod ports;
#[path = "ota_support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lucebox::ota::http::HttpClient;
use lucebox::ota::manifest::{Manifest, ModelFile};
use lucebox::ota::models::ModelStore;
use lucebox::ota::repo::RepoSource;
use lucebox::ota::{
    referenced_models, ActivationError, ActivationFuture, Activator, ApplyOptions, ApplyOutcome, OtaPaths,
    Updater,
};
use lucebox::status::{OtaState, StatusModel};
use ports::free_port;
use support::{make_set, publish, sha256_hex, FileServer, PublishSpec};
use url::Url;

/// Writes a tiny llama-architecture GGUF (one layer, 64-wide, byte-fallback vocabulary).
const TINY_MODEL_PY: &str = r#"
import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1], "llama")
n_embd, n_head, n_ff, n_layer = 64, 4, 128, 1
tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + ["\u2581", "a", "b", "\u2581a"]
w.add_context_length(256); w.add_embedding_length(n_embd); w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff); w.add_head_count(n_head); w.add_head_count_kv(n_head)
w.add_layer_norm_rms_eps(1e-5); w.add_rope_dimension_count(n_embd // n_head); w.add_file_type(0)
w.add_tokenizer_model("llama"); w.add_token_list(tokens); w.add_token_scores([0.0] * len(tokens))
w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 4)
w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)
rng = np.random.default_rng(0)
def t(name, *shape): w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
def ones(name): w.add_tensor(name, np.ones(n_embd, dtype=np.float32))
t("token_embd.weight", len(tokens), n_embd); ones("output_norm.weight"); t("output.weight", len(tokens), n_embd)
for i in range(n_layer):
    ones(f"blk.{i}.attn_norm.weight"); ones(f"blk.{i}.ffn_norm.weight")
    for n in ("q", "k", "v", "output"): t(f"blk.{i}.attn_{n}.weight", n_embd, n_embd)
    t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd); t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
    t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
"#;

/// The CPU llama-server: `LUCEBOX_LLAMA_SERVER` (set by ci/test.sh), else what
/// `ci/build-engine.sh` prints (it builds when missing).
fn llama_server() -> PathBuf {
    if let Some(path) = std::env::var_os("LUCEBOX_LLAMA_SERVER") {
        return path.into();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/build-engine.sh");
    let out = std::process::Command::new("bash").arg(script).output().unwrap();
    assert!(out.status.success(), "build-engine.sh: {}", String::from_utf8_lossy(&out.stderr));
    let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().lines().last().unwrap().trim());
    assert!(path.is_file(), "{} missing", path.display());
    path
}

/// Activates a set by (re)starting llama-server on the first model its manifest names.
struct LlamaActivator {
    server: PathBuf,
    models: ModelStore,
    port: u16,
    allowance: Duration,
    engine: tokio::sync::Mutex<Option<tokio::process::Child>>,
    log_dir: PathBuf,
}

impl LlamaActivator {
    async fn start(&self, set_dir: &Path) -> Result<(), ActivationError> {
        let engine = format!("llama-server:{}", self.port);
        let manifest = Manifest::load(&set_dir.join("manifest.toml"))
            .map_err(|e| ActivationError::Plan(e.to_string()))?;
        let model =
            manifest.models.first().ok_or_else(|| ActivationError::Plan("set names no model".into()))?;
        let mut running = self.engine.lock().await;
        if let Some(mut old) = running.take() {
            let _ = old.kill().await;
        }
        let log =
            std::fs::File::create(self.log_dir.join(format!("engine-{}.log", &model.sha256[..8]))).unwrap();
        let child = tokio::process::Command::new(&self.server)
            .arg("-m")
            .arg(self.models.path(&model.sha256))
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string(), "-c", "256"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ActivationError::Start { engine: engine.clone(), detail: e.to_string() })?;
        let child = running.insert(child);
        let health = Url::parse(&format!("http://127.0.0.1:{}/health", self.port)).unwrap();
        let http = HttpClient::new(Default::default(), None).unwrap();
        let deadline = Instant::now() + self.allowance;
        let unhealthy = |detail: String| ActivationError::Unhealthy {
            engine: engine.clone(),
            allowance: self.allowance,
            detail,
        };
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Err(unhealthy(format!("exited with {status} loading {}", model.name)));
            }
            if http.get(&health, 0).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(unhealthy("/health never answered 200".into()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Activator for LlamaActivator {
    fn activate<'a>(&'a self, set_dir: &'a Path) -> ActivationFuture<'a> {
        Box::pin(self.start(set_dir))
    }
}

async fn engine_health(port: u16) -> bool {
    let url = Url::parse(&format!("http://127.0.0.1:{port}/health")).unwrap();
    HttpClient::new(Default::default(), None).unwrap().get(&url, 0).await.is_ok()
}

#[tokio::test]
async fn a_set_with_a_corrupt_model_never_gets_healthy_and_rolls_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (www, state, sets) = (tmp.path().join("www"), tmp.path().join("state"), tmp.path().join("sets"));
    std::fs::create_dir_all(www.join("models")).unwrap();
    let tiny = www.join("models/tiny.gguf");
    match std::env::var_os("LUCEBOX_TINY_MODEL") {
        // The pinned model ci/test.sh made; any loadable model serves this test.
        Some(pinned) => {
            std::fs::copy(pinned, &tiny).unwrap();
        }
        None => {
            let out = std::process::Command::new("python3")
                .arg("-c")
                .arg(TINY_MODEL_PY)
                .arg(&tiny)
                .output()
                .unwrap();
            assert!(out.status.success(), "making the tiny model: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let good = std::fs::read(&tiny).unwrap();
    // Signed and hashed like any model, but cut short: the engine cannot load it.
    let broken = good[..good.len() / 2].to_vec();
    std::fs::write(www.join("models/tiny-v2.gguf"), &broken).unwrap();
    let server = FileServer::start(&www).await;
    let file = |name: &str, data: &[u8]| ModelFile {
        name: name.into(),
        url: server.url(&format!("models/{name}")),
        size: data.len() as u64,
        sha256: sha256_hex(data),
    };
    make_set(&sets.join("v1"), 1, "model = \"tiny.gguf\"\n", &[file("tiny.gguf", &good)]);
    make_set(&sets.join("v2"), 2, "model = \"tiny-v2.gguf\"\n", &[file("tiny-v2.gguf", &broken)]);
    let repo = www.join("repo");
    publish(&sets.join("v1"), &repo, &PublishSpec::default()).await;

    let paths = OtaPaths { state_dir: state.clone(), models_dir: state.join("models") };
    let status = StatusModel::new();
    let updater = Updater {
        paths: paths.clone(),
        trusted_root: std::fs::read(repo.join("root.json")).unwrap(),
        source: RepoSource::parse(&server.url("repo")).unwrap(),
        http: HttpClient::new(Default::default(), None).unwrap(),
        status: status.clone(),
    };
    let engine = LlamaActivator {
        server: llama_server(),
        models: ModelStore::new(&paths.models_dir),
        port: free_port(),
        allowance: Duration::from_secs(30),
        engine: tokio::sync::Mutex::new(None),
        log_dir: tmp.path().to_path_buf(),
    };
    let options = ApplyOptions { force: true, ..Default::default() };

    let outcome = updater.apply(&engine, options).await.unwrap();
    assert!(matches!(outcome, ApplyOutcome::Committed { version: 1, .. }), "{outcome:?}");
    assert!(engine_health(engine.port).await, "v1 engine must serve");

    publish(&sets.join("v2"), &repo, &PublishSpec::default()).await;
    let outcome = updater.apply(&engine, options).await.unwrap();
    let ApplyOutcome::RolledBack { version: 2, reason } = outcome else {
        panic!("expected a rollback, got {outcome:?}")
    };
    assert!(reason.contains("not healthy") && reason.contains("tiny-v2.gguf"), "{reason}");
    assert!(engine_health(engine.port).await, "the committed set's engine must be back");
    assert_eq!(
        std::fs::read_to_string(state.join("sets/current/profiles/tiny.toml")).unwrap(),
        "model = \"tiny.gguf\"\n"
    );
    let ota = status.snapshot().ota;
    assert!(matches!(ota.state, OtaState::RolledBack { version: 2, .. }), "{:?}", ota.state);
    assert!(ota.active_set.unwrap().ends_with("(v1)"));

    // The broken model is referenced by no kept set: gc removes it and keeps the live one.
    let referenced = referenced_models(&paths).unwrap();
    assert_eq!(referenced, [sha256_hex(&good)].into());
    let removed = ModelStore::new(&paths.models_dir).gc(&referenced).unwrap();
    assert_eq!(removed, vec![sha256_hex(&broken)]);
    assert!(ModelStore::new(&paths.models_dir).path(&sha256_hex(&good)).is_file());
    let running = engine.engine.lock().await.take();
    if let Some(mut child) = running {
        let _ = child.kill().await;
    }
}
