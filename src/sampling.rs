//! Token sampling: picks the next token id from a row of logits.
//!
//! The chain mirrors llama.cpp's default sampler chain (`common/sampling.cpp`):
//! penalties → top-k → top-p → min-p → temperature → softmax → draw.
//! top-p and min-p therefore see probabilities at temperature 1, as in llama.cpp.
//!
//! Built for large vocabularies (Gemma 3 has 262,144 entries): top-k is a partial
//! selection (`select_nth_unstable`), and top-p without top-k sorts only a growing
//! prefix of the candidates until the nucleus is covered. Nothing here panics on
//! NaN or infinite logits: NaN and `-inf` entries are never drawn.

use crate::{Error, Result};

/// The seed [`SamplingParams::default`] uses, so that runs are reproducible unless asked otherwise.
pub const DEFAULT_SEED: u64 = 42;

/// How the next token is chosen. Field semantics follow llama.cpp.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; `<= 0` means greedy (argmax, lowest id on ties).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability sums to at least `top_p`; 1.0 = off.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely token's; 0.0 = off.
    pub min_p: f32,
    /// Repetition penalty (llama.cpp semantics: divide positive logits, multiply the others); 1.0 = off.
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every token seen in the window; 0.0 = off.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the window; 0.0 = off.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens of the history the penalties look at (0 = none).
    pub penalty_last_n: usize,
    /// Seed of the sampler's random number generator.
    pub seed: u64,
}

impl Default for SamplingParams {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off,
    /// with a fixed seed ([`DEFAULT_SEED`]).
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: DEFAULT_SEED,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token, no penalties.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, ..SamplingParams::default() }
    }

    /// Check every field is in range: no NaN, `top_p` and `min_p` in [0, 1], a positive finite
    /// repeat penalty, finite presence and frequency penalties, a temperature below infinity.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, v: f32| Err(Error::InvalidArgument(format!("sampling: {what} = {v}")));
        if self.temperature.is_nan() || self.temperature == f32::INFINITY {
            return bad("temperature must be finite", self.temperature);
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top_p must be in [0, 1]", self.top_p);
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p must be in [0, 1]", self.min_p);
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat_penalty must be finite and > 0", self.repeat_penalty);
        }
        if !self.presence_penalty.is_finite() {
            return bad("presence_penalty must be finite", self.presence_penalty);
        }
        if !self.frequency_penalty.is_finite() {
            return bad("frequency_penalty must be finite", self.frequency_penalty);
        }
        Ok(())
    }

    /// Whether any penalty changes the logits (a window and a penalty that is not neutral).
    pub fn penalties_on(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0)
    }
}

/// Index of the largest logit; the lowest index wins ties. NaN entries are skipped;
/// an empty or all-NaN row gives 0.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    let mut found = false;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if !found || v > best_v {
            best = i;
            best_v = v;
            found = true;
        }
    }
    best as u32
}

/// Apply llama.cpp's penalties (`llama_sampler_penalties_apply`) in place to `logits`, looking
/// at the last `params.penalty_last_n` tokens of `history`. For each distinct token seen `count`
/// times: `l = l <= 0 ? l * repeat : l / repeat`, then `l -= count * frequency + presence`.
/// Token ids outside `logits` are ignored.
pub fn apply_penalties(params: &SamplingParams, logits: &mut [f32], history: &[u32]) {
    if !params.penalties_on() {
        return;
    }
    let start = history.len().saturating_sub(params.penalty_last_n);
    let mut window: Vec<u32> = history[start..].to_vec();
    window.sort_unstable();
    let mut i = 0;
    while i < window.len() {
        let tok = window[i];
        let mut j = i + 1;
        while j < window.len() && window[j] == tok {
            j += 1;
        }
        let count = (j - i) as f32;
        if let Some(l) = logits.get_mut(tok as usize) {
            if *l <= 0.0 {
                *l *= params.repeat_penalty;
            } else {
                *l /= params.repeat_penalty;
            }
            *l -= count * params.frequency_penalty + params.presence_penalty;
        }
        i = j;
    }
}

/// xoshiro256** (Blackman & Vigna), seeded through splitmix64. Small, fast, and the same
/// on every target; not cryptographic.
#[derive(Debug, Clone)]
struct Rng {
    s: [u64; 4],
}

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A candidate token: id and (possibly penalised) logit.
#[derive(Debug, Clone, Copy)]
struct Cand {
    id: u32,
    logit: f32,
}

/// Descending by logit, then ascending by id: a total order since NaN never enters.
fn by_logit_desc(a: &Cand, b: &Cand) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Given `c[..from]` already holds the best `from` candidates in descending order, bring the
/// next best `k - from` to `c[from..k]`, also in descending order. O(len) + O(k log k).
fn sort_range(c: &mut [Cand], from: usize, k: usize) {
    let k = k.min(c.len());
    if k <= from {
        return;
    }
    let tail = &mut c[from..];
    if k - from < tail.len() {
        tail.select_nth_unstable_by(k - from - 1, by_logit_desc);
    }
    tail[..k - from].sort_unstable_by(by_logit_desc);
}

/// Above this many candidates top-p buckets instead of sorting a growing head.
const BUCKET_MIN_CANDS: usize = 4096;
/// Logit buckets for top-p: fine enough that the bucket the cut falls in is small.
const N_BUCKETS: usize = 4096;

/// top-p in O(n) for large candidate sets: bucket the logits (bucket 0 = highest), find the
/// bucket where the cumulative mass from the top reaches `target`, keep every bucket above it
/// and sort only that one bucket to place the cut. Keeps the same set as sorting everything
/// (up to float summation order). Returns false, changing nothing, when the logit range is
/// degenerate (all equal, or too wide to bucket), so the caller sorts instead.
fn top_p_bucketed(c: &mut Vec<Cand>, side: &mut Vec<Cand>, max: f32, target: f64) -> bool {
    let min = c.iter().fold(f32::INFINITY, |m, x| m.min(x.logit));
    let range = max as f64 - min as f64;
    if !(range.is_finite() && range > 0.0) {
        return false;
    }
    let scale = N_BUCKETS as f64 / range;
    let bucket = |l: f32| (((max as f64 - l as f64) * scale) as usize).min(N_BUCKETS - 1);
    let mut mass = vec![0.0f64; N_BUCKETS];
    for x in c.iter() {
        mass[bucket(x.logit)] += ((x.logit - max) as f64).exp();
    }
    let mut cum = 0.0;
    let mut cut = None;
    for (b, &m) in mass.iter().enumerate() {
        if cum + m >= target {
            cut = Some(b);
            break;
        }
        cum += m;
    }
    let Some(cut) = cut else {
        return true; // rounding: the whole mass is below target, keep everything
    };
    side.clear();
    side.extend(c.iter().filter(|x| bucket(x.logit) == cut));
    side.sort_unstable_by(by_logit_desc);
    let mut n_side = side.len();
    for (i, x) in side.iter().enumerate() {
        cum += ((x.logit - max) as f64).exp();
        if cum >= target {
            n_side = i + 1;
            break;
        }
    }
    c.retain(|x| bucket(x.logit) < cut);
    c.extend_from_slice(&side[..n_side]);
    true
}

/// Picks tokens according to [`SamplingParams`]; owns its random number generator and scratch
/// space, so one `Sampler` per generation stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    cands: Vec<Cand>,
    /// Scratch for the bucket that top-p cuts through.
    side: Vec<Cand>,
}

impl Sampler {
    /// A sampler for `params`, which must pass [`SamplingParams::validate`].
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        params.validate()?;
        Ok(Sampler { rng: Rng::new(params.seed), params, cands: Vec::new(), side: Vec::new() })
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// top-p over the candidates, whose first `sorted` are the best in descending order:
    /// sort a growing head until its mass reaches `target`, then cut there.
    fn top_p_sorted(&mut self, mut sorted: usize, max: f32, target: f64) {
        let (mut cum, mut counted) = (0.0f64, 0usize);
        let mut k = sorted.max(64).min(self.cands.len());
        loop {
            if k > sorted {
                sort_range(&mut self.cands, sorted, k);
                sorted = k;
            }
            let mut keep = None;
            for (i, c) in self.cands[counted..k].iter().enumerate() {
                cum += ((c.logit - max) as f64).exp();
                if cum >= target {
                    keep = Some(counted + i + 1);
                    break;
                }
            }
            counted = k;
            match keep {
                Some(n) => {
                    self.cands.truncate(n);
                    break;
                }
                None if k >= self.cands.len() => break, // rounding or min-p: keep all
                None => k = (k * 4).min(self.cands.len()),
            }
        }
    }

    /// Whether every draw is the argmax (temperature <= 0 or top-k = 1): no randomness involved.
    pub fn is_greedy(&self) -> bool {
        self.params.temperature <= 0.0 || self.params.top_k == 1
    }

    /// Pick the next token. `logits` may be modified (penalties are applied in place);
    /// `history` are the tokens so far (prompt + generated). An empty or all-NaN row gives 0.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        apply_penalties(&self.params, logits, history);
        if self.is_greedy() {
            return argmax(logits);
        }
        let p = self.params.clone();

        // Candidates: every finite-or-+inf logit. +inf becomes f32::MAX so that the softmax
        // below stays finite (such tokens then take all the mass, as they should).
        self.cands.clear();
        self.cands.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan() && **l != f32::NEG_INFINITY)
                .map(|(i, &l)| Cand { id: i as u32, logit: l.min(f32::MAX) }),
        );
        if self.cands.is_empty() {
            return argmax(logits);
        }
        // How many of the leading candidates are known to be sorted in descending order.
        let mut sorted = 0usize;

        // top-k: partial selection, O(n).
        if p.top_k > 0 && p.top_k < self.cands.len() {
            sort_range(&mut self.cands, 0, p.top_k);
            self.cands.truncate(p.top_k);
            sorted = self.cands.len();
        }

        // top-p (on temperature-1 probabilities): sort a growing prefix until it covers `top_p`.
        if p.top_p < 1.0 {
            let max = self.cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
            let total: f64 = self.cands.iter().map(|c| ((c.logit - max) as f64).exp()).sum();
            let target = p.top_p as f64 * total;
            // min-p keeps a prefix of the sorted order with a threshold set by the max logit,
            // which top-p never removes: dropping those tokens now (after `total` is known)
            // gives the same result and leaves less to sort.
            if p.min_p > 0.0 {
                let threshold = max + p.min_p.ln();
                self.cands.retain(|c| c.logit >= threshold);
                // Survivors of the sorted prefix are still its head (see `retain`'s order).
                sorted = sorted.min(self.cands.len());
            }
            // Many candidates left and no sorted head: one bucketing pass finds the cut.
            let bucketed = sorted == 0
                && self.cands.len() > BUCKET_MIN_CANDS
                && top_p_bucketed(&mut self.cands, &mut self.side, max, target);
            if !bucketed {
                self.top_p_sorted(sorted, max, target);
            }
        }

        // min-p: keep p_i >= min_p * p_max, i.e. logit >= max + ln(min_p). Keeps at least the max.
        if p.min_p > 0.0 {
            let max = self.cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
            let threshold = max + p.min_p.ln();
            self.cands.retain(|c| c.logit >= threshold);
        }

        // temperature, softmax, draw.
        let max = self.cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        let inv_t = 1.0 / p.temperature as f64;
        let mut total = 0.0f64;
        for c in self.cands.iter_mut() {
            let w = ((((c.logit - max) as f64) * inv_t).exp()) as f32;
            c.logit = w; // reuse the slot for the unnormalised weight
            total += w as f64;
        }
        if !(total > 0.0 && total.is_finite()) {
            return argmax(logits);
        }
        let r = self.rng.next_f64() * total;
        let mut cum = 0.0f64;
        for c in &self.cands {
            cum += c.logit as f64;
            if r < cum {
                return c.id;
            }
        }
        // Rounding left r just above the sum: the last candidate with weight takes it.
        self.cands.iter().rev().find(|c| c.logit > 0.0).map_or(argmax(logits), |c| c.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The O(n) bucketed top-p keeps the same set as sorting, on flat, peaky and tied rows.
    #[test]
    fn bucketed_top_p_matches_sorted() {
        let mut rng = Rng::new(5);
        for (n, scale, quantize) in
            [(20_000, 30.0f32, false), (50_000, 3.0, false), (10_000, 0.1, false), (30_000, 8.0, true)]
        {
            let row: Vec<Cand> = (0..n)
                .map(|i| {
                    let mut l = (rng.next_f64() as f32 - 0.5) * scale;
                    if quantize {
                        l = l.round();
                    }
                    Cand { id: i as u32, logit: l }
                })
                .collect();
            for top_p in [0.1f32, 0.5, 0.9, 0.95, 0.999] {
                let max = row.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
                let total: f64 = row.iter().map(|c| ((c.logit - max) as f64).exp()).sum();
                let target = top_p as f64 * total;

                let mut s = Sampler::new(SamplingParams::default()).unwrap();
                s.cands = row.clone();
                s.top_p_sorted(0, max, target);
                let mut want: Vec<u32> = s.cands.iter().map(|c| c.id).collect();

                let (mut c, mut side) = (row.clone(), Vec::new());
                assert!(top_p_bucketed(&mut c, &mut side, max, target));
                let mut got: Vec<u32> = c.iter().map(|c| c.id).collect();
                want.sort_unstable();
                got.sort_unstable();
                // Summation order differs, so the cut may move by one token when the cumulative
                // mass lands within rounding of the target; otherwise the sets are identical.
                let diff = want.len().abs_diff(got.len());
                assert!(diff <= 1, "n={n} scale={scale} top_p={top_p}: {} vs {}", want.len(), got.len());
                let (short, long) = if want.len() <= got.len() { (&want, &got) } else { (&got, &want) };
                assert!(short.iter().all(|id| long.binary_search(id).is_ok()));
            }
        }
    }
}
