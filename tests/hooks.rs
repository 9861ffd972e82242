//! Firmware hooks against fakes of what they drive: a `framework_tool` and a `ryzenadj` on PATH
//! that record their arguments, and an `ec_su_axb35` sysfs tree. Also the protocol itself: the
//! timeout, exit codes, replies, and the fan fallback to firmware auto.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lucebox::hardware::SysRoot;
use lucebox::hooks::{Board, FanOutcome, FirmwareHooks, HookError, HookEvent, HookOutcome, HookRunner};
use lucebox::status::StatusModel;

fn shipped_hooks() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware-hooks")
}

fn write_executable(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A directory of fake tools; each call appends `name args...` to `calls.log`. A tool fails
/// (exit 1, message on stderr) when its first argument is listed in `fail_on`.
struct FakeTools {
    dir: tempfile::TempDir,
}

impl FakeTools {
    fn new(tools: &[&str], fail_on: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.log");
        for tool in tools {
            let fail_cases: String =
                fail_on.iter().map(|a| format!("  {a}) echo \"EC error on {a}\" >&2; exit 1 ;;\n")).collect();
            let script = format!(
                "#!/bin/sh\necho \"{tool} $*\" >> '{}'\ncase \"$1\" in\n{fail_cases}esac\nexit 0\n",
                log.display()
            );
            write_executable(&dir.path().join("bin").join(tool), &script);
        }
        Self { dir }
    }

    fn path_env(&self) -> String {
        format!("{}:/usr/bin:/bin", self.dir.path().join("bin").display())
    }

    fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.dir.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn runner(board: Board, tools: &FakeTools, root: &Path) -> HookRunner {
    HookRunner::new(shipped_hooks(), board, SysRoot::new(root)).with_env("PATH", tools.path_env())
}

fn applied(outcome: Result<HookOutcome, HookError>) -> String {
    match outcome {
        Ok(HookOutcome::Applied(reply)) => reply.detail.unwrap_or_default(),
        other => panic!("expected the hook to apply, got {other:?}"),
    }
}

#[tokio::test]
async fn board_is_found_by_dmi_under_a_root() {
    let root = tempfile::tempdir().unwrap();
    let dmi = root.path().join("sys/class/dmi/id");
    fs::create_dir_all(&dmi).unwrap();
    assert_eq!(Board::detect(&SysRoot::new(root.path())), None, "no DMI, no board");
    fs::write(dmi.join("board_vendor"), "GMKtec\n").unwrap();
    fs::write(dmi.join("board_name"), "AXB35-02\n").unwrap();
    fs::write(dmi.join("product_name"), "NucBox EVO-X2\n").unwrap();
    assert_eq!(Board::detect(&SysRoot::new(root.path())), Some(Board::SixunitedAxb35));
    fs::write(dmi.join("board_vendor"), "Framework\n").unwrap();
    fs::write(dmi.join("board_name"), "FRANMFCP06\n").unwrap();
    fs::write(dmi.join("product_name"), "Desktop (AMD Ryzen AI Max 300 Series)\n").unwrap();
    assert_eq!(Board::detect(&SysRoot::new(root.path())), Some(Board::FrameworkDesktop));
    let hooks =
        FirmwareHooks::for_this_board(&shipped_hooks(), &SysRoot::new(root.path()), StatusModel::new());
    assert_eq!(hooks.map(|h| h.board()), Some(Board::FrameworkDesktop));
    fs::write(dmi.join("board_vendor"), "ASUSTeK COMPUTER INC.\n").unwrap();
    fs::write(dmi.join("product_name"), "System Product Name\n").unwrap();
    assert!(FirmwareHooks::for_this_board(&shipped_hooks(), &SysRoot::new(root.path()), StatusModel::new())
        .is_none());
}

#[tokio::test]
async fn every_board_ships_every_event_as_an_executable() {
    let events = [
        HookEvent::Boot,
        HookEvent::set_fan(50, None).unwrap(),
        HookEvent::FanAuto { fan: None },
        HookEvent::power_limit(85_000, 120_000, 100_000).unwrap(),
        HookEvent::EngineCrashed { engine: "e".into(), exit: None },
        HookEvent::Shutdown,
    ];
    for board in Board::ALL {
        let runner = HookRunner::new(shipped_hooks(), board, SysRoot::live());
        for event in &events {
            let path = runner.hook_path(event);
            let mode = fs::metadata(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .permissions()
                .mode();
            assert!(mode & 0o111 != 0, "{} is not executable", path.display());
        }
    }
}

#[tokio::test]
async fn framework_desktop_drives_framework_tool() {
    let tools = FakeTools::new(&["framework_tool"], &[]);
    let root = tempfile::tempdir().unwrap();
    let runner = runner(Board::FrameworkDesktop, &tools, root.path());

    applied(runner.call(&HookEvent::set_fan(40, None).unwrap()).await);
    applied(runner.call(&HookEvent::set_fan(65, Some(1)).unwrap()).await);
    applied(runner.call(&HookEvent::FanAuto { fan: None }).await);
    applied(runner.call(&HookEvent::Shutdown).await);
    applied(
        runner
            .call(&HookEvent::EngineCrashed { engine: "engine-0".into(), exit: Some("signal 9".into()) })
            .await,
    );
    assert_eq!(
        tools.calls(),
        [
            "framework_tool --fansetduty 40",
            "framework_tool --fansetduty 1 65",
            "framework_tool --autofanctrl",
            "framework_tool --autofanctrl",
            "framework_tool --autofanctrl",
        ]
    );
}

#[tokio::test]
async fn power_limits_go_through_ryzenadj_on_both_boards() {
    for board in Board::ALL {
        let tools = FakeTools::new(&["ryzenadj"], &[]);
        let root = tempfile::tempdir().unwrap();
        let runner = runner(board, &tools, root.path());
        applied(runner.call(&HookEvent::power_limit(85_000, 120_000, 100_000).unwrap()).await);
        assert_eq!(
            tools.calls(),
            ["ryzenadj --stapm-limit=85000 --fast-limit=120000 --slow-limit=100000"],
            "{board:?}"
        );
    }
}

fn fake_axb35_tree(root: &Path) -> PathBuf {
    let ec = root.join("sys/class/ec_su_axb35");
    for n in 1..=3 {
        let fan = ec.join(format!("fan{n}"));
        fs::create_dir_all(&fan).unwrap();
        fs::write(fan.join("mode"), "auto\n").unwrap();
        fs::write(fan.join("level"), "0\n").unwrap();
        fs::write(fan.join("rpm"), "1800\n").unwrap();
    }
    ec
}

fn read(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_string()
}

#[tokio::test]
async fn axb35_sets_ec_fan_mode_and_level_in_sysfs() {
    let tools = FakeTools::new(&[], &[]);
    let root = tempfile::tempdir().unwrap();
    let ec = fake_axb35_tree(root.path());
    let runner = runner(Board::SixunitedAxb35, &tools, root.path());

    // 55 % lies between the EC's 20 % steps: it rounds up to level 3 (60 %).
    applied(runner.call(&HookEvent::set_fan(55, None).unwrap()).await);
    for n in 1..=3 {
        assert_eq!(read(ec.join(format!("fan{n}/mode"))), "fixed");
        assert_eq!(read(ec.join(format!("fan{n}/level"))), "3");
    }
    applied(runner.call(&HookEvent::set_fan(0, Some(2)).unwrap()).await);
    assert_eq!(read(ec.join("fan2/level")), "0");
    assert_eq!(read(ec.join("fan1/level")), "3", "only fan 2 was named");

    applied(runner.call(&HookEvent::Shutdown).await);
    for n in 1..=3 {
        assert_eq!(read(ec.join(format!("fan{n}/mode"))), "auto");
    }
}

#[tokio::test]
async fn axb35_without_the_module_refuses_with_the_fix() {
    let tools = FakeTools::new(&[], &[]);
    let root = tempfile::tempdir().unwrap();
    let runner = runner(Board::SixunitedAxb35, &tools, root.path());
    match runner.call(&HookEvent::set_fan(50, None).unwrap()).await {
        Err(HookError::Refused { detail, .. }) => assert!(detail.contains("ec_su_axb35"), "{detail}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failing_fan_command_hands_the_fan_back_to_firmware_auto() {
    // The EC rejects a fixed duty but accepts auto.
    let tools = FakeTools::new(&["framework_tool"], &["--fansetduty"]);
    let root = tempfile::tempdir().unwrap();
    let status = StatusModel::new();
    let hooks = FirmwareHooks::new(
        Board::FrameworkDesktop,
        runner(Board::FrameworkDesktop, &tools, root.path()),
        status.clone(),
    );

    match hooks.set_fan(30, None).await {
        FanOutcome::FellBackToAuto { error: HookError::Refused { detail, .. }, auto_applied: true } => {
            assert!(detail.contains("EC error on --fansetduty"), "{detail}")
        }
        other => panic!("expected a fallback to auto, got {other:?}"),
    }
    assert_eq!(tools.calls(), ["framework_tool --fansetduty 30", "framework_tool --autofanctrl"]);
    let events = status.snapshot().events;
    assert!(events.iter().any(|e| e.source == "hooks" && e.message.contains("set-fan")), "{events:?}");
}

#[tokio::test]
async fn a_missing_tool_is_named_in_the_refusal() {
    let tools = FakeTools::new(&[], &[]);
    let root = tempfile::tempdir().unwrap();
    let hooks = FirmwareHooks::new(
        Board::FrameworkDesktop,
        runner(Board::FrameworkDesktop, &tools, root.path()),
        StatusModel::new(),
    );
    match hooks.set_fan(30, None).await {
        FanOutcome::FellBackToAuto { error: HookError::Refused { detail, .. }, auto_applied: false } => {
            assert!(detail.contains("framework_tool not installed"), "{detail}")
        }
        other => panic!("expected a refusal and a failed fallback, got {other:?}"),
    }
}

/// A hooks folder holding one custom `set-fan` for the Framework board.
fn custom_hook(script: &str) -> (tempfile::TempDir, HookRunner) {
    let dir = tempfile::tempdir().unwrap();
    write_executable(&dir.path().join("framework-desktop/set-fan"), script);
    let runner = HookRunner::new(dir.path(), Board::FrameworkDesktop, SysRoot::live());
    (dir, runner)
}

/// A `set-fan` that starts a sleeper in its own process group and waits for it, and the file
/// the sleeper's pid is written to.
fn hung_hook() -> (tempfile::TempDir, HookRunner, tempfile::NamedTempFile) {
    let pid_file = tempfile::NamedTempFile::new().unwrap();
    let (dir, runner) =
        custom_hook(&format!("#!/bin/sh\nsleep 30 &\necho $! > '{}'\nwait\n", pid_file.path().display()));
    (dir, runner.with_timeout(Duration::from_millis(500)), pid_file)
}

/// Whether the sleeper of [`hung_hook`] still runs (a zombie waiting for its reaper does not).
fn still_running(pid_file: &Path) -> Option<String> {
    let pid: i32 = fs::read_to_string(pid_file).unwrap().trim().parse().unwrap();
    let state = fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| {
        s.rsplit(')').next().and_then(|rest| rest.split_whitespace().next().map(str::to_string))
    });
    state.filter(|s| s != "Z").map(|s| format!("sleep {pid} in state {s}"))
}

#[tokio::test]
async fn a_hung_hook_is_killed_with_its_children_at_the_timeout() {
    let (_dir, runner, pid_file) = hung_hook();
    let started = Instant::now();
    let result = runner.call(&HookEvent::set_fan(50, None).unwrap()).await;
    assert!(matches!(result, Err(HookError::Timeout { .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(still_running(pid_file.path()), None);
}

/// The fan loop waits for its hooks on its own thread: the same timeout and the same kill.
#[test]
fn a_hung_hook_waited_for_on_a_thread_is_killed_with_its_children_at_the_timeout() {
    let (_dir, runner, pid_file) = hung_hook();
    let started = Instant::now();
    let result = runner.call_blocking(&HookEvent::set_fan(50, None).unwrap());
    assert!(matches!(result, Err(HookError::Timeout { .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(still_running(pid_file.path()), None);
}

/// What the fan loop's hooks answer is read as the async caller reads it: a refusal, a bad reply
/// or an exit code is an error, and the hook sees the event and the environment.
#[test]
fn a_hook_waited_for_on_a_thread_answers_as_an_awaited_one() {
    let event = HookEvent::set_fan(42, Some(0)).unwrap();
    let (_d0, runner) = custom_hook(
        "#!/bin/sh\nin=$(cat)\nprintf '{\"ok\":true,\"detail\":\"%s|%s|%s\"}\\n' \"$LUCEBOX_BOARD\" \"$LUCEBOX_ROOT\" \"$(printf '%s' \"$in\" | sed 's/\"/_/g')\"\n",
    );
    assert_eq!(
        applied(runner.call_blocking(&event)),
        "framework-desktop||{_event_:_set-fan_,_duty_pct_:42,_fan_:0}"
    );
    let (_d1, runner) = custom_hook("#!/bin/sh\necho 'cannot reach EC' >&2\nexit 3\n");
    match runner.call_blocking(&event) {
        Err(HookError::Exit { stderr, status, .. }) => {
            assert_eq!(status.code(), Some(3));
            assert_eq!(stderr, "cannot reach EC");
        }
        other => panic!("expected an exit error, got {other:?}"),
    }
    let (_d2, runner) = custom_hook("#!/bin/sh\necho 'fan set'\n");
    assert!(matches!(runner.call_blocking(&event), Err(HookError::BadReply { .. })));
    let (_d3, runner) = custom_hook("#!/bin/sh\necho '{\"ok\":false,\"detail\":\"EC busy\"}'\n");
    match runner.call_blocking(&event) {
        Err(HookError::Refused { detail, .. }) => assert_eq!(detail, "EC busy"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(runner.call_blocking(&HookEvent::Boot).unwrap(), HookOutcome::NotProvided);
}

/// An operator copying a new hook over the old one holds it open for writing for a moment; the
/// kernel refuses to run it then (ETXTBSY). The call waits that moment out instead of failing.
#[tokio::test]
async fn a_hook_held_open_for_writing_for_a_moment_still_runs() {
    let (dir, runner) = custom_hook("#!/bin/sh\necho '{\"ok\": true, \"detail\": \"ran\"}'\n");
    let writer =
        fs::OpenOptions::new().append(true).open(dir.path().join("framework-desktop/set-fan")).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(60));
        drop(writer);
    });
    let outcome = runner.call(&HookEvent::set_fan(50, None).unwrap()).await;
    release.join().unwrap();
    assert_eq!(applied(outcome), "ran");
}

#[tokio::test]
async fn exit_codes_and_bad_replies_are_typed_errors() {
    let (_d1, runner) = custom_hook("#!/bin/sh\necho 'cannot reach EC' >&2\nexit 3\n");
    match runner.call(&HookEvent::set_fan(50, None).unwrap()).await {
        Err(HookError::Exit { stderr, status, .. }) => {
            assert_eq!(status.code(), Some(3));
            assert_eq!(stderr, "cannot reach EC");
        }
        other => panic!("expected an exit error, got {other:?}"),
    }
    let (_d2, runner) = custom_hook("#!/bin/sh\necho 'fan set'\n");
    assert!(matches!(
        runner.call(&HookEvent::set_fan(50, None).unwrap()).await,
        Err(HookError::BadReply { .. })
    ));
    let (_d3, runner) = custom_hook("#!/bin/sh\necho '{\"ok\":false}'\n");
    assert!(matches!(
        runner.call(&HookEvent::set_fan(50, None).unwrap()).await,
        Err(HookError::Refused { .. })
    ));
}

#[tokio::test]
async fn the_hook_reads_the_event_and_the_environment() {
    let (_dir, runner) = custom_hook(
        "#!/bin/sh\nin=$(cat)\nprintf '{\"ok\":true,\"detail\":\"%s|%s|%s\"}\\n' \"$LUCEBOX_BOARD\" \"$LUCEBOX_ROOT\" \"$(printf '%s' \"$in\" | sed 's/\"/_/g')\"\n",
    );
    let detail = applied(runner.call(&HookEvent::set_fan(42, Some(0)).unwrap()).await);
    assert_eq!(detail, "framework-desktop||{_event_:_set-fan_,_duty_pct_:42,_fan_:0}");
}

#[tokio::test]
async fn a_board_without_a_hook_for_an_event_does_not_support_it() {
    let (_dir, runner) = custom_hook("#!/bin/sh\nexit 0\n");
    assert_eq!(runner.call(&HookEvent::Boot).await.unwrap(), HookOutcome::NotProvided);
}
