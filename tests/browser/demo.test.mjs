// End to end: the www chat demo in headless Chromium (WebGPU through SwiftShader) loads a
// small model from the local server with a moving progress bar, streams a reply, stops a
// long one, keeps the conversation across a reload (its KV cache restored from OPFS), and
// loads the same model a second time from OPFS without downloading it again.
//
//   node tests/browser/demo.test.mjs   (needs pkg/ built and $WICK_TEST_MODEL or
//                                       target/web-test/tiny.gguf; see .ci/web-tests)

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { repo, modelPath, startServer, launch, echo, check } from './harness.mjs';

const shots = join(repo, 'target/web-test');

/** Send `prompt` on the demo `page` with at most `maxTokens`, and wait for its `n`th reply. */
async function ask(page, prompt, maxTokens, n) {
  await page.fill('#max-tokens', String(maxTokens));
  await page.fill('#prompt', prompt);
  await page.click('#send');
  await page.waitForFunction((k) => window.wickDemo.replies.length === k, n, { timeout: 120_000 });
  return (await page.evaluate(() => window.wickDemo.replies))[n - 1];
}
mkdirSync(shots, { recursive: true });

const server = await startServer();
const browser = await launch();
try {
  const page = await browser.context.newPage();
  echo(page, 'chat');
  await page.goto(`${server.base}/www/?executor=webgpu&model=${encodeURIComponent(modelPath)}`);
  check(await page.evaluate(() => !!navigator.gpu), 'the page has WebGPU (SwiftShader)');

  // 1. Load: the progress bar moves, the model arrives.
  await page.click('#load');
  await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 120_000 });
  const progress = await page.evaluate(() => window.wickDemo.state.progress);
  const downloads = progress.filter((p) => p.phase === 'download');
  const loads = progress.filter((p) => p.phase === 'load');
  console.log(`  progress: ${downloads.length} download and ${loads.length} load reports`);
  check(downloads.length >= 3 && loads.length >= 3, 'the progress bar got several download and load reports');
  const increasing = (xs) => xs.every((p, i) => i === 0 || p.loaded >= xs[i - 1].loaded);
  check(increasing(downloads) && increasing(loads), 'progress only moves forward');
  const last = loads[loads.length - 1];
  check(last.total > 0 && last.loaded === last.total, `the load reached its total (${last.total} bytes)`);
  check((await page.$eval('#progress', (b) => b.value)) > 0, 'the <progress> bar has a value');
  const status = await page.textContent('#load-status');
  console.log(`  status: ${status}`);
  check(/on webgpu/.test(status), 'the model runs on WebGPU');
  check(await page.$eval('#webgpu-note', (n) => n.hidden), 'no CPU-fallback note with WebGPU');

  // 2. A reply streams in.
  const first = await ask(page, 'Hello! Who are you?', 24, 1);
  console.log(`  reply: ${first.pieces} pieces, ${JSON.stringify(first.text.slice(0, 80))}`);
  check(first.outcome === 'done' && first.pieces >= 2 && first.text.length > 0, 'a reply streamed in, piece by piece');
  const stats = await page.textContent('#stats');
  console.log(`  stats: ${stats}`);
  check(/decode [\d.]+ tokens\/s/.test(stats), 'tokens/s are shown');
  // Memory use (the estimator's weights + KV + scratch) and context fill (tokens / size).
  const memory = await page.textContent('#memory');
  console.log(`  memory: ${memory}`);
  const fill = /memory \d+ MiB \(weights \d+ MiB \+ KV \d+ MiB \+ scratch \d+ MiB\) · context (\d+) \/ (\d+) tokens/.exec(memory);
  check(fill && +fill[1] > 0 && +fill[1] <= +fill[2], 'memory use and context fill are shown');

  // 3. Stop: a long generation ends early when the stop button is clicked.
  await page.fill('#max-tokens', '3000');
  await page.fill('#prompt', 'Tell me a very long story.');
  await page.click('#send');
  await page.waitForFunction(() => (document.querySelectorAll('.msg.assistant')[1]?.textContent.length || 0) > 20, null, {
    timeout: 120_000,
  });
  await page.click('#stop');
  await page.waitForFunction(() => window.wickDemo.replies.length === 2, null, { timeout: 30_000 });
  const second = (await page.evaluate(() => window.wickDemo.replies))[1];
  console.log(`  stopped after ${second.pieces} pieces`);
  check(second.outcome === 'stopped' && second.pieces < 3000, 'the stop button ended the generation');
  check(await page.$eval('#stop', (b) => b.disabled), 'the stop button is disabled again');
  const shot = join(shots, 'demo-chat.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);

  // 3b. A reload keeps the conversation: its messages come back, and the next reply (the
  //     model loaded again, from OPFS) restores its KV cache from the prompt cache.
  await page.reload();
  await page.waitForFunction(() => document.querySelectorAll('.msg').length === 4, null, { timeout: 10_000 });
  check(true, 'the conversation is shown again after a reload');
  await page.click('#load');
  await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 120_000 });
  await ask(page, 'And then?', 8, 1);
  const resumed = await page.textContent('#stats');
  console.log(`  after the reload: ${resumed}`);
  check(/\d+ prompt tokens restored from the cache/.test(resumed), 'the next reply restored the conversation from the prompt cache');

  // 4. Second load: from OPFS, no second download (counted at the server).
  const before = (await server.requests())[modelPath] || 0;
  check(before === 1, `the model was downloaded once (${before} request)`);
  const listed = await page.evaluate(async () => (await import('/pkg/index.js')).listCachedModels());
  check(listed.some((m) => m.url.endsWith(modelPath) && m.complete), 'listCachedModels shows the model as complete');
  for (const worker of ['1', '0']) {
    const again = await browser.context.newPage();
    echo(again, `reload worker=${worker}`);
    await again.goto(`${server.base}/www/?executor=webgpu&worker=${worker}&model=${encodeURIComponent(modelPath)}`);
    await again.click('#load');
    await again.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 120_000 });
    const p2 = await again.evaluate(() => window.wickDemo.state.progress);
    check(!p2.some((p) => p.phase === 'download'), `worker=${worker}: the second load reported no download`);
    await again.close();
  }
  const after = (await server.requests())[modelPath] || 0;
  check(after === 1, `no second download: the server saw ${after} request for the model in all`);

  // 5. Delete from the cache: the next load downloads again.
  const deleted = await page.evaluate(async (u) => (await import('/pkg/index.js')).deleteCachedModel(u), modelPath);
  check(deleted === true, 'deleteCachedModel removed the cached copy');
  const rest = await page.evaluate(async () => (await import('/pkg/index.js')).listCachedModels());
  check(!rest.some((m) => m.url.endsWith(modelPath)), 'the model is no longer listed');

  // 6. The bench page reports prefill and decode tokens/s for the loaded model.
  const bench = await browser.context.newPage();
  echo(bench, 'bench');
  await bench.goto(`${server.base}/www/bench.html?executor=webgpu&autoload=1&model=${encodeURIComponent(modelPath)}`);
  await bench.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 120_000 });
  await bench.fill('#n-prompt', '64');
  await bench.fill('#n-gen', '16');
  await bench.fill('#runs', '2');
  await bench.click('#run');
  await bench.waitForFunction(() => window.wickBench.done, null, { timeout: 120_000 });
  const runs = await bench.evaluate(() => window.wickBench.results);
  const summary = await bench.textContent('#summary');
  console.log(`  bench: ${summary}`);
  check(runs.length === 2 && runs.every((r) => r.prefill_tokens_per_s > 0 && r.decode_tokens_per_s > 0 && r.completionTokens === 16), 'the bench page measured prefill and decode twice');
  check(runs.every((r) => r.promptEvaluated >= 60), 'its prompt had about 64 tokens');
  check(/on webgpu: prefill [\d.]+ tokens\/s, decode [\d.]+ tokens\/s/.test(summary), 'the bench page shows both speeds');
  const benchShot = join(shots, 'demo-bench.png');
  await bench.screenshot({ path: benchShot, fullPage: true });
  console.log(`screenshot: ${benchShot}`);

  // 7. Without WebGPU: the note shows and the model runs on the CPU fallback.
  const nogpu = await browser.context.newPage();
  echo(nogpu, 'no-webgpu');
  await nogpu.addInitScript(() => {
    delete Navigator.prototype.gpu;
  });
  await nogpu.goto(`${server.base}/www/?worker=0&autoload=1&model=${encodeURIComponent(modelPath)}`);
  check(await nogpu.$eval('#webgpu-note', (n) => !n.hidden && /CPU/.test(n.textContent)), 'without WebGPU the page shows the CPU-fallback note');
  await nogpu.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 120_000 });
  check(/on cpu/.test(await nogpu.textContent('#load-status')), 'the model loaded on the CPU executor');
  const cpuReply = await ask(nogpu, 'Hi', 8, 1);
  check(cpuReply.outcome === 'done' && cpuReply.text.length > 0, 'the CPU fallback streams a reply');

  // 8. JSON mode: a reply under the page's example schema parses and fits it; the tool
  //    example: a forced call runs in the page, its result goes back, and the model answers.
  await nogpu.click('#clear');
  await nogpu.click('#shape summary');
  await nogpu.selectOption('#format', 'json_schema');
  const json = await ask(nogpu, 'Describe yourself.', 96, 2);
  console.log(`  JSON mode: ${json.text}`);
  const obj = json.json;
  check(json.outcome === 'done' && obj && typeof obj === 'object', 'the JSON-mode reply parses');
  check(
    Object.keys(obj).sort().join() === 'mood,name,stars' && ['happy', 'tired', 'curious'].includes(obj.mood) && Number.isInteger(obj.stars) && obj.stars >= 1 && obj.stars <= 5 && obj.name.length <= 16,
    'it fits the schema',
  );
  await nogpu.selectOption('#format', 'text');
  await nogpu.selectOption('#tools', 'required');
  const tooled = await ask(nogpu, 'What is 2 plus 3?', 48, 3);
  console.log(`  tools: ${JSON.stringify(tooled.calls)}, then ${JSON.stringify(tooled.text.slice(0, 60))} (${tooled.finish})`);
  const call0 = tooled.calls[0];
  check(tooled.outcome === 'done' && call0 && ['add', 'get_time'].includes(call0.name), 'the forced tool call was made');
  const args = JSON.parse(call0.arguments);
  check(call0.name !== 'add' || String(args.a + args.b) === call0.result, 'the page ran it and kept its result');
  check((await nogpu.$$('.msg.call')).length >= 1 && (await nogpu.$$('.msg.tool')).length >= 1, 'the call and its result are shown');
  check(tooled.finish !== 'tool_calls', 'the model answered after the results (the last round may not call)');
  const cpuShot = join(shots, 'demo-no-webgpu.png');
  await nogpu.screenshot({ path: cpuShot, fullPage: true });
  console.log(`screenshot: ${cpuShot}`);
  console.log('demo test: all passed');
} finally {
  await browser.close();
  server.stop();
}
