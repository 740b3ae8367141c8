// The main-thread proxy of a model running in a Web Worker (worker.js): the same backend
// interface as local.js, over postMessage. Generation and loading never block the page.

import { abortError } from './local.js';
import { WickStorageError } from './cache.js';

function rebuildError(e) {
  if (e.name === 'AbortError') return new DOMException(e.message, 'AbortError');
  if (e.name === 'WickStorageError') return new WickStorageError(e.message);
  const err = new Error(e.message);
  if (e.name && e.name !== 'Error') err.name = e.name;
  return err;
}

class Channel {
  constructor(worker) {
    this.worker = worker;
    this.next = 1;
    this.pending = new Map();
    worker.onmessage = (ev) => {
      const m = ev.data;
      const p = this.pending.get(m.id);
      if (!p) return;
      if (m.type === 'done' || m.type === 'error') {
        this.pending.delete(m.id);
        if (m.type === 'done') p.resolve(m.value);
        else p.reject(rebuildError(m.error));
      } else {
        p.onEvent?.(m);
      }
    };
    worker.onerror = (ev) => {
      const err = new Error(`the wick worker failed: ${ev.message || 'could not start (check that worker.js and the wasm are served)'}`);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
  }

  /** Send a request; `onEvent` gets its progress/token messages. Aborting `signal` asks the
   *  worker to stop and rejects at once. */
  request(msg, { onEvent, signal, transfer } = {}) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortError(signal));
      const onAbort = () => {
        this.worker.postMessage({ type: 'abort', target: id, reason: String(signal.reason?.message || '') });
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const done = () => signal?.removeEventListener('abort', onAbort);
      this.pending.set(id, {
        resolve: (v) => (done(), resolve(v)),
        reject: (e) => (done(), reject(signal?.aborted ? abortError(signal) : e)),
        onEvent,
      });
      this.worker.postMessage({ ...msg, id }, transfer || []);
    });
  }
}

export async function loadRemote(source, opts = {}) {
  const { onProgress, signal, workerUrl, ...rest } = opts;
  if (rest.fetch) throw new TypeError('the fetch option cannot be sent to a worker: load with { worker: false }');
  const wasmUrl = rest.wasmUrl ? String(rest.wasmUrl) : undefined;
  // Written out literally so that bundlers (Vite, webpack) see the worker and bundle it.
  const worker = workerUrl
    ? new Worker(workerUrl, { type: 'module', name: 'wick' })
    : new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'wick' });
  const ch = new Channel(worker);
  const transfer = typeof ReadableStream !== 'undefined' && source instanceof ReadableStream ? [source] : [];
  const src = source instanceof URL ? source.href : source;
  const cleanOpts = {
    cache: rest.cache, executor: rest.executor, size: rest.size, wasmUrl, memoryBudget: rest.memoryBudget, threads: rest.threads, simd: rest.simd,
    promptCache: rest.promptCache, promptCacheMaxBytes: rest.promptCacheMaxBytes,
  };
  // Relative URLs are resolved against the page, not the worker script.
  const absolute = typeof src === 'string' ? new URL(src, location.href).href : src;
  try {
    const { executor, info } = await ch.request(
      { type: 'load', source: absolute, opts: cleanOpts },
      { onEvent: (m) => onProgress?.(m.progress), signal, transfer },
    );
    return new RemoteBackend(ch, executor, info);
  } catch (e) {
    worker.terminate();
    throw e;
  }
}

class RemoteBackend {
  constructor(ch, executor, info) {
    this.ch = ch;
    this.executor = executor;
    this.info = info;
  }

  live() {
    if (!this.ch) throw new Error('the model has been unloaded');
    return this.ch;
  }

  applyChatTemplate(messages, vars, tools) {
    return this.live().request({ type: 'template', messages, vars, tools });
  }

  toolChoiceGrammar(tools, toolChoice, parallel) {
    return this.live().request({ type: 'tools', tools, toolChoice, parallel });
  }

  async *stream(prompt, opts = {}, signal) {
    const { signal: _s, ...rest } = opts;
    const queue = [];
    let wake = null;
    let finished = false;
    let failure = null;
    let stats = null;
    const ctl = new AbortController();
    const onAbort = () => ctl.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) ctl.abort(signal.reason);
    const run = this.live()
      .request(
        { type: 'generate', prompt, opts: rest },
        {
          signal: ctl.signal,
          onEvent: (m) => {
            const item = { text: m.text, id: m.tokenId };
            if (m.logprobs) item.logprobs = m.logprobs;
            if (m.toolDeltas) item.toolDeltas = m.toolDeltas;
            queue.push(item);
            if (wake) wake();
          },
        },
      )
      .then(
        (s) => (stats = s),
        (e) => (failure = e),
      )
      .finally(() => {
        finished = true;
        if (wake) wake();
      });
    try {
      for (;;) {
        if (signal?.aborted) break;
        if (queue.length) {
          yield queue.shift();
          continue;
        }
        if (finished) break;
        await new Promise((r) => (wake = r));
        wake = null;
      }
    } finally {
      // Leaving the loop early (break, return, throw) stops the worker's generation.
      if (!finished) ctl.abort(new DOMException('The generation was stopped', 'AbortError'));
      signal?.removeEventListener('abort', onAbort);
      await run;
    }
    if (failure) throw failure;
    if (signal?.aborted) throw abortError(signal);
    return stats;
  }

  async unload() {
    if (!this.ch) return;
    const ch = this.ch;
    this.ch = null;
    try {
      await ch.request({ type: 'unload' });
    } finally {
      // Ending the worker releases its GPU device and wasm memory for certain.
      ch.worker.terminate();
    }
  }
}
