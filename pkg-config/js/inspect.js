// Wick.inspect(url): a model's memory at a context and whether it fits this browser, from the
// file's header alone, fetched with HTTP Range requests (a few MB for big vocabularies) before
// anyone downloads gigabytes. The figures are the Rust estimator's (src/model/memory.rs), the
// same a load fits its default context to.

import { initWasm } from './local.js';

const FIRST_RANGE = 1 << 20;
const MOST_HEADER = 256 << 20;

/** The executor a load would pick, with the adapter's binding limit for WebGPU. */
async function pickExecutor(executor) {
  if (executor === 'cpu' || typeof navigator === 'undefined' || !navigator.gpu) return { executor: 'cpu' };
  const adapter = await navigator.gpu.requestAdapter().catch(() => null);
  if (!adapter) return { executor: 'cpu' };
  // Like a load's 'auto': a software (fallback) adapter is slower than the CPU executor.
  const fallback = adapter.info?.isFallbackAdapter ?? adapter.isFallbackAdapter ?? false;
  if (executor !== 'webgpu' && fallback) return { executor: 'cpu' };
  const l = adapter.limits;
  return { executor: 'webgpu', maxBinding: Math.min(l.maxStorageBufferBindingSize, l.maxBufferSize) };
}

/**
 * Inspect the GGUF at `url`: `{ architecture, name, parameters, size, contextLength, nCtx,
 * memory: { weights, kv, scratch, total }, fits, problem, full, budget, executor, bytesRead }`.
 * `opts`: `{ nCtx?, executor?: 'auto'|'webgpu'|'cpu', memoryBudget?, fetch?, wasmUrl?, signal? }`.
 */
export async function inspect(url, opts = {}) {
  const { nCtx = 0, memoryBudget, wasmUrl, signal } = opts;
  const fetchFn = opts.fetch ?? globalThis.fetch.bind(globalThis);
  const { inspectHeader } = await initWasm(wasmUrl);
  const href = new URL(String(url), globalThis.location?.href).href;
  const pick = await pickExecutor(opts.executor ?? 'auto');
  const parse = (bytes) => inspectHeader(bytes, { executor: pick.executor, maxBinding: pick.maxBinding, nCtx, memoryBudget });
  let want = FIRST_RANGE;
  let bytes = new Uint8Array(0);
  let total = null;
  for (;;) {
    // Only the bytes not read yet.
    const res = await fetchFn(href, { headers: { Range: `bytes=${bytes.length}-${want - 1}` }, signal });
    if (!res.ok) throw new Error(`inspecting ${href}: HTTP ${res.status}`);
    if (res.status === 200) return readWhole(href, res, parse);
    const chunk = new Uint8Array(await res.arrayBuffer());
    const joined = new Uint8Array(bytes.length + chunk.length);
    joined.set(bytes);
    joined.set(chunk, bytes.length);
    bytes = joined;
    const m = /\/(\d+)$/.exec(res.headers.get('Content-Range') ?? '');
    if (m) total = Number(m[1]);
    const r = await parse(bytes);
    if (!r.needMore) return { ...r, bytesRead: bytes.length, fileSize: total ?? bytes.length };
    const end = total ?? Infinity;
    if (bytes.length >= end || chunk.length === 0) {
      throw new Error(`inspecting ${href}: the file ends inside its GGUF header`);
    }
    if (want >= MOST_HEADER) throw new Error(`inspecting ${href}: a GGUF header larger than ${MOST_HEADER} bytes`);
    want *= 4;
  }
}

/**
 * A server that ignores Range sends the whole file (status 200): read its body only until the
 * header parses, trying at 1, 4, 16... MiB, then cancel the rest of the download.
 */
async function readWhole(href, res, parse) {
  const length = Number(res.headers.get('Content-Length')) || null;
  const reader = res.body.getReader();
  const parts = [];
  let have = 0;
  let next = FIRST_RANGE;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (value) {
        parts.push(value);
        have += value.length;
      }
      if (!done && have < next) continue;
      const bytes = new Uint8Array(have);
      let at = 0;
      for (const p of parts) {
        bytes.set(p, at);
        at += p.length;
      }
      parts.length = 0;
      parts.push(bytes);
      const r = await parse(bytes);
      if (!r.needMore) return { ...r, bytesRead: have, fileSize: length ?? have };
      if (done) throw new Error(`inspecting ${href}: the file ends inside its GGUF header`);
      if (next >= MOST_HEADER) throw new Error(`inspecting ${href}: a GGUF header larger than ${MOST_HEADER} bytes`);
      next *= 4;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
