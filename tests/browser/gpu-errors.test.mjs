// Failures while loading and running, through the npm package in headless Chromium (WebGPU
// through SwiftShader): each rejects its promise with an Error that says what happened, and the
// same page then loads the model and generates. The GPU failures are forced from the page:
// WebGPU calls are wrapped (before the package loads) so that one buffer asks for more than the
// device allows, one pipeline names an entry point its shader lacks, or the device is
// destroyed, as a smaller GPU, a driver that refuses a shader or a browser's GPU watchdog would.
// (tests/webgpu_errors.rs forces the same natively.)
//
//   node tests/browser/gpu-errors.test.mjs   (needs pkg/ and the test model, as demo.test.mjs)

import { mkdtempSync, openSync, readSync, closeSync, writeFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { modelFile, modelPath, startServer, launch, echo, check } from './harness.mjs';

// Bad files served over HTTP: the model cut short, and a file that is not a GGUF.
const bad = mkdtempSync(join(tmpdir(), 'wick-bad-models-'));
const size = statSync(modelFile).size;
const head = Buffer.alloc(Math.floor(size * 0.6));
const fd = openSync(modelFile, 'r');
readSync(fd, head, 0, head.length, 0);
closeSync(fd);
writeFileSync(join(bad, 'truncated.gguf'), head);
writeFileSync(join(bad, 'header-cut.gguf'), head.subarray(0, 4096));
writeFileSync(join(bad, 'not-gguf.gguf'), Buffer.from('<!doctype html><title>a page, not a model</title>'.repeat(50)));

const server = await startServer({ '/bad-models': bad });
const browser = await launch();
try {
  const page = await browser.context.newPage();
  echo(page, 'gpu-errors');
  // WebGPU hooks, installed before any script of the page runs: every device made is kept in
  // __wickTest.devices (to destroy one), and while __wickTest.bigBuffer (a buffer label) or
  // __wickTest.badPipeline is set, the next such buffer or pipeline is made invalid.
  await page.addInitScript(() => {
    const t = (globalThis.__wickTest = { devices: [], bigBuffer: null, badPipeline: false, forced: [] });
    if (typeof GPUAdapter === 'undefined') return;
    const requestDevice = GPUAdapter.prototype.requestDevice;
    GPUAdapter.prototype.requestDevice = async function (...args) {
      const device = await requestDevice.apply(this, args);
      t.devices.push(device);
      return device;
    };
    const createBuffer = GPUDevice.prototype.createBuffer;
    GPUDevice.prototype.createBuffer = function (desc) {
      if (t.bigBuffer && desc.label === t.bigBuffer) {
        t.forced.push(`buffer ${desc.label}`);
        t.bigBuffer = null;
        // One byte-word past the device's limit: what a model too big for this GPU asks for.
        return createBuffer.call(this, { ...desc, size: this.limits.maxBufferSize + 4 });
      }
      return createBuffer.call(this, desc);
    };
    const createComputePipeline = GPUDevice.prototype.createComputePipeline;
    GPUDevice.prototype.createComputePipeline = function (desc) {
      if (t.badPipeline) {
        t.forced.push(`pipeline ${desc.label}`);
        t.badPipeline = false;
        return createComputePipeline.call(this, { ...desc, compute: { ...desc.compute, entryPoint: 'no_such_entry_point' } });
      }
      return createComputePipeline.call(this, desc);
    };
  });
  await page.goto(`${server.base}/tests/browser/blank.html`);

  // 1. Bad files and a budget the model cannot fit, in the worker (the default) and on the
  // main thread; then the real model in both.
  const files = await page.evaluate(async (url) => {
    const { Wick } = await import('/pkg/index.js');
    const attempt = async (source, opts) => {
      try {
        const m = await Wick.load(source, { executor: 'webgpu', cache: false, ...opts });
        await m.unload();
        return 'loaded';
      } catch (e) {
        return `${e instanceof Error ? 'Error' : typeof e}: ${e.message}`;
      }
    };
    const out = {};
    for (const worker of [true, false]) {
      const w = worker ? 'worker' : 'main';
      out[`truncated ${w}`] = await attempt('/bad-models/truncated.gguf', { worker });
      out[`header-cut ${w}`] = await attempt('/bad-models/header-cut.gguf', { worker });
      out[`not-gguf ${w}`] = await attempt('/bad-models/not-gguf.gguf', { worker });
      out[`budget ${w}`] = await attempt(url, { worker, memoryBudget: 1000 });
      // Blob of the cut file: the same error without HTTP.
      out[`truncated blob ${w}`] = await attempt(await (await fetch('/bad-models/truncated.gguf')).blob(), { worker });
    }
    const after = {};
    for (const worker of [true, false]) {
      const m = await Wick.load(url, { executor: 'webgpu', cache: false, worker });
      let text = '';
      for await (const p of m.generate('Hello', { max_tokens: 5, temperature: 0 })) text += p;
      after[worker ? 'worker' : 'main'] = { executor: m.executor, tokens: m.lastStats.completionTokens, text };
      await m.unload();
    }
    return { out, after };
  }, modelPath);
  for (const [k, v] of Object.entries(files.out)) console.log(`  ${k}: ${v}`);
  for (const w of ['worker', 'main']) {
    check(/^Error: truncated GGUF: .*'output\.weight'.*stream ended/.test(files.out[`truncated ${w}`]), `${w}: a model cut short over fetch rejects with a truncation error naming the tensor`);
    check(/^Error: truncated GGUF/.test(files.out[`truncated blob ${w}`]), `${w}: the same from a Blob`);
    check(/^Error: truncated GGUF/.test(files.out[`header-cut ${w}`]), `${w}: a header cut short rejects as truncated`);
    check(/^Error: .*(magic|not a GGUF)/i.test(files.out[`not-gguf ${w}`]), `${w}: a file that is not a GGUF rejects clearly`);
    check(/^Error: .*does not fit.*memory budget/.test(files.out[`budget ${w}`]), `${w}: a memory budget the model cannot fit rejects before loading it`);
    const a = files.after[w];
    check(a.executor === 'webgpu' && a.tokens === 5, `${w}: afterwards the page loads the model on WebGPU and generates 5 tokens (${JSON.stringify(a.text)})`);
  }

  // 2. GPU failures, on the main thread (where the hooks are): at load, at run time, in a
  // pipeline, and a context beyond the memory budget. The model or the page stays usable.
  const gpu = await page.evaluate(async (url) => {
    const { Wick } = await import('/pkg/index.js');
    const t = globalThis.__wickTest;
    const gen = async (m, opts = {}) => {
      try {
        let text = '';
        for await (const p of m.generate('Hello', { max_tokens: 4, temperature: 0, ...opts })) text += p;
        return { ok: m.lastStats.completionTokens, text };
      } catch (e) {
        return { error: `${e instanceof Error ? 'Error' : typeof e}: ${e.message}` };
      }
    };
    const load = async (opts = {}) => {
      try {
        return await Wick.load(url, { executor: 'webgpu', cache: false, worker: false, ...opts });
      } catch (e) {
        return { error: `${e instanceof Error ? 'Error' : typeof e}: ${e.message}` };
      }
    };
    const r = {};
    // A weight larger than the device allows: the load itself rejects.
    t.bigBuffer = 'token_embd.weight';
    const refused = await load();
    r.weightLoad = refused.error || 'loaded';
    if (!refused.error) await refused.unload();
    const m = await load();
    r.afterWeight = await gen(m);
    // A KV cache the device refuses: that generation rejects, the next one works.
    t.bigBuffer = 'kv';
    r.kv = await gen(m, { nCtx: 512 });
    r.afterKv = await gen(m, { nCtx: 512 });
    await m.unload();
    // A pipeline that fails to compile (on a fresh model: pipelines are made at its first
    // generation and kept).
    const p = await load();
    t.badPipeline = true;
    r.pipeline = await gen(p);
    r.afterPipeline = await gen(p);
    await p.unload();
    // A context whose KV cache and scratch exceed the caller's memory budget.
    const small = await load({ memoryBudget: 1.2 * (1 << 20) });
    r.budgetCtx = small.info.nCtx;
    r.bigCtx = await gen(small, { nCtx: 2048 });
    r.smallCtx = await gen(small, { nCtx: 256 });
    await small.unload();
    r.forced = t.forced;
    return r;
  }, modelPath);
  console.log(`  ${JSON.stringify(gpu, null, 1).replace(/\n/g, '\n  ')}`);
  check(gpu.forced.includes('buffer token_embd.weight') && gpu.forced.includes('buffer kv') && gpu.forced.some((f) => f.startsWith('pipeline ')), 'each GPU failure was forced');
  check(/^Error: webgpu executor: .*token_embd\.weight.*exceeds the max buffer size/s.test(gpu.weightLoad), 'a weight beyond the device\'s buffer limit rejects the load, naming the weight');
  check(gpu.afterWeight.ok === 4, 'then the same page loads the model and generates');
  check(/^Error: webgpu executor: allocating a KV cache layer .* failed: .*exceeds the max buffer size/s.test(gpu.kv.error || ''), 'a KV cache the device refuses rejects that generation, saying so');
  check(gpu.afterKv.ok === 4, 'and the next generation of the same model works');
  check(/^Error: webgpu executor: compiling kernel \w+ failed/.test(gpu.pipeline.error || ''), 'a pipeline that fails to compile rejects that generation, naming the kernel');
  check(gpu.afterPipeline.ok === 4, 'and the next generation of the same model works');
  check(/^Error: .*context of 2048 tokens does not fit.*memory budget/.test(gpu.bigCtx.error || ''), `a context beyond the memory budget rejects (the default is ${gpu.budgetCtx})`);
  check(gpu.smallCtx.ok === 4, 'and a smaller context of the same model works');

  // 3. The device lost mid-session (a browser's watchdog, a driver reset): every later call
  // rejects and says to load again; a new load gets a new device and works.
  const lost = await page.evaluate(async (url) => {
    const { Wick } = await import('/pkg/index.js');
    const t = globalThis.__wickTest;
    const gen = async (m) => {
      try {
        let text = '';
        for await (const p of m.generate('Hello', { max_tokens: 4, temperature: 0 })) text += p;
        return { ok: m.lastStats.completionTokens };
      } catch (e) {
        return { error: `${e instanceof Error ? 'Error' : typeof e}: ${e.message}` };
      }
    };
    const m = await Wick.load(url, { executor: 'webgpu', cache: false, worker: false });
    const before = await gen(m);
    const devices = t.devices.length;
    t.devices[devices - 1].destroy();
    const first = await gen(m);
    const second = await gen(m);
    let chat = null;
    try {
      await m.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });
    } catch (e) {
      chat = e.message;
    }
    await m.unload();
    const fresh = await Wick.load(url, { executor: 'webgpu', cache: false, worker: false });
    const again = await gen(fresh);
    await fresh.unload();
    return { before, first, second, chat, again, newDevice: t.devices.length > devices };
  }, modelPath);
  console.log(`  ${JSON.stringify(lost)}`);
  check(lost.before.ok === 4, 'a model generates before its device is lost');
  const lostMsg = /^Error: webgpu executor: the device was lost \(Destroyed.*\); load the model again$/;
  check(lostMsg.test(lost.first.error || ''), `after device.destroy() the next generation rejects: ${lost.first.error}`);
  check(lostMsg.test(lost.second.error || ''), 'and so does the one after');
  check(/device was lost/.test(lost.chat || ''), 'and a chat completion');
  check(lost.newDevice && lost.again.ok === 4, 'a new load gets a new device and generates');
  console.log('gpu-errors: all passed');
} finally {
  await browser.close();
  server.stop();
  rmSync(bad, { recursive: true, force: true });
}
