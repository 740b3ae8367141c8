// The prompt cache: conversations' KV caches kept in the Origin Private File System (OPFS), so
// that after a reload the next chat turn prefills only its new tokens.
//
// Layout: one directory `wick-prompt-cache/` holding, per saved conversation, `N.wkv` (the
// bytes of the wasm module's savePromptCache, checked by the module when restored) and one
// `index.json`: [{ file, digest, tokens, bytes, usedAt }]. `digest` names the model (its
// weights, shapes and hyperparameters), `tokens` the conversation. A save drops the same
// model's caches whose tokens it extends; past the size cap the least recently used go.

const DIR = 'wick-prompt-cache';
const INDEX = 'index.json';

/** Default cap on the prompt cache's bytes in OPFS. */
export const DEFAULT_MAX_BYTES = 1 << 30;

export function promptCacheAvailable() {
  return typeof navigator !== 'undefined' && !!navigator.storage && typeof navigator.storage.getDirectory === 'function';
}

async function dir() {
  const root = await navigator.storage.getDirectory();
  return root.getDirectoryHandle(DIR, { create: true });
}

async function readIndex(d) {
  try {
    const f = await (await d.getFileHandle(INDEX)).getFile();
    const list = JSON.parse(await f.text());
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

async function writeIndex(d, list) {
  const w = await (await d.getFileHandle(INDEX, { create: true })).createWritable();
  await w.write(JSON.stringify(list));
  await w.close();
}

async function remove(d, file) {
  try {
    await d.removeEntry(file);
  } catch {
    // Already gone.
  }
}

// One index update at a time in this context (a save's and a restore's can overlap).
let chain = Promise.resolve();
function serial(f) {
  const run = chain.then(f, f);
  chain = run.catch(() => {});
  return run;
}

function commonPrefix(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * Of the caches saved for model `digest`, the one sharing the most leading tokens with
 * `tokens`: `{ file: File, common, name }`, or null.
 */
export async function findPromptCache(digest, tokens) {
  return serial(async () => {
    const d = await dir();
    let best = null;
    for (const e of await readIndex(d)) {
      if (e.digest !== digest) continue;
      const common = commonPrefix(e.tokens, tokens);
      if (common > 0 && (!best || common > best.common)) best = { entry: e, common };
    }
    if (!best) return null;
    try {
      const file = await (await d.getFileHandle(best.entry.file)).getFile();
      return { file, common: best.common, name: best.entry.file };
    } catch {
      return null;
    }
  });
}

/** Mark a cache used now, or (`drop`) remove it: one that was rejected. */
export async function touchPromptCache(name, drop = false) {
  return serial(async () => {
    const d = await dir();
    const list = await readIndex(d);
    const e = list.find((x) => x.file === name);
    if (!e) return;
    if (drop) {
      await remove(d, name);
      list.splice(list.indexOf(e), 1);
    } else {
      e.usedAt = Date.now();
    }
    await writeIndex(d, list);
  });
}

/**
 * Save a conversation: `write(onChunk)` is the wasm module's savePromptCache, resolving to
 * `{ tokens, bytes }` (or null when there is nothing to save). Returns the entry or null.
 */
export async function savePromptCache(digest, write, maxBytes = DEFAULT_MAX_BYTES) {
  const d = await dir();
  const name = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}.wkv`;
  const w = await (await d.getFileHandle(name, { create: true })).createWritable();
  let saved;
  try {
    saved = await write((chunk) => w.write(chunk));
    await w.close();
  } catch (e) {
    await w.abort().catch(() => {});
    await remove(d, name);
    throw e;
  }
  if (!saved) {
    await remove(d, name);
    return null;
  }
  const tokens = Array.from(saved.tokens);
  const entry = { file: name, digest, tokens, bytes: saved.bytes, usedAt: Date.now() };
  return serial(async () => {
    // Earlier snapshots of this conversation are contained in this one.
    const contained = (x) => x.digest === digest && commonPrefix(x.tokens, tokens) === x.tokens.length;
    const all = await readIndex(d);
    for (const e of all.filter(contained)) await remove(d, e.file);
    const list = all.filter((x) => !contained(x));
    list.push(entry);
    list.sort((a, b) => a.usedAt - b.usedAt);
    let total = list.reduce((n, x) => n + x.bytes, 0);
    while (total > maxBytes && list.length > 1) {
      const old = list.shift();
      total -= old.bytes;
      await remove(d, old.file);
    }
    await writeIndex(d, list);
    return entry;
  });
}

/** The saved conversations: `[{ digest, tokens: number, bytes, usedAt }]`. */
export async function listPromptCaches() {
  if (!promptCacheAvailable()) return [];
  return serial(async () =>
    (await readIndex(await dir())).map((e) => ({ digest: e.digest, tokens: e.tokens.length, bytes: e.bytes, usedAt: e.usedAt })),
  );
}

/** Delete every saved conversation. */
export async function clearPromptCache() {
  if (!promptCacheAvailable()) return;
  return serial(async () => {
    const root = await navigator.storage.getDirectory();
    try {
      await root.removeEntry(DIR, { recursive: true });
    } catch {
      // Nothing saved.
    }
  });
}
