//! The op suite (tests/ops/) on the CPU executor in headless Chromium: the wasm build's kernels
//! (one thread, simd128 dot products) against the plain reference, as tests/ops_cpu.rs does
//! natively.
#![cfg(target_arch = "wasm32")]

mod ops;
mod support;

use ops::{cases, fused, sequences};
use wasm_bindgen_test::*;
use wick::exec::cpu::CpuExecutor;
use wick::exec::Executor;

wasm_bindgen_test_configure!(run_in_browser);

async fn cpu() -> Option<Box<dyn Executor>> {
    Some(Box::new(CpuExecutor::new()))
}

browser_op_rows! { "browser cpu";
    embed => cpu(), cases::embed();
    rms_norm => cpu(), cases::rms_norm();
    matmul => cpu(), cases::matmul();
    matmul_model => cpu(), cases::matmul_model();
    matmul_tiles => cpu(), cases::matmul_tiles();
    rope => cpu(), cases::rope();
    kv_shift => cpu(), cases::kv_shift();
    kv_copy => cpu(), cases::kv_copy();
    attention => cpu(), cases::attention();
    attention_deep => cpu(), cases::attention_deep();
    gated_act => cpu(), cases::gated_act();
    add_take_last => cpu(), cases::add_take_last();
    readback => cpu(), cases::readback();
    sequences => cpu(), sequences::rows();
    sequences_readback => cpu(), sequences::readback();
    split_weights => cpu(), cases::split_weights();
    fused_patterns => cpu(), fused::patterns();
    fused_layer => cpu(), fused::layer();
}

#[wasm_bindgen_test]
async fn errors_are_errors() {
    ops::errors_are_errors(cpu().await).await;
}
