//! The bench: runs controllers against a simulated plant and engine on one trace and reports the
//! figures of DESIGN.md. Every run uses the same seeded sensor noise and the same engine; fan
//! control never throttles the engine, and the report checks that every controller served the
//! same tokens.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::controller::{
    Controller, DecisionDetail, DeviceLimits, Observation, Oracle, Predictive, Stock, Target,
};
use super::forecast::PowerForecast;
use super::learned::LearnedFiles;
use super::model::ModelParams;
use super::plant::{PlantSpec, PlantState, PLANT_DT_S};
use super::safety::{SafetyLayer, Verdict};
use super::sensors::Readings;
use super::sim::{EngineSim, LoadSampler, Noise};
use super::trace::Request;
use super::ThermalError;

/// Seconds simulated after the last request is served, so the cool-down counts too.
const COOL_DOWN_S: f64 = 60.0;
/// Longest run the bench simulates.
const MAX_DURATION_S: f64 = 7.0 * 86_400.0;
/// A duty change smaller than this is not counted as a change.
const CHANGE_EPSILON_PCT: f64 = 0.5;
/// Horizon of the prediction error figure.
const PREDICTION_AHEAD_S: f64 = 30.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ControllerKind {
    Stock,
    Target,
    Predictive,
    Oracle,
    /// The oracle kept to survive unannounced work: about the best a controller that sees only
    /// the queue can do (run on request, not by `all`).
    OracleUnannounced,
}

impl ControllerKind {
    pub const ALL: [ControllerKind; 4] = [Self::Stock, Self::Target, Self::Predictive, Self::Oracle];

    pub fn name(self) -> &'static str {
        match self {
            Self::Stock => "stock",
            Self::Target => "target",
            Self::Predictive => "predictive",
            Self::Oracle => "oracle",
            Self::OracleUnannounced => "oracle-unannounced",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ceiling {
    /// The plant's own junction limit.
    PlantLimit,
    Fixed(f64),
    /// Stock's own peak on this trace ("same peak temperature").
    StockPeak,
}

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub controllers: Vec<ControllerKind>,
    pub ceiling: Ceiling,
    /// Simulated seconds; default: until the trace is served plus a cool-down.
    pub duration_s: Option<f64>,
    pub seed: u64,
    /// Record per-period telemetry of this controller's run (the CSV `thermal fit` reads).
    pub telemetry_of: Option<ControllerKind>,
    /// Where the predictive controller resumes its learned state from and saves it to, as a
    /// device does across restarts (default: it starts from the priors and keeps nothing).
    pub state_dir: Option<PathBuf>,
}

/// One sensor period of a bench run, as a device would log it, plus the bench's own truth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TelemetryRow {
    pub t_s: f64,
    pub junction_c: f64,
    pub power_w: f64,
    pub fan_duty_pct: f64,
    pub fan_rpm: f64,
    pub true_junction_c: f64,
    pub command_pct: f64,
    /// Why the predictive controller chose the command (empty columns for the others).
    pub detail: Option<DecisionDetail>,
}

/// Header of the telemetry CSV: what a device would log, the bench's truth, then the predictive
/// controller's [`DecisionDetail`].
pub fn telemetry_header() -> String {
    format!(
        "t_s,junction_c,power_w,fan_duty_pct,fan_rpm,true_junction_c,command_pct,{}",
        DecisionDetail::CSV_HEADER
    )
}

impl TelemetryRow {
    pub fn csv(&self) -> String {
        format!(
            "{:.1},{:.1},{:.1},{:.1},{:.0},{:.2},{:.1},{}",
            self.t_s,
            self.junction_c,
            self.power_w,
            self.fan_duty_pct,
            self.fan_rpm,
            self.true_junction_c,
            self.command_pct,
            self.detail.map_or_else(DecisionDetail::csv_empty, |d| d.csv())
        )
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ControllerResult {
    pub mean_duty_pct: f64,
    pub p95_duty_pct: f64,
    pub noise_db_vs_full: f64,
    pub peak_junction_c: f64,
    pub p99_junction_c: f64,
    pub seconds_over_limit: f64,
    pub duty_changes_per_min: f64,
    pub quiet_time_pct: f64,
    pub tokens_served: u64,
    pub prediction_mae_30s_c: Option<f64>,
    pub reduction_vs_stock_pct: Option<f64>,
    pub reduction_vs_target_pct: Option<f64>,
    pub share_of_achievable_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub plant: String,
    pub limit_c: f64,
    pub duration_s: f64,
    pub seed: u64,
    pub requests: usize,
    /// Whether every controller served the same tokens in the same time.
    pub same_service: bool,
    pub controllers: BTreeMap<&'static str, ControllerResult>,
    /// With a state directory: whether the predictive controller resumed a learned state from it
    /// (false: it started from the priors); it saved what it learned there after the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictive_resumed: Option<bool>,
    #[serde(skip)]
    pub telemetry: Vec<TelemetryRow>,
}

/// The simulated run length: until every request is served, plus a cool-down.
pub fn natural_duration_s(spec: &PlantSpec, trace: &[Request]) -> f64 {
    let mut engine = EngineSim::new(trace.to_vec());
    let mut t = 0.0;
    while !engine.drained() && t < MAX_DURATION_S {
        engine.step(spec);
        t += PLANT_DT_S;
    }
    t + COOL_DOWN_S
}

pub fn run(spec: &PlantSpec, trace: &[Request], options: &BenchOptions) -> Result<BenchReport, ThermalError> {
    let duration_s =
        options.duration_s.unwrap_or_else(|| natural_duration_s(spec, trace)).min(MAX_DURATION_S);
    let steps = (duration_s / PLANT_DT_S).round() as usize;
    let mut results: BTreeMap<&'static str, ControllerResult> = BTreeMap::new();
    let mut telemetry = Vec::new();
    let limit_c = match options.ceiling {
        Ceiling::PlantLimit => spec.limits.junction_limit_c,
        Ceiling::Fixed(c) => c,
        Ceiling::StockPeak => {
            let limit_c = spec.limits.junction_limit_c;
            let (stock, _) =
                simulate(spec, trace, ControllerKind::Stock, None, limit_c, steps, options.seed, None);
            // The reported peak is rounded to 0.01 °C; round the ceiling up so stock stays under it.
            stock.peak_junction_c + 0.01
        }
    };
    let learned = options
        .state_dir
        .as_deref()
        .filter(|_| options.controllers.contains(&ControllerKind::Predictive))
        .map(|dir| LearnedFiles::for_device(dir, &format!("bench-{}", spec.name), None));
    let predictive_resumed = learned.as_ref().map(|f| f.model.exists() || f.forecast.exists());
    for &kind in &options.controllers {
        let log = (options.telemetry_of == Some(kind)).then_some(&mut telemetry);
        let start = match (kind, &learned) {
            (ControllerKind::Predictive, Some(files)) => Some(resume(files)?),
            _ => None,
        };
        let (result, driver) = simulate(spec, trace, kind, start, limit_c, steps, options.seed, log);
        if let (Some(files), Some((params, forecast))) = (&learned, driver.learned()) {
            files.save(&params, forecast)?;
        }
        results.insert(kind.name(), result);
    }
    let tokens: Vec<u64> = results.values().map(|r| r.tokens_served).collect();
    let same_service = tokens.windows(2).all(|w| w[0] == w[1]);
    let mean = |name: &str| results.get(name).map(|r| r.mean_duty_pct);
    let (stock, target, oracle) = (mean("stock"), mean("target"), mean("oracle"));
    let mut controllers = BTreeMap::new();
    for (name, mut r) in results {
        r.reduction_vs_stock_pct = stock.filter(|s| *s > 0.0).map(|s| 100.0 * (s - r.mean_duty_pct) / s);
        r.reduction_vs_target_pct = target.filter(|t| *t > 0.0).map(|t| 100.0 * (t - r.mean_duty_pct) / t);
        // Only where the oracle beats stock is there a gap to close: where stock already runs
        // as quietly (a fan its firmware stops whenever the oracle would), a share would divide
        // by nothing or flip its sign.
        r.share_of_achievable_pct = match (stock, oracle) {
            (Some(s), Some(o)) if name != "oracle" && s - o > 1e-9 => {
                Some(100.0 * (s - r.mean_duty_pct) / (s - o))
            }
            _ => None,
        };
        controllers.insert(name, r);
    }
    Ok(BenchReport {
        plant: spec.name.clone(),
        limit_c,
        duration_s,
        seed: options.seed,
        requests: trace.len(),
        same_service,
        controllers,
        predictive_resumed,
        telemetry,
    })
}

/// The learned state a bench run resumes; unlike a device, which relearns a bad part from the
/// prior, the bench refuses it (a benchmark must start where it says).
fn resume(files: &LearnedFiles) -> Result<(ModelParams, Option<PowerForecast>), ThermalError> {
    let resumed = files.load();
    match resumed.errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok((resumed.params.unwrap_or_else(ModelParams::prior), resumed.forecast)),
    }
}

/// A controller as `lucebox run` drives a fan with it: under the daemon's safety layer, which
/// takes full speed at the limit, lifts the duty to its reactive floor near it, and hands the fan
/// to the firmware's automatic control (on the bench, the plant's stock curve) on a reading it
/// does not trust. The controller is asked only where the daemon would ask it.
struct UnderSafetyLayer<C> {
    safety: SafetyLayer,
    controller: C,
    firmware_auto: Stock,
}

impl<C: Controller> Controller for UnderSafetyLayer<C> {
    fn name(&self) -> &'static str {
        self.controller.name()
    }

    fn decide(&mut self, obs: &Observation) -> f64 {
        let readings = Readings {
            junction_c: obs.junction_c,
            power_w: Some(obs.power_w),
            fan_rpm: None,
            fan_duty_pct: Some(obs.fan_duty_pct),
        };
        let (duty, commanded) = match self.safety.judge(&Ok(readings)) {
            Verdict::Control { floor_pct } => {
                let duty = self.controller.decide(obs).max(floor_pct);
                (duty, Some(duty))
            }
            Verdict::FullSpeed(_) => (100.0, Some(100.0)),
            Verdict::FirmwareAuto(_) => (self.firmware_auto.decide(obs), None),
        };
        self.controller.commanded(commanded);
        duty
    }

    fn prediction_30s_c(&self) -> Option<f64> {
        self.controller.prediction_30s_c()
    }

    fn predicted_peak_c(&self) -> Option<f64> {
        self.controller.predicted_peak_c()
    }

    fn learned(&self) -> Option<(ModelParams, &PowerForecast)> {
        self.controller.learned()
    }

    fn detail(&self) -> Option<DecisionDetail> {
        self.controller.detail()
    }
}

enum Driver {
    Observing(Box<dyn Controller>),
    Oracle(Box<Oracle>),
}

impl Driver {
    fn learned(&self) -> Option<(ModelParams, &PowerForecast)> {
        match self {
            Driver::Observing(controller) => controller.learned(),
            Driver::Oracle(_) => None,
        }
    }
}

/// Board power of every plant step of the run (what the oracle knows in advance).
fn power_timeline(spec: &PlantSpec, trace: &[Request], steps: usize) -> Vec<f64> {
    let mut engine = EngineSim::new(trace.to_vec());
    (0..steps).map(|_| engine.step(spec)).collect()
}

/// One controller's run; `start` is the predictive controller's learned state to resume (default:
/// the priors). Returns the figures and the controller as it ended.
#[allow(clippy::too_many_arguments)]
fn simulate(
    spec: &PlantSpec,
    trace: &[Request],
    kind: ControllerKind,
    start: Option<(ModelParams, Option<PowerForecast>)>,
    limit_c: f64,
    steps: usize,
    seed: u64,
    mut telemetry: Option<&mut Vec<TelemetryRow>>,
) -> (ControllerResult, Driver) {
    let limits = DeviceLimits {
        junction_limit_c: limit_c,
        min_duty_pct: spec.fan.min_duty_pct,
        zero_rpm: spec.fan.zero_rpm,
        power_cap_w: spec.limits.power_cap_w,
    };
    let period_steps = spec.sample_steps();
    let period_s = period_steps as f64 * PLANT_DT_S;
    let mut driver = match kind {
        ControllerKind::Stock => Driver::Observing(Box::new(Stock::new(spec.stock.curve.clone()))),
        ControllerKind::Target => Driver::Observing(Box::new(Target::new(limits))),
        ControllerKind::Predictive => {
            let (params, forecast) = start.unwrap_or_else(|| (ModelParams::prior(), None));
            Driver::Observing(Box::new(UnderSafetyLayer {
                safety: SafetyLayer::new(limit_c),
                controller: Predictive::new(limits, params, period_s).with_forecast(forecast),
                firmware_auto: Stock::new(spec.stock.curve.clone()),
            }))
        }
        ControllerKind::Oracle => {
            Driver::Oracle(Box::new(Oracle::new(spec.clone(), limit_c, power_timeline(spec, trace, steps))))
        }
        ControllerKind::OracleUnannounced => {
            let oracle = Oracle::new(spec.clone(), limit_c, power_timeline(spec, trace, steps));
            Driver::Oracle(Box::new(oracle.surviving_unannounced_work()))
        }
    };
    let mut engine = EngineSim::new(trace.to_vec());
    let mut sampler = LoadSampler::new(seed);
    let mut noise = Noise::new(seed);
    let mut state = PlantState::at_ambient(spec);
    let mut metrics = Metrics::new(spec, limit_c, steps);
    // The fan's firmware, reading the same sensor: it drives a zero-rpm fan sent a stop.
    let mut firmware = Stock::new(spec.stock.curve.clone());
    let mut command = spec.effective_duty(0.0);
    let mut period_energy = 0.0;
    let ahead_periods = (PREDICTION_AHEAD_S / period_s).round() as usize;
    let mut predictions: Vec<Option<f64>> = Vec::new();
    for step in 0..steps {
        sampler.follow(step as f64 * PLANT_DT_S, &engine);
        if step % period_steps == 0 {
            let reading = state.junction_c + spec.sensor.noise_c * noise.gaussian();
            let obs = Observation {
                t_s: step as f64 * PLANT_DT_S,
                junction_c: (reading / spec.sensor.resolution_c).round() * spec.sensor.resolution_c,
                power_w: if step == 0 { spec.power.idle_w } else { (period_energy / period_s).round() },
                fan_duty_pct: state.fan_duty_pct.round(),
                load: sampler.latest().cloned(),
            };
            let (next, detail) = match &mut driver {
                Driver::Oracle(oracle) => (oracle.decide(&state, step), None),
                Driver::Observing(controller) => {
                    let duty = controller.decide(&obs);
                    predictions.push(controller.prediction_30s_c());
                    (duty, controller.detail())
                }
            };
            if let Some(log) = telemetry.as_deref_mut() {
                log.push(TelemetryRow {
                    t_s: obs.t_s,
                    junction_c: obs.junction_c,
                    power_w: obs.power_w,
                    fan_duty_pct: obs.fan_duty_pct,
                    fan_rpm: state.rpm(spec).round(),
                    true_junction_c: state.junction_c,
                    command_pct: next,
                    detail,
                });
            }
            let effective = spec.duty_through_firmware(next, firmware.decide(&obs));
            if step > 0 && (effective - command).abs() > CHANGE_EPSILON_PCT {
                metrics.changes += 1;
            }
            command = effective;
            period_energy = 0.0;
            let period = step / period_steps;
            if let Some(Some(predicted)) = period.checked_sub(ahead_periods).and_then(|i| predictions.get(i))
            {
                metrics.prediction_errors.push((predicted - state.junction_c).abs());
            }
        }
        let power = engine.step(spec);
        period_energy += power * PLANT_DT_S;
        state.step(spec, power, command);
        metrics.record(spec, &state);
    }
    (metrics.finish(engine.tokens_served()), driver)
}

struct Metrics {
    duties: Vec<f64>,
    junctions: Vec<f64>,
    loudness: f64,
    quiet_steps: usize,
    over_steps: usize,
    changes: usize,
    prediction_errors: Vec<f64>,
    limit_c: f64,
}

impl Metrics {
    fn new(spec: &PlantSpec, limit_c: f64, steps: usize) -> Self {
        let _ = spec;
        Self {
            duties: Vec::with_capacity(steps),
            junctions: Vec::with_capacity(steps),
            loudness: 0.0,
            quiet_steps: 0,
            over_steps: 0,
            changes: 0,
            prediction_errors: Vec::new(),
            limit_c,
        }
    }

    fn record(&mut self, spec: &PlantSpec, state: &PlantState) {
        let duty = state.fan_duty_pct;
        self.duties.push(duty);
        self.junctions.push(state.junction_c);
        // Sound power ∝ rpm^5 (ΔL = 50·log10 of the rpm ratio).
        self.loudness += (state.rpm(spec) / spec.fan.max_rpm).powi(5);
        if duty <= spec.fan.min_duty_pct + 0.5 {
            self.quiet_steps += 1;
        }
        if state.junction_c > self.limit_c + 1e-9 {
            self.over_steps += 1;
        }
    }

    fn finish(mut self, tokens_served: u64) -> ControllerResult {
        let n = self.duties.len().max(1) as f64;
        let minutes = n * PLANT_DT_S / 60.0;
        let mean_duty = self.duties.iter().sum::<f64>() / n;
        let loudness = self.loudness / n;
        let prediction_mae = (!self.prediction_errors.is_empty())
            .then(|| self.prediction_errors.iter().sum::<f64>() / self.prediction_errors.len() as f64);
        ControllerResult {
            mean_duty_pct: round2(mean_duty),
            p95_duty_pct: round2(percentile(&mut self.duties, 0.95)),
            noise_db_vs_full: round2(if loudness > 0.0 {
                (10.0 * loudness.log10()).max(-99.0)
            } else {
                -99.0
            }),
            peak_junction_c: round2(self.junctions.iter().copied().fold(f64::MIN, f64::max)),
            p99_junction_c: round2(percentile(&mut self.junctions, 0.99)),
            seconds_over_limit: round2(self.over_steps as f64 * PLANT_DT_S),
            duty_changes_per_min: round2(if minutes > 0.0 { self.changes as f64 / minutes } else { 0.0 }),
            quiet_time_pct: round2(100.0 * self.quiet_steps as f64 / n),
            tokens_served,
            prediction_mae_30s_c: prediction_mae.map(round2),
            reduction_vs_stock_pct: None,
            reduction_vs_target_pct: None,
            share_of_achievable_pct: None,
        }
    }
}

fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    values[i]
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Renders the report as a readable table.
pub fn render(report: &BenchReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "plant {}  limit {:.2} °C  {:.0} s  {} requests  seed {}  same tokens served: {}",
        report.plant,
        report.limit_c,
        report.duration_s,
        report.requests,
        report.seed,
        if report.same_service { "yes" } else { "NO" }
    );
    if let Some(resumed) = report.predictive_resumed {
        let from = if resumed { "resumed its learned state" } else { "started from the priors" };
        let _ = writeln!(out, "predictive {from}; what it learned is saved for the next run");
    }
    let _ = writeln!(
        out,
        "{:<11} {:>6} {:>6} {:>7} {:>6} {:>6} {:>6} {:>7} {:>6} {:>8} {:>6} {:>7} {:>7} {:>6}",
        "controller",
        "mean%",
        "p95%",
        "noisedB",
        "peakC",
        "p99C",
        "over_s",
        "chg/min",
        "quiet%",
        "tokens",
        "mae30",
        "vsStock",
        "vsTarg",
        "share"
    );
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
    for kind in ControllerKind::ALL.into_iter().chain([ControllerKind::OracleUnannounced]) {
        let Some(r) = report.controllers.get(kind.name()) else { continue };
        let _ = writeln!(
            out,
            "{:<11} {:>6.1} {:>6.1} {:>7.1} {:>6.1} {:>6.1} {:>6.1} {:>7.2} {:>6.1} {:>8} {:>6} {:>7} {:>7} {:>6}",
            kind.name(),
            r.mean_duty_pct,
            r.p95_duty_pct,
            r.noise_db_vs_full,
            r.peak_junction_c,
            r.p99_junction_c,
            r.seconds_over_limit,
            r.duty_changes_per_min,
            r.quiet_time_pct,
            r.tokens_served,
            opt(r.prediction_mae_30s_c),
            opt(r.reduction_vs_stock_pct),
            opt(r.reduction_vs_target_pct),
            opt(r.share_of_achievable_pct),
        );
    }
    out
}
