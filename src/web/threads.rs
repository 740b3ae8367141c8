//! The CPU executor's threads, for the package's `threads.js`: how many the module runs on, and
//! the entry each Web Worker calls (the threaded build only; see exec/cpu/web_pool.rs).

use wasm_bindgen::prelude::*;

/// Threads the CPU executor's parallel loops run on: 1, or in the threaded build the calling
/// thread plus the workers that have started.
#[wasm_bindgen(js_name = cpuThreads)]
pub fn cpu_threads() -> usize {
    crate::exec::cpu::threads()
}

/// Whether this is the threaded build (shared memory, Web Workers).
#[wasm_bindgen(js_name = threadedBuild)]
pub fn threaded_build() -> bool {
    cfg!(target_feature = "atomics")
}

/// A worker thread's whole life: takes tasks of the CPU executor's parallel loops; never
/// returns. Called by `threads.js` in a Web Worker that instantiated this module over the
/// model thread's memory.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = workerMain)]
pub fn worker_main() {
    crate::exec::cpu::web_pool::worker_main()
}

/// Called by `thread.js` when [`worker_main`] threw: the model's thread then fails its step
/// (a rejected call) instead of waiting forever for the task the worker held.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen(js_name = workerDied)]
pub fn worker_died() {
    crate::exec::cpu::web_pool::worker_died()
}
