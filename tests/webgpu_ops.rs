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
);
