//! Every op of the WebGPU executor against the CPU reference, natively (lavapipe without a
//! GPU). The cases and their tolerances are in tests/webgpu_cases/mod.rs, shared with the
//! browser run (tests/web_ops.rs).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]
#![cfg(feature = "webgpu")]

mod webgpu_cases;

use wick::exec::webgpu::WebGpuExecutor;

fn gpu() -> WebGpuExecutor {
    pollster::block_on(WebGpuExecutor::new()).expect("a WebGPU adapter (install mesa-vulkan-drivers)")
}

/// One `#[test]` per case, each on a fresh device.
macro_rules! native_cases {
    ($($case:ident),* $(,)?) => {$(
        #[test]
        fn $case() {
            pollster::block_on(webgpu_cases::$case(gpu()));
        }
    )*};
}

native_cases!(
    matmul_every_type,
    matmul_bias_and_shared_input,
    embed_every_type,
    rms_norm_rows_and_heads,
    rope_normal_and_neox,
    attention_with_history_window_softcap,
    gated_act_add_take_last,
    argmax_on_device,
    bad_token_is_an_error,
    matmul_model_shapes,
    split_weights,
    fused_layer,
);

/// Not a test: writes a benchmark model quickly (`cargo test ... -- --ignored quick_synth`):
/// the shape and tensor types of `wick synth` (`WICK_QS_SHAPE`, `WICK_QS_TYPE`, donor
/// `WICK_QS_DONOR`, output `WICK_QS_OUT`), but each tensor's rows repeat 64 quantized random
/// rows, so an 8B file takes seconds rather than minutes. Decode speed does not depend on the
/// values; generated text is meaningless.
#[test]
#[ignore]
fn quick_synth() {
    use std::io::Write;
    use wick::gguf::{GgufReader, GgufWriter};
    use wick::synth::{FileType, SynthSpec};
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("set {k}"));
    let donor = pollster::block_on(async {
        let src = wick::source::FileSource::open(var("WICK_QS_DONOR")).await.unwrap();
        GgufReader::open(src).await.unwrap().into_header().metadata
    });
    let arch = wick::model::Arch::from_name("llama").unwrap();
    let spec =
        SynthSpec::shape(&var("WICK_QS_SHAPE"), arch, FileType::parse(&var("WICK_QS_TYPE")).unwrap(), 1)
            .unwrap();
    let n_vocab = donor.str_array("tokenizer.ggml.tokens").unwrap().len();
    let md = wick::synth::metadata(&spec, &donor).unwrap();
    let specs = spec.tensor_specs(n_vocab);
    let file = std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(var("WICK_QS_OUT")).unwrap());
    let mut out = GgufWriter::new(file, &md, &specs).unwrap();
    let mut seed = 1u64;
    for t in &specs {
        let k = t.dims[0] as usize;
        let rows: u64 = t.dims[1..].iter().product();
        let norm = t.dims.len() == 1;
        let mut pool = Vec::new();
        for _ in 0..rows.min(64) {
            seed += 1;
            let mut rng = webgpu_cases::Rng::new(seed);
            let v: Vec<f32> = (0..k)
                .map(|_| if norm { 1.0 + 0.2 * rng.f() } else { rng.f() * 1.7 / (k as f32).sqrt() })
                .collect();
            let mut b = Vec::new();
            wick::quant::quantize_weights(t.dtype, &v, &mut b).unwrap();
            pool.push(b);
        }
        for r in 0..rows as usize {
            out.write_tensor_data(&pool[r % pool.len()]).unwrap();
        }
    }
    out.finish().unwrap().flush().unwrap();
}
