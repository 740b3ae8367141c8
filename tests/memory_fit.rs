//! The fit estimate is within 10% of the measured peak memory on the CPU executor: for each
//! model, the process's peak RSS growth across loading it and evaluating a whole context of
//! tokens (so that every page of the lazily zeroed KV cache is written) is compared with
//! `Model::memory_estimate` (weights + KV cache + scratch) at that context.
//!
//! Models: every file in `WICK_FIT_MODELS` (colon-separated; e.g. `wick synth --shape 1b` and
//! `--shape 8b` files), else the repository's two real models (`bash .ci/get-models`; missing
//! ones fail). The context: `WICK_FIT_CTX` (default 1024). Alone in its own test binary, one
//! test, so that the process's peak is this test's; the peak is reset between models through
//! `/proc/self/clear_refs` (Linux).
//!
//! With the `cuda` feature and a driver (`WICK_REQUIRE_CUDA=1` to fail without one), the same on
//! the CUDA executor: the device memory a model takes (free memory before loading it, the
//! context already made by an earlier load, less free memory after a whole context) against
//! the estimate. `WICK_FIT_MODELS` there too (the 1b and 8b files on the GPU machine).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use std::path::PathBuf;

use support::block_on;
use support::models::{model_path, GEMMA3, SMOLLM2};
use wick::exec::Readback;
use wick::{ExecutorKind, LoadOptions, Model, SessionOptions};

/// A field of /proc/self/status in bytes.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with(field)).expect(field);
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Reset the peak RSS (VmHWM) to the current RSS.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("writing /proc/self/clear_refs");
}

fn models() -> Vec<PathBuf> {
    match std::env::var("WICK_FIT_MODELS") {
        Ok(list) if !list.is_empty() => list.split(':').map(PathBuf::from).collect(),
        _ => vec![model_path(SMOLLM2), model_path(GEMMA3)],
    }
}

#[test]
fn the_estimate_is_within_10_percent_of_the_peak_on_the_cpu() {
    let n_ctx: usize = std::env::var("WICK_FIT_CTX").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let mut worst = 0f64;
    for path in models() {
        reset_peak();
        let before = status_kib("VmRSS:");
        let model = block_on(async {
            let src = wick::source::FileSource::open(&path).await.expect("open");
            let opts = LoadOptions { executor: ExecutorKind::Cpu, ..Default::default() };
            Model::load(src, opts).await.expect("load")
        });
        let mut s = model.session(SessionOptions { n_ctx, ..Default::default() }).expect("session");
        // A whole context (all but the last position, then one decode step into it).
        let n_vocab = model.n_vocab() as u64;
        let tokens: Vec<u32> = (0..n_ctx as u64 - 1).map(|i| (1 + i * 7919 % (n_vocab - 1)) as u32).collect();
        block_on(s.eval(&tokens, Readback::Argmax)).expect("prefill");
        block_on(s.eval(&[1], Readback::Argmax)).expect("decode");
        assert_eq!(s.tokens().len(), n_ctx);
        let peak = status_kib("VmHWM:").saturating_sub(before);
        let est = model.memory_estimate(n_ctx, SessionOptions::default().n_batch).unwrap();
        let off = (est.total() as f64 - peak as f64) / peak as f64;
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        eprintln!(
            "{}: context {n_ctx}: estimate {est}; measured peak growth {:.1} MiB; estimate {:+.1}%",
            path.file_name().unwrap().to_string_lossy(),
            mib(peak),
            off * 100.0
        );
        worst = worst.max(off.abs());
        drop(s);
        drop(model);
    }
    assert!(worst <= 0.10, "an estimate is {:.1}% off the measured peak", worst * 100.0);
}

#[cfg(feature = "cuda")]
#[test]
fn the_estimate_is_within_10_percent_of_the_device_memory_on_cuda() {
    if !support::cuda_wanted() {
        return;
    }
    let n_ctx: usize = std::env::var("WICK_FIT_CTX").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let load = |path: &PathBuf| {
        block_on(async {
            let src = wick::source::FileSource::open(path).await.expect("open");
            let opts = LoadOptions { executor: ExecutorKind::Cuda, ..Default::default() };
            Model::load(src, opts).await.expect("load")
        })
    };
    let free = |m: &Model| m.memory_budget().and_then(|b| b.free).expect("free CUDA memory");
    let mut worst = 0f64;
    for path in models() {
        // A first copy of the model makes the CUDA context; what the second one takes (its
        // kernels, weights, KV cache and scratch over a whole context) is the measure.
        let first = load(&path);
        let before = free(&first);
        let model = load(&path);
        let mut s = model.session(SessionOptions { n_ctx, ..Default::default() }).expect("session");
        let n_vocab = model.n_vocab() as u64;
        let tokens: Vec<u32> = (0..n_ctx as u64 - 1).map(|i| (1 + i * 7919 % (n_vocab - 1)) as u32).collect();
        block_on(s.eval(&tokens, Readback::Argmax)).expect("prefill");
        block_on(s.eval(&[1], Readback::Argmax)).expect("decode");
        let used = before.saturating_sub(free(&model));
        let est = model.memory_estimate(n_ctx, SessionOptions::default().n_batch).unwrap();
        let off = (est.total() as f64 - used as f64) / used as f64;
        eprintln!(
            "{} on CUDA: context {n_ctx}: estimate {est}; measured {:.1} MiB of device memory; estimate {:+.1}%",
            path.file_name().unwrap().to_string_lossy(),
            used as f64 / (1u64 << 20) as f64,
            off * 100.0
        );
        worst = worst.max(off.abs());
    }
    assert!(worst <= 0.10, "an estimate is {:.1}% off the measured device memory", worst * 100.0);
}
