//! Simulated plant for the bench: a two-node RC model (junction and heatsink) cooled by a fan
//! with a first-order lag, in the plant-file format of DESIGN.md. Controllers never see this.

use std::path::Path;

use serde::Deserialize;

use super::ThermalError;

/// Integration step of the plant (seconds); the junction time constant is ~2–4 s.
pub const PLANT_DT_S: f64 = 0.1;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlantSpec {
    pub name: String,
    pub ambient_c: f64,
    pub thermal: ThermalSpec,
    pub fan: FanSpec,
    pub limits: LimitSpec,
    pub power: PowerSpec,
    pub engine: EngineSpec,
    pub sensor: SensorSpec,
    pub stock: StockSpec,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ThermalSpec {
    pub junction_capacity_j_per_k: f64,
    pub sink_capacity_j_per_k: f64,
    pub junction_to_sink_k_per_w: f64,
    pub sink_to_air_full_k_per_w: f64,
    pub airflow_exponent: f64,
    pub sink_to_air_stopped_k_per_w: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FanSpec {
    pub min_duty_pct: f64,
    pub zero_rpm: bool,
    pub max_rpm: f64,
    pub lag_s: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    pub junction_limit_c: f64,
    pub junction_critical_c: f64,
    /// The board power limit the device reports (hwmon `power1_cap`, NVML's enforced limit):
    /// the one thing of the plant's power a controller sees. Optional: without it the
    /// controller starts from the generic priors, as on a device that reports none.
    #[serde(default)]
    pub power_cap_w: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PowerSpec {
    pub idle_w: f64,
    pub prefill_w: f64,
    pub decode_w: f64,
    pub per_stream_w: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    pub max_streams: u32,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SensorSpec {
    pub resolution_c: f64,
    pub noise_c: f64,
    pub period_s: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StockSpec {
    /// (junction °C, duty %) points, temperatures strictly rising.
    pub curve: Vec<(f64, f64)>,
}

impl PlantSpec {
    pub fn load(path: &Path) -> Result<Self, ThermalError> {
        let spec: PlantSpec = super::read_toml(path)?;
        spec.validate().map_err(|(field, why)| ThermalError::Invalid {
            path: path.to_path_buf(),
            field,
            why,
        })?;
        Ok(spec)
    }

    /// Checks physical sense; returns the offending key and why.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let positive = [
            ("thermal.junction_capacity_j_per_k", self.thermal.junction_capacity_j_per_k),
            ("thermal.sink_capacity_j_per_k", self.thermal.sink_capacity_j_per_k),
            ("thermal.junction_to_sink_k_per_w", self.thermal.junction_to_sink_k_per_w),
            ("thermal.sink_to_air_full_k_per_w", self.thermal.sink_to_air_full_k_per_w),
            ("thermal.airflow_exponent", self.thermal.airflow_exponent),
            ("thermal.sink_to_air_stopped_k_per_w", self.thermal.sink_to_air_stopped_k_per_w),
            ("fan.max_rpm", self.fan.max_rpm),
            ("fan.lag_s", self.fan.lag_s),
            ("engine.prefill_tokens_per_s", self.engine.prefill_tokens_per_s),
            ("engine.decode_tokens_per_s", self.engine.decode_tokens_per_s),
            ("sensor.resolution_c", self.sensor.resolution_c),
            ("sensor.period_s", self.sensor.period_s),
        ];
        let power_cap = self.limits.power_cap_w.map(|w| ("limits.power_cap_w", w));
        for (key, value) in positive.into_iter().chain(power_cap) {
            if !(value.is_finite() && value > 0.0) {
                return Err((key.into(), format!("must be a positive number, got {value}")));
            }
        }
        let non_negative = [
            ("power.idle_w", self.power.idle_w),
            ("power.prefill_w", self.power.prefill_w),
            ("power.decode_w", self.power.decode_w),
            ("power.per_stream_w", self.power.per_stream_w),
            ("sensor.noise_c", self.sensor.noise_c),
        ];
        for (key, value) in non_negative {
            if !(value.is_finite() && value >= 0.0) {
                return Err((key.into(), format!("must be zero or more, got {value}")));
            }
        }
        if !(0.0..100.0).contains(&self.fan.min_duty_pct) {
            return Err(("fan.min_duty_pct".into(), "must be in [0, 100)".into()));
        }
        if self.engine.max_streams == 0 {
            return Err(("engine.max_streams".into(), "must be at least 1".into()));
        }
        if !self.ambient_c.is_finite() || self.ambient_c >= self.limits.junction_limit_c {
            return Err(("ambient_c".into(), "must be below limits.junction_limit_c".into()));
        }
        if self.limits.junction_critical_c < self.limits.junction_limit_c {
            return Err(("limits.junction_critical_c".into(), "must be at or above junction_limit_c".into()));
        }
        if self.stock.curve.is_empty() || self.stock.curve.windows(2).any(|w| w[1].0 <= w[0].0) {
            return Err(("stock.curve".into(), "needs points with strictly rising temperatures".into()));
        }
        Ok(())
    }

    /// Plant steps between two sensor samples (each controller decides once a sample).
    pub fn sample_steps(&self) -> usize {
        ((self.sensor.period_s / PLANT_DT_S).round() as usize).max(1)
    }

    /// The duty the fan really runs at for a command: below the floor it stops (zero-rpm) or clamps.
    pub fn effective_duty(&self, command_pct: f64) -> f64 {
        super::fan::running_duty(command_pct, self.fan.min_duty_pct, self.fan.zero_rpm)
    }

    /// The duty the fan runs at when a daemon sends `command_pct` and the fan's firmware would
    /// command `firmware_pct`. No actuator the daemon has stops a zero-rpm fan on command (NVML
    /// reaches 0 % only through the driver's auto, an RDNA3/4 card stops only under its
    /// firmware's zero-rpm temperature), so a command under its floor hands the fan back to the
    /// firmware. The bench sends every controller's commands through this.
    pub fn duty_through_firmware(&self, command_pct: f64, firmware_pct: f64) -> f64 {
        let handed_back = self.fan.zero_rpm && command_pct < self.fan.min_duty_pct;
        self.effective_duty(if handed_back { firmware_pct } else { command_pct })
    }

    fn sink_to_air_k_per_w(&self, duty_pct: f64) -> f64 {
        let stopped = self.thermal.sink_to_air_stopped_k_per_w;
        if duty_pct <= 0.5 {
            return stopped;
        }
        let spinning =
            self.thermal.sink_to_air_full_k_per_w * (duty_pct / 100.0).powf(-self.thermal.airflow_exponent);
        spinning.min(stopped)
    }
}

/// Physical state of one simulated device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlantState {
    pub junction_c: f64,
    pub sink_c: f64,
    /// Duty the fan really turns at (after the lag).
    pub fan_duty_pct: f64,
}

impl PlantState {
    /// At rest at ambient with the fan stopped.
    pub fn at_ambient(spec: &PlantSpec) -> Self {
        Self { junction_c: spec.ambient_c, sink_c: spec.ambient_c, fan_duty_pct: 0.0 }
    }

    /// Advances one [`PLANT_DT_S`] step with `power_w` dissipated and the fan commanded to
    /// `effective_duty` (already passed through [`PlantSpec::effective_duty`]).
    pub fn step(&mut self, spec: &PlantSpec, power_w: f64, effective_duty: f64) {
        let dt = PLANT_DT_S;
        let lag = 1.0 - (-dt / spec.fan.lag_s).exp();
        self.fan_duty_pct += (effective_duty - self.fan_duty_pct) * lag;
        let t = &spec.thermal;
        let to_sink = (self.junction_c - self.sink_c) / t.junction_to_sink_k_per_w;
        let to_air = (self.sink_c - spec.ambient_c) / spec.sink_to_air_k_per_w(self.fan_duty_pct);
        self.junction_c += dt * (power_w - to_sink) / t.junction_capacity_j_per_k;
        self.sink_c += dt * (to_sink - to_air) / t.sink_capacity_j_per_k;
    }

    pub fn rpm(&self, spec: &PlantSpec) -> f64 {
        spec.fan.max_rpm * self.fan_duty_pct / 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> PlantSpec {
        toml::from_str(include_str!("../../../thermal/plants/r9700-blower.toml")).unwrap()
    }

    #[test]
    fn shipped_sample_is_valid_and_unknown_keys_are_rejected() {
        sample().validate().unwrap();
        let text = format!("{}\nbogus = 1\n", include_str!("../../../thermal/plants/r9700-blower.toml"));
        let err = toml::from_str::<PlantSpec>(&text).unwrap_err().to_string();
        assert!(err.contains("bogus"), "{err}");
    }

    /// The power limit a plant's device reports is optional, and where given a positive number.
    #[test]
    fn a_power_limit_is_optional_and_positive() {
        let mut spec = sample();
        assert_eq!(spec.limits.power_cap_w, Some(300.0));
        spec.limits.power_cap_w = None;
        spec.validate().unwrap();
        for bad in [0.0, -1.0, f64::NAN] {
            spec.limits.power_cap_w = Some(bad);
            assert_eq!(
                spec.validate().map_err(|(key, _)| key),
                Err("limits.power_cap_w".to_string()),
                "{bad}"
            );
        }
    }

    #[test]
    fn steady_state_matches_the_rc_network() {
        let spec = sample();
        let mut s = PlantState::at_ambient(&spec);
        for _ in 0..(3600.0 / PLANT_DT_S) as usize {
            s.step(&spec, 200.0, 100.0);
        }
        let r_sa = spec.thermal.sink_to_air_full_k_per_w;
        let expected_sink = spec.ambient_c + 200.0 * r_sa;
        let expected_junction = expected_sink + 200.0 * spec.thermal.junction_to_sink_k_per_w;
        assert!((s.sink_c - expected_sink).abs() < 0.1, "{} vs {expected_sink}", s.sink_c);
        assert!((s.junction_c - expected_junction).abs() < 0.1);
    }

    #[test]
    fn commands_below_the_floor_stop_or_clamp() {
        let mut spec = sample();
        spec.fan.zero_rpm = true;
        assert_eq!(spec.effective_duty(spec.fan.min_duty_pct - 1.0), 0.0);
        spec.fan.zero_rpm = false;
        assert_eq!(spec.effective_duty(1.0), spec.fan.min_duty_pct);
        assert_eq!(spec.effective_duty(150.0), 100.0);
    }

    /// A zero-rpm fan sent less than its floor runs its firmware's command, stopped where that
    /// stops it; a running command, or any command to a fan that never stops, is the daemon's.
    #[test]
    fn a_stop_reaches_a_zero_rpm_fan_through_its_firmware() {
        let mut spec = sample();
        spec.fan.zero_rpm = true;
        let floor = spec.fan.min_duty_pct;
        assert_eq!(spec.duty_through_firmware(0.0, 45.0), 45.0);
        assert_eq!(spec.duty_through_firmware(floor - 1.0, 0.0), 0.0);
        assert_eq!(spec.duty_through_firmware(floor - 1.0, floor - 2.0), 0.0, "the firmware's own stop");
        assert_eq!(spec.duty_through_firmware(60.0, 45.0), 60.0);
        spec.fan.zero_rpm = false;
        assert_eq!(spec.duty_through_firmware(0.0, 45.0), floor);
    }
}
