//! Every op of the WebGPU executor against the CPU reference, in headless Chromium
//! (SwiftShader: the f32 path, no shader-f16). The cases and their tolerances are in
//! tests/webgpu_cases/mod.rs, shared with the native run (tests/webgpu_ops.rs).
#![cfg(all(target_arch = "wasm32", feature = "webgpu"))]

mod webgpu_cases;

use wasm_bindgen_test::*;
use wick::exec::webgpu::WebGpuExecutor;

wasm_bindgen_test_configure!(run_in_browser);

async fn gpu() -> WebGpuExecutor {
    WebGpuExecutor::new().await.expect("a WebGPU adapter (Chromium needs --enable-unsafe-webgpu)")
}

/// One `#[wasm_bindgen_test]` per case, each on a fresh device.
macro_rules! browser_cases {
    ($($case:ident),* $(,)?) => {$(
        #[wasm_bindgen_test]
        async fn $case() {
            webgpu_cases::$case(gpu().await).await;
        }
    )*};
}

browser_cases!(
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
