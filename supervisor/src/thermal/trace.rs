//! Request traces for the bench: `t_s,prompt_tokens,output_tokens[,session]`, or the public Azure
//! LLM inference trace (`TIMESTAMP,ContextTokens,GeneratedTokens`) unchanged.

use std::path::Path;

use super::ThermalError;

/// One request arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    pub t_s: f64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
}

/// How to fit a trace to one box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceShaping {
    /// Keep every N-th request (1 keeps all).
    pub sample: u32,
    /// Divide arrival times by this.
    pub speedup: f64,
    /// Drop arrivals after this many seconds (after speedup).
    pub duration_s: Option<f64>,
}

impl Default for TraceShaping {
    fn default() -> Self {
        Self { sample: 1, speedup: 1.0, duration_s: None }
    }
}

pub fn load(path: &Path, shaping: TraceShaping) -> Result<Vec<Request>, ThermalError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ThermalError::Io { path: path.to_path_buf(), source: e })?;
    parse(&text, shaping).map_err(|(line, why)| ThermalError::Invalid {
        path: path.to_path_buf(),
        field: format!("line {line}"),
        why,
    })
}

#[derive(Clone, Copy)]
enum Format {
    Simple,
    Azure,
}

/// Parses a trace; errors carry the 1-based line number.
pub fn parse(text: &str, shaping: TraceShaping) -> Result<Vec<Request>, (usize, String)> {
    if shaping.sample == 0 || !(shaping.speedup.is_finite() && shaping.speedup > 0.0) {
        return Err((0, "--sample must be >= 1 and --speedup > 0".into()));
    }
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    let (_, header) = lines.next().ok_or((1, "empty trace".to_string()))?;
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let format = match columns.as_slice() {
        ["t_s", "prompt_tokens", "output_tokens"] | ["t_s", "prompt_tokens", "output_tokens", "session"] => {
            Format::Simple
        }
        ["TIMESTAMP", "ContextTokens", "GeneratedTokens", ..] => Format::Azure,
        _ => {
            return Err((
                1,
                format!(
                    "unknown header {header:?}; expected t_s,prompt_tokens,output_tokens[,session] or \
                     TIMESTAMP,ContextTokens,GeneratedTokens"
                ),
            ))
        }
    };
    let mut raw = Vec::new();
    for (index, line) in lines {
        let n = index + 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() < 3 {
            return Err((n, "expected at least 3 columns".into()));
        }
        let t = match format {
            Format::Simple => fields[0].parse::<f64>().map_err(|e| (n, format!("t_s: {e}")))?,
            Format::Azure => {
                azure_timestamp_s(fields[0]).ok_or((n, format!("bad TIMESTAMP {:?}", fields[0])))?
            }
        };
        let prompt = fields[1].parse::<u64>().map_err(|e| (n, format!("prompt tokens: {e}")))?;
        let output = fields[2].parse::<u64>().map_err(|e| (n, format!("output tokens: {e}")))?;
        if !t.is_finite() {
            return Err((n, "time is not finite".into()));
        }
        raw.push(Request { t_s: t, prompt_tokens: prompt, output_tokens: output });
    }
    raw.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let start = raw.first().map(|r| r.t_s).unwrap_or(0.0);
    let start = match format {
        Format::Simple => 0.0_f64.min(start),
        Format::Azure => start,
    };
    let out = raw
        .into_iter()
        .step_by(shaping.sample as usize)
        .map(|r| Request { t_s: (r.t_s - start) / shaping.speedup, ..r })
        .take_while(|r| shaping.duration_s.is_none_or(|d| r.t_s <= d))
        .collect();
    Ok(out)
}

/// Seconds since the Unix epoch of `YYYY-MM-DD HH:MM:SS[.fraction]` (UTC, as the Azure trace has).
fn azure_timestamp_s(s: &str) -> Option<f64> {
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.trim_end_matches('Z').split(':');
    let (h, min) = (t.next()?.parse::<i64>().ok()?, t.next()?.parse::<i64>().ok()?);
    let sec = t.next()?.parse::<f64>().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || !(0.0..61.0).contains(&sec)
    {
        return None;
    }
    Some((days_from_civil(y, m, day) * 86_400 + h * 3600 + min * 60) as f64 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_format_with_session_column() {
        let t = parse(
            "t_s,prompt_tokens,output_tokens,session\n0.5,100,20,a\n2,300,40,a\n",
            TraceShaping::default(),
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1], Request { t_s: 2.0, prompt_tokens: 300, output_tokens: 40 });
    }

    #[test]
    fn azure_format_is_read_unchanged_and_shaped() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:15:46.6805900,374,44\n\
                    2023-11-16 18:15:50.9951690,396,109\n\
                    2023-11-16 18:16:06.6805900,879,16\n";
        let all = parse(text, TraceShaping::default()).unwrap();
        assert_eq!(all[0].t_s, 0.0);
        assert!((all[2].t_s - 20.0).abs() < 1e-6);
        let shaped = parse(text, TraceShaping { sample: 2, speedup: 2.0, duration_s: None }).unwrap();
        assert_eq!(shaped.len(), 2);
        assert!((shaped[1].t_s - 10.0).abs() < 1e-6);
        let cut = parse(text, TraceShaping { duration_s: Some(5.0), ..Default::default() }).unwrap();
        assert_eq!(cut.len(), 2);
    }

    #[test]
    fn errors_name_the_line() {
        let err =
            parse("t_s,prompt_tokens,output_tokens\n1,2,3\nx,2,3\n", TraceShaping::default()).unwrap_err();
        assert_eq!(err.0, 3);
        assert!(parse("a,b,c\n", TraceShaping::default()).is_err());
    }

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }
}
