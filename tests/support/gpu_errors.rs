//! Helpers of the GPU-failure tests, native (`tests/webgpu_errors.rs`) and in the browser
//! (`tests/web_gpu_errors.rs`): both check the same errors of the WebGPU executor.

use wick::exec::KvSpec;
use wick::Error;

/// The message of an `Error::Executor` from the WebGPU executor; panics on anything else.
pub fn executor_message<T>(r: wick::Result<T>) -> String {
    match r {
        Err(Error::Executor { executor: "webgpu", message }) => message,
        Err(e) => panic!("expected a WebGPU executor error, got {e:?}"),
        Ok(_) => panic!("expected a WebGPU executor error, got Ok"),
    }
}

/// A KV cache of two layers, `n_ctx` positions of `dim` values each for keys and values.
pub fn kv(n_ctx: usize, dim: usize) -> KvSpec {
    KvSpec { n_blocks: wick::exec::blocks_for(n_ctx), k_dims: vec![dim; 2], v_dims: vec![dim; 2] }
}
