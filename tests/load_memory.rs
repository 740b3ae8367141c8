//! Loading streams the weights: peak host memory while loading stays near the model's size
//! (the CPU executor's copy of the weights) plus the tokenizer, never a second copy.
//! Alone in its own test binary so that the process's peak is this test's.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::models::*;

/// Peak resident set size of this process (Linux), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn loading_gemma3_holds_one_copy_of_the_weights() {
    let path = model_path(GEMMA3);
    let file_size = std::fs::metadata(&path).unwrap().len();
    let before = peak_rss();
    let model = load_cpu(GEMMA3);
    let peak = peak_rss();
    let grown = peak.saturating_sub(before);
    eprintln!(
        "file {:.1} MB, peak before {:.1} MB, after loading {:.1} MB (+{:.1} MB)",
        file_size as f64 / 1e6,
        before as f64 / 1e6,
        peak as f64 / 1e6,
        grown as f64 / 1e6
    );
    // The weights (≈ the file), the 262k-token vocabulary's tables (≈ 40 MB), one 4 MiB chunk.
    // A second copy of the weights would add another 250 MB.
    assert!(
        grown < file_size + 80_000_000,
        "loading grew the heap by {grown} bytes for a {file_size}-byte file"
    );
    drop(model);
}
