//! The helpers every integration test shares (`mod support;` in a test file): one random
//! generator, one `block_on`, synthetic tensors, model paths and references, chat prompts and
//! generations, GGUF byte builders, the GPU-failure checks, and the browser tests' streams.
//! Each test uses part of it.
#![allow(dead_code, unused_imports)]

#[cfg(not(target_arch = "wasm32"))]
pub mod agreement;
#[cfg(not(target_arch = "wasm32"))]
pub mod chat;
pub mod gguf;
pub mod gpu_errors;
#[cfg(not(target_arch = "wasm32"))]
pub mod models;
pub mod rng;
pub mod schemas;
pub mod tensors;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use rng::{pattern, Rng};

/// Run a future to completion on this thread (native tests; the library needs no runtime).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

/// The executors a test runs on: the CPU, and the GPU executors built in (WebGPU: lavapipe in
/// CI; CUDA where [`cuda_wanted`]).
#[cfg(not(target_arch = "wasm32"))]
pub fn executor_kinds() -> Vec<wick::ExecutorKind> {
    #[allow(unused_mut)]
    let mut k = vec![wick::ExecutorKind::Cpu];
    #[cfg(feature = "webgpu")]
    k.push(wick::ExecutorKind::WebGpu);
    #[cfg(feature = "cuda")]
    if cuda_wanted() {
        k.push(wick::ExecutorKind::Cuda);
    }
    k
}

/// Whether the CUDA tests should run: a CUDA driver is installed, or `WICK_REQUIRE_CUDA=1`
/// (which turns a missing driver into the executor's failure). Where neither, says so loudly.
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
pub fn cuda_wanted() -> bool {
    // SAFETY: only tries to open the driver library.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if !present && std::env::var("WICK_REQUIRE_CUDA").as_deref() != Ok("1") {
        eprintln!("SKIPPED: no CUDA driver on this machine (set WICK_REQUIRE_CUDA=1 to fail instead)");
        return false;
    }
    true
}
