// The OPFS weight cache in headless Chromium: a download cut midway is resumed with an HTTP
// Range request by the next load (here on the main thread, then in the worker), and a storage
// quota too small for the model is reported clearly.
//
//   node tests/browser/cache.test.mjs   (needs pkg/ and the test model, as demo.test.mjs)

import { statSync } from 'node:fs';
import { modelFile, modelPath, startServer, launch, echo, check } from './harness.mjs';

const size = statSync(modelFile).size;
const CUT = 3 << 20;

const server = await startServer();
const browser = await launch();
try {
  const page = await browser.context.newPage();
  echo(page, 'cache');
  await page.goto(`${server.base}/tests/browser/blank.html`);

  // 1. Abort the first load once 3 MiB have arrived: the part stays in OPFS as partial.
  const first = await page.evaluate(
    async ({ url, cut }) => {
      const { Wick, listCachedModels } = await import('/pkg/index.js');
      const ctl = new AbortController();
      let error = null;
      try {
        await Wick.load(url, {
          worker: false,
          signal: ctl.signal,
          onProgress: (p) => p.phase === 'download' && p.loaded >= cut && ctl.abort(),
        });
      } catch (e) {
        error = e.name;
      }
      return { error, listed: await listCachedModels() };
    },
    { url: modelPath, cut: CUT },
  );
  check(first.error === 'AbortError', 'the first load was aborted midway');
  const partial = first.listed.find((m) => m.url.endsWith(modelPath));
  check(partial && !partial.complete && partial.size === size, 'the cache lists a partial download of the model');

  // 2. The next load (in the worker) resumes with a Range request and loads the model.
  const second = await page.evaluate(async (url) => {
    const { Wick, listCachedModels } = await import('/pkg/index.js');
    const downloads = [];
    const model = await Wick.load(url, { onProgress: (p) => p.phase === 'download' && downloads.push(p.loaded) });
    let text = '';
    for await (const t of model.generate('Hello', { max_tokens: 4, temperature: 0 })) text += t;
    await model.unload();
    return { first: downloads[0], n: downloads.length, text, listed: await listCachedModels() };
  }, modelPath);
  const seen = await server.requests();
  const ranges = seen.ranges[modelPath] || [];
  console.log(`  requests for the model: ${seen[modelPath]}, ranges: ${JSON.stringify(ranges)}; resumed download began at ${second.first}`);
  const from = ranges.length === 1 ? Number(/bytes=(\d+)-/.exec(ranges[0])?.[1]) : NaN;
  check(seen[modelPath] === 2 && from >= CUT && from < size, `the second load asked only for the rest (Range from byte ${from})`);
  check(second.first > from, 'its progress continued from the part already cached');
  check(second.text.length > 0, 'the resumed model generates');
  check(second.listed.some((m) => m.url.endsWith(modelPath) && m.complete && m.size === size), 'the cache now holds the whole model');

  // 3. A quota too small for the model: a clear WickStorageError, nothing downloaded into OPFS.
  const small = await browser.context.newPage();
  echo(small, 'quota');
  await small.addInitScript(() => {
    StorageManager.prototype.estimate = async () => ({ quota: 2 << 20, usage: 1 << 20 });
  });
  await small.goto(`${server.base}/tests/browser/blank.html`);
  const quota = await small.evaluate(async (url) => {
    const { Wick, deleteCachedModel } = await import('/pkg/index.js');
    await deleteCachedModel(url);
    try {
      await Wick.load(url, { worker: false });
      return { name: null };
    } catch (e) {
      return { name: e.name, message: e.message };
    }
  }, modelPath);
  console.log(`  quota error: ${quota.message}`);
  check(quota.name === 'WickStorageError', 'a too-small quota rejects with a WickStorageError');
  check(/needs 1[01]\.\d MB more, 1\.0 MB are free of a 2\.0 MB quota/.test(quota.message), 'the message says what is needed and what is free');
  console.log('cache test: all passed');
} finally {
  await browser.close();
  server.stop();
}
