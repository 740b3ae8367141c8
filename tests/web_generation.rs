//! End to end in the browser: tiny synthetic models of every architecture, generated in memory,
//! streamed through a JS `ReadableStream` ([`ReadableStreamSource`]) onto the WebGPU executor
//! (SwiftShader in headless Chromium: the f32 path, no shader-f16) and onto the CPU executor
//! (single-threaded wasm); greedy generation must give the same tokens.
//!
//! As in the native tests/webgpu_generation.rs, the two executors quantize activations to q8
//! blocks before every matrix product and may sum floats in different orders, so tokens may
//! part ways only at a near-tie: where the CPU's own top-2 logit gap is below [`TIE`].
#![cfg(target_arch = "wasm32")]

mod support;

use support::web::*;
use wasm_bindgen_test::*;
use wick::exec::Readback;
use wick::model::Arch;
use wick::sampling::SamplingParams;
use wick::source::ReadableStreamSource;
use wick::synth::SynthSpec;
use wick::{ExecutorKind, GenerateOptions, LoadOptions, Model, SessionOptions};

wasm_bindgen_test_configure!(run_in_browser);

/// A CPU top-2 gap below this is a near-tie.
const TIE: f32 = 1e-2;

async fn load(bytes: &[u8], executor: ExecutorKind) -> Model {
    let src = ReadableStreamSource::new(&stream_of(bytes, 64 << 10)).unwrap().with_len(bytes.len() as u64);
    Model::load(src, LoadOptions { executor, chunk_size: 256 << 10, ..Default::default() }).await.unwrap()
}

async fn greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = model.session(SessionOptions { n_ctx: 128, ..Default::default() }).unwrap();
    let opts = GenerateOptions {
        max_tokens: n,
        sampling: SamplingParams::greedy(),
        stop: vec![],
        ..Default::default()
    };
    let mut gen = s.generate(prompt, opts).unwrap();
    let mut out = Vec::new();
    while let Some(t) = gen.next().await {
        out.extend(t.unwrap().id);
    }
    out
}

#[wasm_bindgen_test]
async fn synthetic_models_generate_the_cpu_tokens_on_webgpu() {
    let donor = donor(512);
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Gemma3] {
        let bytes = wick::synth::write(Vec::new(), &SynthSpec::tiny(arch, 21), &donor).unwrap();
        let cpu = load(&bytes, ExecutorKind::Cpu).await;
        let gpu = load(&bytes, ExecutorKind::WebGpu).await;
        assert_eq!((cpu.executor_name(), gpu.executor_name()), ("cpu", "webgpu"));
        let prompt: Vec<u32> = (0..12).map(|i| 3 + (37 * i) % 500).collect();
        let want = greedy(&cpu, &prompt, 24).await;
        let got = greedy(&gpu, &prompt, 24).await;
        let same = want.iter().zip(&got).take_while(|(a, b)| a == b).count();
        say!("{arch:?}: {same} of {} greedy tokens equal: {got:?}", want.len());
        if same < want.len().min(got.len()) {
            let mut ctx = prompt.clone();
            ctx.extend_from_slice(&want[..same]);
            let mut s = cpu.session(SessionOptions { n_ctx: 128, ..Default::default() }).unwrap();
            let l = s.eval(&ctx, Readback::LastLogits).await.unwrap().logits;
            let gap = l[want[same] as usize] - l[got[same] as usize];
            say!("  parted at token {same}: CPU top-2 gap {gap:.4}");
            assert!(gap < TIE, "{arch:?}: tokens differ at {same} where the CPU gap is {gap}");
        } else {
            assert_eq!(got.len(), want.len(), "{arch:?}: generation lengths differ");
        }
        assert!(want.len() >= 8, "{arch:?}: only {} tokens generated", want.len());
    }
}

/// `Auto` does not take a software adapter: headless Chromium's only adapter is SwiftShader
/// (CPU-emulated), slower than the CPU executor, so `Auto` runs on the CPU; asked for by name,
/// the adapter is still used.
#[wasm_bindgen_test]
async fn auto_prefers_the_cpu_to_a_software_adapter() {
    let bytes = wick::synth::write(Vec::new(), &SynthSpec::tiny(Arch::Llama, 3), &donor(300)).unwrap();
    let model = load(&bytes, ExecutorKind::Auto).await;
    assert_eq!(model.executor_name(), "cpu");
    let model = load(&bytes, ExecutorKind::WebGpu).await;
    assert_eq!(model.executor_name(), "webgpu");
}
