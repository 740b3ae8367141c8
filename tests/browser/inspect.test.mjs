// Wick.inspect(url): a model's memory and whether it fits, from its header alone, fetched
// with Range requests. The figures must be the Rust estimator's (`wick info --ctx N
// --executor cpu` prints the same weights, KV cache and scratch), and far fewer bytes than
// the file must have been read.
//
//   node tests/browser/inspect.test.mjs   (needs pkg/, the test model and target/release/wick;
//   also inspects $WICK_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf where present)

import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { modelFile, modelPath, repo, startServer, launch, echo, check } from './harness.mjs';

const smol = join(process.env.WICK_MODELS || join(repo, 'models'), 'SmolLM2-135M-Instruct.Q4_1.gguf');
const extra = existsSync(smol) ? { '/fit-models': dirname(smol) } : {};
const server = await startServer(extra);
const browser = await launch();

/** `wick info`'s figures at a context, in MiB: { total, weights, kv, scratch }. */
function nativeFigures(file, nCtx) {
  const out = execFileSync(join(repo, 'target/release/wick'), ['info', '-m', file, '--ctx', String(nCtx), '--executor', 'cpu'], { encoding: 'utf8' });
  const m = new RegExp(`context ${nCtx} \\(the context asked for\\): ([\\d.]+) MiB = weights ([\\d.]+) MiB \\+ KV cache ([\\d.]+) MiB \\+ scratch ([\\d.]+) MiB`).exec(out);
  if (!m) throw new Error(`no memory line for context ${nCtx} in wick info's output:\n${out}`);
  return { total: +m[1], weights: +m[2], kv: +m[3], scratch: +m[4] };
}

try {
  const page = await browser.context.newPage();
  echo(page, 'inspect');
  await page.goto(`${server.base}/tests/browser/blank.html`);
  const cases = [[modelFile, modelPath]];
  if (existsSync(smol)) cases.push([smol, '/fit-models/SmolLM2-135M-Instruct.Q4_1.gguf']);
  for (const [file, path] of cases) {
    const size = statSync(file).size;
    const r = await page.evaluate(async (url) => {
      const { Wick } = await import('/pkg/index.js');
      const asked = await Wick.inspect(url, { executor: 'cpu', nCtx: 1024 });
      const byDefault = await Wick.inspect(url, { executor: 'cpu' });
      // A budget of exactly the KV cache and scratch at 1024: the default context is 1024.
      const small = await Wick.inspect(url, { executor: 'cpu', memoryBudget: asked.memory.kv + asked.memory.scratch });
      return { asked, byDefault, small };
    }, path);
    const a = r.asked;
    console.log(`  ${path}: ${a.architecture}, ${a.parameters} parameters, context ${a.contextLength}; at ${a.nCtx}: ` +
      `${JSON.stringify(a.memory)} fits ${a.fits}; default context ${r.byDefault.nCtx} (${r.byDefault.budget.source}); ` +
      `read ${a.bytesRead} of ${size} bytes (header ${a.headerBytes})`);
    const mib = (b) => b / (1 << 20);
    const want = nativeFigures(file, 1024);
    for (const k of ['weights', 'kv', 'scratch', 'total']) {
      check(Math.abs(mib(a.memory[k]) - want[k]) <= 0.051, `${path}: ${k} ${mib(a.memory[k]).toFixed(2)} MiB equals wick info's ${want[k]} MiB`);
    }
    check(a.nCtx === 1024 && a.fits === true && a.problem === null, `${path}: context 1024 fits a wasm heap`);
    check(a.fileSize === size && a.bytesRead < size, `${path}: read ${a.bytesRead} bytes, less than the file's ${size}`);
    check(a.bytesRead <= Math.max(4 * a.headerBytes, 1 << 20), `${path}: read at most 4x the header (${a.headerBytes} bytes)`);
    check(r.byDefault.nCtx === a.contextLength && r.byDefault.fits, `${path}: the default context is the model's own where it fits`);
    check(r.small.nCtx === 1024 && r.small.fits, `${path}: a budget of the KV and scratch at 1024 makes 1024 the default context (${r.small.nCtx})`);
    // A server that ignores Range sends the whole file: the download stops once the header parses.
    const w = await page.evaluate(async (url) => {
      const { Wick } = await import('/pkg/index.js');
      let pulled = 0;
      let cancelled = false;
      const noRange = async (u, init) => {
        const res = await fetch(u, { signal: init?.signal });
        const reader = res.body.getReader();
        const body = new ReadableStream({
          async pull(c) {
            const { done, value } = await reader.read();
            if (done) return c.close();
            pulled += value.length;
            c.enqueue(value);
          },
          cancel(why) {
            cancelled = true;
            return reader.cancel(why);
          },
        }, { highWaterMark: 0 });
        return new Response(body, { status: 200, headers: res.headers });
      };
      const r = await Wick.inspect(url, { executor: 'cpu', nCtx: 1024, fetch: noRange });
      return { memory: r.memory, bytesRead: r.bytesRead, fileSize: r.fileSize, pulled, cancelled };
    }, path);
    check(JSON.stringify(w.memory) === JSON.stringify(a.memory), `${path}: without Range, the same figures`);
    check(w.fileSize === size, `${path}: without Range, the file's size from Content-Length (${w.fileSize})`);
    check(w.cancelled && w.pulled < size && w.pulled <= 4 * a.headerBytes + (1 << 20),
      `${path}: without Range, the download stopped after ${w.pulled} of ${size} bytes (header ${a.headerBytes})`);
  }
  // A URL that is not a GGUF file is an error, not a hang.
  const bad = await page.evaluate(async () => {
    const { Wick } = await import('/pkg/index.js');
    try {
      await Wick.inspect('/tests/browser/blank.html');
      return 'no error';
    } catch (e) {
      return String(e.message || e);
    }
  });
  check(bad !== 'no error', `a page that is not a GGUF file is an error (${bad})`);
  console.log('inspect: ok');
} finally {
  await browser.close();
  server.stop();
}
