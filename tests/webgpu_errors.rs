//! GPU failures are errors, not crashes (issue 16): buffers beyond the device's limits (weights,
//! KV cache, graph buffers), errors wgpu reports out of band, and a shader that does not
//! compile each reach the caller as `Error::Executor` with a clear message, and the executor,
//! or the process, stays usable; a lost device (`Device::destroy`) is an error from every
//! later call, and a new executor works. Natively (lavapipe without a GPU).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]
#![cfg(feature = "webgpu")]

mod support;

use std::sync::Mutex;

use support::block_on;
use support::gpu_errors::{executor_message, kv};
use support::models::*;
use wick::exec::webgpu::WebGpuExecutor;
use wick::exec::Executor;
use wick::quant::GgmlType;
use wick::sampling::SamplingParams;
use wick::{ExecutorKind, GenerateOptions, LoadOptions, Model, SessionOptions};

/// `WICK_WEBGPU_MAX_BUFFER` is read by every executor a test creates: tests that set it, and
/// those it would disturb, take this lock.
static ENV: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|p| p.into_inner())
}

fn gpu() -> WebGpuExecutor {
    block_on(WebGpuExecutor::new()).expect("a WebGPU adapter (install mesa-vulkan-drivers)")
}

#[test]
fn kv_cache_beyond_the_binding_limit_is_refused() {
    let _g = lock();
    let mut e = gpu();
    e.limit_buffer_size(1 << 20);
    // 8192 positions of 128 f16 values: 2 MiB a layer, over the 1 MiB limit.
    let msg = executor_message(e.alloc_kv(&kv(8192, 128)));
    assert!(msg.contains("KV cache layer of 2097152 bytes"), "{msg}");
    assert!(msg.contains("8192 positions") && msg.contains("use a smaller context"), "{msg}");
    // The executor is still usable: a cache that fits is allocated.
    e.alloc_kv(&kv(1024, 128)).expect("a KV cache that fits");
}

#[test]
fn kv_cache_beyond_the_real_device_limit_is_refused() {
    let _g = lock();
    let mut e = gpu();
    // Far beyond any device's limits (and overflowing nothing): 2^40 bytes a layer.
    let msg = executor_message(e.alloc_kv(&kv(1 << 30, 512)));
    assert!(msg.contains("exceeds the device's binding size"), "{msg}");
    e.alloc_kv(&kv(256, 128)).expect("a KV cache that fits");
}

#[test]
fn weight_rows_beyond_the_binding_limit_are_refused() {
    let _g = lock();
    let mut e = gpu();
    e.limit_buffer_size(4096);
    // One f32 row of 4096 values is 16 KiB: no part can hold it.
    let msg = executor_message(e.alloc_weight("big.weight", GgmlType::F32, &[4096, 8]));
    assert!(msg.contains("a row of 'big.weight' (16384 bytes) exceeds the device's binding size"), "{msg}");
    // Smaller rows are split into parts that fit (whole groups of 4 rows), and can be written.
    let w = e.alloc_weight("small.weight", GgmlType::F32, &[128, 64]).expect("a weight that fits");
    e.write_weight(w, 0, &vec![0u8; 128 * 64 * 4]).unwrap();
    block_on(e.finish_upload()).unwrap();
}

#[test]
fn a_shader_that_does_not_compile_is_an_error() {
    let _g = lock();
    let mut e = gpu();
    let msg =
        executor_message(e.check_shader("@compute @workgroup_size(1) fn main() { let x: u32 = ; }", "main"));
    assert!(msg.starts_with("compiling kernel check_shader failed:"), "{msg}");
    // A shader that validates only on the device's limits: a workgroup far beyond them.
    let msg = executor_message(e.check_shader("@compute @workgroup_size(65536) fn main() {}", "main"));
    assert!(msg.starts_with("compiling kernel check_shader failed:"), "{msg}");
    // The device is still usable.
    e.check_shader("@compute @workgroup_size(1) fn main() {}", "main").expect("a valid shader compiles");
    e.alloc_kv(&kv(16, 64)).expect("a KV cache");
}

#[test]
fn errors_reported_out_of_band_are_returned_by_the_next_call() {
    let _g = lock();
    let mut e = gpu();
    // An invalid buffer created behind the executor's back: wgpu reports it to the device's
    // uncaptured-error handler, which by default panics natively.
    let _bad = e.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("bad"),
        size: 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let msg = executor_message(block_on(e.finish_upload()));
    assert!(msg.starts_with("device error:"), "{msg}");
    assert!(msg.contains("bad") || msg.to_lowercase().contains("usage"), "{msg}");
    // Reported once; the executor goes on.
    block_on(e.finish_upload()).expect("no error left");
    e.alloc_weight("w", GgmlType::F32, &[64, 4]).expect("a weight");
}

fn load(name: &str) -> wick::Result<Model> {
    block_on(async {
        let src = wick::source::FileSource::open(model_path(name)).await.expect("open");
        Model::load(src, LoadOptions { executor: ExecutorKind::WebGpu, ..Default::default() }).await
    })
}

/// The message of an `Error::InvalidArgument` (what the memory fit check returns before anything
/// is allocated); panics on anything else.
fn fit_message<T>(r: wick::Result<T>) -> String {
    match r {
        Err(wick::Error::InvalidArgument(m)) => m,
        Err(e) => panic!("expected the fit check's error, got {e:?}"),
        Ok(_) => panic!("expected the fit check's error, got Ok"),
    }
}

/// A model load and a session refused for the device's limits, then a normal load and
/// generation in the same process.
#[test]
fn a_model_beyond_the_limits_fails_and_the_next_load_works() {
    let _g = lock();
    let name = "SmolLM2-135M-Instruct.Q4_1.gguf";
    if !model_path(name).exists() {
        panic!("missing model {name} (set WICK_MODELS)");
    }
    // SAFETY: the lock keeps other tests of this file from reading the environment meanwhile.
    std::env::set_var("WICK_WEBGPU_MAX_BUFFER", "256");
    let r = load(name);
    std::env::set_var("WICK_WEBGPU_MAX_BUFFER", "1048576");
    let small = load(name);
    std::env::remove_var("WICK_WEBGPU_MAX_BUFFER");
    // Refused by the fit check before any weight is read: not even the smallest context's KV
    // cache layer fits a buffer (the executor's own refusals: the tests above).
    let msg = fit_message(r);
    assert!(
        msg.contains("does not fit this device") && msg.contains("more than its largest buffer"),
        "{msg}"
    );
    // With 1 MiB, the weights are split to fit but a long context does not.
    let small = small.expect("load under a 1 MiB limit");
    let msg = fit_message(small.session(SessionOptions { n_ctx: 8192, ..Default::default() }));
    assert!(msg.contains("context of 8192 tokens does not fit this device"), "{msg}");
    drop(small);

    let model = load(name).expect("a normal load after the failures");
    let mut s = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).unwrap();
    let prompt = model.tokenizer().encode("Hello", true, true).unwrap();
    let opts = GenerateOptions {
        max_tokens: 4,
        sampling: SamplingParams::greedy(),
        stop: vec![],
        ..Default::default()
    };
    let mut gen = s.generate(&prompt, opts).unwrap();
    let mut n = 0;
    while let Some(t) = block_on(gen.next()) {
        t.unwrap();
        n += 1;
    }
    assert!(n > 0);
}

#[test]
fn a_lost_device_is_an_error_and_a_new_executor_works() {
    let _g = lock();
    let mut e = gpu();
    e.alloc_kv(&kv(16, 64)).expect("a KV cache");
    e.device().destroy();
    let msg = executor_message(block_on(e.finish_upload()));
    assert!(msg.starts_with("the device was lost (Destroyed"), "{msg}");
    // Still an error later, not a panic.
    let msg = executor_message(e.alloc_weight("w", GgmlType::F32, &[64, 4]));
    assert!(msg.starts_with("the device was lost"), "{msg}");
    drop(e);
    let mut e = gpu();
    e.alloc_weight("w", GgmlType::F32, &[64, 4]).expect("a weight on a new device");
    block_on(e.finish_upload()).expect("upload on a new device");
}
