// The weight cache: downloaded models kept in the Origin Private File System (OPFS).
//
// Layout: one directory `wick-models/`; for a model URL whose SHA-256 (hex) is H:
//   H.gguf   the complete file, loaded from here next time (no second download)
//   H.part   an unfinished download, resumed with `Range: bytes=N-` when asked again
//   H.json   { url, size, etag, lastModified, complete, savedAt }
// In a worker the bytes are written through a sync access handle and flushed every few
// megabytes, so a download cut by a closed tab resumes where it stopped. On the main thread
// they go through a writable stream, committed when the download ends (a download cut there
// resumes only within the same load, through its retries).

const DIR = 'wick-models';
const FLUSH_BYTES = 8 << 20;
const MAX_RETRIES = 3;

/** Thrown when the browser's storage quota is too small for a model, or a write hits it. */
export class WickStorageError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'WickStorageError';
  }
}

const mb = (n) => `${(n / 1048576).toFixed(1)} MB`;

/** Whether this context has OPFS. */
export function cacheAvailable() {
  return typeof navigator !== 'undefined' && !!navigator.storage && typeof navigator.storage.getDirectory === 'function';
}

async function dir() {
  const root = await navigator.storage.getDirectory();
  return root.getDirectoryHandle(DIR, { create: true });
}

async function keyOf(url) {
  const bytes = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(url)));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

async function fileOrNull(d, name) {
  try {
    return await d.getFileHandle(name);
  } catch (e) {
    if (e && e.name === 'NotFoundError') return null;
    throw e;
  }
}

async function readMeta(d, key) {
  const h = await fileOrNull(d, `${key}.json`);
  if (!h) return null;
  try {
    return JSON.parse(await (await h.getFile()).text());
  } catch {
    return null;
  }
}

async function writeMeta(d, key, meta) {
  const h = await d.getFileHandle(`${key}.json`, { create: true });
  const w = await h.createWritable();
  await w.write(JSON.stringify(meta));
  await w.close();
}

function isQuota(e) {
  return !!e && (e.name === 'QuotaExceededError' || /quota/i.test(String(e.message)));
}

function quotaError(url, e) {
  return new WickStorageError(
    `Not enough browser storage to cache ${url}: the write hit the storage quota. ` +
      'Delete cached models (deleteCachedModel) or load with { cache: false }.',
    { cause: e },
  );
}

/** Fail early when the quota cannot hold `need` more bytes. */
async function checkQuota(url, need) {
  if (!navigator.storage.estimate || !(need > 0)) return;
  const { quota, usage } = await navigator.storage.estimate();
  if (typeof quota !== 'number' || typeof usage !== 'number') return;
  const free = quota - usage;
  if (need > free) {
    throw new WickStorageError(
      `Not enough browser storage to cache ${url}: it needs ${mb(need)} more, ` +
        `${mb(free)} are free of a ${mb(quota)} quota. Delete cached models ` +
        '(deleteCachedModel) or load with { cache: false }.',
    );
  }
}

/** A writer into an OPFS file from `offset`: sync access handle in workers, else writable. */
async function openWriter(handle, offset) {
  if (typeof handle.createSyncAccessHandle === 'function' && typeof WorkerGlobalScope !== 'undefined') {
    const h = await handle.createSyncAccessHandle();
    h.truncate(offset);
    let at = offset;
    let unflushed = 0;
    return {
      async write(chunk) {
        const n = h.write(chunk, { at });
        if (n !== chunk.byteLength) throw new DOMException('short write to OPFS', 'QuotaExceededError');
        at += n;
        unflushed += n;
        if (unflushed >= FLUSH_BYTES) {
          h.flush();
          unflushed = 0;
        }
      },
      async close() {
        h.flush();
        h.close();
      },
      async abort() {
        try {
          h.flush();
        } finally {
          h.close();
        }
      },
    };
  }
  const w = await handle.createWritable({ keepExistingData: offset > 0 });
  if (offset > 0) {
    await w.truncate(offset);
    await w.seek(offset);
  }
  return {
    write: (chunk) => w.write(chunk),
    close: () => w.close(),
    // Keep what was written: the next attempt in this load resumes from it.
    abort: () => w.close().catch(() => {}),
  };
}

function abortError(signal) {
  return signal.reason instanceof Error ? signal.reason : new DOMException('The load was aborted', 'AbortError');
}

/**
 * The cached copy of `url` as a File, downloading it first (or finishing an earlier partial
 * download) when needed. `onProgress({ phase: 'download', loaded, total })`.
 * `fetchFn` replaces the global fetch (tests, credentials).
 */
export async function cachedFile(url, { onProgress, signal, fetchFn } = {}) {
  const d = await dir();
  const key = await keyOf(url);
  const meta = await readMeta(d, key);
  const done = await fileOrNull(d, `${key}.gguf`);
  if (done && meta && meta.complete) {
    const file = await done.getFile();
    if (file.size === meta.size) return file;
  }
  const doFetch = fetchFn || ((...a) => fetch(...a));
  const part = await d.getFileHandle(`${key}.part`, { create: true });
  let offset = (await part.getFile()).size;
  // A partial file is only resumed when the server still describes the same file.
  let info = meta && !meta.complete ? meta : null;
  if (!info) offset = 0;
  let failures = 0;
  for (;;) {
    if (signal?.aborted) throw abortError(signal);
    const headers = {};
    if (offset > 0) {
      headers.Range = `bytes=${offset}-`;
      if (info?.etag) headers['If-Range'] = info.etag;
    }
    const resp = await doFetch(url, { headers, signal });
    if (!resp.ok) throw new Error(`fetching ${url}: HTTP ${resp.status} ${resp.statusText}`);
    let total;
    if (resp.status === 206) {
      const m = /\/(\d+)\s*$/.exec(resp.headers.get('content-range') || '');
      total = m ? Number(m[1]) : undefined;
      if (info?.size && total !== undefined && total !== info.size) {
        offset = 0;
        info = null;
        await resp.body?.cancel();
        continue;
      }
    } else {
      offset = 0; // 200: the server sent the whole file (no Range support, or it changed)
      const len = resp.headers.get('content-length');
      total = len !== null && !resp.headers.get('content-encoding') ? Number(len) : undefined;
    }
    if (!info) {
      info = {
        url,
        size: total,
        etag: resp.headers.get('etag'),
        lastModified: resp.headers.get('last-modified'),
        complete: false,
      };
      try {
        await checkQuota(url, total);
      } catch (e) {
        await resp.body?.cancel().catch(() => {});
        throw e;
      }
      await writeMeta(d, key, info);
    }
    const writer = await openWriter(part, offset).catch((e) => {
      throw isQuota(e) ? quotaError(url, e) : e;
    });
    const reader = resp.body.getReader();
    const before = offset;
    try {
      for (;;) {
        const { done: end, value } = await reader.read();
        if (end) break;
        await writer.write(value);
        offset += value.byteLength;
        onProgress?.({ phase: 'download', loaded: offset, total: info.size });
      }
      await writer.close();
    } catch (e) {
      await writer.abort().catch(() => {});
      if (signal?.aborted) throw abortError(signal);
      if (isQuota(e)) throw quotaError(url, e);
      failures = offset > before ? 1 : failures + 1;
      if (failures > MAX_RETRIES) throw new Error(`downloading ${url} failed at byte ${offset}: ${e?.message || e}`, { cause: e });
      await new Promise((r) => setTimeout(r, 250 * 2 ** (failures - 1)));
      continue;
    }
    if (info.size !== undefined && offset !== info.size) {
      failures += 1;
      if (failures > MAX_RETRIES) throw new Error(`downloading ${url}: got ${offset} of ${info.size} bytes`);
      continue;
    }
    info = { ...info, size: offset, complete: true, savedAt: new Date().toISOString() };
    await part.move(`${key}.gguf`);
    await writeMeta(d, key, info);
    const file = await (await d.getFileHandle(`${key}.gguf`)).getFile();
    return file;
  }
}

/** The cached models: `[{ url, size, complete, savedAt }]` (incomplete ones are partial downloads). */
export async function listCachedModels() {
  if (!cacheAvailable()) return [];
  const d = await dir();
  const out = [];
  for await (const [name] of d.entries()) {
    if (!name.endsWith('.json')) continue;
    const meta = await readMeta(d, name.slice(0, -5));
    if (meta && meta.url) {
      out.push({ url: meta.url, size: meta.size ?? null, complete: !!meta.complete, savedAt: meta.savedAt ?? null });
    }
  }
  return out;
}

/** Delete the cached copy (complete or partial) of `url`; true if there was one. */
export async function deleteCachedModel(url) {
  if (!cacheAvailable()) return false;
  const d = await dir();
  const key = await keyOf(new URL(url, globalThis.location?.href).href);
  let found = false;
  for (const name of [`${key}.gguf`, `${key}.part`, `${key}.json`]) {
    try {
      await d.removeEntry(name);
      found = true;
    } catch (e) {
      if (!e || e.name !== 'NotFoundError') throw e;
    }
  }
  return found;
}

/** Delete every cached model. */
export async function clearCache() {
  if (!cacheAvailable()) return;
  const root = await navigator.storage.getDirectory();
  try {
    await root.removeEntry(DIR, { recursive: true });
  } catch (e) {
    if (!e || e.name !== 'NotFoundError') throw e;
  }
}
