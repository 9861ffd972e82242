//! Offline fit of the thermal model from a recorded telemetry CSV (`thermal fit --log FILE`):
//! the same recursive least squares the daemon runs online, replayed over the log.

use std::path::Path;

use serde::Serialize;

use super::model::{ModelParams, ThermalModel};
use super::ThermalError;

/// Result of a fit: the parameters and how well they predict the log 30 s ahead.
#[derive(Debug, Clone, Serialize)]
pub struct FitReport {
    pub samples: usize,
    pub params: ModelParams,
    /// Heatsink heat capacity implied by the fit (J/K).
    pub sink_capacity_j_per_k: f64,
    /// Sink-to-air resistance at 0 % and 100 % duty implied by the fit (K/W).
    pub sink_to_air_stopped_k_per_w: Option<f64>,
    pub sink_to_air_full_k_per_w: Option<f64>,
    /// The ambient the heatsink cools towards (°C).
    pub ambient_c: f64,
    /// Mean absolute error of 30 s-ahead junction predictions over the second half of the log.
    pub mae_30s_c: Option<f64>,
}

/// One logged sample: junction °C, board power W, fan duty %.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogRow {
    pub t_s: f64,
    pub junction_c: f64,
    pub power_w: f64,
    pub fan_duty_pct: f64,
}

/// Reads a telemetry CSV with at least the columns `t_s,junction_c,power_w,fan_duty_pct` (any
/// order, more columns allowed; the bench's `--telemetry` output is one).
pub fn read_log(path: &Path) -> Result<Vec<LogRow>, ThermalError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ThermalError::Io { path: path.to_path_buf(), source: e })?;
    let invalid = |field: String, why: String| ThermalError::Invalid { path: path.to_path_buf(), field, why };
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| invalid("header".into(), "empty log".into()))?;
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let find = |name: &str| {
        columns
            .iter()
            .position(|c| *c == name)
            .ok_or_else(|| invalid("header".into(), format!("missing column {name}")))
    };
    let idx = [find("t_s")?, find("junction_c")?, find("power_w")?, find("fan_duty_pct")?];
    let mut rows = Vec::new();
    for (i, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let mut v = [0.0; 4];
        for (k, &col) in idx.iter().enumerate() {
            let raw = fields
                .get(col)
                .ok_or_else(|| invalid(format!("line {}", i + 1), "too few columns".into()))?;
            v[k] =
                raw.parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| {
                    invalid(format!("line {}", i + 1), format!("{:?} is not a number", raw))
                })?;
        }
        rows.push(LogRow { t_s: v[0], junction_c: v[1], power_w: v[2], fan_duty_pct: v[3] });
    }
    if rows.len() < 2 {
        return Err(invalid("rows".into(), "need at least two samples".into()));
    }
    Ok(rows)
}

/// Fits from the prior (or `start`) over `rows`, sampled at the log's median period.
pub fn fit(rows: &[LogRow], start: ModelParams) -> FitReport {
    let mut gaps: Vec<f64> = rows.windows(2).map(|w| w[1].t_s - w[0].t_s).filter(|g| *g > 0.0).collect();
    gaps.sort_by(f64::total_cmp);
    let dt = gaps.get(gaps.len() / 2).copied().unwrap_or(1.0);
    let mut model = ThermalModel::new(start, dt);
    let ahead = (30.0 / dt).round().max(1.0) as usize;
    let mut errors = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        model.observe(row.junction_c, row.power_w, row.fan_duty_pct);
        if i >= rows.len() / 2 && i + ahead < rows.len() {
            let future = &rows[i + 1..=i + ahead];
            let power: Vec<f64> = future.iter().map(|r| r.power_w).collect();
            let mut last = None;
            model.predict(row.junction_c, &power, |k| future[k].fan_duty_pct, |_, tj| last = Some(tj));
            if let Some(tj) = last {
                errors.push((tj - rows[i + ahead].junction_c).abs());
            }
        }
    }
    let [a, b, c, _] = model.params.sink;
    let resistance = |g: f64| (g > 0.0).then(|| a / g);
    FitReport {
        samples: rows.len(),
        sink_capacity_j_per_k: 1.0 / a,
        sink_to_air_stopped_k_per_w: resistance(b),
        sink_to_air_full_k_per_w: resistance(c),
        ambient_c: model.params.ambient_c(),
        mae_30s_c: (!errors.is_empty()).then(|| errors.iter().sum::<f64>() / errors.len() as f64),
        params: model.params,
    }
}
