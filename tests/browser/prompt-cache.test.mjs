// The prompt cache in headless Chromium (issue 18): a chat turn, a page reload, and the next
// turn restores the saved conversation from OPFS, so only the new message is prefilled; the
// same turn without the cache prefills everything. Prints both times to first token.
//
//   node tests/browser/prompt-cache.test.mjs   (needs pkg/ and the test model, as demo.test.mjs)

import { modelPath, startServer, launch, echo, check } from './harness.mjs';

const SYSTEM =
  'You are the keeper of a long-running conversation about the sea, rivers and the weather. ' +
  Array.from({ length: 40 }, (_, i) => `Fact ${i + 1}: tides follow the moon, rivers carry salt, and winds shift with the seasons.`).join(' ');

const server = await startServer();
const browser = await launch();
try {
  const page = await browser.context.newPage();
  echo(page, 'prompt-cache');
  await page.goto(`${server.base}/tests/browser/blank.html`);

  // 1. The first turn: prefilled whole, then saved to OPFS (unload waits for the save).
  const first = await page.evaluate(
    async ({ url, system }) => {
      const { Wick, clearPromptCache, listPromptCaches } = await import('/pkg/index.js');
      await clearPromptCache();
      const model = await Wick.load(url);
      const messages = [
        { role: 'system', content: system },
        { role: 'user', content: 'Tell me about the sea.' },
      ];
      const r = await model.chat.completions.create({ messages, max_tokens: 8, temperature: 0 });
      const stats = model.lastStats;
      await model.unload();
      return { reply: r.choices[0].message.content, stats, saved: await listPromptCaches(), executor: model.executor };
    },
    { url: modelPath, system: SYSTEM },
  );
  console.log(`  first turn (${first.executor}): ${first.stats.promptEvaluated} prompt tokens evaluated in ${first.stats.prefillMs.toFixed(0)} ms; saved ${JSON.stringify(first.saved)}`);
  check(first.stats.promptEvaluated === first.stats.promptTokens && first.stats.promptTokens > 300, 'the first turn prefills its whole prompt');
  check(first.saved.length === 1 && first.saved[0].tokens >= first.stats.promptTokens, 'the conversation is saved in OPFS');

  // 2. After a reload: the next turn restores it and prefills only the new message; the same
  //    turn on a model loaded without the prompt cache prefills everything.
  await page.reload();
  const next = await page.evaluate(
    async ({ url, system, reply }) => {
      const { Wick, listPromptCaches } = await import('/pkg/index.js');
      const messages = [
        { role: 'system', content: system },
        { role: 'user', content: 'Tell me about the sea.' },
        { role: 'assistant', content: reply },
        { role: 'user', content: 'And the rivers?' },
      ];
      const run = async (opts) => {
        const model = await Wick.load(url, opts);
        const t0 = performance.now();
        const stream = await model.chat.completions.create({ messages, max_tokens: 8, temperature: 0, stream: true });
        let ttft = null;
        let text = '';
        for await (const c of stream) {
          if (ttft === null) ttft = performance.now() - t0;
          text += c.choices[0]?.delta?.content || '';
        }
        const stats = model.lastStats;
        await model.unload();
        return { stats, ttft, text };
      };
      const cached = await run({});
      const fresh = await run({ promptCache: false });
      return { cached, fresh, saved: await listPromptCaches() };
    },
    { url: modelPath, system: SYSTEM, reply: first.reply },
  );
  const { cached, fresh } = next;
  console.log(
    `  next turn after a reload: restored ${cached.stats.promptRestored} tokens in ${cached.stats.restoreMs?.toFixed(0)} ms, ` +
      `evaluated ${cached.stats.promptEvaluated} of ${cached.stats.promptTokens} in ${cached.stats.prefillMs.toFixed(0)} ms, ` +
      `first token at ${cached.ttft.toFixed(0)} ms; without the cache: evaluated ${fresh.stats.promptEvaluated} in ` +
      `${fresh.stats.prefillMs.toFixed(0)} ms, first token at ${fresh.ttft.toFixed(0)} ms; replies equal: ${cached.text === fresh.text}`,
  );
  check(cached.stats.promptRestored >= first.stats.promptTokens, 'the reloaded page restores the first turn from OPFS');
  check(cached.stats.promptEvaluated < 40 && cached.stats.promptEvaluated === cached.stats.promptTokens - cached.stats.promptRestored, 'only the new message is prefilled');
  check(fresh.stats.promptRestored === undefined && fresh.stats.promptEvaluated === fresh.stats.promptTokens, 'without the prompt cache the whole prompt is prefilled');
  check(next.saved.length === 1 && next.saved[0].tokens > first.saved[0].tokens, 'the longer conversation replaced the earlier snapshot');

  // 3. A corrupt saved cache is dropped with a warning and the turn prefilled whole.
  const corrupt = await page.evaluate(async ({ url, system }) => {
    const { Wick, listPromptCaches } = await import('/pkg/index.js');
    const d = await (await navigator.storage.getDirectory()).getDirectoryHandle('wick-prompt-cache');
    for await (const [name, h] of d.entries()) {
      if (!name.endsWith('.wkv')) continue;
      const bytes = new Uint8Array(await (await h.getFile()).arrayBuffer());
      bytes[bytes.length - 100] ^= 1;
      const w = await h.createWritable();
      await w.write(bytes);
      await w.close();
    }
    const model = await Wick.load(url);
    const messages = [
      { role: 'system', content: system },
      { role: 'user', content: 'Tell me about the sea.' },
    ];
    await model.chat.completions.create({ messages, max_tokens: 2, temperature: 0 });
    const stats = model.lastStats;
    await model.unload();
    return { stats, saved: await listPromptCaches() };
  }, { url: modelPath, system: SYSTEM });
  check(corrupt.stats.promptRestored === undefined && corrupt.stats.promptEvaluated === corrupt.stats.promptTokens, 'a corrupt saved cache is not used');
  check(corrupt.saved.length === 1 && corrupt.saved[0].tokens < next.saved[0].tokens, 'it is deleted, and the new turn saved in its place');
} finally {
  await browser.close();
  server.stop();
}
