//! The last minutes of temperature, fan duty and tokens/s, sampled at 1 Hz from the status
//! model, so a page opened now can draw its charts at once.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::status::{unix_ms, Status, StatusModel};

/// Ten minutes at one sample a second.
pub const HISTORY_CAPACITY: usize = 600;
const SAMPLE_PERIOD: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Sample {
    pub unix_ms: u64,
    /// Per device id.
    pub junction_c: BTreeMap<String, f64>,
    pub fan_duty_pct: BTreeMap<String, f64>,
    /// Per engine name.
    pub tokens_per_s: BTreeMap<String, f64>,
}

impl Sample {
    /// The readings in `status`: the thermal controller's view first, else the detection's.
    pub fn of(status: &Status, unix_ms: u64) -> Self {
        let mut sample = Sample { unix_ms, ..Sample::default() };
        if let Some(detection) = &status.hardware {
            for device in &detection.devices {
                if let Some(t) = device.telemetry.temperature_c {
                    sample.junction_c.insert(device.id.clone(), t);
                }
                if let Some(d) = device.telemetry.fan_speed_pct {
                    sample.fan_duty_pct.insert(device.id.clone(), d);
                }
            }
        }
        for (id, thermal) in &status.thermal {
            if let Some(t) = thermal.junction_c {
                sample.junction_c.insert(id.clone(), t);
            }
            if let Some(d) = thermal.fan_duty_pct {
                sample.fan_duty_pct.insert(id.clone(), d);
            }
        }
        for (name, engine) in &status.engines {
            let tokens = engine.load.as_ref().map_or(0.0, |l| l.tokens_per_s);
            sample.tokens_per_s.insert(name.clone(), tokens);
        }
        sample
    }
}

#[derive(Clone, Default)]
pub struct History {
    ring: Arc<Mutex<VecDeque<Sample>>>,
}

impl History {
    /// Starts the 1 Hz sampler; it stops with `cancel`.
    pub fn spawn(status: StatusModel, cancel: CancellationToken) -> Self {
        let history = History::default();
        let ring = history.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_PERIOD);
            tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tick.tick() => ring.record(status.read(|s| Sample::of(s, unix_ms()))),
                }
            }
        });
        history
    }

    pub fn record(&self, sample: Sample) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == HISTORY_CAPACITY {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&*self.ring.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{EngineState, EngineStatus, LoadSnapshot, ThermalStatus};

    #[test]
    fn ring_is_bounded_and_keeps_the_newest() {
        let history = History::default();
        for i in 0..HISTORY_CAPACITY as u64 + 5 {
            history.record(Sample { unix_ms: i, ..Sample::default() });
        }
        let samples: Vec<serde_json::Value> = serde_json::from_slice(&history.to_json().unwrap()).unwrap();
        assert_eq!(samples.len(), HISTORY_CAPACITY);
        assert_eq!(samples[0]["unix_ms"], 5);
    }

    #[test]
    fn sample_prefers_the_thermal_view_and_reads_engine_load() {
        let mut status = Status::default();
        status.thermal.insert(
            "0000:03:00.0".into(),
            ThermalStatus { junction_c: Some(71.0), fan_duty_pct: Some(42.0), ..ThermalStatus::default() },
        );
        status.engines.insert(
            "engine-0".into(),
            EngineStatus {
                state: EngineState::Ready,
                load: Some(LoadSnapshot { tokens_per_s: 12.5, ..LoadSnapshot::default() }),
                ..EngineStatus::new("engine-0", "process", 0)
            },
        );
        let sample = Sample::of(&status, 9);
        assert_eq!(sample.junction_c["0000:03:00.0"], 71.0);
        assert_eq!(sample.fan_duty_pct["0000:03:00.0"], 42.0);
        assert_eq!(sample.tokens_per_s["engine-0"], 12.5);
    }
}
