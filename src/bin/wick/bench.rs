//! `wick bench`: prefill and decode speed, measured the way llama-bench measures them.
//!
//! pp N: a fresh context evaluates N tokens in prompt chunks of the executor's size, as
//! `generate` does (CUDA 1024, the others 256; as llama-bench's ubatch; `--ubatch` sets it).
//! tg N: a fresh context (after one token) generates N tokens one step at a time. Each test runs once to warm up, then
//! `repetitions` times; the mean and standard deviation of tokens/s are reported. With a
//! depth D, D tokens fill the context first (not timed). Lists of prompt sizes, generation
//! lengths and depths give one row per combination, in llama-bench's order: for each depth,
//! every pp test, then every tg test.
//!
//! With `--parallel N` (N > 1), as llama-batched-bench: pp P evaluates N sequences of P
//! tokens each in one step, tg T generates T tokens for each of N sequences in steps of N
//! tokens (one per sequence, each at its own position); tokens/s counts every sequence's.

use std::time::Instant;

use wick::exec::Readback;
use wick::{Batch, Model, Result, SeqId, SessionOptions};

/// One result row.
pub struct Row {
    pub test: String,
    /// A decode (tg) test, else a prefill (pp) one.
    pub decode: bool,
    pub n_tokens: usize,
    /// Tokens in the context before the test.
    pub depth: usize,
    /// Sequences evaluated together (1: one session).
    pub parallel: usize,
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

async fn prefill(model: &Model, n: usize, depth: usize, ubatch: usize) -> Result<f64> {
    let mut s = model.session(SessionOptions { n_ctx: depth + n + 1, n_batch: ubatch })?;
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
    // Greedy decoding as `generate` runs it: each step but the last lets the device start the
    // next on its argmax.
    for i in 0..n {
        let out =
            if i + 1 < n { s.eval_greedy(&[next]).await? } else { s.eval(&[next], Readback::Argmax).await? };
        next = out.token().unwrap_or(0);
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// A batch of `n` sequences, each holding `depth` tokens (filled one sequence a step).
async fn filled_batch(
    model: &Model,
    n: usize,
    depth: usize,
    extra: usize,
) -> Result<(Batch<'_>, Vec<SeqId>)> {
    let mut b = model.batch(n * (depth + extra + wick::exec::KV_BLOCK))?;
    let ids: Vec<SeqId> = (0..n).map(|_| b.add()).collect();
    if depth > 0 {
        let fill = tokens(model, depth);
        for &id in &ids {
            b.step(&[(id, &fill)], Readback::Argmax).await?;
        }
    }
    Ok((b, ids))
}

async fn batch_prefill(model: &Model, n_seqs: usize, n: usize, depth: usize) -> Result<f64> {
    let (mut b, ids) = filled_batch(model, n_seqs, depth, n).await?;
    let prompt = tokens(model, n);
    let work: Vec<(SeqId, &[u32])> = ids.iter().map(|&id| (id, &prompt[..])).collect();
    let t = Instant::now();
    b.step(&work, Readback::Argmax).await?;
    Ok((n * n_seqs) as f64 / t.elapsed().as_secs_f64())
}

async fn batch_decode(model: &Model, n_seqs: usize, n: usize, depth: usize) -> Result<f64> {
    let (mut b, ids) = filled_batch(model, n_seqs, depth, n + 1).await?;
    let first = tokens(model, 1);
    let work: Vec<(SeqId, &[u32])> = ids.iter().map(|&id| (id, &first[..])).collect();
    let mut next = b.step(&work, Readback::Argmax).await?.tokens;
    let t = Instant::now();
    for _ in 0..n {
        let cur: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let work: Vec<(SeqId, &[u32])> = ids.iter().zip(&cur).map(|(&id, t)| (id, &t[..])).collect();
        next = b.step(&work, Readback::Argmax).await?.tokens;
    }
    Ok((n * n_seqs) as f64 / t.elapsed().as_secs_f64())
}

/// Run the pp and tg tests for every depth (llama-bench's order: depth, then the pp sizes,
/// then the tg lengths; 0 skips a test). `ubatch`: prompt tokens a step (0: the executor's).
pub async fn run(
    model: &Model,
    pps: &[usize],
    tgs: &[usize],
    depths: &[usize],
    parallel: &[usize],
    reps: usize,
    ubatch: usize,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &par in parallel {
        for &depth in depths {
            let mut suffix = if depth > 0 { format!(" @ d{depth}") } else { String::new() };
            if par > 1 {
                suffix = format!(" x{par}{suffix}");
            }
            for &pp in pps.iter().filter(|&&n| n > 0) {
                let mut samples = Vec::new();
                for i in 0..=reps {
                    let s = if par > 1 {
                        batch_prefill(model, par, pp, depth).await?
                    } else {
                        prefill(model, pp, depth, ubatch).await?
                    };
                    // The first run warms up.
                    if i > 0 {
                        samples.push(s);
                    }
                }
                let test = format!("pp{pp}{suffix}");
                rows.push(Row { test, decode: false, n_tokens: pp, depth, parallel: par, samples });
            }
            for &tg in tgs.iter().filter(|&&n| n > 0) {
                let mut samples = Vec::new();
                for i in 0..=reps {
                    let n = if i == 0 { tg.min(8) } else { tg };
                    let s = if par > 1 {
                        batch_decode(model, par, n, depth).await?
                    } else {
                        decode(model, n, depth).await?
                    };
                    if i > 0 {
                        samples.push(s);
                    }
                }
                let test = format!("tg{tg}{suffix}");
                rows.push(Row { test, decode: true, n_tokens: tg, depth, parallel: par, samples });
            }
        }
    }
    Ok(rows)
}
