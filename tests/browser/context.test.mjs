// Context shift through the npm package in Node (node:test, CPU executor, no browser): a
// generation that runs past a small context ends there without `context_shift`, and goes on
// to `max_tokens` with it (the prompt kept, the older half of the generated text dropped);
// a wrong value is the caller's error. Needs the built package (WICK_PKG, default pkg/) and
// the model (WICK_TEST_MODEL).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(fileURLToPath(new URL('.', import.meta.url)), '../..');
const pkg = resolve(process.env.WICK_PKG || resolve(root, 'pkg'));
const modelPath = process.env.WICK_TEST_MODEL || resolve(root, 'target/web-test/tiny.gguf');
const wasm = readFileSync(resolve(pkg, 'wasm/wick_bg.wasm'));
const { default: Wick, BadRequestError } = await import(pathToFileURL(resolve(pkg, 'index.js')).href);
await Wick.init(wasm);

/** Greedy generation of up to 200 tokens in a 64-token context; the stats. */
async function run(model, extra) {
  const opts = { nCtx: 64, max_tokens: 200, ignore_eos: true, temperature: 0, ...extra };
  const it = model.generate('The lighthouse keeper', opts);
  let r;
  while (!(r = await it.next()).done);
  return r.value;
}

test('context_shift carries a generation past a full context', async () => {
  const bytes = readFileSync(modelPath);
  const model = await Wick.load(new Blob([bytes]), { worker: false, cache: false, executor: 'cpu', wasmUrl: wasm });
  try {
    const plain = await run(model, {});
    assert.equal(plain.finishReason, 'length');
    assert.ok(plain.completionTokens < 64, `without a shift the context ends it (${plain.completionTokens} tokens)`);
    const shifted = await run(model, { context_shift: true });
    assert.equal(shifted.completionTokens, 200);
    assert.equal(shifted.finishReason, 'length');
    const kept = await run(model, { context_shift: 2 });
    assert.equal(kept.completionTokens, 200);
    await assert.rejects(run(model, { context_shift: 'yes' }), /option 'context_shift' must be a boolean or a non-negative integer/);
    const chat = { messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, context_shift: -1 };
    await assert.rejects(model.chat.completions.create(chat), (e) => e instanceof BadRequestError && /context_shift/.test(e.message));
  } finally {
    await model.unload();
  }
});
