//! The op suite (tests/ops/) on the WebGPU executor, natively (lavapipe without a GPU): every
//! op against the plain reference, with each matrix-product kernel family (cooperative with and
//! without subgroup reduction, tiled, one row per invocation), with fusion on and off, and with
//! weights split across buffers. CI runs it on both precision paths (shader-f16, and
//! `WICK_WEBGPU_F16=0`).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]
#![cfg(feature = "webgpu")]

mod ops;
mod support;

use ops::{cases, fused, masked, sequences};
use wick::exec::webgpu::WebGpuExecutor;
use wick::exec::Executor;

/// A WebGPU executor on a fresh device, configured by `setup`.
fn gpu_with(setup: impl FnOnce(&mut WebGpuExecutor)) -> Option<Box<dyn Executor>> {
    let mut e =
        support::block_on(WebGpuExecutor::new()).expect("a WebGPU adapter (install mesa-vulkan-drivers)");
    setup(&mut e);
    Some(Box::new(e))
}

/// With the device's default kernels.
fn gpu() -> Option<Box<dyn Executor>> {
    gpu_with(|_| {})
}

/// Cooperative matrix products, reducing through subgroup operations or workgroup memory.
fn coop(subgroup: bool) -> Option<Box<dyn Executor>> {
    gpu_with(|e| {
        e.set_cooperative_matmul(true);
        e.set_subgroup_reduce(subgroup);
    })
}

/// Products in tiles (matmul_tiled.wgsl, float weights matmul_tiled_float.wgsl) from one token row on, the
/// other products cooperative; tiles of `shape` (None: each product's choice).
fn tiled(shape: Option<(u8, u8)>) -> Option<Box<dyn Executor>> {
    gpu_with(|e| {
        e.set_cooperative_matmul(true);
        e.set_tiled_matmul(Some(1));
        e.set_tile_shape(shape).expect("a tile shape the kernel has");
    })
}

/// One matrix-product row per invocation.
fn rows_kernel() -> Option<Box<dyn Executor>> {
    gpu_with(|e| e.set_cooperative_matmul(false))
}

op_rows! { "webgpu";
    embed => gpu(), cases::embed();
    rms_norm => gpu(), cases::rms_norm();
    matmul_coop_subgroup => coop(true), cases::matmul();
    matmul_coop_workgroup => coop(false), cases::matmul();
    matmul_rows => rows_kernel(), cases::matmul();
    matmul_model => gpu(), cases::matmul_model();
    matmul_tiles => gpu(), cases::matmul_tiles();
    matmul_tiled => tiled(None), cases::matmul();
    matmul_tiled_prefill => tiled(None), cases::matmul_tiles();
    matmul_tiled_8x4 => tiled(Some((8, 4))), cases::matmul_tiles();
    matmul_tiled_4x8 => tiled(Some((4, 8))), cases::matmul_tiles();
    rope => gpu(), cases::rope();
    kv_shift => gpu(), cases::kv_shift();
    kv_copy => gpu(), cases::kv_copy();
    attention => gpu(), cases::attention();
    attention_deep => gpu(), cases::attention_deep();
    gated_act => gpu(), cases::gated_act();
    add_take_last => gpu(), cases::add_take_last();
    readback => gpu(), cases::readback();
    masked_argmax => gpu(), masked::rows();
    sequences => gpu(), sequences::rows();
    sequences_readback => gpu(), sequences::readback();
    // Gemma 3's 167 MiB embedding is split on a 128 MiB binding limit; forced here with 40 KiB.
    split_weights => gpu_with(|e| e.cap_binding_size(40 * 1024)), cases::split_weights();
    fused_patterns_coop => coop(true), fused::patterns();
    fused_patterns_rows => rows_kernel(), fused::patterns();
    fused_layer_coop => coop(true), fused::layer();
    fused_layer_rows => rows_kernel(), fused::layer();
    fused_patterns_tiled => tiled(None), fused::patterns();
    fused_layer_tiled => tiled(Some((8, 4))), fused::layer();
    unfused_layer => gpu_with(|e| e.set_fusion(false)), fused::layer();
}

#[test]
fn errors_are_errors() {
    support::block_on(ops::errors_are_errors(gpu()));
}

/// Not a test: writes a benchmark model quickly (`cargo test ... -- --ignored quick_synth`):
/// the shape and tensor types of `wick synth` (`WICK_QS_SHAPE`, `WICK_QS_TYPE`, donor
/// `WICK_QS_DONOR`, output `WICK_QS_OUT`), each tensor's rows repeating 64 random rows
/// (`wick synth --distinct-rows 64`), so an 8B file takes seconds rather than minutes. Kept
/// beside the CLI because the device machine runs this test binary. Decode speed does not
/// depend on the values; generated text is meaningless.
#[test]
#[ignore]
fn quick_synth() {
    use std::io::Write;
    use wick::synth::{FileType, SynthSpec};
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("set {k}"));
    let donor = support::models::read_metadata(std::path::Path::new(&var("WICK_QS_DONOR")));
    let arch = wick::model::Arch::from_name("llama").unwrap();
    let spec =
        SynthSpec::shape(&var("WICK_QS_SHAPE"), arch, FileType::parse(&var("WICK_QS_TYPE")).unwrap(), 1)
            .unwrap();
    let file = std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(var("WICK_QS_OUT")).unwrap());
    wick::synth::write_repeating(file, &spec, &donor, 64).unwrap().flush().unwrap();
}
