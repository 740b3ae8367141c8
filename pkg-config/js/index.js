// wick-llm: run GGUF language models in the browser. See README.md and index.d.ts.

import { WickModel } from './api.js';
import { loadLocal, initWasm } from './local.js';
import { loadRemote } from './remote.js';
import { listCachedModels, deleteCachedModel, clearCache, cacheAvailable, WickStorageError } from './cache.js';
import { BadRequestError } from './errors.js';
import { listPromptCaches, clearPromptCache } from './prompt-cache.js';
import { inspect } from './inspect.js';

export {
  WickModel, WickStorageError, BadRequestError, listCachedModels, deleteCachedModel, clearCache, cacheAvailable,
  listPromptCaches, clearPromptCache, inspect,
};

/** Whether this browser exposes WebGPU (an adapter may still be missing). */
export function hasWebGPU() {
  return typeof navigator !== 'undefined' && !!navigator.gpu;
}

export const Wick = {
  /**
   * Load a model from a URL, File, Blob or ReadableStream. By default it runs in a Web
   * Worker (`worker: false` runs it on this thread) and a URL's file is cached in OPFS.
   */
  async load(source, opts = {}) {
    const useWorker = opts.worker ?? typeof Worker !== 'undefined';
    const backend = useWorker ? await loadRemote(source, opts) : await loadLocal(source, opts);
    return new WickModel(backend, source);
  },
  /**
   * A model's memory (weights + KV cache + scratch) at a context and whether it fits this
   * browser, from its header alone (HTTP Range requests), before downloading it.
   */
  inspect,
  /** Fetch and compile the wasm module ahead of a main-thread load (optional; `threads` as
   *  in `load`'s options). */
  init: (wasmUrl, threads) => initWasm(wasmUrl, threads).then(() => undefined),
  hasWebGPU,
  listCachedModels,
  deleteCachedModel,
  clearCache,
  listPromptCaches,
  clearPromptCache,
};

export default Wick;
