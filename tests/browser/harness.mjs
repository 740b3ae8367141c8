// Shared pieces of the browser tests: the demo server and headless Chromium with WebGPU
// (SwiftShader), as /work/shared/PLATFORM.md describes.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const repo = fileURLToPath(new URL('../..', import.meta.url));

/** The model the tests load: $WICK_TEST_MODEL, else target/web-test/tiny.gguf (which
 *  .ci/web-tests makes). */
export const modelFile = resolvePath(process.env.WICK_TEST_MODEL || join(repo, 'target/web-test/tiny.gguf'));

/** The model's URL path on the test server, which serves the model's folder at /test-model/. */
export const modelPath = `/test-model/${basename(modelFile)}`;

/** Start www/serve.mjs on a free port with its request log on (--test-log). Besides what it
 *  serves to anyone (the repository's www/, pkg/ and models/) it serves, through --serve-dir,
 *  the test pages at /tests/browser/, the test model's folder at /test-model/ and `extra`
 *  ({ '/prefix': folder }). Resolves to { base, stop, requests() }. */
export function startServer(extra = {}) {
  const dirs = { '/tests/browser': join(repo, 'tests/browser'), '/test-model': dirname(modelFile), ...extra };
  return new Promise((resolve, reject) => {
    const args = [join(repo, 'www/serve.mjs'), '--port', '0', '--root', repo, '--test-log'];
    for (const [prefix, dir] of Object.entries(dirs)) args.push('--serve-dir', `${prefix}=${dir}`);
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`serve.mjs exited with ${code}: ${out}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /http:\/\/([\d.]+:\d+)\//.exec(out);
      if (m) {
        const base = `http://${m[1]}`;
        resolve({
          base,
          stop: () => child.kill(),
          requests: async () => (await fetch(`${base}/__wick/requests`)).json(),
        });
      }
    });
  });
}

/** Headless Chromium with a fresh profile (OPFS persists across its pages). */
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'wick-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--enable-unsafe-webgpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
    ],
    viewport: { width: 1000, height: 900 },
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Log the page's console and errors, prefixed (useful when a test fails in CI). */
export function echo(page, tag) {
  page.on('console', (m) => console.log(`  [${tag} console.${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => console.log(`  [${tag} pageerror] ${e.message}`));
}

export function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
  console.log(`ok - ${msg}`);
}
