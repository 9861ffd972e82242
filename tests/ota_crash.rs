//! kill -9 of `lucebox ota apply` at each install step leaves a box that boots the last
//! committed set: checked by starting the CLI again (which runs boot recovery) and reading the
//! active set; a later apply then completes. Also: a never-healthy set rolls back by itself,
//! and `ota rollback` returns to the previous set by hand.

mod common;
#[path = "ota_support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{copy_dir, make_set, publish, PublishSpec};

/// The binary under test; `OTA_TEST_BIN` overrides it (a shared target dir on a dev box
/// may hold another branch's build by the time the tests run).
fn bin() -> PathBuf {
    std::env::var_os("OTA_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_lucebox").into())
}

struct Box_ {
    _tmp: tempfile::TempDir,
    state: PathBuf,
    repo_v1: PathBuf,
    repo_v2: PathBuf,
}

impl Box_ {
    /// Repositories offering v1 and v2 (same root), and a box that committed v1.
    async fn new() -> Self {
        Self::with_profiles("name = \"v1\"\n", "name = \"v2\"\n", None).await
    }

    /// The same with these profile texts, and `variants` as each set's variants manifest.
    async fn with_profiles(v1: &str, v2: &str, variants: Option<&Path>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (sets, state) = (tmp.path().join("sets"), tmp.path().join("state"));
        let (repo_v1, repo_v2) = (tmp.path().join("repo-v1"), tmp.path().join("repo-v2"));
        make_set(&sets.join("v1"), 1, v1, &[]);
        make_set(&sets.join("v2"), 2, v2, &[]);
        if let Some(variants) = variants {
            for set in ["v1", "v2"] {
                std::fs::copy(variants, sets.join(set).join("variants.toml")).unwrap();
            }
        }
        publish(&sets.join("v1"), &repo_v1, &PublishSpec::default()).await;
        copy_dir(&repo_v1, &repo_v2);
        publish(&sets.join("v2"), &repo_v2, &PublishSpec::default()).await;
        std::fs::create_dir_all(state.join("ota")).unwrap();
        std::fs::copy(repo_v1.join("root.json"), state.join("ota/root.json")).unwrap();
        let b = Self { _tmp: tmp, state, repo_v1, repo_v2 };
        let out = b
            .lucebox(&["ota", "apply", "--repo", b.repo_v1.to_str().unwrap(), "--health-cmd", "/bin/true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(b.active_profile(), v1);
        b
    }

    fn lucebox(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args).env("LUCEBOX_STATE_DIR", &self.state).env("LUCEBOX_LOG", "warn");
        cmd
    }

    /// `ota status --json` (the boot path: it recovers an interrupted update first).
    fn status(&self) -> serde_json::Value {
        let out = self.lucebox(&["ota", "status", "--json"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// What the planner would read: the active set's profile.
    fn active_profile(&self) -> String {
        std::fs::read_to_string(self.state.join("sets/current/profiles/tiny.toml")).unwrap()
    }

    /// `ota apply` of v2 under the gate `health`, with `extra` arguments.
    fn apply_v2_command(&self, health: &str, extra: &[&str]) -> Command {
        let mut cmd =
            self.lucebox(&["ota", "apply", "--repo", self.repo_v2.to_str().unwrap(), "--health-cmd", health]);
        cmd.args(extra);
        cmd
    }

    fn apply_v2(&self, health: &str) -> std::process::Output {
        self.apply_v2_command(health, &[]).output().unwrap()
    }
}

/// Starts an apply that pauses after `step`, waits for it to get there, then SIGKILLs it.
fn kill_at(b: &Box_, step: &str) {
    let mut child = b
        .apply_v2_command("/bin/true", &["--pause-after", step])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line =
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("apply never paused");
        if line == format!("ota: paused after {step}") {
            break;
        }
    }
    // While it holds the update, the lock is visible and a second updater is refused.
    let status = b.status();
    let holder = status["lock"].as_str().unwrap_or_default();
    assert!(holder.contains(&format!("pid {}", child.id())) && holder.contains("ota apply"), "{status}");
    let second = b.apply_v2("/bin/true");
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("update locked by pid"), "{second:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    child.wait().unwrap();
}

fn active_version(status: &serde_json::Value) -> String {
    status["active_set"].as_str().unwrap_or_default().rsplit(' ').next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn kill_at_every_step_boots_the_committed_set() {
    for step in ["download", "verify", "unpack", "swap", "activation"] {
        let b = Box_::new().await;
        kill_at(&b, step);
        let status = b.status();
        assert_eq!(active_version(&status), "(v1)", "after kill at {step}: {status}");
        assert_eq!(b.active_profile(), "name = \"v1\"\n", "after kill at {step}");
        assert_eq!(status["lock"], serde_json::Value::Null, "lock must die with its holder ({step})");
        if matches!(step, "swap" | "activation") {
            assert_eq!(status["state"]["state"], "rolled-back", "after kill at {step}: {status}");
        }
        // The box is not wedged: the same update completes afterwards.
        let out = b.apply_v2("/bin/true");
        assert!(out.status.success(), "apply after kill at {step}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(b.active_profile(), "name = \"v2\"\n", "after re-apply ({step})");
        assert_eq!(active_version(&b.status()), "(v2)");
    }
}

#[tokio::test]
async fn a_never_healthy_set_rolls_back_by_itself() {
    let b = Box_::new().await;
    // A gate under which v1's engines come up and v2's never do.
    let gate = b.state.parent().unwrap().join("v1-only-healthy.sh");
    std::fs::write(&gate, "#!/bin/sh\ngrep -q v1 \"$1/profiles/tiny.toml\" || { echo 'engine never became healthy' >&2; exit 1; }\n").unwrap();
    std::fs::set_permissions(&gate, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = b.apply_v2(gate.to_str().unwrap());
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rolled back v2") && stdout.contains("not healthy"), "{stdout}");
    let status = b.status();
    assert_eq!(status["state"]["state"], "rolled-back");
    assert!(status["state"]["reason"].as_str().unwrap().contains("engine never became healthy"), "{status}");
    assert_eq!(active_version(&status), "(v1)");
    assert_eq!(b.active_profile(), "name = \"v1\"\n");
}

#[tokio::test]
async fn manual_rollback_returns_to_the_previous_set() {
    let b = Box_::new().await;
    assert!(b.apply_v2("/bin/true").status.success());
    assert_eq!(b.active_profile(), "name = \"v2\"\n");
    let out = b.lucebox(&["ota", "rollback", "--health-cmd", "/bin/true"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(b.active_profile(), "name = \"v1\"\n");
    let status = b.status();
    assert_eq!(active_version(&status), "(v1)");
    assert!(status["previous_set"].as_str().unwrap().ends_with("(v2)"), "{status}");
    // The rolled-back-from set stays installed, and a box restarts into v1.
    assert!(Path::new(&b.state.join("sets/previous/profiles/tiny.toml")).is_file());
}

/// A supervisor that starts while a CLI `ota apply` is in its health gate (`current` already names
/// the candidate) waits for the update to settle instead of planning from a set the box may not
/// keep: here the gate fails, and the engine comes up on the committed set's profile.
#[tokio::test]
async fn a_supervisor_started_during_an_apply_plans_the_set_the_box_keeps() {
    let tiny = std::fs::read_to_string(common::repo_root().join("profiles/tiny-cpu-test.toml")).unwrap();
    let v2 = tiny.replace("ctx = 512", "ctx = 256");
    assert_ne!(tiny, v2, "the tiny profile sets ctx as this test expects");
    let variants = common::repo_root().join("engine/variants.toml");
    let b = Box_::with_profiles(&tiny, &v2, Some(&variants)).await;

    // The gate passes v1 at once; v2's waits for `release`, then fails.
    let release = b.state.parent().unwrap().join("release");
    let gate = b.state.parent().unwrap().join("gate.sh");
    let script = format!(
        "#!/bin/sh\ngrep -q 'ctx = 512' \"$1/profiles/tiny.toml\" && exit 0\n\
         while [ ! -e '{}' ]; do sleep 0.1; done\necho 'engine never became healthy' >&2; exit 1\n",
        release.display()
    );
    std::fs::write(&gate, script).unwrap();
    std::fs::set_permissions(&gate, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut apply = b
        .apply_v2_command(gate.to_str().unwrap(), &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read without `ota status`, whose boot recovery would take the update lock from the apply.
    common::wait_for("the apply's health gate", Duration::from_secs(60), || b.active_profile() == v2);

    let mut rig = common::RunRig::new();
    let mut command = rig.command();
    command.env("LUCEBOX_STATE_DIR", &b.state);
    rig.spawn(command);
    let engine_props = || common::http(rig.engine_port, "GET", "/props", "");
    std::thread::sleep(Duration::from_secs(3));
    assert!(engine_props().is_none(), "no engine while the update is unsettled");

    std::fs::write(&release, "").unwrap();
    assert_eq!(apply.wait().unwrap().code(), Some(2), "the gate failed: rolled back");
    common::wait_for("the engine on the committed set", Duration::from_secs(60), || {
        engine_props().is_some_and(|(code, _)| code == 200)
    });
    let (_, body) = common::http(rig.web_port, "GET", "/api/v1/status", "").unwrap();
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let args = status["plan"]["groups"][0]["choice"]["launch"]["args"].to_string();
    assert!(args.contains("\"-c\",\"512\""), "v1's context: {args}");
    assert!(rig.terminate(Duration::from_secs(30)).success());
}

/// `ota status` on a settled box repairs nothing, so it does not take the update lock: an
/// `ota apply` started at the same moment is not refused. The lock file still names the last
/// holder that took it (the apply that committed v1), not `ota recover`.
#[tokio::test]
async fn ota_status_on_a_settled_box_leaves_the_update_lock_alone() {
    let b = Box_::new().await;
    let lock = b.state.join("ota/update.lock");
    let holder = || std::fs::read_to_string(&lock).unwrap();
    assert!(holder().contains("\"ota apply\""), "{}", holder());
    for _ in 0..3 {
        assert_eq!(active_version(&b.status()), "(v1)");
    }
    assert!(holder().contains("\"ota apply\""), "status took the lock: {}", holder());
}
