// The demo server's rules (www/serve.mjs), one test per finding of issue #16 item 4, each of
// which the server before it failed: it is started on port 0 over a temporary checkout that
// holds what must not be served (.git/, target/, src/, symlinks out of the served folders), and
// asked with raw request paths (node:http, so that nothing normalizes them on the way).
//
//   node --test tests/browser/serve.test.mjs     (no browser, no pkg/ needed)

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseRange, RequestLog, SECURITY_HEADERS } from '../../www/serve.mjs';

const serveMjs = fileURLToPath(new URL('../../www/serve.mjs', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'wick-serve-'));
const root = join(tmp, 'checkout');
const SIZE = 1000;
const model = Buffer.from(Array.from({ length: SIZE }, (_, i) => i % 251));

/** Write `files` (path -> content) under `dir`. */
function put(dir, files) {
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
}

before(() => {
  put(root, {
    'www/index.html': '<!doctype html><title>demo</title>',
    'www/app.js': 'export {};',
    'www/sub/index.html': 'sub',
    'www/.env': 'SECRET=1',
    '.git/config': '[core]',
    'target/secret.txt': 'build output',
    'src/lib.rs': '// source',
    'README.md': 'readme',
  });
  // models/ is a symlink to a shared folder, as in a developer checkout: still served.
  put(tmp, { 'shared-models/m.gguf': model, 'shared-models/.cache/x.gguf': 'hidden', 'outside.txt': 'outside', 'extra/e.txt': 'extra' });
  symlinkSync(join(tmp, 'shared-models'), join(root, 'models'));
  symlinkSync(join(tmp, 'outside.txt'), join(tmp, 'shared-models/escape.gguf'));
  symlinkSync(join(root, 'target'), join(tmp, 'shared-models/escape-dir'));
  symlinkSync(join(tmp, 'shared-models/.cache/x.gguf'), join(tmp, 'shared-models/dotted.gguf'));
  symlinkSync(join(root, 'www/app.js'), join(tmp, 'shared-models/to-www.js'));
  symlinkSync(join(tmp, 'extra/e.txt'), join(tmp, 'shared-models/to-extra.txt'));
});

after(() => rmSync(tmp, { recursive: true, force: true }));

/** Start www/serve.mjs with `args` on a free port; resolves to { port, line, stop }. */
function start(args = []) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [serveMjs, '--port', '0', '--root', root, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.on('exit', (code) => reject(new Error(`serve.mjs exited with ${code}: ${out}`)));
    child.stderr.on('data', (d) => (out += d));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /http:\/\/([\d.]+):(\d+)\//.exec(out);
      if (m) resolve({ port: Number(m[2]), line: out, stop: () => child.kill() });
    });
  });
}

/** The exit code and stderr of serve.mjs run with `args` (for arguments it must refuse). */
function refused(args) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [serveMjs, '--port', '0', '--root', root, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill(), 30000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, err });
    });
  });
}

/** One request with the path sent exactly as given; resolves to { status, headers, body }. */
function get(port, path, { method = 'GET', headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end();
  });
}

let server;
before(async () => {
  server = await start(['--serve-dir', `/extra/=${join(tmp, 'extra')}`]);
});
after(() => server.stop());

test('serves www/, models/ (itself a symlink) and a --serve-dir folder; / and folders redirect', async () => {
  const p = server.port;
  assert.equal((await get(p, '/www/app.js')).body.toString(), 'export {};');
  assert.equal((await get(p, '/www/')).body.toString(), '<!doctype html><title>demo</title>');
  assert.deepEqual((await get(p, '/models/m.gguf')).body, model);
  assert.equal((await get(p, '/extra/e.txt')).body.toString(), 'extra');
  const home = await get(p, '/');
  assert.equal(home.status, 302);
  assert.equal(home.headers.location, '/www/');
  const sub = await get(p, '/www/sub?x=1');
  assert.equal(sub.status, 301);
  assert.equal(sub.headers.location, '/www/sub/?x=1');
  assert.equal((await get(p, '/pkg/index.js')).status, 404, 'pkg/ not built: a plain 404');
});

test('nothing outside www/, pkg/, models/ and dot-files nowhere', async () => {
  for (const path of [
    '/.git/config',
    '/target/secret.txt',
    '/src/lib.rs',
    '/README.md',
    '/www/.env',
    '/models/.cache/x.gguf',
    '/www/../.git/config',
    '/www/%2e%2e/.git/config',
    '/www/..%2F.git%2Fconfig',
    '/www/%2E%2E%2F%2E%2E%2Foutside.txt',
    '/__wick/requests',
  ]) {
    const r = await get(server.port, path);
    assert.equal(r.status, 404, `${path}: ${r.status} ${r.body}`);
  }
  for (const path of ['/www/a\\..\\..\\README.md', '/www/%5C..%5CREADME.md', '/www/%00', '/www/%E0%A4%A']) {
    assert.equal((await get(server.port, path)).status, 400, path);
  }
});

test('a symlink is followed only into a served folder', async () => {
  const p = server.port;
  for (const path of ['/models/escape.gguf', '/models/escape-dir/secret.txt', '/models/dotted.gguf']) {
    const r = await get(p, path);
    assert.equal(r.status, 403, `${path}: ${r.status}`);
    assert.ok(!/^(outside|build output|hidden)$/.test(r.body.toString()));
  }
  assert.equal((await get(p, '/models/to-www.js')).body.toString(), 'export {};');
  assert.equal((await get(p, '/models/to-extra.txt')).body.toString(), 'extra');
});

test('no redirect leaves the origin', async () => {
  for (const path of ['/%2Fevil.example%2F..%2Fsrc', '/%2Fevil.example%2F..%2Fwww', '/%2Fwww', '/%5Cwww', '//www', '/www//sub', '/%2F%2Fwww%2Fsub']) {
    const r = await get(server.port, path);
    const loc = r.headers.location;
    if (loc !== undefined) assert.match(loc, /^\/(?![/\\])/, `${path} redirects to ${loc}`);
    assert.ok(r.status < 500, `${path}: ${r.status}`);
  }
  assert.equal((await get(server.port, '/%2Fwww')).headers.location, '/www/');
  assert.equal((await get(server.port, '/www//sub')).headers.location, '/www/sub/');
});

test('COOP, COEP, CORP and nosniff on every response', async () => {
  const p = server.port;
  const cases = [
    ['/www/app.js', {}, 200],
    ['/models/m.gguf', { Range: 'bytes=0-9' }, 206],
    ['/', {}, 302],
    ['/www', {}, 301],
    ['/nope', {}, 404],
    ['/models/escape.gguf', {}, 403],
    ['/models/m.gguf', { Range: 'bytes=5000-' }, 416],
    ['/www/%zz', {}, 400],
  ];
  for (const [path, headers, status] of cases) {
    const r = await get(p, path, { headers });
    assert.equal(r.status, status, path);
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) assert.equal(r.headers[k.toLowerCase()], v, `${k} on ${status}`);
  }
  const post = await get(p, '/www/app.js', { method: 'POST' });
  assert.equal(post.status, 405);
  assert.equal(post.headers['x-content-type-options'], 'nosniff');
});

test('Range by RFC 9110: one range 206, what cannot be served ignored (200), past the end 416', async () => {
  const p = server.port;
  const range = (h, extra = {}) => get(p, '/models/m.gguf', { headers: { Range: h, ...extra } });
  const part = async (h, start, end) => {
    const r = await range(h);
    assert.equal(r.status, 206, h);
    assert.equal(r.headers['content-range'], `bytes ${start}-${end}/${SIZE}`, h);
    assert.deepEqual(r.body, model.subarray(start, end + 1), h);
  };
  await part('bytes=0-9', 0, 9);
  await part('bytes=990-', 990, 999);
  await part('bytes=-10', 990, 999);
  await part('bytes=-5000', 0, 999);
  await part('bytes=10-99999999999999999999999999', 10, 999);
  await part('Bytes=3-4', 3, 4);
  await part('bytes=3-4,', 3, 4);
  for (const h of ['bytes=0-1,5-6', 'bytes=0-0, 2-3', 'bytes=x', 'bytes=5-2', 'items=0-1', 'bytes=-', 'bytes =0-1', 'bytes=1-2-3', '']) {
    const r = await range(h);
    assert.equal(r.status, 200, JSON.stringify(h));
    assert.deepEqual(r.body, model, h);
  }
  for (const h of ['bytes=1000-', 'bytes=99999999999999999999999999-', 'bytes=-0']) {
    const r = await range(h);
    assert.equal(r.status, 416, h);
    assert.equal(r.headers['content-range'], `bytes */${SIZE}`, h);
  }
  const etag = (await get(p, '/models/m.gguf', { method: 'HEAD' })).headers.etag;
  assert.equal((await range('bytes=10-', { 'If-Range': etag })).status, 206);
  assert.equal((await range('bytes=10-', { 'If-Range': '"stale"' })).status, 200);
  const head = await get(p, '/models/m.gguf', { method: 'HEAD', headers: { Range: 'bytes=0-9' } });
  assert.equal(head.status, 200);
  assert.equal(head.headers['content-length'], String(SIZE));
});

test('parseRange', () => {
  assert.equal(parseRange(undefined, 10), null);
  assert.deepEqual(parseRange('bytes=2-', 10), { start: 2, end: 9 });
  assert.deepEqual(parseRange(' bytes=-3 ', 10), { start: 7, end: 9 });
  assert.equal(parseRange('bytes=0-', 0), 'unsatisfiable');
  assert.equal(parseRange('bytes=-3', 0), null);
  assert.equal(parseRange('bytes=0-1,2-3', 10), null);
  // Exact comparison beyond 2^53: last < first, so invalid and ignored (not 416).
  assert.equal(parseRange('bytes=100000000000000000000000001-100000000000000000000000000', 10), null);
});

test('the request log: only with --test-log, and bounded', async () => {
  const s = await start(['--test-log']);
  try {
    for (let i = 0; i < 3; i++) await get(s.port, '/models/m.gguf', { headers: i ? { Range: `bytes=${i}-` } : {} });
    let log = JSON.parse((await get(s.port, '/__wick/requests')).body);
    assert.equal(log['/models/m.gguf'], 3);
    assert.deepEqual(log.ranges['/models/m.gguf'], ['bytes=1-', 'bytes=2-']);
    await Promise.all(Array.from({ length: 1100 }, (_, i) => get(s.port, `/www/nope-${i}`)));
    log = JSON.parse((await get(s.port, '/__wick/requests')).body);
    assert.ok(Object.keys(log).length <= 1001, `${Object.keys(log).length} keys`);
    assert.equal(log['/www/nope-1099'], 1);
    assert.equal(log['/www/nope-0'], undefined, 'the oldest paths are forgotten');
  } finally {
    s.stop();
  }
  const small = new RequestLog({ paths: 2, rangesPerPath: 2, chars: 8 });
  for (const r of ['bytes=1-', 'bytes=2-', 'bytes=3-']) small.record('/a', r);
  small.record('/b');
  small.record('/a-very-long-path');
  const json = small.toJSON();
  assert.deepEqual(Object.keys(json), ['/b', '/a-very-', 'ranges']);
  assert.deepEqual(json.ranges, { '/a': ['bytes=2-', 'bytes=3-'] });
});

test('localhost by default; a foreign Host header is refused (DNS rebinding)', async () => {
  assert.match(server.line, /http:\/\/127\.0\.0\.1:\d+\/www\//);
  assert.equal((await get(server.port, '/www/app.js', { headers: { Host: `localhost:${server.port}` } })).status, 200);
  assert.equal((await get(server.port, '/www/app.js', { headers: { Host: 'evil.example' } })).status, 403);
});

test('bad arguments stop it with a message', async () => {
  for (const args of [['--serve-dir', `/.git=${root}`], ['--serve-dir', `/x=${join(tmp, 'missing')}`], ['--serve-dir', `/x=${join(tmp, 'outside.txt')}`], ['--serve-dir', 'x'], ['--bogus'], ['--port', '70000']]) {
    const r = await refused(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.match(r.err, /serve\.mjs: /);
  }
});
