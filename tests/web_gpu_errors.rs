//! GPU failures in the browser are errors, not crashes (issue 16), as tests/webgpu_errors.rs
//! checks natively: a KV cache beyond the device's binding limit is refused before WebGPU is
//! asked, a shader that does not compile is an error (in the browser WebGPU reports it out of
//! band: it is returned by the call or by the next one that checks), and a lost device
//! (`GPUDevice.destroy()`, as a browser's watchdog or a driver reset leaves it) is an error from
//! every later call while a new executor works. The executor stays usable after each error.
//! Headless Chromium's SwiftShader adapter.
#![cfg(target_arch = "wasm32")]
#![cfg(feature = "webgpu")]

mod support;

use support::gpu_errors::{executor_message, kv};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;
use wick::exec::webgpu::WebGpuExecutor;
use wick::exec::Executor;
use wick::quant::GgmlType;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(inline_js = "export function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }")]
extern "C" {
    fn sleep(ms: u32) -> js_sys::Promise;
}

/// Let the browser deliver what WebGPU reports asynchronously (errors, a lost device).
async fn settle() {
    wasm_bindgen_futures::JsFuture::from(sleep(100)).await.unwrap();
}

async fn gpu() -> WebGpuExecutor {
    WebGpuExecutor::new().await.expect("a WebGPU adapter in headless Chromium")
}

#[wasm_bindgen_test]
async fn kv_cache_beyond_the_binding_limit_is_refused() {
    let mut e = gpu().await;
    e.limit_buffer_size(1 << 20);
    // 8192 positions of 128 f16 values: 2 MiB a layer, over the 1 MiB limit.
    let msg = executor_message(e.alloc_kv(&kv(8192, 128)));
    assert!(msg.contains("KV cache layer of 2097152 bytes"), "{msg}");
    assert!(msg.contains("use a smaller context"), "{msg}");
    // Still usable: a cache that fits is allocated, and nothing was reported out of band.
    e.alloc_kv(&kv(1024, 128)).expect("a KV cache that fits");
    settle().await;
    e.finish_upload().await.expect("no error left");
}

#[wasm_bindgen_test]
async fn a_shader_that_does_not_compile_is_an_error() {
    let mut e = gpu().await;
    let bad = "@compute @workgroup_size(1) fn main() { let x: u32 = ; }";
    let msg = match e.check_shader(bad, "main") {
        Err(err) => executor_message::<()>(Err(err)),
        // Out of band: the next call that checks, once the browser has had time to report it
        // (the first call flushes the commands to the GPU process).
        Ok(()) => match e.finish_upload().await {
            Err(err) => executor_message::<()>(Err(err)),
            Ok(()) => {
                settle().await;
                executor_message(e.finish_upload().await)
            }
        },
    };
    assert!(msg.starts_with("device error:") || msg.contains("check_shader"), "{msg}");
    // Reported once; the executor goes on and compiles a valid shader.
    settle().await;
    e.finish_upload().await.expect("no error left");
    e.check_shader("@compute @workgroup_size(1) fn main() {}", "main").expect("a valid shader compiles");
    settle().await;
    e.finish_upload().await.expect("a valid shader reports nothing");
}

#[wasm_bindgen_test]
async fn a_lost_device_is_an_error_and_a_new_executor_works() {
    let mut e = gpu().await;
    e.alloc_kv(&kv(16, 64)).expect("a KV cache");
    e.device().destroy();
    settle().await;
    let msg = executor_message(e.finish_upload().await);
    assert!(msg.starts_with("the device was lost"), "{msg}");
    // Still an error later, not a panic or a hang.
    let msg = executor_message(e.alloc_weight("w", GgmlType::F32, &[64, 4]));
    assert!(msg.starts_with("the device was lost"), "{msg}");
    drop(e);
    let mut e = gpu().await;
    e.alloc_weight("w", GgmlType::F32, &[64, 4]).expect("a weight on a new device");
    e.finish_upload().await.expect("upload on a new device");
}
