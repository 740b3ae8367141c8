// Which wasm build this page runs, and the CPU executor's threads.
//
// Two builds ship in wasm/: wick.js (one thread, runs anywhere) and wick_mt.js (threaded:
// shared memory, built with atomics). A cross-origin isolated page (COOP/COEP headers, so that
// SharedArrayBuffer exists) gets the threaded one: the module is instantiated over one shared
// memory on this thread and in `threads - 1` Web Workers (thread.js), which run the tasks of
// the CPU executor's parallel loops. Anywhere else, or when it fails to start, the one-thread
// build.
//
// Each build's wasm comes twice: wick_bg.wasm / wick_mt_bg.wasm (simd128) and
// wick_relaxed_bg.wasm / wick_mt_relaxed_bg.wasm (also relaxed SIMD: the CPU kernels' integer
// dot products in one instruction). The relaxed file is taken where the engine validates a
// relaxed SIMD instruction, unless the `simd: 'simd128'` option says otherwise; the two files
// of a build share their JS glue (pkg-config/build.sh checks it), so only the wasm differs.

import * as threaded from './wasm/wick_mt.js';

// The smallest module that uses relaxed SIMD (a function returning i8x16.relaxed_swizzle of two
// splats): engines without the proposal do not validate it.
const RELAXED_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 15, 1, 13, 0, 65, 1, 253, 15, 65, 2, 253, 15, 253,
  128, 2, 11,
]);

/** Whether this engine runs relaxed SIMD. */
export function relaxedSimdAvailable() {
  try {
    return WebAssembly.validate(RELAXED_PROBE);
  } catch {
    return false;
  }
}

/** Whether to take the relaxed wasm: `simd` ('relaxed', 'simd128' or undefined: the best the
 *  engine runs) against what the engine validates. */
export function wantRelaxed(simd) {
  if (simd !== undefined && simd !== 'relaxed' && simd !== 'simd128') {
    throw new TypeError(`simd must be 'relaxed' or 'simd128', not ${JSON.stringify(simd)}`);
  }
  return simd !== 'simd128' && relaxedSimdAvailable();
}

/** The URL of a build's wasm file next to the package (`threaded`, `relaxed`: which one). */
export function wasmFileUrl(threaded, relaxed) {
  // Written out literally so that bundlers (Vite, webpack) see each file and bundle it.
  if (threaded) {
    return relaxed ? new URL('./wasm/wick_mt_relaxed_bg.wasm', import.meta.url) : new URL('./wasm/wick_mt_bg.wasm', import.meta.url);
  }
  return relaxed ? new URL('./wasm/wick_relaxed_bg.wasm', import.meta.url) : new URL('./wasm/wick_bg.wasm', import.meta.url);
}

/** Whether this context can run the threaded build. */
export function threadsAvailable() {
  return typeof SharedArrayBuffer !== 'undefined' && globalThis.crossOriginIsolated === true && typeof Worker !== 'undefined';
}

/** Threads to use when the caller does not say: every core, at most 8 (decode is bound by
 *  memory, and the page's own threads need cores too). */
export function defaultThreads() {
  const n = globalThis.navigator?.hardwareConcurrency || 1;
  return Math.max(1, Math.min(n, 8));
}

/** Fetch and compile `url` (streaming when the server sends application/wasm). */
async function compile(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`failed to fetch ${url}: ${res.status} ${res.statusText}`);
  if (typeof WebAssembly.compileStreaming === 'function' && res.headers.get('Content-Type') === 'application/wasm') {
    return WebAssembly.compileStreaming(res);
  }
  return WebAssembly.compile(await res.arrayBuffer());
}

/** Start one thread worker over `module` and `memory` (pushed on `started`, so that a failed
 *  start can end them all); resolves once it is about to run. */
function startWorker(module, memory, i, started) {
  return new Promise((resolve, reject) => {
    // Written out literally so that bundlers (Vite, webpack) see the worker and bundle it.
    const w = new Worker(new URL('./thread.js', import.meta.url), { type: 'module', name: `wick-thread-${i}` });
    started.push(w);
    w.onmessage = (ev) => (ev.data === 'ready' ? resolve(w) : reject(new Error(ev.data?.error || 'a thread failed to start')));
    w.onerror = (e) => reject(new Error(e.message || 'a thread worker failed to load'));
    w.postMessage({ module, memory });
  });
}

/** Fetch and compile the threaded build's wasm: the relaxed file with `relaxed`, falling back
 *  to the simd128 one (with a console warning) where that fails. */
async function compileThreaded(relaxed) {
  if (relaxed) {
    try {
      return await compile(wasmFileUrl(true, true));
    } catch (e) {
      console.warn(`wick: the relaxed-SIMD build did not load (${e?.message || e}); taking the simd128 one`);
    }
  }
  return compile(wasmFileUrl(true, false));
}

/**
 * Instantiate the threaded build on this thread and start `threads - 1` workers (`relaxed`:
 * its relaxed-SIMD wasm, where it loads). Resolves to the glue module once the workers have
 * entered the pool; rejects (having ended them) if one fails to start or they take over 10 s.
 */
export async function initThreaded(threads, relaxed = false) {
  const glue = threaded;
  const module = await compileThreaded(relaxed);
  const { memory } = await glue.default({ module_or_path: module });
  const started = [];
  try {
    const all = Promise.all(Array.from({ length: threads - 1 }, (_, i) => startWorker(module, memory, i + 1, started)));
    all.catch(() => {}); // (seen through the race below)
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error('the thread workers did not start within 10 s')), 10_000);
    });
    await Promise.race([all, late]).finally(() => clearTimeout(timer));
  } catch (e) {
    // The caller falls back to the one-thread build: end the threads that did start.
    for (const w of started) w.terminate();
    throw e;
  }
  // Each worker counts itself as it enters its loop, just after saying it is ready.
  const until = performance.now() + 10_000;
  while (glue.cpuThreads() < threads && performance.now() < until) await new Promise((r) => setTimeout(r, 1));
  return glue;
}
