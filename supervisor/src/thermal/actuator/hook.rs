//! Boxes whose fan belongs to an embedded controller (Strix Halo mini PCs): the board's firmware
//! hooks do the work, in the hook protocol of `crate::hooks` (one executable per event in the
//! board's hook folder, one flat JSON event on stdin): `set-fan` with `duty_pct`, `fan-auto`.
//! Full speed is `set-fan` at 100 %. The fan loop is synchronous, so the hook is run and waited
//! for here, with the same timeout the async runner uses.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{ActuatorError, FanActuator, FanRange};
use crate::hooks::HookEvent;

/// The hook is killed after this long.
const HOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// EC fan levels are coarse (e.g. 20 % steps); the hook maps the duty to what the board has.
const EC_MIN_DUTY_PCT: f64 = 20.0;

pub struct FirmwareHook {
    /// The board's hook folder, e.g. `/usr/local/lib/lucebox/firmware-hooks/framework-desktop`.
    dir: PathBuf,
}

impl FirmwareHook {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn send(&self, event: HookEvent) -> Result<(), ActuatorError> {
        let exe = self.dir.join(event.name());
        let err = |why: String| ActuatorError::Hook { path: exe.clone(), why };
        let json = serde_json::to_string(&event).map_err(|e| err(e.to_string()))?;
        let mut command = Command::new(&exe);
        command.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = crate::exec::spawn_blocking(&mut command).map_err(|e| err(e.to_string()))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(json.as_bytes()).map_err(|e| err(e.to_string()))?;
        }
        let started = Instant::now();
        loop {
            match child.try_wait().map_err(|e| err(e.to_string()))? {
                Some(status) if status.success() => return Ok(()),
                Some(status) => return Err(err(format!("exited with {status}"))),
                None if started.elapsed() > HOOK_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(err("timed out".into()));
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

impl FanActuator for FirmwareHook {
    fn kind(&self) -> &'static str {
        "firmware-hook"
    }

    fn range(&self) -> FanRange {
        FanRange { min_duty_pct: EC_MIN_DUTY_PCT, zero_rpm: false }
    }

    fn set_duty(&mut self, duty_pct: f64, _junction_c: f64, _limit_c: f64) -> Result<(), ActuatorError> {
        let duty = duty_pct.clamp(EC_MIN_DUTY_PCT, 100.0).round() as u8;
        self.send(HookEvent::SetFan { duty_pct: duty, fan: None })
    }

    fn restore_auto(&mut self) -> Result<(), ActuatorError> {
        self.send(HookEvent::FanAuto { fan: None })
    }

    fn full_speed(&mut self) -> Result<(), ActuatorError> {
        self.send(HookEvent::SetFan { duty_pct: 100, fan: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board hook folder whose hooks append their stdin to `events`.
    fn board_dir(dir: &std::path::Path, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        for name in ["set-fan", "fan-auto"] {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    #[test]
    fn speaks_the_board_hook_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events");
        board_dir(dir.path(), &format!("cat >> {}; echo >> {}", log.display(), log.display()));
        let mut hook = FirmwareHook::new(dir.path().to_path_buf());
        hook.set_duty(42.4, 60.0, 95.0).unwrap();
        hook.full_speed().unwrap();
        hook.restore_auto().unwrap();
        let events: Vec<HookEvent> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            events,
            [
                HookEvent::SetFan { duty_pct: 42, fan: None },
                HookEvent::SetFan { duty_pct: 100, fan: None },
                HookEvent::FanAuto { fan: None }
            ]
        );
    }

    #[test]
    fn a_failing_hook_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        board_dir(dir.path(), "exit 3");
        let mut hook = FirmwareHook::new(dir.path().to_path_buf());
        assert!(matches!(hook.full_speed(), Err(ActuatorError::Hook { .. })));
    }
}
