//! A long chat keeps its memory flat: 200 turns whose new text has ever-different lengths (so
//! every turn's prompt chunk has a new token count) keep at most a bounded number of compiled
//! graphs, and the process's resident memory after the last turn is what it was after the
//! first few. Before the bound, each distinct chunk length kept a compiled graph with its own
//! activation buffers for the life of the model.
//!
//! Runs on the CPU executor; with the `webgpu` feature also on WebGPU (lavapipe in CI), where a
//! compiled graph owns device buffers. Alone in its own test binary so that the resident set
//! is this test's.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use std::path::PathBuf;

use wick::{ExecutorKind, GenerateOptions, LoadOptions, Model, SessionOptions};

/// Resident set size of this process now (Linux), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// A tiny synthetic llama (random weights, SmolLM2's 49152-token vocabulary): the graph cache
/// behaves the same whatever the model's size, and 200 turns of it run in seconds.
fn load(kind: ExecutorKind) -> Model {
    let dir = std::env::var_os("WICK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `bash .ci/get-models`", path.display());
    pollster::block_on(async {
        let donor = wick::source::FileSource::open(&path).await.expect("open");
        let donor = wick::gguf::GgufReader::open(donor).await.expect("donor").into_header().metadata;
        let spec = wick::synth::SynthSpec::tiny(wick::model::Arch::Llama, 7);
        let bytes = wick::synth::write(Vec::new(), &spec, &donor).expect("synth");
        let src = wick::source::MemorySource::new(bytes);
        Model::load(src, LoadOptions { executor: kind, ..Default::default() }).await.expect("load")
    })
}

/// 200 turns; returns (most graphs kept at once, RSS after turn 20, RSS after turn 200).
/// Diagnostics: `WICK_TRACE_RSS=1` prints the RSS every 20 turns; `WICK_TRACE_FIXED=1` gives
/// every turn the same length (no compiles after the first turns).
fn chat(model: &Model, turns: usize) -> (usize, u64, u64) {
    let mut session = model.session(SessionOptions { n_ctx: 512, n_batch: 64 }).expect("session");
    let vocab = model.n_vocab() as u64;
    let mut history: Vec<u32> = Vec::new();
    let (mut most, mut rss_warm) = (0, 0);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for turn in 0..turns {
        // New text of 1..=97 tokens: chunk lengths (and so graph shapes) differ turn to turn.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let n_new =
            if std::env::var_os("WICK_TRACE_FIXED").is_some() { 13 } else { 1 + (seed % 97) as usize };
        if history.len() + n_new + 4 > session.n_ctx() {
            history.clear();
        }
        history.extend((0..n_new as u64).map(|i| ((seed >> 3).wrapping_add(i * 7919) % vocab) as u32));
        let opts = GenerateOptions { max_tokens: 2, ..Default::default() };
        let mut gen = session.generate(&history, opts).expect("generate");
        pollster::block_on(async {
            while let Some(t) = gen.next().await {
                if let Some(id) = t.expect("token").id {
                    history.push(id);
                }
            }
        });
        most = most.max(model.compiled_graphs());
        if std::env::var_os("WICK_TRACE_RSS").is_some() && turn % 20 == 19 {
            eprintln!("turn {}: {:.1} MB, {} graphs", turn + 1, rss() as f64 / 1e6, model.compiled_graphs());
        }
        if turn + 1 == 20 {
            rss_warm = rss();
        }
    }
    (most, rss_warm, rss())
}

/// The two tests measure one process's resident set: they take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `rss_checked`: whether resident memory must stay flat too (see the WebGPU test).
fn check(kind: ExecutorKind, rss_checked: bool) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let model = load(kind);
    let (most, warm, end) = chat(&model, 200);
    eprintln!(
        "{}: at most {most} compiled graphs; RSS after turn 20 {:.1} MB, after turn 200 {:.1} MB",
        model.executor_name(),
        warm as f64 / 1e6,
        end as f64 / 1e6
    );
    assert!(most <= 6, "{most} compiled graphs kept");
    // Allocator noise is a few MB. On WebGPU a graph per chunk length kept ~20 KB of
    // activation buffers per token of the chunk: ~50-100 MB over the ~97 lengths seen here.
    if rss_checked {
        assert!(end <= warm + 16_000_000, "memory grew from {warm} to {end} bytes over 180 turns");
    }
}

#[test]
fn two_hundred_turns_keep_memory_flat_on_the_cpu() {
    check(ExecutorKind::Cpu, true);
}

/// On a hardware adapter the resident set must stay flat (an H100 through Vulkan, 2026-11-25:
/// 194.8 MB after turn 20, 195.2 MB after turn 200). Mesa's software adapter (lavapipe) grows
/// by ~2 MB a turn even when every turn reuses the same three compiled graphs (no compile, no
/// free: only submissions and readbacks), which the same binary does not do on the H100: that
/// growth is the software driver's own, so there only the graph bound is checked.
#[cfg(feature = "webgpu")]
#[test]
fn two_hundred_turns_keep_memory_flat_on_webgpu() {
    let adapter = pollster::block_on(wick::exec::webgpu::WebGpuExecutor::new())
        .expect("a WebGPU adapter (install mesa-vulkan-drivers)")
        .adapter_name()
        .to_lowercase();
    let software = ["llvmpipe", "lavapipe", "swiftshader"].iter().any(|n| adapter.contains(n));
    if software {
        eprintln!("{adapter}: a software adapter, resident memory not checked (see the doc comment)");
    }
    check(ExecutorKind::WebGpu, !software);
}
