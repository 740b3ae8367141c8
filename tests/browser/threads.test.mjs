// The CPU executor's threads in headless Chromium: a cross-origin isolated page loads the
// threaded build (wick_mt_bg.wasm: shared memory, Web Workers) and `Wick.load` reports every
// core; a page without COOP/COEP, or `threads: 1`, loads the one-thread build; all of them
// write the same greedy tokens, in the package's worker and on the page's main thread.
// Chromium has relaxed SIMD, so each build's relaxed twin (wick_mt_relaxed_bg.wasm,
// wick_relaxed_bg.wasm) is the file fetched, unless `simd: 'simd128'` asks for the other or the
// relaxed file is missing; `info.simd` says which ran.
//
//   node tests/browser/threads.test.mjs   (needs pkg/ and models/SmolLM2-135M-Instruct.Q4_1.gguf,
//   which .ci/get-models downloads; WICK_THREADS_MODEL overrides it)

import { existsSync } from 'node:fs';
import { basename, join } from 'node:path';
import { repo, startServer, launch, echo, check } from './harness.mjs';

const file = process.env.WICK_THREADS_MODEL || join(repo, 'models/SmolLM2-135M-Instruct.Q4_1.gguf');
if (!existsSync(file)) throw new Error(`threads.test: ${file} is missing (run .ci/get-models)`);
const server = await startServer({ '/threads-model': join(file, '..') });
const url = `/threads-model/${basename(file)}`;
const browser = await launch();

/** Load the model in a fresh page (isolated or not), generate greedily, report what ran. */
async function run({ isolated, worker, threads, simd, noThreadScript = false, noRelaxed = false }) {
  const page = await browser.context.newPage();
  echo(page, `threads isolated=${isolated} worker=${worker} threads=${threads} simd=${simd}`);
  const warnings = [];
  page.on('console', (m) => m.type() === 'warning' && warnings.push(m.text()));
  // A thread worker's script that fails to load: the package must fall back to one thread.
  if (noThreadScript) await page.route('**/pkg/thread.js', (route) => route.fulfill({ status: 404, body: 'gone' }));
  // The relaxed files missing (a package built without them): the simd128 ones must load.
  if (noRelaxed) await page.route('**/pkg/wasm/*_relaxed_bg.wasm', (route) => route.fulfill({ status: 404, body: 'gone' }));
  if (!isolated) {
    // The same server without the isolation headers on the page itself: no COOP/COEP, so no
    // SharedArrayBuffer in the page or its workers.
    await page.route('**/blank.html', async (route) => {
      const res = await route.fetch();
      const headers = { ...res.headers() };
      delete headers['cross-origin-opener-policy'];
      delete headers['cross-origin-embedder-policy'];
      await route.fulfill({ response: res, headers });
    });
  }
  await page.goto(`${server.base}/tests/browser/blank.html`);
  const before = await server.requests();
  const out = await page.evaluate(
    async ({ url, worker, threads, simd }) => {
      const { Wick } = await import('/pkg/index.js');
      const model = await Wick.load(url, { worker, executor: 'cpu', cache: false, threads, simd });
      let text = '';
      for await (const piece of model.generate('The three primary colours are', { max_tokens: 40, temperature: 0, stop: [] })) text += piece;
      const r = {
        isolated: globalThis.crossOriginIsolated,
        cores: navigator.hardwareConcurrency,
        threads: model.info.threads,
        simd: model.info.simd,
        executor: model.executor,
        text,
        decode: model.lastStats.decode_tokens_per_s,
        completion: model.lastStats.completionTokens,
      };
      await model.unload();
      return r;
    },
    { url, worker, threads, simd },
  );
  const after = await server.requests();
  const fetched = (name) => (after[`/pkg/wasm/${name}`] || 0) - (before[`/pkg/wasm/${name}`] || 0);
  out.mt = fetched('wick_mt_bg.wasm') + fetched('wick_mt_relaxed_bg.wasm');
  out.st = fetched('wick_bg.wasm') + fetched('wick_relaxed_bg.wasm');
  out.relaxedFiles = fetched('wick_mt_relaxed_bg.wasm') + fetched('wick_relaxed_bg.wasm');
  out.warnings = warnings;
  await page.close();
  console.log(`  ${JSON.stringify({ ...out, text: out.text.slice(0, 60) })}`);
  return out;
}

try {
  const threaded = await run({ isolated: true, worker: true });
  const want = Math.min(threaded.cores, 8);
  check(threaded.isolated === true, 'the test page is cross-origin isolated (COOP/COEP from www/serve.mjs)');
  check(threaded.executor === 'cpu' && threaded.completion === 40, 'the threaded build generated 40 tokens on the CPU executor');
  check(threaded.threads === want, `isolated, in the worker: Wick.load reports ${threaded.threads} threads (every core, at most 8: ${want})`);
  check(want === 1 || threaded.mt > 0, 'isolated: the threaded build (wick_mt_bg.wasm) was fetched');

  const main = await run({ isolated: true, worker: false });
  check(main.threads === want, `isolated, on the main thread: ${main.threads} threads`);
  check(main.text === threaded.text, 'the main thread wrote the same greedy tokens as the worker');

  const plain = await run({ isolated: false, worker: true });
  check(plain.isolated === false, 'without COOP/COEP the page is not cross-origin isolated');
  check(plain.threads === 1, 'not isolated: one thread');
  check(plain.st > 0 && plain.mt === 0, 'not isolated: the one-thread build (wick_bg.wasm) was fetched, not the threaded one');
  check(plain.text === threaded.text, 'the one-thread build wrote the same greedy tokens as the threaded one');

  const one = await run({ isolated: true, worker: true, threads: 1 });
  check(one.threads === 1 && one.mt === 0, 'isolated with threads: 1: the one-thread build');
  check(one.text === threaded.text, 'threads: 1 wrote the same greedy tokens');
  const broken = await run({ isolated: true, worker: false, noThreadScript: true });
  check(broken.threads === 1 && broken.st > 0, 'isolated, thread.js missing: the load falls back to the one-thread build');
  check(broken.warnings.some((w) => /threaded build did not start/.test(w)), 'and says so in a console warning');
  check(broken.text === threaded.text, 'the fallback wrote the same greedy tokens');
  for (const [name, r] of [['threaded', threaded], ['main thread', main], ['one thread', plain], ['threads: 1', one]]) {
    check(r.simd === 'relaxed' && r.relaxedFiles > 0, `${name}: the relaxed-SIMD file ran (info.simd ${r.simd})`);
  }

  // The simd128 builds, asked for: the same greedy tokens (both builds' kernels have the same
  // exact integer lanes and the same float operations: src/quant/simd128.rs).
  const mt128 = await run({ isolated: true, worker: true, simd: 'simd128' });
  check(mt128.simd === 'simd128' && mt128.relaxedFiles === 0 && mt128.mt > 0, "simd: 'simd128': the threaded simd128 file (wick_mt_bg.wasm)");
  check(mt128.threads === want, `simd: 'simd128', isolated: ${mt128.threads} threads`);
  check(mt128.text === threaded.text, 'the simd128 threaded build wrote the same greedy tokens as the relaxed one');
  const st128 = await run({ isolated: false, worker: false, simd: 'simd128' });
  check(st128.simd === 'simd128' && st128.relaxedFiles === 0 && st128.st > 0, "simd: 'simd128', not isolated: wick_bg.wasm");
  check(st128.text === threaded.text, 'the simd128 one-thread build wrote the same greedy tokens');
  const gone = await run({ isolated: true, worker: false, noRelaxed: true });
  check(gone.simd === 'simd128' && gone.threads === want, 'the relaxed files missing: the threaded simd128 build runs');
  check(gone.warnings.some((w) => /relaxed-SIMD build did not load/.test(w)), 'and a console warning says so');
  check(gone.text === threaded.text, 'with the same greedy tokens');
  console.log(
    `  decode tok/s: ${want} threads ${threaded.decode.toFixed(1)} (simd128 ${mt128.decode.toFixed(1)}), ` +
      `one thread ${plain.decode.toFixed(1)} (simd128 ${st128.decode.toFixed(1)})`,
  );
} finally {
  await browser.close();
  server.stop();
}
