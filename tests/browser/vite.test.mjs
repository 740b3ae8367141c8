// wick-llm in a Vite app: `vite build` must bundle the worker and the wasm (found through
// `new URL(..., import.meta.url)`), and the bundle must generate in the worker and on the
// main thread.
//
//   node tests/browser/vite.test.mjs   (needs pkg/ and the test model, as demo.test.mjs)

import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'vite';
import { repo, modelPath, startServer, launch, echo, check } from './harness.mjs';

const dist = join(repo, 'target/web-test/vite-dist');

await build({ configFile: join(repo, 'tests/browser/vite/vite.config.mjs') });
const assets = readdirSync(join(dist, 'assets'));
console.log(`  bundle: ${assets.join(', ')}`);
check(assets.some((f) => /^worker-.*\.js$/.test(f)), 'vite bundled the worker');
check(assets.some((f) => /^wick_bg-.*\.wasm$/.test(f)), 'vite emitted the wasm');
check(assets.some((f) => /^wick_mt_bg-.*\.wasm$/.test(f)) && assets.some((f) => /^thread-.*\.js$/.test(f)), 'vite emitted the threaded build and its thread worker');
check(
  assets.some((f) => /^wick_relaxed_bg-.*\.wasm$/.test(f)) && assets.some((f) => /^wick_mt_relaxed_bg-.*\.wasm$/.test(f)),
  'vite emitted both builds\' relaxed-SIMD wasm',
);

// The bundle is built for /vite/ (vite.config.mjs's base), where the server mounts it.
const server = await startServer({ '/vite': dist });
const browser = await launch();
try {
  const page = await browser.context.newPage();
  echo(page, 'vite');
  await page.goto(`${server.base}/vite/index.html`);
  for (const worker of [true, false]) {
    const r = await page.evaluate(({ url, worker }) => window.generate(url, worker), { url: modelPath, worker });
    // The default executor (auto) takes the CPU over the test browser's only adapter,
    // SwiftShader (a software one, slower than the CPU executor).
    check(r.executor === 'cpu' && r.text.length > 0, `the bundle generates ${worker ? 'in the worker' : 'on the main thread'} on the CPU: ${JSON.stringify(r.text)}`);
    // The page is cross-origin isolated (www/serve.mjs), so the bundled threaded build runs.
    check(r.threads === Math.min(r.cores, 8), `on ${r.threads} threads (the bundled thread workers started)`);
  }
  console.log('vite test: all passed');
} finally {
  await browser.close();
  server.stop();
}
