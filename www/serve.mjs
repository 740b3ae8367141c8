#!/usr/bin/env node
// A tiny dependency-free static server for the demo. It serves three folders of the repository,
// /www/ (the demo), /pkg/ (the npm package it imports) and /models/ (GGUF files), with HTTP
// Range requests (206, resumable downloads), ETag/Last-Modified and the wasm MIME type, and
// nothing else: not .git/, not target/, not a file a symlink points at outside those folders.
//
//   node www/serve.mjs [--port 8080] [--host 127.0.0.1] [--root DIR]
//                      [--serve-dir /PREFIX=DIR]... [--test-log]
//
//   --host H        the address to listen on; 127.0.0.1 (this machine only) unless given.
//                   Anything else (0.0.0.0, a LAN address) serves the three folders to the network.
//   --root DIR      the checkout whose www/, pkg/ and models/ are served (default: this file's ../).
//   --serve-dir /PREFIX=DIR   also serve DIR (relative to the current directory) at /PREFIX/;
//                   repeatable; a PREFIX of www, pkg or models replaces that folder (for example
//                   --serve-dir /models=/data/gguf). The browser tests add their model and pages so.
//   --test-log      answer GET /__wick/requests with how many GET requests each path has had and
//                   the Range headers they carried (the browser tests check with it that a cached
//                   model is not downloaded twice and that a cut download resumes). Bounded (the
//                   1,000 paths asked for last, the last 100 Range headers of each); off by default,
//                   and /__wick/requests is then a 404 like any other unknown path.
//
// The rules, each tested by tests/browser/serve.test.mjs:
// - A path is served only when every segment is a plain name (none starts with a dot, so no
//   `..`, no .git/, no dot-files) and it lies under a served folder once symlinks are resolved
//   (realpath). The served folders are themselves resolved once, when they first exist (models/
//   may well be a symlink to a shared directory), and a symlink inside one is followed only if it lands inside one of
//   them, so a model symlinked from elsewhere needs its real folder added with --serve-dir.
// - Redirects (`/` to `/www/`, a folder to its trailing-slash form) carry a Location built from
//   the checked segments, so it is always a path on this origin: `/` then a name, never `//` or
//   `/\` (which a browser would read as another host).
// - Range follows RFC 9110: a header this server cannot serve as one range (a syntax error, an
//   unknown unit, several ranges) is ignored and the whole file sent with 200; one satisfiable
//   range gets 206; one range starting at or past the end gets 416 with `bytes */SIZE`. If-Range
//   must equal the current ETag for the range to apply. Range applies to GET only.
// - Every response carries COOP same-origin and COEP require-corp (the page is cross-origin
//   isolated, as a page that uses SharedArrayBuffer needs), CORP same-origin and nosniff.
// - Bound to a loopback address, it answers only requests whose Host is a loopback name, so a
//   web page cannot reach it through a DNS name rebound to 127.0.0.1.

import { createServer } from 'node:http';
import { createReadStream, realpathSync, statSync } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { extname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.d.ts': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.gguf': 'application/octet-stream',
};

/** Headers on every response: cross-origin isolation, and no MIME sniffing (with `nosniff` a
 *  file is only run as a script or style when its Content-Type says so). */
export const SECURITY_HEADERS = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'X-Content-Type-Options': 'nosniff',
};

/** The folders served by default, each at `/NAME/`, relative to the root. */
export const DEFAULT_DIRS = ['www', 'pkg', 'models'];

/** How much the --test-log request log keeps: paths (oldest forgotten first), Range headers per
 *  path, and characters of a path or header (longer ones are cut). */
export const LOG_LIMITS = { paths: 1000, rangesPerPath: 100, chars: 512 };

/** The byte range a `Range` header asks for within `size` bytes, by RFC 9110 section 14:
 *  `{ start, end }` (inclusive) for one satisfiable range, `'unsatisfiable'` for one range that
 *  starts at or past the end (or a suffix of zero bytes), and `null` when the header is absent
 *  or is to be ignored (a syntax error, a unit other than bytes, more than one range), which
 *  means the whole file. Positions are compared as BigInt so that a 30-digit position is judged
 *  exactly rather than rounded. */
export function parseRange(header, size) {
  if (typeof header !== 'string') return null;
  const h = header.trim();
  const eq = h.indexOf('=');
  // The unit is case-insensitive; no whitespace is allowed around `=`.
  if (eq < 0 || h.slice(0, eq).toLowerCase() !== 'bytes') return null;
  // A list may hold empty elements (RFC 9110 section 5.6.1), which do not count as ranges.
  const specs = h
    .slice(eq + 1)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (specs.length !== 1) return null;
  const m = /^(\d*)-(\d*)$/.exec(specs[0]);
  if (!m || (m[1] === '' && m[2] === '')) return null;
  const n = BigInt(size);
  if (m[1] === '') {
    // A suffix: the last N bytes (all of them when the file is shorter).
    const len = BigInt(m[2]);
    if (len === 0n) return 'unsatisfiable';
    if (n === 0n) return null; // nothing to cut: the whole (empty) file
    return { start: Number(len >= n ? 0n : n - len), end: size - 1 };
  }
  const first = BigInt(m[1]);
  const last = m[2] === '' ? null : BigInt(m[2]);
  if (last !== null && last < first) return null; // an invalid range-spec: ignored
  if (first >= n) return 'unsatisfiable';
  return { start: Number(first), end: Number(last === null || last >= n ? n - 1n : last) };
}

/** The --test-log record: GET counts per path and the Range headers each carried, bounded by
 *  LOG_LIMITS so that a long-running server or a stream of odd paths cannot grow it. */
export class RequestLog {
  constructor(limits = LOG_LIMITS) {
    this.limits = limits;
    this.counts = new Map();
    this.ranges = new Map();
  }

  /** Count one GET of `path`, with its Range header if any. */
  record(path, range) {
    const key = path.slice(0, this.limits.chars);
    bump(this.counts, key, this.limits.paths, (n) => (n || 0) + 1);
    if (range) {
      const value = String(range).slice(0, this.limits.chars);
      bump(this.ranges, key, this.limits.paths, (list) => [...(list || []), value].slice(-this.limits.rangesPerPath));
    }
  }

  /** The JSON the tests read: `{ [path]: count, ..., ranges: { [path]: [header, ...] } }`. */
  toJSON() {
    return { ...Object.fromEntries(this.counts), ranges: Object.fromEntries(this.ranges) };
  }
}

/** Update `map[key]` with `f`, keeping it last in insertion order and at most `max` keys (the
 *  least recently updated go first). */
function bump(map, key, max, f) {
  const value = f(map.get(key));
  map.delete(key);
  map.set(key, value);
  while (map.size > max) map.delete(map.keys().next().value);
}

/** The options from the command line (see the top of this file); throws on anything unknown or
 *  malformed, so that a typo is not silently a server with other rules. */
export function parseArgs(argv, env = process.env) {
  const o = {
    port: Number(env.PORT || 8080),
    host: '127.0.0.1',
    root: join(fileURLToPath(new URL('.', import.meta.url)), '..'),
    serveDirs: [],
    testLog: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--port') o.port = Number(value());
    else if (a === '--host') o.host = value();
    else if (a === '--root') o.root = value();
    else if (a === '--test-log') o.testLog = true;
    else if (a === '--serve-dir') {
      const v = value();
      const m = /^(\/[^=]+)=(.+)$/.exec(v);
      if (!m) throw new Error(`--serve-dir wants /PREFIX=DIR, got ${JSON.stringify(v)}`);
      o.serveDirs.push({ prefix: m[1], dir: m[2] });
    } else throw new Error(`unknown argument ${JSON.stringify(a)} (see the top of www/serve.mjs)`);
  }
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) throw new Error(`--port must be 0 to 65535`);
  return o;
}

/** The segments of a URL prefix such as `/models-test` or `/a/b`: plain names only. */
function prefixSegments(prefix) {
  const segs = prefix.replace(/\/+$/, '').split('/').slice(1);
  if (segs.some((s) => !/^[A-Za-z0-9_~-][A-Za-z0-9._~-]*$/.test(s)) || segs[0] === '__wick') {
    throw new Error(`--serve-dir prefix ${JSON.stringify(prefix)}: want /NAME[/NAME...] of letters, digits, . _ ~ - (no leading dot)`);
  }
  return segs;
}

/** The served folders: `{ segs, dir, real }`, `real` being the folder's realpath once it exists.
 *  A default folder may not exist yet (pkg/ before the package is built): it is resolved again
 *  on each request until it does. A --serve-dir folder must exist at start-up. */
function mountsFor(o) {
  const mounts = new Map();
  for (const name of DEFAULT_DIRS) mounts.set(name, { segs: [name], dir: resolve(o.root, name), real: null });
  for (const { prefix, dir } of o.serveDirs) {
    const segs = prefixSegments(prefix);
    let real = null;
    try {
      real = realpathSync(resolve(dir));
    } catch {}
    if (real === null || !statSync(real).isDirectory()) throw new Error(`--serve-dir ${prefix}=${dir}: no such folder`);
    mounts.set(segs.join('/'), { segs, dir: resolve(dir), real });
  }
  // Longest prefix first, so that /a/b is matched before /a.
  return [...mounts.values()].sort((x, y) => y.segs.length - x.segs.length);
}

/** The realpath of a served folder, null while it does not exist. */
async function resolveMount(m) {
  if (m.real === null) m.real = await realpath(m.dir).catch(() => null);
  return m.real;
}

/** What `file` is once symlinks are resolved: `{ file, st, dir }` (its realpath, stat and whether
 *  it is a folder) when it lies inside one of `roots` with no dot-named segment below that root;
 *  `{ status: 403 }` when it exists but resolves elsewhere; `{ status: 404 }` otherwise. The
 *  realpath is what gets opened, so a symlink retargeted after this check is not followed (only
 *  someone who can write the served folders could swap one in that instant, and they can read
 *  what they would point it at anyway). */
async function locate(file, roots) {
  const real = await realpath(file).catch(() => null);
  const st = real && (await stat(real).catch(() => null));
  if (!st || !(st.isFile() || st.isDirectory())) return { status: 404 };
  for (const root of roots) {
    if (real !== root && !real.startsWith(root.endsWith(sep) ? root : root + sep)) continue;
    if (!relative(root, real).split(sep).some((s) => s.startsWith('.'))) return { file: real, st, dir: st.isDirectory() };
  }
  return { status: 403 };
}

const LOOPBACK_HOST = /^(localhost|127(\.\d{1,3}){3}|\[::1\])(:\d+)?$/i;
const isLoopback = (host) => host === 'localhost' || host === '::1' || /^127(\.\d{1,3}){3}$/.test(host);

/** A Node http.Server with the rules above; `o` as parseArgs returns it. Throws on a bad
 *  --serve-dir. Call `.listen(o.port, o.host)` on it. */
export function createWickServer(o) {
  const mounts = mountsFor(o);
  const log = o.testLog ? new RequestLog() : null;
  const checkHost = isLoopback(o.host);

  const send = (res, status, body, headers = {}) => {
    res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Cache-Control': 'no-store', ...headers });
    res.end(body);
  };
  const redirect = (res, status, location) => {
    // The one invariant that keeps a redirect on this origin: `/` then anything but `/` or `\`.
    if (!/^\/(?![/\\])/.test(location)) return send(res, 500, 'refusing an off-origin redirect');
    send(res, status, '', { Location: location });
  };

  async function handle(req, res) {
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) res.setHeader(k, v);
    if (checkHost && req.headers.host !== undefined && !LOOPBACK_HOST.test(req.headers.host)) {
      return send(res, 403, 'forbidden: this server answers only to a loopback Host');
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed', { Allow: 'GET, HEAD' });
    let url;
    let path;
    try {
      // Origin-form only (`/path?query`): a request target such as `//host/x` must stay a path.
      // A raw backslash is refused before the URL parser reads it as `/` (`\..\` would be `/../`).
      if (!req.url.startsWith('/') || req.url.includes('\\')) throw new Error('not a path');
      url = new URL('http://localhost' + req.url);
      path = decodeURIComponent(url.pathname);
    } catch {
      return send(res, 400, 'bad request path');
    }
    if (log && req.method === 'GET') log.record(path, req.headers.range);
    if (log && path === '/__wick/requests') {
      return send(res, 200, JSON.stringify(log), { 'Content-Type': 'application/json' });
    }
    if (path === '/') return redirect(res, 302, '/www/');
    if (/[\0\\]/.test(path)) return send(res, 400, 'bad request path');
    // Empty segments (`//`) are dropped; the rebuilt path is what redirects use.
    const segs = path.split('/').filter((s) => s !== '');
    if (segs.some((s) => s.startsWith('.'))) return send(res, 404, 'not found');
    const mount = mounts.find((m) => m.segs.every((s, i) => segs[i] === s));
    const base = mount && (await resolveMount(mount));
    if (!base) return send(res, 404, 'not found');
    const roots = [];
    for (const m of mounts) {
      const r = await resolveMount(m);
      if (r) roots.push(r);
    }
    let found = await locate(join(base, ...segs.slice(mount.segs.length)), roots);
    if (found.dir) {
      if (!path.endsWith('/')) return redirect(res, 301, '/' + segs.map(encodeURIComponent).join('/') + '/' + url.search);
      found = await locate(join(found.file, 'index.html'), roots);
    }
    if (found.status) return send(res, found.status, found.status === 403 ? 'forbidden: resolves outside the served folders' : 'not found');
    const { file, st } = found;
    if (!st || !st.isFile()) return send(res, 404, 'not found');
    return sendFile(req, res, file, st, send);
  }

  return createServer((req, res) =>
    handle(req, res).catch((e) => {
      if (res.headersSent) return res.destroy();
      send(res, 500, String(e && e.message ? e.message : e));
    }),
  );
}

/** Answer with the file (or the part of it that a Range header asks for). */
function sendFile(req, res, file, st, send) {
  const type = file.endsWith('.d.ts') ? TYPES['.d.ts'] : TYPES[extname(file)] || 'application/octet-stream';
  const etag = `"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
  const headers = {
    'Content-Type': type,
    'Accept-Ranges': 'bytes',
    ETag: etag,
    'Last-Modified': st.mtime.toUTCString(),
    'Cache-Control': 'no-cache',
  };
  // Range is defined for GET only (RFC 9110 section 14.2); If-Range, when sent, must name the
  // current file, or the client gets all of it (its partial copy is of an older file).
  const ifRange = req.headers['if-range'];
  const range = req.method !== 'GET' || (ifRange && ifRange !== etag) ? null : parseRange(req.headers.range, st.size);
  if (range === 'unsatisfiable') return send(res, 416, 'range not satisfiable', { 'Content-Range': `bytes */${st.size}` });
  const { start, end } = range || { start: 0, end: st.size - 1 };
  if (range) headers['Content-Range'] = `bytes ${start}-${end}/${st.size}`;
  headers['Content-Length'] = String(Math.max(end - start + 1, 0));
  res.writeHead(range ? 206 : 200, headers);
  if (req.method === 'HEAD' || st.size === 0) return res.end();
  const s = createReadStream(file, { start, end });
  s.on('error', () => res.destroy());
  s.pipe(res);
}

/** Run from the command line (not when imported by a test). */
function main() {
  let o;
  let server;
  try {
    o = parseArgs(process.argv.slice(2));
    server = createWickServer(o);
  } catch (e) {
    console.error(`serve.mjs: ${e.message}`);
    process.exit(2);
  }
  server.listen(o.port, o.host, () => {
    const { port } = server.address();
    const host = o.host.includes(':') ? `[${o.host}]` : o.host;
    console.log(`wick demo: http://${host}:${port}/www/ (serving www/, pkg/, models/ of ${resolve(o.root)})`);
    for (const { prefix, dir } of o.serveDirs) console.log(`  also ${prefix}/ from ${resolve(dir)}`);
    if (o.testLog) console.log('  GET /__wick/requests: the request log (--test-log)');
    if (!isLoopback(o.host)) console.log(`  listening on ${o.host}: these folders are open to the network`);
  });
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) main();
