//! `wick bench`: prefill and decode speed, measured the way llama-bench measures them.
//!
//! pp N: a fresh context evaluates N tokens as one batch. tg N: a fresh context (after one
//! token) generates N tokens one step at a time. Each test runs once to warm up, then
//! `repetitions` times; the mean and standard deviation of tokens/s are reported.

use std::time::Instant;

use wick::exec::Readback;
use wick::{Model, Result, SessionOptions};

/// One result row.
pub struct Row {
    pub test: String,
    pub n_tokens: usize,
    pub samples: Vec<f64>,
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
    let mut next = s.eval(&first, Readback::Argmax).await?.token.unwrap_or(0);
    let t = Instant::now();
    for _ in 0..n {
        next = s.eval(&[next], Readback::Argmax).await?.token.unwrap_or(0);
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Run the pp and tg tests.
pub async fn run(model: &Model, pp: usize, tg: usize, depth: usize, reps: usize) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let suffix = if depth > 0 { format!(" @ d{depth}") } else { String::new() };
    if pp > 0 {
        prefill(model, pp, depth).await?;
        let mut samples = Vec::new();
        for _ in 0..reps {
            samples.push(prefill(model, pp, depth).await?);
        }
        rows.push(Row { test: format!("pp{pp}{suffix}"), n_tokens: pp, samples });
    }
    if tg > 0 {
        decode(model, tg.min(8), depth).await?;
        let mut samples = Vec::new();
        for _ in 0..reps {
            samples.push(decode(model, tg, depth).await?);
        }
        rows.push(Row { test: format!("tg{tg}{suffix}"), n_tokens: tg, samples });
    }
    Ok(rows)
}
