//! `/metrics` in the Prometheus text format, rendered from a status snapshot at each scrape
//! (a fresh registry each time, so an engine or device that went away leaves no stale series).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::status::{EngineState, OtaState, Status};

type Labels = Vec<(String, String)>;
type FloatGauges = Family<Labels, Gauge<f64, AtomicU64>>;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn gauges(registry: &mut Registry, name: &str, help: &str) -> FloatGauges {
    let family = FloatGauges::default();
    registry.register(name, help, family.clone());
    family
}

fn set(family: &FloatGauges, pairs: &[(&str, &str)], value: Option<f64>) {
    if let Some(value) = value {
        family.get_or_create(&labels(pairs)).set(value);
    }
}

fn ota_version(state: &OtaState) -> Option<u64> {
    match state {
        OtaState::Idle => None,
        OtaState::Available { version }
        | OtaState::Staged { version }
        | OtaState::Activating { version }
        | OtaState::Committed { version }
        | OtaState::RolledBack { version, .. } => Some(*version),
    }
}

pub fn render(status: &Status) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("lucebox");

    let up = gauges(&mut registry, "engine_up", "1 while the engine is ready to serve");
    let restarts = Family::<Labels, Counter>::default();
    registry.register("engine_restarts", "Engine restarts since the supervisor started", restarts.clone());
    let tokens = gauges(&mut registry, "engine_tokens_per_second", "Tokens generated per second");
    let processing = gauges(&mut registry, "engine_requests_processing", "Requests being served");
    let deferred = gauges(&mut registry, "engine_requests_deferred", "Requests waiting in the queue");
    let waiting = gauges(&mut registry, "engine_waiting_prompt_tokens", "Prompt tokens not yet processed");
    for (name, engine) in &status.engines {
        let engine_labels =
            [("engine", name.as_str()), ("variant", &engine.variant), ("profile", &engine.profile)];
        set(&up, &engine_labels, Some(f64::from(u8::from(engine.state == EngineState::Ready))));
        restarts.get_or_create(&labels(&[("engine", name)])).inc_by(u64::from(engine.restarts));
        let load = engine.load.as_ref();
        set(&tokens, &[("engine", name)], load.map(|l| l.tokens_per_s));
        set(&processing, &[("engine", name)], load.map(|l| f64::from(l.requests_processing)));
        set(&deferred, &[("engine", name)], load.map(|l| f64::from(l.requests_deferred)));
        set(&waiting, &[("engine", name)], load.map(|l| l.waiting_prompt_tokens as f64));
    }

    let temperature = gauges(&mut registry, "device_temperature_celsius", "Junction (hotspot) temperature");
    let power = gauges(&mut registry, "device_power_watts", "Board power");
    let fan = gauges(&mut registry, "device_fan_duty_percent", "Fan duty");
    let peak =
        gauges(&mut registry, "device_predicted_peak_celsius", "Highest junction temperature predicted");
    let limit = gauges(&mut registry, "device_limit_celsius", "Junction temperature limit");
    let loop_cpu = Family::<Labels, Counter<f64, AtomicU64>>::default();
    registry.register(
        "device_fan_loop_cpu_seconds",
        "CPU time of the device's fan control loop since it started",
        loop_cpu.clone(),
    );
    if let Some(detection) = &status.hardware {
        for device in &detection.devices {
            let id = [("device", device.id.as_str())];
            set(&temperature, &id, device.telemetry.temperature_c);
            set(&power, &id, device.telemetry.power_w);
            set(&fan, &id, device.telemetry.fan_speed_pct);
        }
    }
    // The thermal controller's readings are newer than detection's: they win.
    for (id, thermal) in &status.thermal {
        let id = [("device", id.as_str())];
        set(&temperature, &id, thermal.junction_c);
        set(&power, &id, thermal.power_w);
        set(&fan, &id, thermal.fan_duty_pct);
        set(&peak, &id, thermal.predicted_peak_c);
        set(&limit, &id, thermal.limit_c);
        loop_cpu.get_or_create(&labels(&id)).inc_by(thermal.loop_cpu_s);
    }

    let ota = gauges(&mut registry, "ota_version", "Version of the profile set the OTA state refers to");
    let ota_state = crate::ota::state::name(&status.ota.state);
    set(&ota, &[("state", ota_state)], ota_version(&status.ota.state).map(|v| v as f64));
    let build = gauges(&mut registry, "build_info", "Supervisor build");
    set(&build, &[("version", env!("CARGO_PKG_VERSION"))], Some(1.0));

    let mut text = String::new();
    encode(&mut text, &registry)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{EngineStatus, LoadSnapshot, ThermalStatus};

    #[test]
    fn engine_device_and_ota_series_are_rendered() {
        let mut status = Status::default();
        status.engines.insert(
            "engine-0".into(),
            EngineStatus {
                state: EngineState::Ready,
                variant: "cpu".into(),
                profile: "tiny".into(),
                port: 8080,
                restarts: 3,
                load: Some(LoadSnapshot {
                    tokens_per_s: 17.5,
                    requests_deferred: 2,
                    ..LoadSnapshot::default()
                }),
                ..EngineStatus::new("engine-0", "process", 0)
            },
        );
        status.thermal.insert(
            "0000:03:00.0".into(),
            ThermalStatus {
                junction_c: Some(66.0),
                predicted_peak_c: Some(81.5),
                loop_cpu_s: 0.25,
                ..ThermalStatus::default()
            },
        );
        status.ota.state = OtaState::Committed { version: 12 };
        let text = render(&status).unwrap();
        for line in [
            "lucebox_engine_up{engine=\"engine-0\",variant=\"cpu\",profile=\"tiny\"} 1.0",
            "lucebox_engine_restarts_total{engine=\"engine-0\"} 3",
            "lucebox_engine_tokens_per_second{engine=\"engine-0\"} 17.5",
            "lucebox_engine_requests_deferred{engine=\"engine-0\"} 2.0",
            "lucebox_device_temperature_celsius{device=\"0000:03:00.0\"} 66.0",
            "lucebox_device_predicted_peak_celsius{device=\"0000:03:00.0\"} 81.5",
            "lucebox_device_fan_loop_cpu_seconds_total{device=\"0000:03:00.0\"} 0.25",
            "lucebox_ota_version{state=\"committed\"} 12.0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_stopped_engine_is_down() {
        let mut status = Status::default();
        status.engines.insert(
            "e".into(),
            EngineStatus {
                state: EngineState::Restarting { in_ms: 500 },
                variant: "v".into(),
                profile: "p".into(),
                ..EngineStatus::new("e", "process", 0)
            },
        );
        assert!(render(&status)
            .unwrap()
            .contains("lucebox_engine_up{engine=\"e\",variant=\"v\",profile=\"p\"} 0.0"));
    }
}
