//! Power over the next seconds from the engine's queue: queued prefill, active decode streams
//! and their remaining tokens, with per-phase power and engine rates learned from what the
//! device and the engine show; the requests still to come where they arrive while the engine
//! works; and the size of a prompt (or burst of prompts) that may arrive unannounced.

use std::collections::VecDeque;

use lucebox_engine::{LoadSignal, SlotLoad};
use serde::{Deserialize, Serialize};

/// Learning rate of the per-phase power and rate averages.
const ALPHA: f64 = 0.2;
/// Per period that shows one, the fastest prefill seen is forgotten by this factor (a new
/// model or profile may prefill slower).
const FAST_PREFILL_DECAY: f64 = 0.98;
/// Streams tracked separately for decode power; more share the last entry's slope.
const MAX_STREAMS_TRACKED: usize = 16;
/// Per new request the "large prompt" memory decays by this factor (half of it in ~700 requests):
/// the largest prompts (an agent's compaction, a document sent whole) come hundreds of requests
/// apart on a busy box, and a memory of about a hundred requests forgot them between two
/// (thermal/FINDINGS.md, "The size of a surprise, remembered").
const PROMPT_MEMORY_DECAY: f64 = 0.999;
/// Learning rate (per arrival) of the share of requests that arrive while the engine is busy.
const BUSY_ALPHA: f64 = 0.15;
/// Below this share of busy arrivals the work is taken as sequential (one user or agent waiting
/// for each answer): a new prompt then comes only after the engine has been idle for a while.
const SEQUENTIAL_BELOW: f64 = 0.05;
/// Arrivals seen before the arrival pattern is trusted at all.
const MIN_ARRIVALS: u32 = 12;
/// The shortest idle gap is trusted only to this share (a shorter one may come).
const GAP_TRUST: f64 = 0.75;
/// Idle gaps seen before the shortest one is trusted.
const MIN_GAPS: u32 = 3;
/// A longer idle gap moves the shortest-gap floor only as far as one this many times the floor
/// (at least 1 s): a pause between sessions says little about how soon a prompt may follow an
/// answer.
const GAP_RELAX_CAP: f64 = 3.0;
/// The board power limit the priors assume where the device reports none.
const GENERIC_POWER_CAP_W: f64 = 300.0;
/// A reported limit outside this range is not believed (a driver's placeholder, a unit slip):
/// the generic one is assumed instead.
const PLAUSIBLE_POWER_CAP_W: std::ops::RangeInclusive<f64> = 20.0..=1500.0;
/// Prior decode power for one stream and the extra per stream, as shares of the board's power
/// limit, until measured: decode streams weights from memory and draws less than the limit
/// that a compute-bound prefill runs at (180 W and 10 W of a 300 W card).
const DECODE_PRIOR_SHARE: (f64, f64) = (0.6, 1.0 / 30.0);
/// Arrivals over this window (or over the span since the first of them, where a burst began
/// within it) give the rate of the requests still to come ...
const STREAM_WINDOW_S: f64 = 60.0;
/// ... whose power a plan expects to fade over this time constant: a burst seen for the last
/// minute is expected to last about half as long again (each period re-plans while it lasts).
const STREAM_FADE_S: f64 = 30.0;
/// Most arrival times kept for the rate (a bound on memory at any request rate).
const MAX_ARRIVALS_KEPT: usize = 256;
/// Format of the saved forecast (see [`PowerForecast::check`]).
const FORMAT_VERSION: u32 = 1;
/// The rise the forecast missed is remembered with this half-life (of seconds observed) ...
const MISSED_RISE_HALF_LIFE_S: f64 = 690.0;
/// ... and trusted once this much of it has been seen.
const MISSED_RISE_TRUSTED_AFTER_S: f64 = 60.0;

/// A reported board power limit, where it is one a card can have.
fn plausible_cap(power_cap_w: Option<f64>) -> Option<f64> {
    power_cap_w.filter(|w| PLAUSIBLE_POWER_CAP_W.contains(w))
}

/// Which phase the engine was in over one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Idle,
    Prefill,
    Decode(u32),
}

/// Whether two samples of a slot show the same request: the slot's id is reused, the prompt
/// length tells requests apart.
fn same_request(a: &SlotLoad, b: &SlotLoad) -> bool {
    a.id == b.id && a.prompt_tokens == b.prompt_tokens
}

/// The slot of `prev` that holds the same request as `slot`, if any.
fn earlier<'a>(prev: &'a LoadSignal, slot: &SlotLoad) -> Option<&'a SlotLoad> {
    prev.slots.iter().find(|p| same_request(p, slot))
}

/// `power` with `extra(k)` added at every step `k` from `drained` on: work taken to go on once
/// the known work drains (the stream of requests still to come, the work the queue did not show).
pub fn after_drain(power: &[f64], drained: usize, extra: impl Fn(usize) -> f64) -> Vec<f64> {
    power.iter().enumerate().map(|(k, &p)| if k < drained { p } else { p + extra(k) }).collect()
}

pub fn phase(load: &LoadSignal) -> Phase {
    if load.waiting_prompt_tokens() > 0 {
        Phase::Prefill
    } else if load.active_streams() > 0 {
        Phase::Decode(load.active_streams())
    } else {
        Phase::Idle
    }
}

/// What the forecast has learned is saved per device with the thermal model (see
/// `thermal::learned`), so a restarted box resumes it; only the live view of the engine is not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PowerForecast {
    version: u32,
    /// The model (file name) the engine served while the power and rates below were learned;
    /// absent from forecasts saved before it was kept, and where the engine does not say.
    #[serde(default)]
    model: Option<String>,
    idle_w: f64,
    prefill_w: f64,
    decode_w: [Option<f64>; MAX_STREAMS_TRACKED],
    /// Prefill rate measured across periods (a prompt still waiting at two samples in a row).
    prefill_tokens_per_s: f64,
    /// The fastest prefill shown within one period, slowly forgotten (0 until one is shown;
    /// absent from forecasts saved before it was learned).
    #[serde(default)]
    fast_prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    /// The largest prefill backlog a prompt (or prompts arriving together) brought, slowly
    /// forgotten: the size of a surprise to keep room for.
    large_prompt_tokens: f64,
    typical_prompt_tokens: f64,
    typical_output_tokens: f64,
    #[serde(skip)]
    last: Option<LoadSignal>,
    /// The last period's power and the phase both samples around it showed, waiting for the next
    /// sample to confirm it (see [`PowerForecast::observe`]), and whether it was learned already.
    #[serde(skip)]
    unconfirmed_power: Option<(Phase, f64, bool)>,
    /// The phases a confirmed period has taught; absent from forecasts saved before periods were
    /// confirmed, which learn as before until one is.
    #[serde(default)]
    confirmed: ConfirmedPhases,
    /// How long the prompt being prefilled has shown no progress: llama-server counts a prompt's
    /// tokens a batch (2048) at a time, so a slow engine shows none for several samples, then a
    /// batch at once.
    #[serde(skip)]
    prefill_unseen_s: f64,
    /// Requests seen arriving.
    arrivals: u32,
    /// Share of arrivals (moving average) that found the engine busy.
    busy_share: f64,
    /// Seconds the engine has been idle now; not known after a restart until it first works.
    #[serde(skip)]
    idle_s: Option<f64>,
    /// A slowly relaxing minimum of the idle time before an arrival.
    gap_floor_s: Option<f64>,
    /// Arrivals that found the engine idle.
    gaps: u32,
    /// Seconds observed: the clock of `recent_arrivals`.
    #[serde(skip)]
    clock_s: f64,
    /// When requests arrived within the last `STREAM_WINDOW_S` (not kept across a restart).
    #[serde(skip)]
    recent_arrivals: VecDeque<f64>,
    /// How much warmer than forecast the junction got (absent from forecasts saved before it was
    /// kept: learned again then).
    #[serde(default)]
    missed_rise: MissedRise,
    /// The board power limit the device reports now (not saved: it is read again at each start);
    /// the phase power a device has not shown yet starts from it.
    #[serde(skip)]
    power_cap_w: Option<f64>,
}

/// Which phases' power a confirmed period has taught (see [`PowerForecast::observe`]).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct ConfirmedPhases {
    idle: bool,
    prefill: bool,
    decode: [bool; MAX_STREAMS_TRACKED],
}

impl ConfirmedPhases {
    fn slot(&mut self, phase: Phase) -> Option<&mut bool> {
        match phase {
            Phase::Idle => Some(&mut self.idle),
            Phase::Prefill => Some(&mut self.prefill),
            Phase::Decode(n) => self.decode.get_mut(n as usize - 1),
        }
    }

    fn mark(&mut self, phase: Phase) {
        if let Some(confirmed) = self.slot(phase) {
            *confirmed = true;
        }
    }

    fn has(mut self, phase: Phase) -> bool {
        self.slot(phase).is_some_and(|confirmed| *confirmed)
    }
}

/// How much warmer the junction got than the power a plan expected made it, within the time the
/// fan takes to answer: the largest such rise, slowly forgotten. The predictive controller
/// measures it (it holds the thermal model); it is kept with the forecast whose miss it is, so a
/// restart resumes it and another served model starts it again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MissedRise {
    /// Decaying maximum, °C.
    rise_c: f64,
    /// Seconds of rises seen.
    seen_s: f64,
}

impl MissedRise {
    /// Folds in the rise measured over the last period of `dt_s`.
    pub fn fold(&mut self, rise_c: f64, dt_s: f64) {
        self.rise_c = (self.rise_c * 0.5f64.powf(dt_s / MISSED_RISE_HALF_LIFE_S)).max(rise_c);
        self.seen_s += dt_s;
    }

    /// The rise, once enough has been seen to trust it.
    pub fn trusted_c(&self) -> Option<f64> {
        (self.seen_s >= MISSED_RISE_TRUSTED_AFTER_S).then_some(self.rise_c)
    }
}

impl Default for PowerForecast {
    fn default() -> Self {
        Self::new()
    }
}

impl PowerForecast {
    /// Generic priors for a discrete GPU; each is replaced by what the device shows within a
    /// few samples of that phase.
    pub fn new() -> Self {
        Self::for_power_cap(None)
    }

    /// Priors for a device that reports its board power limit: a prompt's prefill, which is
    /// compute-bound, is expected at the limit, and decode at a share of it, until the device
    /// shows each. A small card is then not planned for a larger one's prefill, nor a large one
    /// for a smaller one's.
    pub fn for_power_cap(power_cap_w: Option<f64>) -> Self {
        let power_cap_w = plausible_cap(power_cap_w);
        Self {
            version: FORMAT_VERSION,
            model: None,
            idle_w: 30.0,
            prefill_w: power_cap_w.unwrap_or(GENERIC_POWER_CAP_W),
            decode_w: [None; MAX_STREAMS_TRACKED],
            prefill_tokens_per_s: 1000.0,
            fast_prefill_tokens_per_s: 0.0,
            decode_tokens_per_s: 30.0,
            large_prompt_tokens: 4000.0,
            typical_prompt_tokens: 2000.0,
            typical_output_tokens: 300.0,
            last: None,
            unconfirmed_power: None,
            confirmed: ConfirmedPhases::default(),
            prefill_unseen_s: 0.0,
            arrivals: 0,
            busy_share: 1.0,
            idle_s: Some(0.0),
            gap_floor_s: None,
            gaps: 0,
            clock_s: 0.0,
            recent_arrivals: VecDeque::new(),
            missed_rise: MissedRise::default(),
            power_cap_w,
        }
    }

    /// A forecast learned before, on a device that reports `power_cap_w` now: what it learned
    /// stays; what it has not learned, or learns again for another model, starts from the limit.
    pub fn with_power_cap(mut self, power_cap_w: Option<f64>) -> Self {
        self.power_cap_w = plausible_cap(power_cap_w);
        self
    }

    /// The board power limit the priors start from.
    fn prior_cap_w(&self) -> f64 {
        self.power_cap_w.unwrap_or(GENERIC_POWER_CAP_W)
    }

    pub fn missed_rise(&self) -> MissedRise {
        self.missed_rise
    }

    pub fn missed_rise_mut(&mut self) -> &mut MissedRise {
        &mut self.missed_rise
    }

    pub fn prefill_w(&self) -> f64 {
        self.prefill_w
    }

    pub fn decode_w(&self, streams: u32) -> f64 {
        let n = streams.max(1) as usize;
        if let Some(w) = self.decode_w.get(n - 1).copied().flatten() {
            return w;
        }
        // Extrapolate from the nearest measured stream count with the prior slope.
        let (one_stream, slope) =
            (DECODE_PRIOR_SHARE.0 * self.prior_cap_w(), DECODE_PRIOR_SHARE.1 * self.prior_cap_w());
        let nearest = (0..MAX_STREAMS_TRACKED)
            .filter_map(|i| self.decode_w[i].map(|w| (i + 1, w)))
            .min_by_key(|(m, _)| m.abs_diff(n));
        match nearest {
            Some((m, w)) => (w + slope * (n as f64 - m as f64)).max(self.idle_w),
            None => one_stream + slope * (n as f64 - 1.0),
        }
    }

    pub fn phase_w(&self, phase: Phase) -> f64 {
        match phase {
            Phase::Idle => self.idle_w,
            Phase::Prefill => self.prefill_w,
            Phase::Decode(n) => self.decode_w(n),
        }
    }

    /// Seconds an unannounced large prompt (or burst of prompts) would keep the GPU in prefill,
    /// at the rate measured across periods only. A card that prefills a prompt within a period
    /// keeps the prior's slow rate here, and that is the room a burst of such prompts needs: they
    /// hold it near prefill power for seconds, though the backlog never shows more than one
    /// (thermal/FINDINGS.md, "Sizing a surprise by bursts").
    pub fn large_prefill_s(&self) -> f64 {
        self.large_prompt_tokens / self.prefill_tokens_per_s
    }

    /// The prefill rate the queue and the requests still to come are forecast at: the best
    /// estimate, where the surprise's is the cautious one.
    fn expected_prefill_tokens_per_s(&self) -> f64 {
        self.prefill_tokens_per_s.max(self.fast_prefill_tokens_per_s)
    }

    /// The model the engine served while this was learned, where known.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The model this was learned with, where the engine now serves another: what
    /// [`Self::observe`] relearns the phase power and rates for.
    pub fn learned_with_another(&self, served: Option<&str>) -> Option<&str> {
        let served = served?;
        self.model.as_deref().filter(|&learned| learned != served)
    }

    /// Learns from one sample: `power_w` was drawn over the period that ended with `load`.
    ///
    /// The sample may be up to a sampling interval older than the period's end (the supervisor
    /// samples the engine on a clock of its own), so two samples showing one phase do not cover
    /// the period between them: once the next sample has shown a phase still held past such a
    /// period, only periods confirmed so teach that phase. Otherwise short requests (completions
    /// of a second or two) lend their power to the idle and take the idle's into the prefill.
    pub fn observe(&mut self, load: &LoadSignal, power_w: f64, dt_s: f64) {
        self.follow_model(load.model.as_deref());
        let Some(prev) = self.last.replace(load.clone()) else {
            self.learn_prompts(&LoadSignal::default(), load);
            return;
        };
        self.learn_arrivals(&prev, load, dt_s);
        let (before, after) = (phase(&prev), phase(load));
        if let Some((held, watts, learned)) = self.unconfirmed_power.take().filter(|p| p.0 == after) {
            self.confirmed.mark(held);
            if !learned {
                self.learn_phase_power(held, watts);
            }
        }
        self.unconfirmed_power = (before == after).then(|| {
            // A phase no period confirms (prefills under two samples on a fast card) learns from
            // two samples alone: its power has to come from somewhere.
            let learned = !self.confirmed.has(after);
            if learned {
                self.learn_phase_power(after, power_w);
            }
            (after, power_w, learned)
        });
        self.learn_rates(&prev, load, dt_s);
        self.learn_prompts(&prev, load);
    }

    fn learn_phase_power(&mut self, phase: Phase, power_w: f64) {
        let learn = |v: &mut f64| *v += ALPHA * (power_w - *v);
        match phase {
            Phase::Idle => learn(&mut self.idle_w),
            Phase::Prefill => learn(&mut self.prefill_w),
            Phase::Decode(n) => {
                if let Some(slot) = self.decode_w.get_mut(n as usize - 1) {
                    learn(slot.get_or_insert(power_w));
                }
            }
        }
    }

    /// Another model (a new profile) draws other power in each phase and prefills and decodes at
    /// other rates: those start again from the prior. Idle power belongs to the card; prompt
    /// and answer sizes and the arrival pattern belong to the users: they stay. A forecast that
    /// does not know its model (saved before it was kept) adopts the one served now.
    fn follow_model(&mut self, served: Option<&str>) {
        let Some(served) = served.filter(|&served| self.model.as_deref() != Some(served)) else {
            return;
        };
        if self.learned_with_another(Some(served)).is_some() {
            let prior = Self::for_power_cap(self.power_cap_w);
            self.prefill_w = prior.prefill_w;
            self.decode_w = prior.decode_w;
            self.confirmed = ConfirmedPhases { idle: self.confirmed.idle, ..prior.confirmed };
            self.prefill_tokens_per_s = prior.prefill_tokens_per_s;
            self.fast_prefill_tokens_per_s = prior.fast_prefill_tokens_per_s;
            self.decode_tokens_per_s = prior.decode_tokens_per_s;
            self.missed_rise = prior.missed_rise;
        }
        self.model = Some(served.to_owned());
    }

    fn learn_rates(&mut self, prev: &LoadSignal, now: &LoadSignal, dt_s: f64) {
        self.learn_fast_prefill(prev, now, dt_s);
        let same_slots = prev.slots.len() == now.slots.len()
            && prev.slots.iter().zip(&now.slots).all(|(a, b)| same_request(a, b));
        let prefilling = same_slots && phase(prev) == Phase::Prefill && phase(now) == Phase::Prefill;
        if !prefilling {
            self.prefill_unseen_s = 0.0;
        }
        if !same_slots || dt_s <= 0.0 {
            return;
        }
        if prefilling {
            // The tokens shown now took the time since progress last showed, not one period.
            self.prefill_unseen_s += dt_s;
            let done = prev.waiting_prompt_tokens().saturating_sub(now.waiting_prompt_tokens()) as f64;
            if done > 0.0 {
                let rate = done / self.prefill_unseen_s;
                self.prefill_tokens_per_s += ALPHA * (rate - self.prefill_tokens_per_s);
                self.prefill_unseen_s = 0.0;
            }
        }
        if let (Phase::Decode(n), Phase::Decode(m)) = (phase(prev), phase(now)) {
            let done = prev.remaining_tokens().saturating_sub(now.remaining_tokens()) as f64;
            if n == m && done > 0.0 {
                self.decode_tokens_per_s += ALPHA * (done / (n as f64 * dt_s) - self.decode_tokens_per_s);
            }
        }
    }

    /// A prompt prefilled within one period (a short prompt on a fast card) never shows two
    /// prefill samples in a row, so `learn_rates` never sees its rate. The prompt tokens of the
    /// slots seen at the last sample that a period ending with none waiting prefilled took at
    /// most the period: a floor for the rate. A slot new in this period is left out: its count
    /// includes the tokens the engine took from its prompt cache.
    fn learn_fast_prefill(&mut self, prev: &LoadSignal, now: &LoadSignal, dt_s: f64) {
        if dt_s <= 0.0 || now.waiting_prompt_tokens() > 0 {
            return;
        }
        let prefilled: u64 = now
            .slots
            .iter()
            .filter_map(|slot| {
                let before = earlier(prev, slot)?;
                Some(slot.prompt_processed.saturating_sub(before.prompt_processed))
            })
            .sum();
        if prefilled > 0 {
            let forgotten = self.fast_prefill_tokens_per_s * FAST_PREFILL_DECAY;
            self.fast_prefill_tokens_per_s = forgotten.max(prefilled as f64 / dt_s);
        }
    }

    /// Learns whether requests come while the engine is busy and how long it sits idle first.
    fn learn_arrivals(&mut self, prev: &LoadSignal, now: &LoadSignal, dt_s: f64) {
        let new_slots = now.slots.iter().filter(|s| earlier(prev, s).is_none()).count() as u32;
        // A request admitted from the queue was counted when it was deferred.
        let admitted = prev.requests_deferred.saturating_sub(now.requests_deferred);
        let queued = now.requests_deferred.saturating_sub(prev.requests_deferred);
        let arrived = new_slots.saturating_sub(admitted) + queued;
        if arrived > 0 {
            let was_idle = prev.is_idle();
            for i in 0..arrived {
                let busy = if was_idle && i == 0 { 0.0 } else { 1.0 };
                self.busy_share += BUSY_ALPHA * (busy - self.busy_share);
            }
            self.arrivals = self.arrivals.saturating_add(arrived);
            // The arrival came some time within the last period: count the idle time only.
            if let Some(gap) = self.idle_s.filter(|_| was_idle) {
                self.gaps = self.gaps.saturating_add(1);
                self.gap_floor_s = Some(match self.gap_floor_s {
                    Some(floor) if gap >= floor => {
                        floor + 0.05 * (gap.min(GAP_RELAX_CAP * floor.max(1.0)) - floor)
                    }
                    _ => gap,
                });
            }
        }
        self.idle_s = if now.is_idle() { self.idle_s.map(|s| s + dt_s) } else { Some(0.0) };
        self.clock_s += dt_s;
        for _ in 0..arrived {
            if self.recent_arrivals.len() == MAX_ARRIVALS_KEPT {
                self.recent_arrivals.pop_front();
            }
            self.recent_arrivals.push_back(self.clock_s);
        }
        while self.recent_arrivals.front().is_some_and(|&t| t <= self.clock_s - STREAM_WINDOW_S) {
            self.recent_arrivals.pop_front();
        }
    }

    /// Mean power (W above idle) that requests not yet arrived would draw if they kept coming at
    /// the rate of the last minute (of the burst, where one began within it): a stream of small
    /// requests (completions while someone types) heats the heatsink as much as one long answer,
    /// though each is over in a second or two.
    pub fn stream_w(&self) -> f64 {
        // Over the whole window, or over the span its arrivals cover up to now if higher: a
        // burst that began after a pause is not diluted by the pause.
        let n = self.recent_arrivals.len();
        let over_window = n as f64 / STREAM_WINDOW_S;
        let over_burst = match self.recent_arrivals.front() {
            Some(&first) if n > 1 => (n - 1) as f64 / (self.clock_s - first).max(f64::EPSILON),
            _ => 0.0,
        };
        let rate = over_window.max(over_burst);
        let prefill_s = self.typical_prompt_tokens / self.expected_prefill_tokens_per_s();
        let decode_s = self.typical_output_tokens / self.decode_tokens_per_s;
        let energy_j = prefill_s * (self.prefill_w - self.idle_w).max(0.0)
            + decode_s * (self.decode_w(1) - self.idle_w).max(0.0);
        (rate * energy_j).min((self.prefill_w - self.idle_w).max(0.0))
    }

    /// `known` (the power of the work in the queue, from [`Self::power`]) with the requests
    /// still to come where prompts arrive while the engine works: once the queue drains they
    /// keep coming at [`Self::stream_w`], fading over `STREAM_FADE_S` from now. Arrivals during
    /// the queue's work only extend it. Where each prompt waits for the previous answer, the
    /// surprise reserve covers the next one and `known` is returned as it is.
    pub fn with_stream(&self, known: &[f64], dt_s: f64) -> Vec<f64> {
        let stream_w = if self.arrives_while_busy() { self.stream_w() } else { 0.0 };
        let drained = self.work_steps(known);
        after_drain(known, drained, |k| stream_w * (-(k as f64) * dt_s / STREAM_FADE_S).exp())
    }

    /// Steps of `power` (from [`Self::power`]) until the known work drains: with no new
    /// arrivals, once idle it stays idle.
    pub fn work_steps(&self, power: &[f64]) -> usize {
        power.iter().rposition(|&p| p != self.idle_w).map_or(0, |k| k + 1)
    }

    /// Whether a new prompt may arrive while the engine is busy (busy arrivals seen, or too
    /// few arrivals to tell).
    pub fn arrives_while_busy(&self) -> bool {
        self.arrivals < MIN_ARRIVALS || self.busy_share > SEQUENTIAL_BELOW
    }

    /// Seconds from when the engine goes idle until a new prompt may arrive (a share of the
    /// shortest idle gap seen); 0 until enough gaps were seen.
    pub fn quiet_after_idle_s(&self) -> f64 {
        if self.gaps < MIN_GAPS {
            return 0.0;
        }
        self.gap_floor_s.map_or(0.0, |g| GAP_TRUST * g)
    }

    /// Seconds the engine has been idle now: unbounded after a restart until it first works
    /// (how long it sat idle before is not known, so a prompt may come at once).
    pub fn idle_s(&self) -> f64 {
        self.idle_s.unwrap_or(f64::INFINITY)
    }

    /// The first learned value that is not plausible, as (field, why): a saved forecast must pass
    /// this before it is resumed.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.version != FORMAT_VERSION {
            return Err(("version", format!("format {}, this build reads {FORMAT_VERSION}", self.version)));
        }
        let watts = [("idle_w", self.idle_w), ("prefill_w", self.prefill_w)]
            .into_iter()
            .chain(self.decode_w.iter().flatten().map(|&w| ("decode_w", w)));
        let fast = ("fast_prefill_tokens_per_s", self.fast_prefill_tokens_per_s);
        let tokens = [
            ("large_prompt_tokens", self.large_prompt_tokens),
            ("typical_prompt_tokens", self.typical_prompt_tokens),
            ("typical_output_tokens", self.typical_output_tokens),
        ];
        let gap = self.gap_floor_s.map(|g| ("gap_floor_s", g));
        let missed = [
            ("missed_rise.rise_c", self.missed_rise.rise_c),
            ("missed_rise.seen_s", self.missed_rise.seen_s),
        ];
        for (field, v) in watts.chain(tokens).chain(gap).chain([fast]).chain(missed) {
            if !(v.is_finite() && v >= 0.0) {
                return Err((field, format!("{v} is not a finite, non-negative number")));
            }
        }
        for (field, v) in [
            ("prefill_tokens_per_s", self.prefill_tokens_per_s),
            ("decode_tokens_per_s", self.decode_tokens_per_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err((field, format!("{v} is not a positive rate")));
            }
        }
        if !(0.0..=1.0).contains(&self.busy_share) {
            return Err(("busy_share", format!("{} is not a share between 0 and 1", self.busy_share)));
        }
        Ok(())
    }

    pub fn idle_w(&self) -> f64 {
        self.idle_w
    }

    /// Learns prompt and answer sizes, and the size of a surprise, from the slots new since `prev`.
    fn learn_prompts(&mut self, prev: &LoadSignal, now: &LoadSignal) {
        let is_new = |slot: &SlotLoad| earlier(prev, slot).is_none();
        let mut new_slots = 0;
        for slot in now.slots.iter().filter(|s| is_new(s)) {
            new_slots += 1;
            let tokens = slot.prompt_tokens as f64;
            self.typical_prompt_tokens += ALPHA * (tokens - self.typical_prompt_tokens);
            if let Some(left) = slot.remaining_tokens {
                let total = (left + slot.decoded_tokens) as f64;
                self.typical_output_tokens += ALPHA * (total - self.typical_output_tokens);
            }
        }
        if new_slots > 0 {
            // Prompts that arrive together (a tool sending several documents at once) have their
            // prefills run back to back: the surprise is the whole backlog they join.
            let backlog: u64 = now
                .slots
                .iter()
                .map(|s| {
                    if is_new(s) {
                        s.prompt_tokens
                    } else {
                        s.prompt_tokens.saturating_sub(s.prompt_processed)
                    }
                })
                .sum();
            let remembered = self.large_prompt_tokens * PROMPT_MEMORY_DECAY.powi(new_slots);
            self.large_prompt_tokens = (backlog as f64).max(remembered);
        }
    }

    /// Power for each of the next `seconds` seconds if no new request arrives: the queued
    /// prefill first (one prompt at a time), then decode as the streams finish, with deferred
    /// requests admitted as slots free up.
    pub fn power(&self, load: Option<&LoadSignal>, seconds: usize, dt_s: f64) -> Vec<f64> {
        let Some(load) = load else { return vec![self.idle_w; seconds] };
        let mut waiting = load.waiting_prompt_tokens() as f64;
        let mut streams: Vec<f64> = load
            .slots
            .iter()
            .filter(|s| s.is_processing)
            .map(|s| s.remaining_tokens.map(|r| r as f64).unwrap_or(self.typical_output_tokens))
            .collect();
        let mut deferred = load.requests_deferred;
        let capacity = streams.len().max(1);
        let mut out = Vec::with_capacity(seconds);
        for _ in 0..seconds {
            if waiting <= 0.0 && deferred > 0 && streams.len() < capacity {
                deferred -= 1;
                // Queued prompts are not shown; a long queue averages out to the typical size.
                waiting += self.typical_prompt_tokens;
                streams.push(self.typical_output_tokens);
            }
            if waiting > 0.0 {
                waiting -= self.expected_prefill_tokens_per_s() * dt_s;
                out.push(self.prefill_w);
            } else if !streams.is_empty() {
                out.push(self.decode_w(streams.len() as u32));
                for s in &mut streams {
                    *s -= self.decode_tokens_per_s * dt_s;
                }
                streams.retain(|s| *s > 0.0);
            } else {
                out.push(self.idle_w);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(id: u32, prompt: u64, done: u64, remaining: u64) -> SlotLoad {
        SlotLoad {
            id,
            is_processing: true,
            prompt_tokens: prompt,
            prompt_processed: done,
            decoded_tokens: 0,
            remaining_tokens: Some(remaining),
        }
    }

    fn signal(slots: Vec<SlotLoad>) -> LoadSignal {
        LoadSignal { requests_processing: slots.len() as u32, slots, ..Default::default() }
    }

    /// [`signal`] from an engine that names the model it serves.
    fn serving(model: &str, slots: Vec<SlotLoad>) -> LoadSignal {
        LoadSignal { model: Some(model.into()), ..signal(slots) }
    }

    /// `requests` 5000-token prompts served with `model`, each prefilled over three samples at
    /// `prefill_w`, then `decode` samples of it answering, then `idle` samples at `idle_w`.
    fn serve_prompts(
        f: &mut PowerForecast,
        model: &str,
        requests: u32,
        prefill_w: f64,
        decode: &[(u64, f64)],
        idle: (usize, f64),
    ) {
        for id in 1..=requests {
            for done in [0, 2000, 4000] {
                f.observe(&serving(model, vec![slot(id, 5000, done, 50)]), prefill_w, 1.0);
            }
            for &(remaining, watts) in decode {
                f.observe(&serving(model, vec![slot(id, 5000, 5000, remaining)]), watts, 1.0);
            }
            for _ in 0..idle.0 {
                f.observe(&serving(model, vec![]), idle.1, 1.0);
            }
        }
    }

    #[test]
    fn learns_phase_power_and_rates_then_forecasts_prefill_before_decode() {
        let mut f = PowerForecast::new();
        // 14 s of prefill of a 14000-token prompt at 1000 tok/s drawing 250 W, then decode at 140 W.
        for k in 0..14u64 {
            f.observe(&signal(vec![slot(1, 14000, k * 1000, 100)]), 250.0, 1.0);
        }
        for k in 0..20u64 {
            f.observe(&signal(vec![slot(1, 14000, 14000, 100 - 5 * k)]), 140.0, 1.0);
        }
        assert!((f.prefill_w() - 250.0).abs() < 5.0, "{}", f.prefill_w());
        assert!((f.decode_w(1) - 140.0).abs() < 5.0);
        assert!((f.decode_tokens_per_s - 5.0).abs() < 1.0, "{}", f.decode_tokens_per_s);
        assert!(f.large_prefill_s() >= 8.0, "{}", f.large_prefill_s());
        let p = f.power(Some(&signal(vec![slot(2, 3000, 0, 20)])), 12, 1.0);
        let prefill_s = p.iter().take_while(|&&w| w == f.prefill_w()).count();
        assert!((2..=4).contains(&prefill_s), "{p:?}");
        assert_eq!(p[prefill_s], f.decode_w(1));
        assert_eq!(*p.last().unwrap(), f.phase_w(Phase::Idle));
    }

    /// A forecast that observed 400 one-second periods of `at` (what the engine shows and draws
    /// at each tenth of a second): each period's mean power, with the sample taken 0.6 s before
    /// the period ends.
    fn learned_through_an_aged_sample(at: impl Fn(u64) -> (LoadSignal, f64)) -> PowerForecast {
        let mut f = PowerForecast::new();
        for period in 1..400u64 {
            let power_w = (period * 10 - 10..period * 10).map(|t| at(t).1).sum::<f64>() / 10.0;
            f.observe(&at(period * 10 - 6).0, power_w, 1.0);
        }
        f
    }

    /// Requests of a few seconds each, seen through a sample taken 0.6 s before each period ends:
    /// a period between two samples of one phase may still hold some of the next, so only a
    /// period the following sample confirms teaches its phase's power.
    #[test]
    fn short_requests_seen_through_an_aged_sample_teach_each_phase_its_own_power() {
        // A 5.5 s cycle in tenths of a second, so that the samples meet every part of it: 2.5 s of
        // prefill at 250 W (a 5000-token prompt at 2000 tok/s), 0.6 s of decode at 150 W, then
        // 2.4 s idle at 15 W. Each request is told apart from the last by its prompt's length.
        let at = |tenth: u64| {
            let (request, k) = (tenth / 55, tenth % 55);
            let prompt = 5000 + request;
            match k {
                0..25 => (signal(vec![slot(1, prompt, 0, 48)]), 250.0),
                25..31 => (signal(vec![slot(1, prompt, prompt, 48 - 8 * (k - 25))]), 150.0),
                _ => (LoadSignal::default(), 15.0),
            }
        };
        let f = learned_through_an_aged_sample(at);
        assert!((f.idle_w() - 15.0).abs() < 0.5, "idle {}", f.idle_w());
        assert!((f.prefill_w() - 250.0).abs() < 0.5, "prefill {}", f.prefill_w());

        // Prefills of 1.2 s never hold over three samples: the prefill learns from two alone
        // rather than keep the prior's 300 W.
        let at = |tenth: u64| {
            let (request, k) = (tenth / 37, tenth % 37);
            match k {
                0..12 => (signal(vec![slot(1, 2400 + request, 0, 8)]), 250.0),
                _ => (LoadSignal::default(), 15.0),
            }
        };
        let f = learned_through_an_aged_sample(at);
        assert!(!f.confirmed.has(Phase::Prefill) && f.confirmed.has(Phase::Idle), "{:?}", f.confirmed);
        assert!(f.prefill_w() < 250.0, "learned from periods that are part prefill: {}", f.prefill_w());
        assert!((f.idle_w() - 15.0).abs() < 0.5, "idle {}", f.idle_w());
    }

    /// llama-server shows a prompt's progress a 2048-token batch at a time. On a slow engine
    /// (250 tok/s: a batch every ~8 s) the rate is the tokens a batch showed over the time since
    /// the last one did, not over the one period in which they showed.
    #[test]
    fn a_prompt_shown_a_batch_at_a_time_teaches_the_engines_rate() {
        let mut f = PowerForecast::new();
        let prompt = 60_000;
        for second in 0..200u64 {
            let shown = (second * 250 / 2048) * 2048;
            f.observe(&signal(vec![slot(1, prompt, shown, 100)]), 120.0, 1.0);
        }
        assert!((f.prefill_tokens_per_s - 250.0).abs() < 25.0, "{}", f.prefill_tokens_per_s);
    }

    /// One user at a time: each prompt comes 8–12 s after the previous answer ends. The pattern is
    /// learned as sequential with an idle gap; one request arriving while busy means prompts may
    /// come while the engine works.
    #[test]
    fn learns_that_prompts_wait_for_answers_and_forgets_it_on_a_busy_arrival() {
        let mut f = PowerForecast::new();
        let idle = LoadSignal::default();
        let mut id = 0;
        for turn in 0..20u64 {
            id += 1;
            for k in 0..5u64 {
                f.observe(&signal(vec![slot(id, 500, 500, 50 - 10 * k)]), 150.0, 1.0);
            }
            for _ in 0..(8 + turn % 5) {
                f.observe(&idle, 30.0, 1.0);
            }
        }
        let quiet = f.quiet_after_idle_s();
        assert!((5.0..=9.0).contains(&quiet), "{quiet}");
        assert!(!f.arrives_while_busy());
        // A second request while the first still decodes.
        f.observe(&signal(vec![slot(100, 500, 500, 40)]), 150.0, 1.0);
        f.observe(&signal(vec![slot(100, 500, 500, 30), slot(101, 800, 0, 40)]), 300.0, 1.0);
        assert!(f.arrives_while_busy());
        assert!(f.quiet_after_idle_s() > 0.0, "the idle gap still holds after the engine drains");
    }

    /// Completions while someone types: a small request every second or two, most arriving
    /// while the previous one is still answered. Once the queue drains, the plan expects them to
    /// keep coming (fading), and a minute without arrivals ends the stream.
    #[test]
    fn a_stream_of_small_requests_goes_on_after_the_queue_drains() {
        let mut f = PowerForecast::new();
        for id in 1..=40u32 {
            let previous = slot(id - 1, 2000, 2000, 5);
            f.observe(&signal(vec![previous, slot(id, 2000, 0, 30)]), 300.0, 1.0);
            f.observe(&signal(vec![slot(id, 2000, 2000, 20)]), 200.0, 1.0);
        }
        assert!(f.arrives_while_busy());
        let stream = f.stream_w();
        assert!(stream > 50.0, "{stream}");
        let known = f.power(Some(&signal(vec![slot(41, 2000, 2000, 10)])), 90, 1.0);
        let planned = f.with_stream(&known, 1.0);
        let drained = known.iter().position(|&w| w == f.idle_w()).unwrap();
        assert_eq!(planned[..drained], known[..drained], "arrivals during the queue's work only extend it");
        assert!(planned[drained] > f.idle_w() + 0.5 * stream, "{planned:?}");
        assert!(planned.windows(2).skip(drained).all(|w| w[1] < w[0]), "the stream fades: {planned:?}");

        for _ in 0..60 {
            f.observe(&LoadSignal::default(), 30.0, 1.0);
        }
        assert_eq!(f.stream_w(), 0.0, "a minute without arrivals ends the stream");
        let idle = vec![f.idle_w(); 90];
        assert_eq!(f.with_stream(&idle, 1.0), idle);
    }

    /// Completions resuming after a pause: the rate is that of the burst since it began, not
    /// diluted by the quiet part of the last minute.
    #[test]
    fn a_burst_after_a_pause_is_not_diluted_by_the_pause() {
        let mut f = PowerForecast::new();
        let arrive_every = |f: &mut PowerForecast, ids: std::ops::RangeInclusive<u32>, gap_s: u32| {
            let first = *ids.start();
            for id in ids {
                // Each arrives while the one before still decodes (from the second on).
                let previous = (id > first).then(|| slot(id - 1, 500, 500, 2));
                f.observe(&signal(previous.into_iter().chain([slot(id, 500, 0, 10)]).collect()), 300.0, 1.0);
                for _ in 1..gap_s {
                    f.observe(&signal(vec![slot(id, 500, 500, 5)]), 200.0, 1.0);
                }
            }
        };
        arrive_every(&mut f, 1..=20, 4);
        let every_four_s = f.stream_w();
        for _ in 0..60 {
            f.observe(&LoadSignal::default(), 30.0, 1.0);
        }
        arrive_every(&mut f, 21..=30, 2);
        let every_two_s = f.stream_w();
        assert!(every_two_s > 1.5 * every_four_s, "{every_two_s} vs {every_four_s}");
    }

    /// A tool that sends several documents at once: their prefills run back to back, so the
    /// surprise to keep room for is the backlog, not the largest single prompt.
    #[test]
    fn prompts_arriving_together_are_one_large_surprise() {
        let mut f = PowerForecast::new();
        let single = f.large_prefill_s();
        f.observe(&LoadSignal::default(), 30.0, 1.0);
        let burst: Vec<SlotLoad> = (1..=4).map(|id| slot(id, 5000, 0, 100)).collect();
        f.observe(&signal(burst), 300.0, 1.0);
        assert_eq!(f.large_prompt_tokens, 20_000.0);
        // One more arrives while 12,000 tokens of the burst still wait: it joins that backlog.
        let mut joined: Vec<SlotLoad> =
            (1..=4).map(|id| slot(id, 5000, if id == 1 { 5000 } else { 1000 }, 100)).collect();
        joined.push(slot(5, 9000, 0, 100));
        f.observe(&signal(joined), 300.0, 1.0);
        assert_eq!(f.large_prompt_tokens, 21_000.0, "the 12,000 still waiting and the new 9,000");
        assert!(f.large_prefill_s() > 4.0 * single);
    }

    /// A coding agent compacts its context now and then: one long prompt among hundreds of short
    /// turns. On a busy box those hundreds come within the hour, and the long prompt's prefill is
    /// still the surprise to keep room for when the next compaction comes.
    #[test]
    fn a_large_prompt_is_remembered_over_hundreds_of_short_ones() {
        let mut f = PowerForecast::new();
        f.observe(&LoadSignal::default(), 30.0, 1.0);
        f.observe(&signal(vec![slot(1, 30_000, 0, 100)]), 300.0, 1.0);
        for id in 2..=500 {
            f.observe(&signal(vec![]), 30.0, 1.0);
            f.observe(&signal(vec![slot(id, 500, 0, 20)]), 300.0, 1.0);
        }
        assert!(f.large_prompt_tokens > 15_000.0, "{} of 30,000 left", f.large_prompt_tokens);
    }

    /// A fast card with short prompts: each is seen waiting at one sample and done by the next,
    /// so no two prefill samples come in a row. The queue and the stream are forecast at the
    /// rate it showed; the surprise keeps the rate measured across periods (here the prior).
    #[test]
    fn a_prompt_prefilled_within_a_period_teaches_the_expected_rate_only() {
        let mut f = PowerForecast::new();
        let slow = PowerForecast::new();
        for id in 1..=10u32 {
            f.observe(&signal(vec![slot(id, 6000, 0, 20)]), 500.0, 1.0);
            f.observe(&signal(vec![slot(id, 6000, 6000, 10)]), 400.0, 1.0);
            f.observe(&LoadSignal::default(), 30.0, 1.0);
        }
        assert_eq!(f.fast_prefill_tokens_per_s, 6000.0);
        assert_eq!(f.prefill_tokens_per_s, slow.prefill_tokens_per_s, "no two prefill samples in a row");
        assert_eq!(f.large_prefill_s(), 6.0, "6000 tokens at the prior's 1000 tok/s");
        let queued = signal(vec![slot(11, 12_000, 0, 10)]);
        let prefill_steps = |f: &PowerForecast| {
            f.power(Some(&queued), 30, 1.0).iter().take_while(|&&w| w == f.prefill_w()).count()
        };
        assert_eq!(prefill_steps(&f), 2, "12,000 tokens at 6000 tok/s");
        assert_eq!(prefill_steps(&slow), 12);
        // A resumed forecast keeps the rate; one saved before it was learned starts without it.
        let json = serde_json::to_value(&f).unwrap();
        let resumed: PowerForecast = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(resumed.fast_prefill_tokens_per_s, 6000.0);
        let mut older = json;
        older.as_object_mut().unwrap().remove("fast_prefill_tokens_per_s");
        let older: PowerForecast = serde_json::from_value(older).unwrap();
        assert_eq!((older.fast_prefill_tokens_per_s, older.check()), (0.0, Ok(())));
        let mut bad = f.clone();
        bad.fast_prefill_tokens_per_s = f64::NAN;
        assert_eq!(bad.check().map_err(|(field, _)| field), Err("fast_prefill_tokens_per_s"));
    }

    /// A slot that appears already prefilled may have taken its prompt from the engine's cache,
    /// which says nothing of the rate; and a slower model later lowers the rate again.
    #[test]
    fn a_cached_prompt_teaches_no_rate_and_a_fast_one_is_forgotten() {
        let mut f = PowerForecast::new();
        f.observe(&LoadSignal::default(), 30.0, 1.0);
        f.observe(&signal(vec![slot(1, 20_000, 20_000, 50)]), 300.0, 1.0);
        assert_eq!(f.fast_prefill_tokens_per_s, 0.0);
        f.observe(&signal(vec![slot(2, 3000, 1000, 50)]), 300.0, 1.0);
        f.observe(&signal(vec![slot(2, 3000, 3000, 40)]), 300.0, 1.0);
        assert_eq!(f.fast_prefill_tokens_per_s, 2000.0, "the 2000 tokens left at the last sample");
        for id in 3..=60u32 {
            f.observe(&signal(vec![slot(id, 600, 0, 5)]), 300.0, 1.0);
            f.observe(&signal(vec![slot(id, 600, 600, 4)]), 300.0, 1.0);
        }
        assert!((600.0..700.0).contains(&f.fast_prefill_tokens_per_s), "{}", f.fast_prefill_tokens_per_s);
    }

    /// A device that reports its board power limit expects a prompt's prefill at the limit and
    /// decode at a share of it until it shows them; a limit no card has is not believed. Resumed
    /// on that device, a forecast keeps what it learned, and another model starts again from the
    /// limit, not from the generic prior.
    #[test]
    fn the_priors_follow_the_power_limit_the_device_reports() {
        let small = PowerForecast::for_power_cap(Some(165.0));
        assert_eq!(small.prefill_w(), 165.0);
        assert!((small.decode_w(1) - 99.0).abs() < 1e-9, "{}", small.decode_w(1));
        assert!((small.decode_w(4) - 115.5).abs() < 1e-9, "5.5 W a stream more: {}", small.decode_w(4));
        let generic = PowerForecast::new();
        assert_eq!((generic.prefill_w(), generic.decode_w(1), generic.decode_w(4)), (300.0, 180.0, 210.0));
        for absurd in [0.0, 5.0, 1e6, f64::NAN, f64::INFINITY] {
            assert_eq!(PowerForecast::for_power_cap(Some(absurd)).prefill_w(), 300.0, "{absurd} W");
        }

        let mut learned = PowerForecast::new();
        serve_prompts(&mut learned, "a.gguf", 10, 160.0, &[], (1, 12.0));
        let saved = serde_json::to_string(&learned).unwrap();
        let resumed = serde_json::from_str::<PowerForecast>(&saved).unwrap().with_power_cap(Some(165.0));
        assert!(learned.prefill_w() < 200.0, "learned from the 160 W shown: {}", learned.prefill_w());
        assert_eq!(resumed.prefill_w(), learned.prefill_w(), "kept");
        let mut other = resumed.clone();
        other.observe(&serving("b.gguf", vec![]), 12.0, 1.0);
        assert_eq!((other.prefill_w(), other.decode_w(1)), (small.prefill_w(), small.decode_w(1)));
    }

    /// A profile that loads another model: what each phase draws and the engine's rates start
    /// again from the prior; the card's idle power and what was learned of the users stay. A
    /// forecast saved before the model was kept adopts the served one and keeps what it learned.
    #[test]
    fn another_model_relearns_phase_power_and_rates_but_keeps_the_users_pattern() {
        let mut f = PowerForecast::new();
        let decode: Vec<(u64, f64)> = (0..5u64).map(|k| (40 - 10 * k, 150.0)).collect();
        serve_prompts(&mut f, "a.gguf", 20, 420.0, &decode, (5, 25.0));
        f.missed_rise_mut().fold(6.0, 120.0);
        let learned = f.clone();
        assert_eq!(learned.model(), Some("a.gguf"));
        assert!((learned.prefill_w() - 420.0).abs() < 3.0, "{}", learned.prefill_w());
        assert!((learned.decode_w(1) - 150.0).abs() < 1.0, "{}", learned.decode_w(1));
        assert!(learned.prefill_tokens_per_s > 1500.0 && learned.decode_tokens_per_s < 15.0, "{learned:?}");
        let saved = serde_json::to_string(&learned).unwrap();
        assert!(saved.contains(r#""model":"a.gguf""#), "{saved}");

        // An unnamed signal (an engine whose /props does not say) changes nothing.
        f.observe(&signal(vec![]), 25.0, 1.0);
        assert_eq!((f.model(), f.prefill_w()), (Some("a.gguf"), learned.prefill_w()));

        f.observe(&serving("b.gguf", vec![]), 25.0, 1.0);
        let prior = PowerForecast::new();
        assert_eq!(f.model(), Some("b.gguf"));
        assert_eq!(
            (f.prefill_w(), f.decode_w(1), f.decode_w(4)),
            (prior.prefill_w(), prior.decode_w(1), prior.decode_w(4))
        );
        assert_eq!(
            (f.prefill_tokens_per_s, f.fast_prefill_tokens_per_s, f.decode_tokens_per_s),
            (prior.prefill_tokens_per_s, prior.fast_prefill_tokens_per_s, prior.decode_tokens_per_s)
        );
        assert_eq!(f.missed_rise(), prior.missed_rise(), "the rise missed with a.gguf is not b's");
        assert!((f.idle_w() - 25.0).abs() < 0.01, "the card's idle power stays: {}", f.idle_w());
        assert_eq!(
            (f.typical_prompt_tokens, f.typical_output_tokens, f.large_prompt_tokens),
            (learned.typical_prompt_tokens, learned.typical_output_tokens, learned.large_prompt_tokens)
        );
        assert_eq!(
            (f.arrivals, f.busy_share, f.gaps, f.gap_floor_s),
            (learned.arrivals, learned.busy_share, learned.gaps, learned.gap_floor_s)
        );

        let mut older: PowerForecast =
            serde_json::from_str(&saved.replace(r#""model":"a.gguf","#, "")).unwrap();
        assert_eq!((older.check(), older.model()), (Ok(()), None));
        older.observe(&serving("c.gguf", vec![]), 25.0, 1.0);
        assert_eq!(
            (older.model(), older.prefill_w(), older.decode_w(1)),
            (Some("c.gguf"), learned.prefill_w(), learned.decode_w(1))
        );
    }

    /// One user who waits for each answer: the next prompt is the surprise reserve's, not a stream.
    #[test]
    fn sequential_work_adds_no_stream() {
        let mut f = PowerForecast::new();
        for id in 1..=20u32 {
            for k in 0..5u64 {
                f.observe(&signal(vec![slot(id, 500, 500, 50 - 10 * k)]), 150.0, 1.0);
            }
            for _ in 0..3 {
                f.observe(&LoadSignal::default(), 30.0, 1.0);
            }
        }
        assert!(!f.arrives_while_busy());
        assert!(f.stream_w() > 0.0, "requests did arrive in the last minute");
        let known = f.power(Some(&signal(vec![slot(21, 500, 500, 50)])), 90, 1.0);
        assert_eq!(f.with_stream(&known, 1.0), known);
    }

    /// A resumed forecast keeps the learned pattern, but how long the engine sat idle before the
    /// restart is not known: a prompt may come at once, and that first wait is not learned as a gap.
    #[test]
    fn a_resumed_forecast_keeps_the_pattern_but_not_the_idle_time() {
        let mut f = PowerForecast::new();
        let idle = LoadSignal::default();
        for id in 1..=6 {
            for k in 0..5u64 {
                f.observe(&signal(vec![slot(id, 500, 500, 50 - 10 * k)]), 150.0, 1.0);
            }
            for _ in 0..6 {
                f.observe(&idle, 30.0, 1.0);
            }
        }
        assert_eq!(f.idle_s(), 6.0);
        let mut resumed: PowerForecast = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(resumed.check(), Ok(()));
        assert_eq!(resumed.quiet_after_idle_s(), f.quiet_after_idle_s());
        assert_eq!(resumed.decode_w(1), f.decode_w(1));
        assert_eq!(resumed.idle_s(), f64::INFINITY);
        let (gaps, floor) = (resumed.gaps, resumed.gap_floor_s);
        resumed.observe(&idle, 30.0, 1.0);
        resumed.observe(&signal(vec![slot(7, 500, 500, 50)]), 150.0, 1.0);
        assert_eq!((resumed.gaps, resumed.gap_floor_s), (gaps, floor), "an unknown wait was learned");
        assert_eq!(resumed.idle_s(), 0.0);
    }

    /// The rise the forecast missed is resumed with it, trusted at once; a file saved before it was
    /// kept learns it again, and an implausible one is refused by its field's name.
    #[test]
    fn the_missed_rise_is_resumed_and_checked() {
        let mut f = PowerForecast::new();
        f.missed_rise_mut().fold(4.5, 30.0);
        assert_eq!(f.missed_rise().trusted_c(), None, "half a minute seen");
        f.missed_rise_mut().fold(2.0, 30.0);
        let trusted = f.missed_rise().trusted_c().expect("a minute seen");
        assert!((trusted - 4.5 * 0.5f64.powf(30.0 / MISSED_RISE_HALF_LIFE_S)).abs() < 1e-12, "{trusted}");

        let saved = serde_json::to_string(&f).unwrap();
        let resumed: PowerForecast = serde_json::from_str(&saved).unwrap();
        assert_eq!((resumed.check(), resumed.missed_rise().trusted_c()), (Ok(()), Some(trusted)));

        let mut json: serde_json::Value = serde_json::from_str(&saved).unwrap();
        json.as_object_mut().unwrap().remove("missed_rise");
        let older: PowerForecast = serde_json::from_value(json.clone()).unwrap();
        assert_eq!((older.check(), older.missed_rise().trusted_c()), (Ok(()), None));

        json["missed_rise"] = serde_json::json!({ "rise_c": -1.0, "seen_s": 60.0 });
        let bad: PowerForecast = serde_json::from_value(json).unwrap();
        assert_eq!(bad.check().map_err(|(field, _)| field), Err("missed_rise.rise_c"));
    }

    /// A pause between sessions barely moves the shortest idle gap: the next answer in a session
    /// may be followed as soon as before.
    #[test]
    fn a_long_pause_barely_relaxes_the_shortest_gap() {
        let mut f = PowerForecast::new();
        let idle = LoadSignal::default();
        let turn = |f: &mut PowerForecast, id: u32, idle_s: u32| {
            for k in 0..5u64 {
                f.observe(&signal(vec![slot(id, 500, 500, 50 - 10 * k)]), 150.0, 1.0);
            }
            for _ in 0..idle_s {
                f.observe(&idle, 30.0, 1.0);
            }
        };
        for id in 1..=6 {
            turn(&mut f, id, 6);
        }
        let before = f.quiet_after_idle_s();
        assert!((3.0..=5.0).contains(&before), "{before}");
        // 200 s between sessions, then the next session's first turn.
        turn(&mut f, 7, 200);
        turn(&mut f, 8, 6);
        let after = f.quiet_after_idle_s();
        assert!(after - before < 0.5, "{before} -> {after}");
    }
}
