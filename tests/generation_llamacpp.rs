//! The CPU executor against llama.cpp on the real models (tests/data/generation_refs.json,
//! made by tests/scripts/make_llamacpp_refs.py with llama-cpp-python 0.3.36 on this CPU).
//!
//! Two checks per prompt:
//! - teacher-forced: wick evaluates the prompt followed by llama.cpp's greedy tokens in one
//!   batch, and at every step its argmax must be llama.cpp's token, except where llama.cpp's own
//!   top-2 logit gap is below [`TIE`] (there, float summation order legitimately decides);
//! - free-running: `Session::generate` at temperature 0 must reproduce llama.cpp's tokens at
//!   least up to llama.cpp's first near-tie, and all of the first [`MIN_MATCH`] tokens on at
//!   least six of the ten prompts per model (measured: all ten for SmolLM2, seven for Gemma 3,
//!   whose logits are bit-identical to llama.cpp's on most prompts).
//!
//! `WICK_TEST_EXECUTOR=cuda` (or `webgpu`) holds a GPU executor to llama.cpp's own GPU bar (by
//! hand, where a GPU is: CI has none; results in benches/RESULTS.md). A GPU sums in another
//! order than llama.cpp's CPU, and the Q8 rounding of every product's input turns that into
//! logits a few tenths away (a one-ulp change of the weights does the same on the CPU:
//! `one_ulp_moves_the_logits`). llama.cpp's CUDA backend, measured against these references
//! on an H100 (tests/scripts/llama_greedy.cpp), has top-logit errors up to 2.9, parts from its
//! CPU where the CPU's margin is up to 0.65, and keeps 32 tokens on 0-1 of 10 SmolLM2 prompts
//! and 3-4 of 10 Gemma 3 prompts. So for a GPU: top-logit error at most [`GPU_MAX_ERR`],
//! near-ties below [`GPU_TIE`], and the decisive prompts reported, not required. Every prompt
//! is checked before the test fails, so a run lists each prompt that parts.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::*;
use wick::exec::Readback;
use wick::sampling::SamplingParams;
use wick::{ExecutorKind, GenerateOptions, SessionOptions};

/// Tokens that must agree with llama.cpp in free-running generation.
const MIN_MATCH: usize = 32;
/// A top-2 logit gap below this is a near-tie. wick's CPU logits are bit-identical to
/// llama.cpp's on most prompts, but llama.cpp's reference tokens come from its one-token
/// decode path while the teacher-forced check evaluates one batch, and llama.cpp's own batch
/// and decode paths differ by up to a few tenths of a logit; at a near-tie either token may win.
const TIE: f64 = 0.5;
/// [`TIE`] for a GPU executor: llama.cpp's own CUDA backend parts from its CPU at margins up
/// to 0.65 (and wick's CUDA executor flips one teacher-forced Gemma 3 token at 0.69).
const GPU_TIE: f64 = 1.0;
/// The largest top-logit error allowed a GPU executor (llama.cpp's CUDA backend: up to 2.9 on
/// SmolLM2, 1.9 on Gemma 3; wick's: up to 0.6 and 1.1). A wrong kernel is off by whole units.
const GPU_MAX_ERR: f64 = 1.5;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Up to `n` greedy tokens after `prompt`, generated through the public API.
fn greedy(model: &wick::Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = model.session(SessionOptions { n_ctx: 1024, ..Default::default() }).unwrap();
    let opts = GenerateOptions { max_tokens: n, sampling: SamplingParams::greedy(), ..Default::default() };
    let mut gen = s.generate(prompt, opts).unwrap();
    let mut got = Vec::new();
    while let Some(t) = block_on(gen.next()) {
        got.extend(t.unwrap().id);
    }
    got
}

/// The executor under test: `WICK_TEST_EXECUTOR`, else the CPU.
fn executor() -> ExecutorKind {
    std::env::var("WICK_TEST_EXECUTOR").map_or(ExecutorKind::Cpu, |v| v.parse().expect("WICK_TEST_EXECUTOR"))
}

fn check_model(name: &str, min_full_prompts: usize) {
    let refs = reference("generation_refs.json");
    let runs = refs[name]["runs"].as_array().expect("runs");
    let kind = executor();
    let gpu = kind != ExecutorKind::Cpu;
    let (tie, min_full_prompts) = if gpu { (GPU_TIE, 0) } else { (TIE, min_full_prompts) };
    let model = load_on(name, kind);
    let mut decisive = 0; // prompts agreeing for MIN_MATCH tokens
    let mut failures = Vec::new();
    for run in runs {
        let text = run["prompt"].as_str().unwrap();
        let prompt = model.tokenizer().encode(text, true, true).unwrap();
        assert_eq!(prompt, ids(&run["prompt_ids"]), "{name}: prompt {text:?} tokenized differently");
        let mut want = ids(&run["greedy"]);
        let gaps: Vec<f64> = run["gaps"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        if want.last().is_some_and(|&t| model.tokenizer().is_eog(t)) {
            want.pop();
        }

        // Teacher-forced: logits at every generated position, in one batch.
        let mut all = prompt.clone();
        all.extend_from_slice(&want[..want.len().saturating_sub(1)]);
        let mut s = model.session(SessionOptions { n_ctx: 1024, ..Default::default() }).unwrap();
        let out = block_on(s.eval(&all, Readback::AllLogits)).unwrap();
        let nv = model.n_vocab();
        let mut top_err = 0f64;
        for pair in run["last_logits_top"].as_array().unwrap() {
            let (id, v) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap());
            top_err = top_err.max((out.logits[(prompt.len() - 1) * nv + id] as f64 - v).abs());
        }
        if gpu && top_err > GPU_MAX_ERR {
            failures.push(format!(
                "{name} {text:?}: top-logit error {top_err:.3} (a GPU may be {GPU_MAX_ERR} off)"
            ));
        }
        let mut ties = 0;
        for (i, &t) in want.iter().enumerate() {
            let row = &out.logits[(prompt.len() - 1 + i) * nv..(prompt.len() + i) * nv];
            let got = wick::sampling::argmax(row);
            if got != t {
                if gaps[i] >= tie {
                    failures.push(format!(
                        "{name} {text:?}: step {i} wick picks {got}, llama.cpp {t} with a clear margin of {}",
                        gaps[i]
                    ));
                }
                ties += 1;
            }
        }

        // Free-running greedy generation through the public API.
        let got = greedy(&model, &prompt, want.len());
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        let need = want.len().min(MIN_MATCH);
        let first_tie = gaps.iter().position(|&g| g < tie).unwrap_or(want.len()).min(want.len());
        eprintln!(
            "{name} {text:?}: top-logit error {top_err:.3}; teacher-forced near-tie flips {ties}; \
             free-running {same}/{} equal, first near-tie of llama.cpp at {first_tie}",
            want.len()
        );
        if same < first_tie {
            failures.push(format!(
                "{name} {text:?}: greedy generation diverges from llama.cpp at token {same} (llama.cpp's gap there {}), \
                 before any near-tie\n want {want:?}\n got  {got:?}",
                gaps[same]
            ));
        }
        if same >= need {
            decisive += 1;
        }
    }
    eprintln!(
        "{name} on {kind:?}: {decisive} of {} prompts agree with llama.cpp for {MIN_MATCH} tokens",
        runs.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        decisive >= min_full_prompts,
        "{name}: only {decisive} prompts agree with llama.cpp for {MIN_MATCH} tokens (want {min_full_prompts})"
    );
}

#[test]
fn smollm2_matches_llamacpp() {
    check_model(SMOLLM2, 6);
}

#[test]
fn gemma3_matches_llamacpp() {
    check_model(GEMMA3, 6);
}

/// How far the CPU executor's logits move when every `attn_norm` weight of SmolLM2 moves by
/// one ulp (a relative change of 1e-7, the size of a different summation order): the same
/// measure as the checks' "top-logit error" (llama.cpp's top 32 logits at the last prompt
/// position). A yardstick for the GPU executors, which sum in other orders.
#[test]
#[ignore = "an experiment that prints its figures; results in benches/RESULTS.md"]
fn one_ulp_moves_the_logits() {
    let path = model_path(SMOLLM2);
    let bytes = std::fs::read(&path).expect("read the model");
    let header = block_on(async {
        let src = wick::source::FileSource::open(&path).await.expect("open");
        wick::gguf::GgufReader::open(src).await.expect("a GGUF file").into_header()
    });
    let mut nudged = bytes.clone();
    let mut n = 0;
    for t in header.tensors.iter().filter(|t| t.name.ends_with("attn_norm.weight")) {
        let at = (header.data_offset + t.offset) as usize;
        for p in (at..at + 4 * t.n_elements() as usize).step_by(4) {
            let v = f32::from_le_bytes(nudged[p..p + 4].try_into().unwrap());
            nudged[p..p + 4].copy_from_slice(&f32::from_bits(v.to_bits() + 1).to_le_bytes());
        }
        n += 1;
    }
    assert_eq!(n, 30, "SmolLM2 has 30 attn_norm weights");
    let load = |b: &[u8]| {
        let opts = wick::LoadOptions { executor: ExecutorKind::Cpu, ..Default::default() };
        block_on(wick::Model::load(wick::source::MemorySource::new(b.to_vec()), opts)).expect("load")
    };
    let (plain, moved) = (load(&bytes), load(&nudged));
    let last = |m: &wick::Model, prompt: &[u32]| {
        let mut s = m.session(SessionOptions { n_ctx: 1024, ..Default::default() }).unwrap();
        let out = block_on(s.eval(prompt, Readback::AllLogits)).unwrap();
        out.logits[(prompt.len() - 1) * m.n_vocab()..prompt.len() * m.n_vocab()].to_vec()
    };
    let refs = reference("generation_refs.json");
    let mut decisive = 0;
    for run in refs[SMOLLM2]["runs"].as_array().expect("runs") {
        let prompt = ids(&run["prompt_ids"]);
        let (a, b) = (last(&plain, &prompt), last(&moved, &prompt));
        let (mut err_plain, mut err_moved) = (0f64, 0f64);
        for pair in run["last_logits_top"].as_array().unwrap() {
            let (id, v) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap());
            err_plain = err_plain.max((a[id] as f64 - v).abs());
            err_moved = err_moved.max((b[id] as f64 - v).abs());
        }
        // Free-running greedy tokens of the nudged model against llama.cpp's.
        let want = ids(&run["greedy"]);
        let got = greedy(&moved, &prompt, want.len());
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        if same >= want.len().min(MIN_MATCH) {
            decisive += 1;
        }
        eprintln!(
            "{:?}: top-logit error {err_plain:.3}, with one-ulp norms {err_moved:.3}; their greedy tokens equal \
             llama.cpp's for {same} of {}",
            run["prompt"].as_str().unwrap(),
            want.len()
        );
        assert_eq!(err_plain, 0.0, "the CPU executor's logits are llama.cpp's");
    }
    eprintln!("with one-ulp norms, {decisive} of 10 prompts agree with llama.cpp for {MIN_MATCH} tokens");
}
