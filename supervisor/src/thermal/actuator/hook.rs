//! Boxes whose fan belongs to an embedded controller (Strix Halo mini PCs): a board-specific
//! executable does the work. It gets one JSON event on stdin, e.g.
//! `{"event":"fan-duty","device":"0000:c5:00.0","duty_pct":40}`, `{"event":"fan-auto",...}` or
//! `{"event":"fan-full",...}`, and must exit 0 within a few seconds.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{ActuatorError, FanActuator, FanRange};

/// The hook is killed after this long.
const HOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// EC fan levels are coarse (e.g. 20 % steps); the hook maps the duty to what the board has.
const EC_MIN_DUTY_PCT: f64 = 20.0;

pub struct FirmwareHook {
    exe: PathBuf,
    device: String,
}

impl FirmwareHook {
    pub fn new(exe: PathBuf, device: String) -> Self {
        Self { exe, device }
    }

    fn send(&self, event: serde_json::Value) -> Result<(), ActuatorError> {
        let err = |why: String| ActuatorError::Hook { path: self.exe.clone(), why };
        let mut child = Command::new(&self.exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| err(e.to_string()))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(event.to_string().as_bytes()).map_err(|e| err(e.to_string()))?;
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
        let duty = duty_pct.clamp(EC_MIN_DUTY_PCT, 100.0).round();
        self.send(serde_json::json!({"event": "fan-duty", "device": self.device, "duty_pct": duty}))
    }

    fn restore_auto(&mut self) -> Result<(), ActuatorError> {
        self.send(serde_json::json!({"event": "fan-auto", "device": self.device}))
    }

    fn full_speed(&mut self) -> Result<(), ActuatorError> {
        self.send(serde_json::json!({"event": "fan-full", "device": self.device}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &std::path::Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("hook.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn sends_one_json_event_per_command() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events");
        let exe = script(dir.path(), &format!("cat >> {}; echo >> {}", log.display(), log.display()));
        let mut hook = FirmwareHook::new(exe, "0000:c5:00.0".into());
        hook.set_duty(42.4, 60.0, 95.0).unwrap();
        hook.restore_auto().unwrap();
        let events: Vec<serde_json::Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(events[0]["event"], "fan-duty");
        assert_eq!(events[0]["duty_pct"], 42.0);
        assert_eq!(events[0]["device"], "0000:c5:00.0");
        assert_eq!(events[1]["event"], "fan-auto");
    }

    #[test]
    fn a_failing_hook_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut hook = FirmwareHook::new(script(dir.path(), "exit 3"), "x".into());
        assert!(matches!(hook.full_speed(), Err(ActuatorError::Hook { .. })));
    }
}
