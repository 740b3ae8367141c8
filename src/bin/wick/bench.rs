//! `wick bench`: prefill and decode speed, measured the way llama-bench measures them.
//!
//! pp N: a fresh context evaluates N tokens as one batch. tg N: a fresh context (after one
//! token) generates N tokens one step at a time. Each test runs once to warm up, then
//! `repetitions` times; the mean and standard deviation of tokens/s are reported. With a
//! depth D, D tokens fill the context first (not timed). Lists of prompt sizes, generation
//! lengths and depths give one row per combination, in llama-bench's order: for each depth,
//! every pp test, then every tg test.

use std::time::Instant;

use wick::exec::Readback;
use wick::{Model, Result, SessionOptions};

/// One result row.
pub struct Row {
    pub test: String,
    /// A decode (tg) test, else a prefill (pp) one.
    pub decode: bool,
    pub n_tokens: usize,
    /// Tokens in the context before the test.
    pub depth: usize,
    pub samples: Vec<f64>,
}

/// The mean number of context positions a decoded token of a tg test of `n` tokens at `depth`
/// attends to: the test fills depth + 1 positions, then the token at position p (depth + 1 to
/// depth + n) reads the p + 1 cached rows up to and including its own.
pub fn mean_decode_context(depth: usize, n: usize) -> f64 {
    depth as f64 + 1.0 + (n as f64 + 1.0) / 2.0
}

impl Row {
    pub fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len().max(1) as f64
    }
    pub fn stddev(&self) -> f64 {
        let m = self.mean();
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        (self.samples.iter().map(|s| (s - m) * (s - m)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// Token ids spread over the vocabulary (fixed, so runs are comparable).
fn tokens(model: &Model, n: usize) -> Vec<u32> {
    let nv = model.n_vocab() as u64;
    (0..n as u64).map(|i| ((i * 7919 + 13) % nv) as u32).collect()
}

async fn prefill(model: &Model, n: usize, depth: usize) -> Result<f64> {
    let mut s = model.session(SessionOptions { n_ctx: depth + n + 1, n_batch: n.max(1) })?;
    if depth > 0 {
        s.eval(&tokens(model, depth), Readback::Argmax).await?;
    }
    let t = Instant::now();
    s.eval(&tokens(model, n), Readback::Argmax).await?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

async fn decode(model: &Model, n: usize, depth: usize) -> Result<f64> {
    let mut s = model.session(SessionOptions { n_ctx: depth + n + 2, n_batch: 512 })?;
    let first = tokens(model, depth + 1);
    let mut next = s.eval(&first, Readback::Argmax).await?.token().unwrap_or(0);
    let t = Instant::now();
    for _ in 0..n {
        next = s.eval(&[next], Readback::Argmax).await?.token().unwrap_or(0);
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Run the pp and tg tests for every depth (llama-bench's order: depth, then the pp sizes,
/// then the tg lengths; 0 skips a test).
pub async fn run(
    model: &Model,
    pps: &[usize],
    tgs: &[usize],
    depths: &[usize],
    reps: usize,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &depth in depths {
        let suffix = if depth > 0 { format!(" @ d{depth}") } else { String::new() };
        for &pp in pps.iter().filter(|&&n| n > 0) {
            prefill(model, pp, depth).await?;
            let mut samples = Vec::new();
            for _ in 0..reps {
                samples.push(prefill(model, pp, depth).await?);
            }
            rows.push(Row { test: format!("pp{pp}{suffix}"), decode: false, n_tokens: pp, depth, samples });
        }
        for &tg in tgs.iter().filter(|&&n| n > 0) {
            decode(model, tg.min(8), depth).await?;
            let mut samples = Vec::new();
            for _ in 0..reps {
                samples.push(decode(model, tg, depth).await?);
            }
            rows.push(Row { test: format!("tg{tg}{suffix}"), decode: true, n_tokens: tg, depth, samples });
        }
    }
    Ok(rows)
}
