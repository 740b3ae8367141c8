//! The op suite (tests/ops/) on the CPU executor: its kernels against the plain reference.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod ops;
mod support;

use ops::{cases, fused, masked, sequences};
use wick::exec::cpu::CpuExecutor;
use wick::exec::Executor;

fn cpu() -> Option<Box<dyn Executor>> {
    Some(Box::new(CpuExecutor::new()))
}

op_rows! { "cpu";
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
    masked_argmax => cpu(), masked::rows();
    sequences => cpu(), sequences::rows();
    sequences_readback => cpu(), sequences::readback();
    split_weights => cpu(), cases::split_weights();
    fused_patterns => cpu(), fused::patterns();
    fused_layer => cpu(), fused::layer();
}

#[test]
fn errors_are_errors() {
    support::block_on(ops::errors_are_errors(cpu()));
}
