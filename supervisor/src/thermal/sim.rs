//! The simulated engine (FIFO queue, continuous batching, one prefill at a time), what a device's
//! load sampler sees of it, and the seeded noise of the simulated sensor. Fan control never
//! changes what the engine does: the same trace always serves the same tokens at the same times.

use std::collections::VecDeque;

use lucebox_engine::{LoadSignal, SlotLoad};

use super::plant::{PlantSpec, PLANT_DT_S};
use super::trace::Request;

#[derive(Debug, Clone)]
struct Slot {
    id: u32,
    prompt_tokens: f64,
    prompt_processed: f64,
    output_tokens: f64,
    decoded: f64,
}

impl Slot {
    fn prefilling(&self) -> bool {
        self.prompt_processed < self.prompt_tokens
    }
}

/// Deterministic engine driven by a trace.
#[derive(Debug, Clone)]
pub struct EngineSim {
    trace: Vec<Request>,
    next: usize,
    queue: VecDeque<Request>,
    slots: Vec<Slot>,
    next_slot_id: u32,
    now_s: f64,
    tokens_served: f64,
}

impl EngineSim {
    pub fn new(trace: Vec<Request>) -> Self {
        Self {
            trace,
            next: 0,
            queue: VecDeque::new(),
            slots: Vec::new(),
            next_slot_id: 0,
            now_s: 0.0,
            tokens_served: 0.0,
        }
    }

    /// Whether every request has arrived and been served.
    pub fn drained(&self) -> bool {
        self.next == self.trace.len() && self.queue.is_empty() && self.slots.is_empty()
    }

    pub fn tokens_served(&self) -> u64 {
        self.tokens_served.round() as u64
    }

    /// Advances one [`PLANT_DT_S`] step; returns the board power drawn during it.
    pub fn step(&mut self, spec: &PlantSpec) -> f64 {
        let dt = PLANT_DT_S;
        while self.next < self.trace.len() && self.trace[self.next].t_s <= self.now_s {
            self.queue.push_back(self.trace[self.next]);
            self.next += 1;
        }
        while self.slots.len() < spec.engine.max_streams as usize {
            let Some(r) = self.queue.pop_front() else { break };
            self.slots.push(Slot {
                id: self.next_slot_id,
                prompt_tokens: r.prompt_tokens as f64,
                prompt_processed: 0.0,
                output_tokens: r.output_tokens as f64,
                decoded: 0.0,
            });
            self.next_slot_id = self.next_slot_id.wrapping_add(1);
        }
        self.now_s += dt;
        let power = if let Some(slot) = self.slots.iter_mut().find(|s| s.prefilling()) {
            slot.prompt_processed =
                (slot.prompt_processed + spec.engine.prefill_tokens_per_s * dt).min(slot.prompt_tokens);
            spec.power.prefill_w
        } else if !self.slots.is_empty() {
            let streams = self.slots.len() as f64;
            for slot in &mut self.slots {
                let step = (spec.engine.decode_tokens_per_s * dt).min(slot.output_tokens - slot.decoded);
                slot.decoded += step;
                self.tokens_served += step;
            }
            spec.power.decode_w + spec.power.per_stream_w * (streams - 1.0)
        } else {
            spec.power.idle_w
        };
        self.slots.retain(|s| s.prefilling() || s.decoded < s.output_tokens);
        power
    }

    /// What the engine's slots endpoint would show now. llama-server counts a prompt's tokens as
    /// processed a batch at a time (`n_batch`, 2048 by default, which no profile changes): a
    /// slot shows what the batches before the running one did (measured on the CPU llama-server
    /// of CI, a 5782-token prompt showed 0, 2048 and 4096 processed, each for a batch's time).
    pub fn load_signal(&self) -> LoadSignal {
        LoadSignal {
            at_unix_ms: (self.now_s * 1000.0) as u64,
            requests_processing: self.slots.len() as u32,
            requests_deferred: self.queue.len() as u32,
            slots: self
                .slots
                .iter()
                .map(|s| SlotLoad {
                    id: s.id,
                    is_processing: true,
                    prompt_tokens: s.prompt_tokens as u64,
                    prompt_processed: shown_processed(s.prompt_processed, s.prompt_tokens),
                    decoded_tokens: s.decoded.floor() as u64,
                    remaining_tokens: Some((s.output_tokens - s.decoded).ceil().max(0.0) as u64),
                })
                .collect(),
            tokens_per_s: None,
            ..LoadSignal::default()
        }
    }
}

/// Tokens llama-server prefills in one batch (its default `n_batch`).
pub const ENGINE_BATCH_TOKENS: f64 = 2048.0;

/// The processed tokens `/slots` shows: the whole prompt once done, else the batches finished.
fn shown_processed(processed: f64, prompt_tokens: f64) -> u64 {
    if processed >= prompt_tokens {
        prompt_tokens as u64
    } else {
        ((processed / ENGINE_BATCH_TOKENS).floor() * ENGINE_BATCH_TOKENS) as u64
    }
}

/// The engine as a device's loop sees it: the supervisor samples the engine once a second
/// (`runtime/load.rs`) on a clock of its own, and each fan loop reads the latest sample on its
/// own tick. So what a period's decision sees is the sample from up to a second before; the
/// offset between the two clocks, fixed for a run, is drawn from the run's seed.
#[derive(Debug, Clone)]
pub struct LoadSampler {
    offset_s: f64,
    next_sample_s: f64,
    latest: Option<LoadSignal>,
}

/// How often the supervisor samples the engine.
pub const LOAD_SAMPLE_INTERVAL_S: f64 = crate::runtime::load::SAMPLE_INTERVAL.as_secs_f64();

impl LoadSampler {
    pub fn new(seed: u64) -> Self {
        // Its own stream: the sensor's noise stays what it was for every seed.
        let offset_s = (Noise::new(seed ^ 0x10AD_5A3B_1E00_0000).unit() * LOAD_SAMPLE_INTERVAL_S
            / PLANT_DT_S)
            .floor()
            .min(LOAD_SAMPLE_INTERVAL_S / PLANT_DT_S - 1.0)
            * PLANT_DT_S;
        Self { offset_s, next_sample_s: offset_s, latest: None }
    }

    /// Samples `engine` where a sample falls due by `now_s`.
    pub fn follow(&mut self, now_s: f64, engine: &EngineSim) {
        if now_s + 1e-9 >= self.next_sample_s {
            self.latest = Some(engine.load_signal());
            while self.next_sample_s <= now_s + 1e-9 {
                self.next_sample_s += LOAD_SAMPLE_INTERVAL_S;
            }
        }
    }

    /// The latest sample: none before the first.
    pub fn latest(&self) -> Option<&LoadSignal> {
        self.latest.as_ref()
    }

    /// How far the sampler's clock runs behind the loop's.
    pub fn offset_s(&self) -> f64 {
        self.offset_s
    }
}

/// Small seeded generator (SplitMix64) with Gaussian samples: the bench must be reproducible
/// with `--seed` and needs nothing cryptographic.
#[derive(Debug, Clone)]
pub struct Noise {
    state: u64,
}

impl Noise {
    pub fn new(seed: u64) -> Self {
        Self { state: seed ^ 0x9E37_79B9_7F4A_7C15 }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn gaussian(&mut self) -> f64 {
        let (u1, u2) = (self.unit(), self.unit());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PlantSpec {
        toml::from_str(include_str!("../../../thermal/plants/r9700-blower.toml")).unwrap()
    }

    #[test]
    fn prefill_then_decode_then_idle_power_and_tokens() {
        let spec = spec();
        let trace = vec![Request { t_s: 0.0, prompt_tokens: 1500, output_tokens: 40 }];
        assert!(spec.engine.prefill_tokens_per_s <= 1500.0 && spec.engine.decode_tokens_per_s <= 400.0);
        let mut e = EngineSim::new(trace);
        let mut powers = Vec::new();
        while !e.drained() {
            powers.push(e.step(&spec));
        }
        // 1500 tokens of prefill, then 40 tokens of decode, in whole plant steps.
        let steps = |tokens: f64, rate: f64| (tokens / (rate * PLANT_DT_S)).ceil() as usize;
        let prefill = powers.iter().filter(|&&p| p == spec.power.prefill_w).count();
        let decode = powers.iter().filter(|&&p| p == spec.power.decode_w).count();
        assert_eq!(prefill, steps(1500.0, spec.engine.prefill_tokens_per_s));
        assert_eq!(decode, steps(40.0, spec.engine.decode_tokens_per_s));
        assert_eq!(e.tokens_served(), 40);
        assert_eq!(e.step(&spec), spec.power.idle_w);
    }

    #[test]
    fn queue_defers_beyond_max_streams_and_signal_shows_it() {
        let spec = spec();
        let n = spec.engine.max_streams as usize + 2;
        let trace = vec![Request { t_s: 0.0, prompt_tokens: 10, output_tokens: 1000 }; n];
        let mut e = EngineSim::new(trace);
        e.step(&spec);
        let load = e.load_signal();
        assert_eq!(load.requests_deferred, 2);
        assert_eq!(load.slots.len(), spec.engine.max_streams as usize);
    }

    /// A long prompt shows its progress a batch at a time, as llama-server's `/slots` does, and
    /// the whole prompt once it is done.
    #[test]
    fn a_prompt_shows_its_progress_in_whole_batches() {
        let spec = spec();
        let prompt = 5782;
        let mut e = EngineSim::new(vec![Request { t_s: 0.0, prompt_tokens: prompt, output_tokens: 40 }]);
        let mut shown = Vec::new();
        while e.load_signal().slots.first().is_none_or(|s| s.decoded_tokens == 0) {
            e.step(&spec);
            if let Some(slot) = e.load_signal().slots.first() {
                if shown.last() != Some(&slot.prompt_processed) {
                    shown.push(slot.prompt_processed);
                }
            }
        }
        assert_eq!(shown, [0, 2048, 4096, prompt]);
        assert_eq!(e.load_signal().waiting_prompt_tokens(), 0);
    }

    /// The loop sees the supervisor's latest sample of the engine: taken once a second, at an
    /// offset from the loop's own tick that the seed fixes.
    #[test]
    fn the_loop_sees_the_latest_sample_taken_once_a_second() {
        let spec = spec();
        let offsets: Vec<f64> = (1..=16).map(|seed| LoadSampler::new(seed).offset_s()).collect();
        assert!(offsets.iter().all(|o| (0.0..LOAD_SAMPLE_INTERVAL_S).contains(o)), "{offsets:?}");
        assert!(offsets.iter().any(|&o| o != offsets[0]), "one offset for every seed: {offsets:?}");
        assert_eq!(LoadSampler::new(3).offset_s(), LoadSampler::new(3).offset_s());

        let seed = (1..=16).find(|&s| LoadSampler::new(s).offset_s() >= 0.5).expect("a late sampler");
        let mut sampler = LoadSampler::new(seed);
        let offset_steps = (sampler.offset_s() / PLANT_DT_S).round() as usize;
        let mut e = EngineSim::new(vec![Request { t_s: 0.0, prompt_tokens: 10, output_tokens: 100_000 }]);
        let mut seen_at = Vec::new();
        for step in 0..35 {
            sampler.follow(step as f64 * PLANT_DT_S, &e);
            if let Some(sample) = sampler.latest() {
                seen_at.push((step, sample.at_unix_ms));
            }
            e.step(&spec);
        }
        // Nothing before the first sample; then each sample stays until the next, a second later.
        let fresh: Vec<usize> = seen_at
            .iter()
            .enumerate()
            .filter(|&(i, &(_, at))| i == 0 || seen_at[i - 1].1 != at)
            .map(|(_, &(step, _))| step)
            .collect();
        let every_second: Vec<usize> = (offset_steps..35).step_by(10).collect();
        assert_eq!(fresh, every_second);
    }

    #[test]
    fn noise_is_seeded() {
        let a: Vec<f64> = {
            let mut n = Noise::new(7);
            (0..5).map(|_| n.gaussian()).collect()
        };
        let b: Vec<f64> = {
            let mut n = Noise::new(7);
            (0..5).map(|_| n.gaussian()).collect()
        };
        let c: Vec<f64> = {
            let mut n = Noise::new(8);
            (0..5).map(|_| n.gaussian()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
