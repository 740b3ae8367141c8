//! Data parallelism for the CPU executor: rayon's pool natively, a plain loop on wasm.

/// Number of worker threads.
pub fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    {
        rayon::current_num_threads()
    }
    #[cfg(target_arch = "wasm32")]
    {
        1
    }
}

/// Call `f(index, chunk)` for every `chunk`-sized piece of `data`, in parallel where possible.
pub fn for_each_chunk<T: Send>(data: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    let chunk = chunk.max(1);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        data.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
    #[cfg(target_arch = "wasm32")]
    {
        data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
}
