//! Parser for the engine's `/metrics` (Prometheus text exposition format, version 0.0.4).
//!
//! Only the `llamacpp:` series the load signal needs are kept; comments, unknown series and labelled
//! series are skipped so a newer engine that adds metrics still parses. A known series whose value is
//! not a number is an error naming the metric: silently reading 0 would hide a broken engine.

use serde::{Deserialize, Serialize};

/// The engine's counters and gauges we use. Missing series stay `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineMetrics {
    /// Gauge: requests in a slot right now.
    pub requests_processing: Option<f64>,
    /// Gauge: requests waiting for a free slot.
    pub requests_deferred: Option<f64>,
    /// Counter: prompt tokens processed (cache hits excluded); moves when a prompt finishes.
    pub prompt_tokens_total: Option<f64>,
    /// Counter: tokens generated; moves only when a request finishes.
    pub tokens_predicted_total: Option<f64>,
    /// Counter: seconds spent in prompt processing.
    pub prompt_seconds_total: Option<f64>,
    /// Counter: seconds spent generating.
    pub tokens_predicted_seconds_total: Option<f64>,
    /// Gauge: the engine's own average prompt throughput in tokens/s.
    pub prompt_tokens_seconds: Option<f64>,
    /// Gauge: the engine's own average generation throughput in tokens/s.
    pub predicted_tokens_seconds: Option<f64>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MetricsError {
    #[error("metrics line {line}: value {value:?} of {metric} is not a number")]
    BadValue { line: usize, metric: String, value: String },
    #[error("metrics line {line}: {metric} has no value")]
    MissingValue { line: usize, metric: String },
}

const PREFIX: &str = "llamacpp:";

impl EngineMetrics {
    /// Parses Prometheus text as `/metrics` serves it.
    pub fn parse(text: &str) -> Result<Self, MetricsError> {
        let mut metrics = Self::default();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some(sample) = Sample::split(line) else { continue };
            let Some(slot) = metrics.slot_for(sample.name) else { continue };
            let line_no = index + 1;
            let Some(value) = sample.value else {
                return Err(MetricsError::MissingValue { line: line_no, metric: sample.name.to_owned() });
            };
            *slot = Some(parse_value(value).ok_or_else(|| MetricsError::BadValue {
                line: line_no,
                metric: sample.name.to_owned(),
                value: value.to_owned(),
            })?);
        }
        Ok(metrics)
    }

    /// Where an unlabelled `llamacpp:` series is stored, if it is one we keep.
    fn slot_for(&mut self, name: &str) -> Option<&mut Option<f64>> {
        let short = name.strip_prefix(PREFIX)?;
        Some(match short {
            "requests_processing" => &mut self.requests_processing,
            "requests_deferred" => &mut self.requests_deferred,
            "prompt_tokens_total" => &mut self.prompt_tokens_total,
            "tokens_predicted_total" => &mut self.tokens_predicted_total,
            "prompt_seconds_total" => &mut self.prompt_seconds_total,
            "tokens_predicted_seconds_total" => &mut self.tokens_predicted_seconds_total,
            "prompt_tokens_seconds" => &mut self.prompt_tokens_seconds,
            "predicted_tokens_seconds" => &mut self.predicted_tokens_seconds,
            _ => return None,
        })
    }
}

/// One sample line: `name value [timestamp]`. Labelled series (`name{...} value`) yield `None`:
/// none of the series we keep carries labels.
struct Sample<'a> {
    name: &'a str,
    value: Option<&'a str>,
}

impl<'a> Sample<'a> {
    fn split(line: &'a str) -> Option<Self> {
        let mut fields = line.split_whitespace();
        let name = fields.next()?;
        if name.contains('{') {
            return None;
        }
        Some(Self { name, value: fields.next() })
    }
}

/// Prometheus values: floats as C++ streams print them (`3`, `0.5`, `1e+06`, `inf`), and Prometheus'
/// `NaN`, `+Inf`, `-Inf` (Rust's float parser accepts all of these, case-insensitively).
fn parse_value(text: &str) -> Option<f64> {
    text.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: &str = include_str!("../tests/fixtures/metrics-idle.txt");
    const BUSY: &str = include_str!("../tests/fixtures/metrics-busy.txt");

    #[test]
    fn reads_the_gauges_and_counters_of_an_idle_engine() {
        let m = EngineMetrics::parse(IDLE).unwrap();
        assert_eq!(m.requests_processing, Some(0.0));
        assert_eq!(m.requests_deferred, Some(0.0));
        assert_eq!(m.tokens_predicted_total, Some(0.0));
        assert_eq!(m.prompt_tokens_total, Some(0.0));
    }

    #[test]
    fn reads_a_busy_engine() {
        let m = EngineMetrics::parse(BUSY).unwrap();
        assert_eq!(m.requests_processing, Some(1.0));
        assert!(m.tokens_predicted_total.unwrap() > 0.0);
        assert!(m.predicted_tokens_seconds.unwrap() > 0.0);
    }

    #[test]
    fn skips_comments_unknown_and_labelled_series() {
        let text = "# HELP x y\n# TYPE x counter\nother_metric 7\n\
                    llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 3\n\
                    llamacpp:something_new 12\nllamacpp:requests_deferred 2\n";
        let m = EngineMetrics::parse(text).unwrap();
        assert_eq!(m, EngineMetrics { requests_deferred: Some(2.0), ..Default::default() });
    }

    #[test]
    fn reads_exponent_notation_and_timestamps() {
        let m = EngineMetrics::parse("llamacpp:prompt_tokens_total 1.5e+06 1712000000000\n").unwrap();
        assert_eq!(m.prompt_tokens_total, Some(1_500_000.0));
    }

    #[test]
    fn malformed_value_names_the_metric_and_line() {
        let err = EngineMetrics::parse("llamacpp:requests_processing 0\nllamacpp:requests_deferred two\n")
            .unwrap_err();
        assert_eq!(
            err,
            MetricsError::BadValue {
                line: 2,
                metric: "llamacpp:requests_deferred".into(),
                value: "two".into()
            }
        );
        assert!(err.to_string().contains("llamacpp:requests_deferred"));
    }

    #[test]
    fn missing_value_is_an_error() {
        let err = EngineMetrics::parse("llamacpp:tokens_predicted_total\n").unwrap_err();
        assert!(matches!(err, MetricsError::MissingValue { line: 1, .. }));
    }

    #[test]
    fn nan_is_kept_and_unknown_series_may_be_garbage() {
        let m = EngineMetrics::parse("llamacpp:predicted_tokens_seconds NaN\nfoo bar\n").unwrap();
        assert!(m.predicted_tokens_seconds.unwrap().is_nan());
    }
}
