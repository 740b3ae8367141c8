// The bench page (www/bench.html) on the CPU executor in headless Chromium: prefill and decode
// tokens/s of one or more builds of the package, alternated in one sitting (each build served
// at /pkg from its own folder). Not a test (no .test.mjs): a measurement for benches/RESULTS.md.
//
//   WICK_TEST_MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf \
//     node tests/browser/bench-cpu.mjs [--prompt 64] [--gen 32] [--runs 3] [--rounds 2] [--threads 1,2]
//       [--simd relaxed,simd128] PKG_DIR...
//   (PKG_DIR: a folder pkg-config/build.sh wrote, e.g. pkg/; needs tests/browser's npm packages)

import { resolve } from 'node:path';
import { modelPath, startServer, launch, echo } from './harness.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  if (i < 0) return dflt;
  const v = Number(args[i + 1]);
  args.splice(i, 2);
  return v;
};
const [nPrompt, nGen, runs, rounds] = [opt('prompt', 64), opt('gen', 32), opt('runs', 3), opt('rounds', 2)];
// --threads 1,2: each build at each thread count (the CPU executor's threads; default: the
// package's default, every core on this cross-origin isolated page).
const ti = args.indexOf('--threads');
const threadCounts = ti < 0 ? [undefined] : args.splice(ti, 2)[1].split(',').map(Number);
// --simd relaxed,simd128: each build with each wasm SIMD build (default: the package's choice).
const si = args.indexOf('--simd');
const simds = si < 0 ? [undefined] : args.splice(si, 2)[1].split(',');
const pkgs = args.length ? args : ['pkg'];

const browser = await launch();
const configs = pkgs.flatMap((pkg) =>
  threadCounts.flatMap((threads) =>
    simds.map((simd) => ({ pkg, threads, simd, label: `${pkg}${threads ? ` threads=${threads}` : ''}${simd ? ` ${simd}` : ''}` })),
  ),
);
const all = Object.fromEntries(configs.map((c) => [c.label, []]));
let ua = '';
try {
  for (let round = 0; round < rounds; round++) {
    for (const { pkg, threads, simd, label } of configs) {
      const server = await startServer({ '/pkg': resolve(pkg) });
      try {
        const page = await browser.context.newPage();
        echo(page, label);
        const url = `${server.base}/www/bench.html?executor=cpu&autoload=1${threads ? `&threads=${threads}` : ''}${simd ? `&simd=${simd}` : ''}&model=${encodeURIComponent(modelPath)}`;
        await page.goto(url);
        await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 300_000 });
        await page.fill('#n-prompt', String(nPrompt));
        await page.fill('#n-gen', String(nGen));
        await page.fill('#runs', String(runs));
        await page.click('#run');
        await page.waitForFunction(() => window.wickBench.done, null, { timeout: 1_200_000 });
        const res = await page.evaluate(() => window.wickBench.results);
        ua = await page.evaluate(() => navigator.userAgent);
        const summary = await page.textContent('#summary');
        console.log(`${label} (round ${round + 1}): ${summary}`);
        for (const r of res) all[label].push(r);
        await page.close();
      } finally {
        server.stop();
      }
    }
  }
} finally {
  await browser.close();
}
const stat = (v) => {
  const m = v.reduce((a, b) => a + b, 0) / v.length;
  const sd = Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / Math.max(v.length - 1, 1));
  return `${m.toFixed(2)} ± ${sd.toFixed(2)}`;
};
console.log(`${ua}; pp${nPrompt} / tg${nGen}, ${runs} runs x ${rounds} rounds`);
for (const [label, rs] of Object.entries(all)) {
  const pp = rs.map((r) => r.prefill_tokens_per_s);
  const tg = rs.map((r) => r.decode_tokens_per_s);
  console.log(`${label}: prefill ${stat(pp)} tok/s (prompt ${rs[0]?.promptEvaluated}), decode ${stat(tg)} tok/s`);
}
