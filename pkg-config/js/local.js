// The backend that runs the wasm module in this thread (the worker uses it too).

import { cacheAvailable, cachedFile } from './cache.js';
import { DEFAULT_MAX_BYTES, findPromptCache, promptCacheAvailable, savePromptCache, touchPromptCache } from './prompt-cache.js';
import { defaultThreads, initThreaded, threadsAvailable, wantRelaxed, wasmFileUrl } from './threads.js';
// Both builds' glue is imported statically (a few dozen kB of JS; only one build's wasm is
// fetched): a dynamic import would make the worker's bundle a split one, which bundlers'
// default worker formats (Vite's iife) refuse.
import * as single from './wasm/wick.js';

let ready = null;

/**
 * Instantiate the wasm module once; resolves to its glue (wick.js or wick_mt.js). `threads`
 * (default: every core, at most 8) above 1 on a cross-origin isolated page takes the threaded
 * build; `wasmUrl` (where wick_bg.wasm is fetched from, or its bytes) takes the one-thread build.
 * `simd`: 'relaxed' or 'simd128' (default: relaxed where the engine has it; threads.js). The
 * first call decides for this page or worker.
 */
export function initWasm(wasmUrl, threads, simd) {
  if (!ready) {
    ready = instantiate(wasmUrl, threads, simd).catch((e) => {
      ready = null;
      throw e;
    });
  }
  return ready;
}

async function instantiate(wasmUrl, threads, simd) {
  const want = Math.floor(threads ?? defaultThreads());
  const relaxed = wantRelaxed(simd);
  if (want > 1 && !wasmUrl && threadsAvailable()) {
    try {
      return await initThreaded(want, relaxed);
    } catch (e) {
      console.warn(`wick: the threaded build did not start (${e?.message || e}); running on one thread`);
    }
  }
  if (wasmUrl) {
    await single.default({ module_or_path: wasmUrl });
    return single;
  }
  if (relaxed) {
    try {
      await single.default({ module_or_path: wasmFileUrl(false, true) });
      return single;
    } catch (e) {
      console.warn(`wick: the relaxed-SIMD build did not load (${e?.message || e}); taking the simd128 one`);
    }
  }
  await single.default({ module_or_path: wasmFileUrl(false, false) });
  return single;
}

/** Resolve to the next turn of the event loop (a macrotask), so that messages, clicks and
 *  aborts are seen between tokens even when a token is computed synchronously. */
const nextTask = (() => {
  if (typeof MessageChannel === 'undefined') return () => new Promise((r) => setTimeout(r, 0));
  const ch = new MessageChannel();
  const waiting = [];
  // In Node a port with a listener keeps the process alive: hold it only while a turn is
  // awaited (`ref`/`unref` exist in Node only).
  ch.port1.onmessage = () => {
    waiting.shift()?.();
    if (waiting.length === 0) ch.port1.unref?.();
  };
  ch.port1.unref?.();
  return () =>
    new Promise((r) => {
      waiting.push(r);
      ch.port1.ref?.();
      ch.port2.postMessage(0);
    });
})();

export function abortError(signal) {
  return signal?.reason instanceof Error ? signal.reason : new DOMException('The operation was aborted', 'AbortError');
}

function isUrl(source) {
  return typeof source === 'string' || source instanceof URL;
}

/**
 * Load a model into this thread. Returns a backend: { executor, info, applyChatTemplate,
 * stream, unload }.
 */
export async function loadLocal(source, opts = {}) {
  const { onProgress, signal, cache = true, executor = 'auto', wasmUrl, fetch: fetchFn, memoryBudget, threads, simd } = opts;
  const { promptCache = cache, promptCacheMaxBytes = DEFAULT_MAX_BYTES } = opts;
  if (signal?.aborted) throw abortError(signal);
  const glue = await initWasm(wasmUrl, threads, simd);
  let src = source;
  if (isUrl(source)) {
    const url = new URL(String(source), globalThis.location?.href).href;
    src = url;
    if (cache && cacheAvailable()) {
      src = await cachedFile(url, { onProgress, signal, fetchFn });
    }
  }
  const size = opts.size;
  const progress = onProgress ? (p) => onProgress({ phase: 'load', ...p }) : undefined;
  // On abort the wasm load stops at its next chunk; reject at once all the same (and free the
  // model should it have finished meanwhile).
  const loading = glue.WickModel.load(src, { executor, onProgress: progress, size, signal, memoryBudget });
  let raw;
  if (signal) {
    let onAbort;
    const aborted = new Promise((_, reject) => {
      onAbort = () => reject(abortError(signal));
      signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      raw = await Promise.race([loading, aborted]);
    } catch (e) {
      loading.then((m) => m.free(), () => {});
      throw e;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  } else {
    raw = await loading;
  }
  const pc = promptCache && promptCacheAvailable() ? { maxBytes: promptCacheMaxBytes } : null;
  return new LocalBackend(raw, pc, glue);
}

class LocalBackend {
  constructor(raw, promptCache, glue) {
    this.raw = raw;
    this.glue = glue;
    this.executor = raw.executor;
    this.info = raw.info();
    this.lock = Promise.resolve();
    // The prompt cache in OPFS (prompt-cache.js): `fresh` while the session holds nothing a
    // saved conversation could be restored over.
    this.pc = promptCache ? { ...promptCache, digest: raw.digest, fresh: true } : null;
  }

  /** Restore the saved conversation that shares the most tokens with `prompt`, if any. */
  async _restorePromptCache(prompt, gen) {
    const addSpecial = gen.addSpecial ?? true;
    const tokens = Array.from(this.live().tokenize(prompt, addSpecial));
    const found = await findPromptCache(this.pc.digest, tokens);
    if (!found) return null;
    try {
      const r = await this.live().restorePromptCache(found.file, prompt, { addSpecial, nCtx: gen.nCtx });
      await touchPromptCache(found.name);
      return r;
    } catch (e) {
      // A stale or corrupt cache: dropped, and the prompt prefilled.
      console.warn(`wick: ${e?.message || e}; prefilling instead`);
      await touchPromptCache(found.name, true);
      return null;
    }
  }

  /** Save the session's conversation (after the generation queued before it). */
  _savePromptCache() {
    return savePromptCache(this.pc.digest, (onChunk) => this.live().savePromptCache(onChunk), this.pc.maxBytes).catch(
      (e) => console.warn(`wick: saving the prompt cache failed: ${e?.message || e}`),
    );
  }

  live() {
    if (!this.raw) throw new Error('the model has been unloaded');
    return this.raw;
  }

  async applyChatTemplate(messages, vars, tools) {
    return this.live().applyChatTemplate(messages, vars, tools);
  }

  /** Check `tools` and `toolChoice`; the Lark grammar forcing the call, or undefined. */
  async toolChoiceGrammar(tools, toolChoice, parallel) {
    return this.live().toolChoiceGrammar(tools, toolChoice, parallel);
  }

  /**
   * Generate after `prompt`: an async iterator of `{ text, id }` whose return value is the
   * generation's stats. Generations run one at a time (a second one waits for the first).
   * With `opts.toolCalls` (`{ parallel, idPrefix, tools }`) the text goes through the Rust
   * tool-call parser: items carry `toolDeltas` (`{ content }`, `{ index, id, name }`,
   * `{ index, arguments }`, in order) instead of text, and the stats say `toolCalls` (how
   * many) and `toolCallUnfinished` (a call was cut off).
   */
  async *stream(prompt, opts = {}, signal) {
    const { signal: _s, stream: _st, messages: _m, toolCalls, ...rest } = opts;
    if (!toolCalls) return yield* this._stream(prompt, rest, signal);
    const parser = new this.glue.ToolCallParser(
      this.live().toolFamily,
      toolCalls.parallel !== false,
      toolCalls.idPrefix || 'call_',
      toolCalls.tools,
    );
    // Call markers can be control tokens (`[TOOL_CALLS]`): the parser must see their text.
    const it = this._stream(prompt, { ...rest, controlText: true }, signal);
    let done = false;
    try {
      let r;
      while (!(r = await it.next()).done) {
        const { text, ...item } = r.value;
        yield { ...item, text: '', toolDeltas: text ? parser.push(text) : [] };
      }
      done = true;
      const end = parser.finish();
      if (end.deltas.length) yield { text: '', toolDeltas: end.deltas };
      return { ...r.value, toolCalls: parser.calls, toolCallUnfinished: end.unfinished !== undefined };
    } finally {
      // Leaving early stops the generation (as leaving `_stream` itself does).
      if (!done) await it.return();
      parser.free();
    }
  }

  async *_stream(prompt, opts, signal) {
    const { promptCache: usePromptCache, ...rest } = opts;
    const pc = usePromptCache ? this.pc : null;
    const prev = this.lock;
    let release;
    let saving = null;
    this.lock = new Promise((r) => (release = r));
    try {
      await prev;
      if (signal?.aborted) throw abortError(signal);
      // A chat's first turn after a load continues a conversation saved before (a reload).
      let restored = null;
      if (pc?.fresh) {
        pc.fresh = false;
        restored = await this._restorePromptCache(prompt, rest);
      }
      const queue = [];
      let wake = null;
      let finished = false;
      let failure = null;
      let stats = null;
      let stopped = false;
      const onToken = (text, id, logprobs) => {
        queue.push(logprobs ? { text, id, logprobs } : { text, id });
        if (wake) wake();
        if (stopped || signal?.aborted) return false;
        return nextTask().then(() => !(stopped || signal?.aborted));
      };
      const onAbort = () => wake && wake();
      signal?.addEventListener('abort', onAbort);
      const run = this.live().generate(prompt, rest, onToken).then(
        (s) => (stats = s),
        (e) => (failure = e),
      );
      run.finally(() => {
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
          if (finished || signal?.aborted) break;
          await new Promise((r) => (wake = r));
          wake = null;
        }
      } finally {
        stopped = true;
        signal?.removeEventListener('abort', onAbort);
        await run;
      }
      if (failure) {
        // The session starts afresh after a failure: a saved conversation may be restored.
        if (pc) pc.fresh = true;
        throw failure instanceof Error ? failure : new Error(String(failure));
      }
      if (signal?.aborted) throw abortError(signal);
      // Saved while the caller reads the reply; the next generation waits for it.
      if (pc) saving = this.saving = this._savePromptCache();
      return restored ? { ...stats, promptRestored: restored.restored, restoreMs: restored.ms } : stats;
    } finally {
      if (saving) saving.finally(release);
      else release();
    }
  }

  async unload() {
    // A conversation being saved is finished first (a reload right after a reply keeps it).
    if (this.saving) await this.saving;
    if (this.raw) {
      this.raw.unload();
      // Dropping the Rust object frees what a finished generation left (its GPU buffers).
      const raw = this.raw;
      this.raw = null;
      await this.lock;
      raw.free();
    }
  }
}
