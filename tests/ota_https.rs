//! OTA over HTTPS: a real TLS server on 127.0.0.1 (tokio-rustls, a CA made by rcgen for each
//! test) serving real signed repositories. A box that trusts the CA (`ota.ca_file`) updates; one
//! that does not refuses the server before any request and changes nothing; TUF still rejects a
//! bad signature and endless data over TLS; model downloads resume over TLS.

#[path = "ota_support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use lucebox::ota::http::HttpClient;
use lucebox::ota::manifest::ModelFile;
use lucebox::ota::models::ModelStore;
use lucebox::ota::repo::RepoSource;
use lucebox::ota::{ApplyOptions, ApplyOutcome, OtaError, OtaPaths, Updater};
use lucebox::status::StatusModel;
use support::{copy_dir, make_set, publish, sha256_hex, snapshot, FileServer, Healthy, PublishSpec, TestPki};

/// A web root with `repo/` (set v1 published with key a) behind TLS, and a box state dir.
struct Scenario {
    tmp: tempfile::TempDir,
    state: PathBuf,
    www: PathBuf,
    pki: TestPki,
    server: FileServer,
}

impl Scenario {
    async fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (state, www) = (tmp.path().join("state"), tmp.path().join("www"));
        make_set(&tmp.path().join("sets/v1"), 1, "name = \"v1\"\n", &[]);
        publish(&tmp.path().join("sets/v1"), &www.join("repo"), &PublishSpec::default()).await;
        let pki = TestPki::new("updates");
        let server = FileServer::start_tls(&www, &pki).await;
        assert!(server.url("repo").starts_with("https://127.0.0.1:"), "{}", server.url("repo"));
        Self { tmp, state, www, pki, server }
    }

    fn ca_file(&self) -> PathBuf {
        self.pki.write_ca(&self.tmp.path().join("updates-ca.pem"))
    }

    fn updater(&self, source: &str, ca_file: Option<&Path>) -> Updater {
        Updater {
            paths: OtaPaths { state_dir: self.state.clone(), models_dir: self.state.join("models") },
            trusted_root: std::fs::read(self.www.join("repo/root.json")).unwrap(),
            source: RepoSource::parse(source).unwrap(),
            http: HttpClient::new(Default::default(), ca_file).unwrap(),
            status: StatusModel::new(),
        }
    }

    async fn apply(&self, source: &str, ca_file: Option<&Path>) -> Result<ApplyOutcome, OtaError> {
        self.updater(source, ca_file)
            .apply(&Healthy, ApplyOptions { force: true, ..Default::default() })
            .await
    }

    /// Publishes set `version` into `www/<repo>`, a copy of `www/repo`.
    async fn publish_copy(&self, repo: &str, version: u64) {
        copy_dir(&self.www.join("repo"), &self.www.join(repo));
        let set = self.tmp.path().join(format!("sets/{repo}-v{version}"));
        make_set(&set, version, &format!("name = \"{repo} v{version}\"\n"), &[]);
        publish(&set, &self.www.join(repo), &PublishSpec::default()).await;
    }

    fn current_profile(&self) -> String {
        std::fs::read_to_string(self.state.join("sets/current/profiles/tiny.toml")).unwrap()
    }

    /// Applies `repo` over HTTPS with the CA trusted; expects a rejection naming every needle
    /// and no change on disk. The datastore's timestamp must not change either when the
    /// timestamp was attacked (metadata that verified before a target failed may be stored, as
    /// TUF prescribes).
    async fn assert_rejected(&self, repo: &str, needles: &[&str]) -> String {
        let timestamp = std::fs::read(self.state.join("ota/datastore/timestamp.json")).unwrap();
        let before = snapshot(&self.state);
        let err = self
            .apply(&self.server.url(repo), Some(&self.ca_file()))
            .await
            .expect_err("attack must be rejected")
            .to_string();
        for needle in needles {
            assert!(err.to_lowercase().contains(&needle.to_lowercase()), "error {err:?} lacks {needle:?}");
        }
        assert_eq!(snapshot(&self.state), before, "state changed on disk after: {err}");
        if needles.contains(&"timestamp") {
            let now = std::fs::read(self.state.join("ota/datastore/timestamp.json")).unwrap();
            assert!(now == timestamp, "rejected timestamp was trusted");
        }
        assert_eq!(self.current_profile(), "name = \"v1\"\n");
        err
    }
}

#[tokio::test]
async fn an_update_applies_over_https_with_the_ca_trusted() {
    let s = Scenario::new().await;
    let ca = s.ca_file();
    let outcome = s.apply(&s.server.url("repo"), Some(&ca)).await.unwrap();
    let ApplyOutcome::Committed { version: 1, sha256 } = outcome else { panic!("{outcome:?}") };
    assert_eq!(s.current_profile(), "name = \"v1\"\n");
    let log = s.server.log.lock().unwrap().clone();
    assert!(log.iter().any(|l| l.starts_with("repo/metadata/timestamp.json")), "{log:?}");
    let target = format!("repo/targets/{sha256}.profile-set.tar");
    assert!(log.iter().any(|l| l.starts_with(&target)), "target not fetched over TLS: {log:?}");

    // The next release over the same server commits too.
    let set = s.tmp.path().join("sets/v2");
    make_set(&set, 2, "name = \"v2\"\n", &[]);
    publish(&set, &s.www.join("repo"), &PublishSpec::default()).await;
    let outcome = s.apply(&s.server.url("repo"), Some(&ca)).await.unwrap();
    assert!(matches!(outcome, ApplyOutcome::Committed { version: 2, .. }), "{outcome:?}");
    assert_eq!(s.current_profile(), "name = \"v2\"\n");
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused_and_nothing_changes() {
    let s = Scenario::new().await;
    // The box runs v1, installed from a USB stick (a local copy of the repository).
    let stick = s.tmp.path().join("stick");
    copy_dir(&s.www.join("repo"), &stick);
    let outcome = s.apply(&stick.to_string_lossy(), None).await.unwrap();
    assert!(matches!(outcome, ApplyOutcome::Committed { version: 1, .. }), "{outcome:?}");
    // v2 is on the server, whose CA the box does not trust.
    let set = s.tmp.path().join("sets/v2");
    make_set(&set, 2, "name = \"v2\"\n", &[]);
    publish(&set, &s.www.join("repo"), &PublishSpec::default()).await;
    let timestamp = std::fs::read(s.state.join("ota/datastore/timestamp.json")).unwrap();
    let before = snapshot(&s.state);

    let other_ca = TestPki::new("someone else").write_ca(&s.tmp.path().join("other-ca.pem"));
    for (case, ca_file) in [("bundled roots only", None), ("another CA trusted", Some(other_ca.as_path()))] {
        let err = s.apply(&s.server.url("repo"), ca_file).await.expect_err(case).to_string();
        eprintln!("{case}: {err}");
        assert!(err.contains("certificate not trusted"), "{case}: {err}");
        assert!(err.contains("ota.ca_file"), "{case}: the error says how to trust a private CA: {err}");
        assert!(err.contains("https://127.0.0.1:"), "{case}: the error names the URL: {err}");
        assert_eq!(snapshot(&s.state), before, "{case}: state changed on disk after: {err}");
        let now = std::fs::read(s.state.join("ota/datastore/timestamp.json")).unwrap();
        assert!(now == timestamp, "{case}: the datastore changed");
        assert_eq!(s.current_profile(), "name = \"v1\"\n");
    }
    // The handshake failed before any request reached the server.
    assert!(s.server.log.lock().unwrap().is_empty(), "{:?}", s.server.log.lock().unwrap());
}

#[tokio::test]
async fn a_bad_signature_over_https_is_rejected() {
    let s = Scenario::new().await;
    assert!(matches!(
        s.apply(&s.server.url("repo"), Some(&s.ca_file())).await.unwrap(),
        ApplyOutcome::Committed { version: 1, .. }
    ));
    s.publish_copy("evil", 2).await;
    let path = s.www.join("evil/metadata/timestamp.json");
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let sig = value["signatures"][0]["sig"].as_str().unwrap().to_string();
    let (first, rest) = sig.split_at(1);
    value["signatures"][0]["sig"] = format!("{}{rest}", if first == "0" { "1" } else { "0" }).into();
    std::fs::write(&path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    let err = s.assert_rejected("evil", &["timestamp", "signature"]).await;
    eprintln!("bad signature over https: {err}");
}

#[tokio::test]
async fn an_endless_target_over_https_is_cut_off() {
    let s = Scenario::new().await;
    assert!(matches!(
        s.apply(&s.server.url("repo"), Some(&s.ca_file())).await.unwrap(),
        ApplyOutcome::Committed { version: 1, .. }
    ));
    s.publish_copy("evil", 2).await;
    s.server.faults.lock().unwrap().endless.insert("profile-set.tar".into());
    let err = s.assert_rejected("evil", &["profile-set.tar"]).await;
    eprintln!("endless target over https: {err}");
}

#[tokio::test]
async fn a_cut_model_download_resumes_over_https() {
    let tmp = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..2 * 1024 * 1024 + 5).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(tmp.path().join("m.gguf"), &data).unwrap();
    let pki = TestPki::new("models");
    let server = FileServer::start_tls(tmp.path(), &pki).await;
    server.faults.lock().unwrap().cut_once.insert("m.gguf".into(), 700_000);
    let ca = pki.write_ca(&tmp.path().join("ca.pem"));
    let http = HttpClient::new(Default::default(), Some(&ca)).unwrap();
    let store = ModelStore::new(&tmp.path().join("models"));
    let model = ModelFile {
        name: "m.gguf".into(),
        url: server.url("m.gguf"),
        size: data.len() as u64,
        sha256: sha256_hex(&data),
    };
    let path = store.pull(&http, &model, &|_| {}).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), data);
    let log = server.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    let resumed_at: u64 =
        log[1].trim().strip_prefix("m.gguf bytes=").unwrap().trim_end_matches('-').parse().unwrap();
    assert!(resumed_at >= 1, "second request must resume, not restart: {log:?}");

    // A model server whose certificate is not trusted is refused; nothing keeps a final name.
    let untrusted = HttpClient::new(Default::default(), None).unwrap();
    let other = ModelStore::new(&tmp.path().join("models-2"));
    let err = other.pull(&untrusted, &model, &|_| {}).await.unwrap_err().to_string();
    assert!(err.contains("certificate not trusted"), "{err}");
    assert!(other.list().unwrap().is_empty());
}

/// Verify + install of a 10 MiB profile set served over HTTPS, timed like `lucebox ota bench`
/// (which reads the repository from disk); prints both figures.
#[tokio::test]
async fn ten_mib_set_verify_and_install_over_https() {
    let tmp = tempfile::tempdir().unwrap();
    let prepared = lucebox::ota::bench::prepare(tmp.path(), &[support::key("a")], 10).await.unwrap();
    let pki = TestPki::new("bench");
    let server = FileServer::start_tls(&prepared.repo_dir, &pki).await;
    let ca = pki.write_ca(&tmp.path().join("ca.pem"));
    let source = RepoSource::parse(&server.url("")).unwrap();
    let http = HttpClient::new(Default::default(), Some(&ca)).unwrap();
    let started = Instant::now();
    let https =
        lucebox::ota::bench::measure(&prepared, source, http, &tmp.path().join("state-https")).await.unwrap();
    let https_total = started.elapsed();
    let source = RepoSource::parse(&prepared.repo_dir.to_string_lossy()).unwrap();
    let http = HttpClient::new(Default::default(), None).unwrap();
    let dir =
        lucebox::ota::bench::measure(&prepared, source, http, &tmp.path().join("state-dir")).await.unwrap();
    assert!(https.set_bytes >= 10 << 20);
    eprintln!(
        "set {} bytes: over https check {:.1} ms, verify+install {:.1} ms (total {:.1} ms); \
         from disk check {:.1} ms, verify+install {:.1} ms",
        https.set_bytes,
        https.check_ms,
        https.apply_ms,
        https_total.as_secs_f64() * 1000.0,
        dir.check_ms,
        dir.apply_ms
    );
}
