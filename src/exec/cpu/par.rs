//! Data parallelism for the CPU executor: rayon's pool natively; in the browser, the Web Workers
//! of the threaded build (`web_pool`), else a plain loop.

/// Number of worker threads.
pub fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    {
        rayon::current_num_threads()
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    {
        super::web_pool::threads()
    }
    #[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
    {
        1
    }
}

/// Run `f` (a whole step) on one of the pool's worker threads and wait for it.
///
/// Parallel loops started from a worker split their work in the worker's own deque: the
/// calling worker takes part, and no thread is woken or blocked per op. Started from a thread
/// outside the pool, each of a step's hundreds of small ops would cost two context switches
/// (inject the job, block on a latch, wake up): measured, a third of decode time.
pub fn run_in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    #[cfg(not(target_arch = "wasm32"))]
    {
        rayon::scope(|_| f())
    }
    #[cfg(target_arch = "wasm32")]
    {
        f()
    }
}

/// Call `f(first_row, rows)` for runs of whole rows (`row` values each) of `data`: split among
/// the threads when `data` holds at least [`ROWS_PAR_MIN`] values (prefill), else one call
/// (decode: a step's small ops cost more to split than to run).
pub fn for_each_rows<T: Send>(data: &mut [T], row: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    let (row, rows) = (row.max(1), data.len() / row.max(1));
    if data.len() < ROWS_PAR_MIN || threads() == 1 || rows < 2 {
        f(0, data);
        return;
    }
    let per = rows.div_ceil(2 * threads());
    for_each_chunk(data, per * row, |i, part| f(i * per, part));
}

/// The fewest values that [`for_each_rows`] splits among the threads.
pub const ROWS_PAR_MIN: usize = 16 * 1024;

/// Call `f(index, chunk)` for every `chunk`-sized piece of `data`, in parallel where possible.
pub fn for_each_chunk<T: Send>(data: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    let chunk = chunk.max(1);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        if threads() == 1 || data.len() <= chunk {
            data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
            return;
        }
        data.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    {
        /// The slice's start, shared by the tasks: each makes its own disjoint chunk of it.
        struct Base<T>(*mut T);
        // SAFETY: tasks only form disjoint chunks from it (below), and T is Send.
        unsafe impl<T: Send> Sync for Base<T> {}
        impl<T> Base<T> {
            fn at(&self, i: usize) -> *mut T {
                self.0.wrapping_add(i)
            }
        }
        let len = data.len();
        let base = Base(data.as_mut_ptr());
        super::web_pool::run(len.div_ceil(chunk), &|i| {
            let start = i * chunk;
            let end = (start + chunk).min(len);
            // SAFETY: chunk i is [i*chunk, min((i+1)*chunk, len)) of `data`, which is borrowed
            // mutably for the whole run; the chunks of different i do not overlap.
            let c = unsafe { std::slice::from_raw_parts_mut(base.at(start), end - start) };
            f(i, c)
        });
    }
    #[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
    {
        data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// Host memory bandwidth in bytes/s: the best of a few copies of 256 MiB, split over the
/// threads, counting bytes read plus bytes written.
pub fn copy_bandwidth() -> f64 {
    const N: usize = 256 << 20;
    let src = vec![1u8; N];
    let mut dst = vec![0u8; N];
    let chunk = N / threads().max(1);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = web_time_now();
        for_each_chunk(&mut dst, chunk, |i, d| d.copy_from_slice(&src[i * chunk..i * chunk + d.len()]));
        best = best.min(web_time_now() - t);
    }
    2.0 * N as f64 / best.max(1e-9)
}

/// Seconds from an arbitrary origin (natively; wasm has no clock here and reports 0 bandwidth
/// time, which callers treat as unmeasured).
fn web_time_now() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::clock::now_secs()
    }
    #[cfg(target_arch = "wasm32")]
    {
        0.0
    }
}
