//! Every TUF attack class against a box that runs signed set v1: the update is rejected with a
//! clear error and nothing on disk changes. The repositories are real (`tough::editor`) and
//! served by a real HTTP server on 127.0.0.1. Root rotation: a box follows a properly
//! cross-signed new root, refuses one the old root did not sign, and stops trusting the old key.
//! A set whose card priors a box would refuse is not signed at all.

#[path = "ota_support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};

use lucebox::ota::http::HttpClient;
use lucebox::ota::publish::{self, Expiry};
use lucebox::ota::repo::RepoSource;
use lucebox::ota::{ApplyOptions, ApplyOutcome, OtaError, OtaPaths, Updater};
use lucebox::status::StatusModel;
use support::{copy_dir, make_set, publish, publish_options, snapshot, FileServer, Healthy, PublishSpec};

/// A box with v1 committed from `www/repo`, and the web root the attacker controls.
struct Scenario {
    _tmp: tempfile::TempDir,
    state: PathBuf,
    www: PathBuf,
    sets: PathBuf,
    server: FileServer,
}

impl Scenario {
    async fn new(spec: &PublishSpec<'_>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (state, www, sets) = (tmp.path().join("state"), tmp.path().join("www"), tmp.path().join("sets"));
        std::fs::create_dir_all(&www).unwrap();
        make_set(&sets.join("v1"), 1, "name = \"v1\"\n", &[]);
        publish(&sets.join("v1"), &www.join("repo"), spec).await;
        let server = FileServer::start(&www).await;
        let s = Self { _tmp: tmp, state, www, sets, server };
        let outcome = s.apply("repo").await.unwrap();
        assert!(matches!(outcome, ApplyOutcome::Committed { version: 1, .. }), "{outcome:?}");
        s
    }

    fn updater(&self, repo: &str) -> Updater {
        Updater {
            paths: OtaPaths { state_dir: self.state.clone(), models_dir: self.state.join("models") },
            trusted_root: std::fs::read(self.www.join("repo/root.json")).unwrap(),
            source: RepoSource::parse(&self.server.url(repo)).unwrap(),
            http: HttpClient::new(Default::default(), None).unwrap(),
            status: StatusModel::new(),
        }
    }

    async fn apply(&self, repo: &str) -> Result<ApplyOutcome, OtaError> {
        self.updater(repo).apply(&Healthy, ApplyOptions { force: true, ..Default::default() }).await
    }

    /// Publishes set `version` into `www/<repo>` (copied from `www/<base>` first when given).
    async fn publish(&self, base: Option<&str>, repo: &str, version: u64, spec: &PublishSpec<'_>) {
        if let Some(base) = base {
            copy_dir(&self.www.join(base), &self.www.join(repo));
        }
        let set = self.sets.join(format!("{repo}-v{version}"));
        make_set(&set, version, &format!("name = \"{repo} v{version}\"\n"), &[]);
        publish(&set, &self.www.join(repo), spec).await;
    }

    /// Applies from `repo`, expects a rejection whose text has every one of `needles`, and checks
    /// the state directory is byte-for-byte what it was.
    async fn assert_rejected(&self, repo: &str, needles: &[&str]) -> String {
        let trusted_timestamp = self.trusted_timestamp();
        let before = snapshot(&self.state);
        let profile_before = self.current_profile();
        let err = self.apply(repo).await.expect_err("attack must be rejected").to_string();
        for needle in needles {
            assert!(err.to_lowercase().contains(&needle.to_lowercase()), "error {err:?} lacks {needle:?}");
        }
        assert_eq!(snapshot(&self.state), before, "state changed on disk after: {err}");
        assert_eq!(self.current_profile(), profile_before);
        if needles.contains(&"timestamp") {
            assert_eq!(self.trusted_timestamp(), trusted_timestamp, "rejected timestamp was trusted");
        }
        err
    }

    fn current_profile(&self) -> String {
        let current = std::fs::read_link(self.state.join("sets/current")).unwrap();
        std::fs::read_to_string(self.state.join("sets").join(current).join("profiles/tiny.toml")).unwrap()
    }

    /// Version of the root the box trusts now (tough persists it after following a rotation).
    fn trusted_root_version(&self) -> u64 {
        root_version(&self.state.join("ota/datastore/root.json"))
    }

    /// The timestamp metadata tough trusts (persisted in the datastore).
    fn trusted_timestamp(&self) -> Vec<u8> {
        std::fs::read(self.state.join("ota/datastore/timestamp.json")).unwrap()
    }
}

fn root_version(path: &Path) -> u64 {
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    value["signed"]["version"].as_u64().unwrap()
}

/// Key ids allowed to sign the root role of the root.json at `path`.
fn root_keyids(path: &Path) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    value["signed"]["roles"]["root"]["keyids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect()
}

/// Key ids that signed the metadata file at `path`.
fn signers(path: &Path) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    value["signatures"].as_array().unwrap().iter().map(|s| s["keyid"].as_str().unwrap().to_string()).collect()
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
}

#[tokio::test]
async fn bad_signature_is_rejected() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "evil", 2, &PublishSpec::default()).await;
    edit_json(&s.www.join("evil/metadata/timestamp.json"), |v| {
        let sig = v["signatures"][0]["sig"].as_str().unwrap().to_string();
        let (first, rest) = sig.split_at(1);
        let flipped = format!("{}{rest}", if first == "0" { "1" } else { "0" });
        v["signatures"][0]["sig"] = flipped.into();
    });
    let err = s.assert_rejected("evil", &["timestamp", "signature"]).await;
    eprintln!("bad signature: {err}");
}

#[tokio::test]
async fn signatures_below_threshold_are_rejected() {
    let spec = PublishSpec { keys: &["a", "b"], threshold: 2, ..PublishSpec::default() };
    let s = Scenario::new(&spec).await;
    s.publish(Some("repo"), "evil", 2, &spec).await;
    edit_json(&s.www.join("evil/metadata/timestamp.json"), |v| {
        v["signatures"].as_array_mut().unwrap().truncate(1);
    });
    let err = s.assert_rejected("evil", &["timestamp", "threshold"]).await;
    eprintln!("below threshold: {err}");
}

#[tokio::test]
async fn expired_metadata_is_rejected() {
    let s = Scenario::new(&PublishSpec::default()).await;
    let mut expiry = Expiry::days_from_now(7);
    expiry.targets = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    s.publish(Some("repo"), "evil", 2, &PublishSpec { expiry, ..PublishSpec::default() }).await;
    let err = s.assert_rejected("evil", &["targets", "expired"]).await;
    eprintln!("expired: {err}");
}

#[tokio::test]
async fn freeze_with_a_stale_timestamp_is_rejected() {
    let s = Scenario::new(&PublishSpec::default()).await;
    let mut expiry = Expiry::days_from_now(7);
    expiry.timestamp = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    s.publish(Some("repo"), "frozen", 2, &PublishSpec { expiry, ..PublishSpec::default() }).await;
    let err = s.assert_rejected("frozen", &["timestamp", "expired"]).await;
    eprintln!("freeze: {err}");
}

#[tokio::test]
async fn rollback_to_older_metadata_is_rejected() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "new", 2, &PublishSpec::default()).await;
    assert!(matches!(s.apply("new").await.unwrap(), ApplyOutcome::Committed { version: 2, .. }));
    // The attacker now serves the (validly signed, unexpired) v1 repository again.
    let err = s.assert_rejected_after_v2("repo").await;
    eprintln!("rollback: {err}");
}

impl Scenario {
    async fn assert_rejected_after_v2(&self, repo: &str) -> String {
        let before = snapshot(&self.state);
        let err = self.apply(repo).await.expect_err("rollback must be rejected").to_string();
        assert!(err.contains("older") || err.contains("version"), "{err}");
        assert_eq!(snapshot(&self.state), before);
        err
    }
}

#[tokio::test]
async fn mix_and_match_is_rejected() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "a2", 2, &PublishSpec::default()).await;
    s.publish(Some("repo"), "b2", 2, &PublishSpec::default()).await;
    // Valid targets metadata of another release, served beside this release's snapshot.
    std::fs::copy(s.www.join("b2/metadata/2.targets.json"), s.www.join("a2/metadata/2.targets.json"))
        .unwrap();
    let err = s.assert_rejected("a2", &["targets"]).await;
    eprintln!("mix-and-match: {err}");
}

#[tokio::test]
async fn endless_metadata_is_cut_off() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "evil", 2, &PublishSpec::default()).await;
    s.server.faults.lock().unwrap().endless.insert("evil/metadata/timestamp.json".into());
    let err = s.assert_rejected("evil", &["maximum size"]).await;
    eprintln!("endless metadata: {err}");
}

#[tokio::test]
async fn endless_target_is_cut_off() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "evil", 2, &PublishSpec::default()).await;
    s.server.faults.lock().unwrap().endless.insert("profile-set.tar".into());
    let err = s.assert_rejected("evil", &["profile-set.tar"]).await;
    eprintln!("endless target: {err}");
}

#[tokio::test]
async fn target_hash_mismatch_is_rejected() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "evil", 2, &PublishSpec::default()).await;
    let targets = s.www.join("evil/targets");
    for entry in std::fs::read_dir(&targets).unwrap().map(Result::unwrap) {
        let mut data = std::fs::read(entry.path()).unwrap();
        data[0] ^= 0xff; // same length, different content
        std::fs::write(entry.path(), data).unwrap();
    }
    let err = s.assert_rejected("evil", &["hash"]).await;
    eprintln!("hash mismatch: {err}");
}

#[tokio::test]
async fn a_valid_update_commits_and_keeps_the_previous_set() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "next", 2, &PublishSpec::default()).await;
    let outcome = s.apply("next").await.unwrap();
    let ApplyOutcome::Committed { version: 2, sha256 } = outcome else { panic!("{outcome:?}") };
    assert_eq!(std::fs::read_link(s.state.join("sets/current")).unwrap(), Path::new(&sha256));
    let profile = std::fs::read_to_string(s.state.join("sets/current/profiles/tiny.toml")).unwrap();
    assert_eq!(profile, "name = \"next v2\"\n");
    assert!(s.state.join("sets/previous/profiles/tiny.toml").is_file());
    assert_eq!(s.apply("next").await.unwrap(), ApplyOutcome::UpToDate { version: 2 });
}

#[tokio::test]
async fn a_rotated_root_is_followed_and_the_old_key_stops_counting() {
    let s = Scenario::new(&PublishSpec::default()).await;
    assert_eq!(s.trusted_root_version(), 1);
    // The maintainer rotates the root from key a to key c while publishing set v2. The box keeps
    // trusting www/repo/root.json (version 1, key a) as its shipped root.
    s.publish(Some("repo"), "rotated", 2, &PublishSpec { rotate_to: &["c"], ..PublishSpec::default() }).await;
    let v1_ids = root_keyids(&s.www.join("repo/root.json"));
    let v2 = s.www.join("rotated/metadata/2.root.json");
    assert_eq!(root_version(&s.www.join("rotated/root.json")), 2, "publish replaces --root by the new root");
    assert_eq!(std::fs::read(&v2).unwrap(), std::fs::read(s.www.join("rotated/root.json")).unwrap());
    let v2_ids = root_keyids(&v2);
    assert_ne!(v1_ids, v2_ids);
    let mut expected: Vec<String> = v1_ids.iter().chain(&v2_ids).cloned().collect();
    let mut signed_by = signers(&v2);
    expected.sort();
    signed_by.sort();
    assert_eq!(signed_by, expected, "root v2 is signed by the old and the new key");
    assert_eq!(
        signers(&s.www.join("rotated/metadata/timestamp.json")),
        v2_ids,
        "release signed by the new key"
    );

    let outcome = s.apply("rotated").await.unwrap();
    assert!(matches!(outcome, ApplyOutcome::Committed { version: 2, .. }), "{outcome:?}");
    assert_eq!(s.trusted_root_version(), 2, "the box now trusts root v2");

    // Later releases are signed with the new key alone.
    s.publish(None, "rotated", 3, &PublishSpec { keys: &["c"], ..PublishSpec::default() }).await;
    let outcome = s.apply("rotated").await.unwrap();
    assert!(matches!(outcome, ApplyOutcome::Committed { version: 3, .. }), "{outcome:?}");

    // Whoever still holds the rotated-out key a publishes v4 under root v1, withholding
    // 2.root.json: the box starts from root v2, so key a no longer counts.
    s.publish(Some("repo"), "revoked", 4, &PublishSpec::default()).await;
    let err = s.assert_rejected("revoked", &["timestamp", "threshold"]).await;
    assert_eq!(s.trusted_root_version(), 2);
    eprintln!("old key after rotation: {err}");

    // tough rewrites its root.json in place on every load: a power cut can leave it empty. The
    // box's own copy, written atomically, still says root v2, so key a still does not count.
    std::fs::write(s.state.join("ota/datastore/root.json"), b"").unwrap();
    let err = s.assert_rejected("revoked", &["timestamp", "threshold"]).await;
    eprintln!("old key after a torn datastore root: {err}");
}

#[tokio::test]
async fn a_new_root_not_signed_by_the_old_root_is_rejected() {
    let s = Scenario::new(&PublishSpec::default()).await;
    s.publish(Some("repo"), "hijack", 2, &PublishSpec { rotate_to: &["c"], ..PublishSpec::default() }).await;
    // Only the new key vouches for root v2: drop the old key's signature.
    let v2 = s.www.join("hijack/metadata/2.root.json");
    let new_ids = root_keyids(&v2);
    edit_json(&v2, |v| {
        v["signatures"]
            .as_array_mut()
            .unwrap()
            .retain(|sig| new_ids.iter().any(|id| sig["keyid"].as_str() == Some(id.as_str())));
    });
    assert_eq!(signers(&v2), new_ids);
    let err = s.assert_rejected("hijack", &["root", "threshold"]).await;
    assert_eq!(s.trusted_root_version(), 1, "the box still trusts root v1");
    eprintln!("root v2 without the old signature: {err}");
}

#[tokio::test]
async fn a_set_with_bad_card_priors_is_not_signed() {
    let tmp = tempfile::tempdir().unwrap();
    let (set, repo) = (tmp.path().join("set"), tmp.path().join("repo"));
    make_set(&set, 1, "name = \"v1\"\n", &[]);
    let priors = set.join("thermal/priors.toml");
    std::fs::write(&priors, "[[card]]\nambient = 30.0\n").unwrap();
    let err = publish::publish(&publish_options(&set, &repo, &PublishSpec::default())).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains(&priors.display().to_string()), "{message}");
    assert!(message.contains("unknown field `ambient`"), "{message}");
    assert!(!repo.exists(), "nothing is written for a refused set");

    // The same set with priors a box reads is published.
    std::fs::write(
        &priors,
        "[[card]]\nmodel_contains = \"4090\"\nsink_capacity_j_per_k = 1100.0\n\
        sink_to_air_stopped_k_per_w = 0.35\nsink_to_air_full_k_per_w = 0.07\n\
        junction_to_sink_k_per_w = 0.04\nambient_c = 38.0\n",
    )
    .unwrap();
    let published = publish(&set, &repo, &PublishSpec::default()).await;
    assert_eq!(published.set_version, 1);
}
