//! The op suite (tests/ops/) on the WebGPU executor in headless Chromium (SwiftShader: the f32
//! path, no shader-f16): every op against the plain reference, as tests/ops_webgpu.rs does
//! natively.
#![cfg(all(target_arch = "wasm32", feature = "webgpu"))]

mod ops;
mod support;

use ops::{cases, fused, masked, sequences};
use wasm_bindgen_test::*;
use wick::exec::webgpu::WebGpuExecutor;
use wick::exec::Executor;

wasm_bindgen_test_configure!(run_in_browser);

/// A WebGPU executor on a fresh device, configured by `setup`.
async fn gpu_with(setup: impl FnOnce(&mut WebGpuExecutor)) -> Option<Box<dyn Executor>> {
    let mut e =
        WebGpuExecutor::new().await.expect("a WebGPU adapter (Chromium needs --enable-unsafe-webgpu)");
    setup(&mut e);
    Some(Box::new(e))
}

async fn gpu() -> Option<Box<dyn Executor>> {
    gpu_with(|_| {}).await
}

browser_op_rows! { "browser";
    embed => gpu(), cases::embed();
    rms_norm => gpu(), cases::rms_norm();
    matmul => gpu(), cases::matmul();
    matmul_coop => gpu_with(|e| e.set_cooperative_matmul(true)), cases::matmul();
    matmul_model => gpu(), cases::matmul_model();
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
    split_weights => gpu_with(|e| e.cap_binding_size(40 * 1024)), cases::split_weights();
    fused_patterns => gpu(), fused::patterns();
}

#[wasm_bindgen_test]
async fn errors_are_errors() {
    ops::errors_are_errors(gpu().await).await;
}
