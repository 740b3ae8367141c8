// A model larger than 4 GB (beyond a 32-bit wasm heap) in a tab: served over HTTP, streamed
// into WebGPU buffers (SwiftShader here) with the wasm heap staying small, and generating the
// same greedy tokens as the native CPU executor.
//
// The file (made by .ci/web-tests with `wick synth`, 5.4 GB): the Llama 3 8B shape cut to 2
// layers, Gemma 3's vocabulary of 262,144 tokens, and an F32 token embedding of exactly 4 GiB.
// So every tensor after the embedding lies past byte 2^32 of the file, and the embedding is four
// times the adapter's largest buffer: it is split across buffers, and the prompt takes rows
// from every quarter of it. A decoded token reads about 1.1 GB (a generated token reads one
// row of the embedding), so SwiftShader generates a few tokens in about a minute.
//
//   node tests/browser/big-model.test.mjs   (needs pkg/, target/release/wick and the file:
//   $WICK_BIG_MODEL, default target/web-test/big.gguf)

import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { repo, startServer, launch, echo, check } from './harness.mjs';

const file = process.env.WICK_BIG_MODEL || join(repo, 'target/web-test/big.gguf');
const wick = join(repo, 'target/release/wick');
const url = `/big-model/${basename(file)}`;
// Text in four scripts: its tokens come from every quarter of the vocabulary.
const prompt = 'Hello こんにちは 你好吗 नमस्ते';
const nGen = 3;
const GiB = 2 ** 30;
const MiB = 2 ** 20;

const size = statSync(file).size;
check(size > 4 * GiB, `the file is larger than 4 GiB (${(size / GiB).toFixed(2)} GiB)`);

// The reference: the native CPU executor's greedy tokens, and the prompt's ids.
const ids = JSON.parse(execFileSync(wick, ['tokenize', '-m', file, '--json', prompt], { encoding: 'utf8' })).ids;
const reference = execFileSync(wick, ['generate', '-m', file, '--executor', 'cpu', '-p', prompt, '-n', String(nGen), '--temp', '0', '--json'], {
  encoding: 'utf8',
  stdio: ['ignore', 'pipe', 'ignore'],
})
  .split('\n')
  .filter((l) => l.startsWith('{'))
  .map((l) => JSON.parse(l));
check(reference.length === nGen, `the CPU executor generated ${nGen} tokens (${JSON.stringify(reference.map((t) => t.id))})`);

const server = await startServer({ '/big-model': dirname(file) });
const browser = await launch();
try {
  const page = await browser.context.newPage();
  echo(page, 'big-model');
  page.setDefaultTimeout(0);
  await page.goto(`${server.base}/tests/browser/blank.html`);
  const r = await page.evaluate(
    async ({ url, prompt, nGen }) => {
      const { Wick } = await import('/pkg/index.js');
      const adapter = await navigator.gpu.requestAdapter();
      const maxBinding = Math.min(adapter.limits.maxStorageBufferBindingSize, adapter.limits.maxBufferSize);
      const inspected = await Wick.inspect(url, { executor: 'webgpu', nCtx: 64 });
      const t0 = performance.now();
      let first = null;
      let last = null;
      const model = await Wick.load(url, {
        executor: 'webgpu',
        cache: false,
        onProgress: (p) => {
          if (p.phase !== 'load') return;
          first ??= p;
          last = p;
        },
      });
      const loadMs = performance.now() - t0;
      let text = '';
      for await (const piece of model.generate(prompt, { max_tokens: nGen, temperature: 0, nCtx: 64, ignore_eos: true })) text += piece;
      const stats = model.lastStats;
      const executor = model.executor;
      const nVocab = model.info.nVocab;
      await model.unload();
      return { maxBinding, inspected, loadMs, first, last, text, stats, executor, nVocab };
    },
    { url, prompt, nGen },
  );
  const { inspected: ins, first, last, stats } = r;
  console.log(`  adapter binding limit ${(r.maxBinding / MiB).toFixed(0)} MiB; inspect read ${ins.bytesRead} bytes, fits ${ins.fits}`);
  console.log(`  load ${(r.loadMs / 1e3).toFixed(1)} s (${(size / 1e6 / (r.loadMs / 1e3)).toFixed(0)} MB/s); wasm heap ${(first.heapBytes / MiB).toFixed(1)} MiB at the first weight, ${(last.heapBytes / MiB).toFixed(1)} MiB at the end`);
  console.log(`  prefill ${ids.length} tokens ${(stats.prefillMs / 1e3).toFixed(1)} s, ${stats.completionTokens} tokens, decode ${(stats.decodeMs / 1e3).toFixed(1)} s; heap after generating ${(stats.heapBytes / MiB).toFixed(1)} MiB`);

  // The file's layout: past 4 GiB, an embedding split across buffers, read from every part.
  const embedding = r.nVocab * 4096 * 4;
  check(embedding === 4 * GiB && embedding > 3 * r.maxBinding, `the 4 GiB embedding needs at least four of the adapter's ${(r.maxBinding / MiB).toFixed(0)} MiB buffers`);
  const quarters = new Set(ids.map((id) => Math.floor((4 * id) / r.nVocab)));
  check(quarters.size === 4, `the prompt's ids ${JSON.stringify(ids)} come from every quarter of the ${r.nVocab} rows`);

  // The fit check, before any download: a few MB of header.
  check(ins.fits && ins.executor === 'webgpu' && ins.memory.weights > 4 * GiB, `Wick.inspect: the ${(ins.memory.weights / GiB).toFixed(2)} GiB of weights fit this adapter at context 64`);
  check(ins.bytesRead <= 4 * ins.headerBytes && ins.bytesRead < size / 100, `Wick.inspect read ${(ins.bytesRead / MiB).toFixed(1)} MiB of the ${(size / GiB).toFixed(1)} GiB file (its header: ${(ins.headerBytes / MiB).toFixed(1)} MiB)`);

  // The stream: every byte through a heap that stays small.
  check(r.executor === 'webgpu', 'the model ran on WebGPU');
  check(last.loaded === size && last.total === size, `the load streamed all ${size} bytes`);
  check(last.heapBytes - first.heapBytes < 64 * MiB, `the wasm heap grew by less than 64 MiB while 5 GB streamed through it (${((last.heapBytes - first.heapBytes) / MiB).toFixed(1)} MiB)`);
  check(stats.heapBytes < 256 * MiB, `the wasm heap stayed under 256 MiB through the load and generation (${(stats.heapBytes / MiB).toFixed(1)} MiB)`);

  // The tokens: the same as the CPU executor's, so every part was uploaded where it belongs.
  const want = reference.map((t) => t.text).join('');
  check(stats.completionTokens === nGen && r.text === want, `WebGPU generated the CPU executor's ${nGen} greedy tokens (${JSON.stringify(r.text)})`);
} finally {
  await browser.close();
  server.stop();
}
