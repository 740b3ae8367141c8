#!/usr/bin/env node
// A tiny dependency-free static server for the demo: serves the repository root (so that
// /www/ finds /pkg/ and models under /models/ or /target/), with HTTP Range requests
// (206, resumable downloads), ETag/Last-Modified, and the wasm MIME type.
//
//   node www/serve.mjs [--port 8080] [--host 127.0.0.1] [--root DIR]
//
// GET /__wick/requests returns how many GET requests each path has had, and the Range headers
// they carried (the browser tests use it to check that a cached model is not downloaded twice
// and that a cut download resumes).

import { createServer } from 'node:http';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const root = resolve(opt('root', join(fileURLToPath(new URL('.', import.meta.url)), '..')));
const port = Number(opt('port', process.env.PORT || 8080));
const host = opt('host', '127.0.0.1');

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.d.ts': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.gguf': 'application/octet-stream',
};

const counts = new Map();
const ranges = new Map();

function send(res, status, body, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Cache-Control': 'no-store', ...headers });
  res.end(body);
}

/** The byte range a `Range` header asks for within `size` bytes, `null` for the whole file,
 *  or `'bad'` when it cannot be satisfied. Only single ranges are supported. */
function parseRange(header, size) {
  if (!header) return null;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return 'bad';
  let start;
  let end;
  if (m[1] === '') {
    const n = Number(m[2]);
    start = Math.max(size - n, 0);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  }
  if (start >= size || start > end) return 'bad';
  return { start, end };
}

const server = createServer(async (req, res) => {
  try {
    const url = new URL(req.url, 'http://x');
    const path = decodeURIComponent(url.pathname);
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed', { Allow: 'GET, HEAD' });
    if (req.method === 'GET') {
      counts.set(path, (counts.get(path) || 0) + 1);
      if (req.headers.range) ranges.set(path, [...(ranges.get(path) || []), req.headers.range]);
    }
    if (path === '/__wick/requests') {
      const body = { ...Object.fromEntries(counts), ranges: Object.fromEntries(ranges) };
      return send(res, 200, JSON.stringify(body), { 'Content-Type': 'application/json' });
    }
    if (path === '/') return send(res, 302, '', { Location: '/www/' });
    let file = normalize(join(root, path));
    if (file !== root && !file.startsWith(root + sep)) return send(res, 403, 'forbidden');
    let st = await stat(file).catch(() => null);
    if (st && st.isDirectory()) {
      if (!path.endsWith('/')) return send(res, 301, '', { Location: path + '/' });
      file = join(file, 'index.html');
      st = await stat(file).catch(() => null);
    }
    if (!st || !st.isFile()) return send(res, 404, `not found: ${path}`);
    const type = file.endsWith('.d.ts') ? TYPES['.d.ts'] : TYPES[extname(file)] || 'application/octet-stream';
    const etag = `"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
    const headers = {
      'Content-Type': type,
      'Accept-Ranges': 'bytes',
      ETag: etag,
      'Last-Modified': st.mtime.toUTCString(),
      'Cache-Control': 'no-cache',
    };
    const ifRange = req.headers['if-range'];
    const range = ifRange && ifRange !== etag ? null : parseRange(req.headers.range, st.size);
    if (range === 'bad') return send(res, 416, 'range not satisfiable', { 'Content-Range': `bytes */${st.size}` });
    const { start, end } = range || { start: 0, end: st.size - 1 };
    const status = range ? 206 : 200;
    if (range) headers['Content-Range'] = `bytes ${start}-${end}/${st.size}`;
    headers['Content-Length'] = String(Math.max(end - start + 1, 0));
    res.writeHead(status, headers);
    if (req.method === 'HEAD' || st.size === 0) return res.end();
    const s = createReadStream(file, { start, end });
    s.on('error', () => res.destroy());
    s.pipe(res);
  } catch (e) {
    send(res, 500, String(e && e.message ? e.message : e));
  }
});

server.listen(port, host, () => {
  const addr = server.address();
  console.log(`wick demo: http://${host}:${addr.port}/www/ (serving ${root})`);
});
