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
