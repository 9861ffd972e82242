//! Boxes whose fan belongs to an embedded controller (Strix Halo mini PCs): the board's firmware
//! hooks do the work, through the one hook runner of `crate::hooks` (one executable per event in
//! the board's hook folder, one flat JSON event on stdin, one JSON reply on stdout): `set-fan` with
//! `duty_pct`, `fan-auto`. Full speed is `set-fan` at 100 %. The fan loop is synchronous, so the
//! hook is run and waited for on its thread ([`HookRunner::call_blocking`]). Only a hook that
//! answers `{"ok":true}` has applied a command: a refusal, a bad reply, an exit code or a board
//! without the hook is an actuator error, which the fan loop answers with firmware auto.

use std::path::PathBuf;

use super::{ActuatorError, FanActuator, FanRange};
use crate::hardware::SysRoot;
use crate::hooks::{HookEvent, HookOutcome, HookRunner};

/// EC fan levels are coarse (e.g. 20 % steps); the hook maps the duty to what the board has.
const EC_MIN_DUTY_PCT: f64 = 20.0;

pub struct FirmwareHook {
    runner: HookRunner,
}

impl FirmwareHook {
    /// The hooks in the board folder `dir`, e.g.
    /// `/usr/local/lib/lucebox/firmware-hooks/framework-desktop`, acting on the tree under `root`.
    pub fn new(dir: PathBuf, root: SysRoot) -> Self {
        Self { runner: HookRunner::for_board_dir(dir, root) }
    }

    fn send(&self, event: HookEvent) -> Result<(), ActuatorError> {
        match self.runner.call_blocking(&event)? {
            HookOutcome::Applied(_) => Ok(()),
            HookOutcome::NotProvided => Err(ActuatorError::NoHook { path: self.runner.hook_path(&event) }),
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

    fn set_duty(&mut self, duty_pct: f64, _limit_c: f64) -> Result<(), ActuatorError> {
        let duty = duty_pct.clamp(EC_MIN_DUTY_PCT, 100.0).round() as u8;
        self.send(HookEvent::SetFan { duty_pct: duty, fan: None })
    }

    fn restore_auto(&mut self) -> Result<(), ActuatorError> {
        self.send(HookEvent::FanAuto { fan: None })
    }

    fn full_speed(&mut self) -> Result<(), ActuatorError> {
        self.send(HookEvent::SetFan { duty_pct: 100, fan: None })
    }

    fn command_timeout(&self) -> std::time::Duration {
        self.runner.timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::HookError;

    /// A board hook folder whose hooks run `body`.
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
        board_dir(dir.path(), &format!("cat >> {0}; echo >> {0}; echo '{{\"ok\":true}}'", log.display()));
        let mut hook = FirmwareHook::new(dir.path().to_path_buf(), SysRoot::live());
        hook.set_duty(42.4, 95.0).unwrap();
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
        let mut hook = FirmwareHook::new(dir.path().to_path_buf(), SysRoot::live());
        assert!(matches!(hook.full_speed(), Err(ActuatorError::Hook(HookError::Exit { .. }))));
    }

    /// The shipped hooks exit 0 when they refuse (a board tool missing, the EC busy): the reply
    /// says so, and a refused command is not taken as applied.
    #[test]
    fn a_refused_command_is_an_error_naming_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        board_dir(dir.path(), r#"echo '{"ok":false,"detail":"framework_tool not installed"}'"#);
        let mut hook = FirmwareHook::new(dir.path().to_path_buf(), SysRoot::live());
        let error = hook.set_duty(40.0, 95.0).unwrap_err().to_string();
        assert!(error.contains("refused: framework_tool not installed"), "{error}");
        assert!(hook.restore_auto().is_err());
    }

    #[test]
    fn a_board_without_the_hook_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut hook = FirmwareHook::new(dir.path().to_path_buf(), SysRoot::live());
        let error = hook.full_speed().unwrap_err().to_string();
        assert!(matches!(hook.full_speed(), Err(ActuatorError::NoHook { .. })));
        assert!(error.contains("set-fan") && error.contains("no hook"), "{error}");
    }
}
