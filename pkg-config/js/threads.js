// Which wasm build this page runs, and the CPU executor's threads.
//
// Two builds ship in wasm/: wick.js (one thread, runs anywhere) and wick_mt.js (threaded:
// shared memory, built with atomics). A cross-origin isolated page (COOP/COEP headers, so that
// SharedArrayBuffer exists) gets the threaded one: the module is instantiated over one shared
// memory on this thread and in `threads - 1` Web Workers (thread.js), which run the tasks of
// the CPU executor's parallel loops. Anywhere else, or when it fails to start, the one-thread
// build.

import * as threaded from './wasm/wick_mt.js';

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

/**
 * Instantiate the threaded build on this thread and start `threads - 1` workers. Resolves to
 * the glue module once the workers have entered the pool; rejects (having ended them) if one
 * fails to start or they take over 10 s.
 */
export async function initThreaded(threads) {
  const glue = threaded;
  const module = await compile(new URL('./wasm/wick_mt_bg.wasm', import.meta.url));
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
