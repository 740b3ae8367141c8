//! The four architectures on tiny synthetic models (random weights, SmolLM2's tokenizer):
//! wick's CPU logits at every position and its greedy tokens equal llama.cpp's on the same
//! file (tests/data/synthetic_refs.json, made by tests/scripts/make_synthetic_refs.py).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::*;
use wick::exec::Readback;
use wick::model::Arch;
use wick::sampling::SamplingParams;
use wick::source::MemorySource;
use wick::synth::SynthSpec;
use wick::{ExecutorKind, GenerateOptions, LoadOptions, Model, SessionOptions};

/// The file name the reference script saw: `tiny-{arch}-s{seed}.gguf`.
fn check(arch: Arch, seed: u64) {
    let name = format!("tiny-{}-s{seed}.gguf", arch.name());
    let refs = reference("synthetic_refs.json");
    let r = &refs[&name];
    assert!(r.is_object(), "no reference for {name}");
    let donor = donor_metadata();
    let bytes = wick::synth::write(Vec::new(), &SynthSpec::tiny(arch, seed), &donor).unwrap();
    assert_eq!(bytes.len() as u64, r["size"].as_u64().unwrap(), "{name}: the generator changed");
    let sum: u64 = bytes.iter().map(|&b| b as u64).sum();
    assert_eq!(sum, r["byte_sum"].as_u64().unwrap(), "{name}: the generator changed");

    let model = block_on(Model::load(
        MemorySource::new(bytes),
        LoadOptions { executor: ExecutorKind::Cpu, ..Default::default() },
    ))
    .unwrap();
    let tokens: Vec<u32> =
        r["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let mut session = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).unwrap();
    let out = block_on(session.eval(&tokens, Readback::AllLogits)).unwrap();
    let n_vocab = model.n_vocab();
    assert_eq!(out.logits.len(), tokens.len() * n_vocab);
    let mut max_err = 0f64;
    let mut max_abs = 0f64;
    for (i, pos) in r["positions"].as_array().unwrap().iter().enumerate() {
        let row = &out.logits[i * n_vocab..(i + 1) * n_vocab];
        for pair in pos["top"].as_array().unwrap() {
            let (id, v) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap());
            max_err = max_err.max((row[id] as f64 - v).abs());
            max_abs = max_abs.max(v.abs());
        }
        for (j, v) in pos["strided"].as_array().unwrap().iter().enumerate() {
            max_err = max_err.max((row[j * 257] as f64 - v.as_f64().unwrap()).abs());
        }
    }
    eprintln!("{name}: max logit error {max_err:.5} (largest logit {max_abs:.2})");
    // Tiny models have no near-ties to amplify float-order noise: wick agrees to 1e-5.
    assert!(max_err < 1e-3, "{name}: logits differ from llama.cpp by {max_err}");

    let mut want: Vec<u32> =
        r["greedy"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    // llama.cpp's reference runs past end-of-generation tokens; wick stops there.
    if let Some(end) = want.iter().position(|&t| model.tokenizer().is_eog(t)) {
        want.truncate(end);
    }
    let mut session = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).unwrap();
    let opts = GenerateOptions { max_tokens: want.len(), sampling: SamplingParams::greedy(), stop: vec![] };
    let mut gen = session.generate(&tokens, opts).unwrap();
    let mut got = Vec::new();
    while let Some(t) = block_on(gen.next()) {
        got.extend(t.unwrap().id);
    }
    assert_eq!(got, want, "{name}: greedy tokens differ from llama.cpp");
}

#[test]
fn qwen2_matches_llamacpp() {
    check(Arch::Qwen2, 7);
}

#[test]
fn qwen3_matches_llamacpp() {
    check(Arch::Qwen3, 7);
}

#[test]
fn llama_matches_llamacpp() {
    check(Arch::Llama, 7);
}

#[test]
fn gemma3_matches_llamacpp() {
    check(Arch::Gemma3, 7);
}
