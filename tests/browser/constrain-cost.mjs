// What a constraint costs per token in the wasm build, end to end: decode ms/token of greedy
// chat completions with and without a JSON constraint, through the package in headless
// Chromium on the CPU executor (where the logits are on the host either way, so the difference
// is the mask), and the constraint's own host time per token as the package reports it
// (`timings.constraint_ms_per_token`: llguidance's masks and advancing, timed in the wasm
// module with performance.now()). Any model: a synthetic one made with `wick synth --donor
// VOCAB.gguf` measures a vocabulary with a cheap forward pass. Not a test (no .test.mjs): a measurement for benches/RESULTS.md.
//
//   WICK_TEST_MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf node tests/browser/constrain-cost.mjs
//   (needs pkg/ built by pkg-config/build.sh and tests/browser's npm packages)

import { modelPath, startServer, launch, echo } from './harness.mjs';

const server = await startServer();
const browser = await launch();
try {
  const page = await browser.context.newPage();
  echo(page, 'cost');
  await page.goto(`${server.base}/tests/browser/blank.html`);
  const rows = await page.evaluate(async (url) => {
    const { Wick } = await import('/pkg/index.js');
    const model = await Wick.load(url, { executor: 'cpu', cache: false });
    const schema = {
      type: 'object',
      properties: { name: { type: 'string', maxLength: 40 }, age: { type: 'integer', minimum: 0, maximum: 150 }, city: { type: 'string', maxLength: 40 } },
      required: ['name', 'age', 'city'],
      additionalProperties: false,
    };
    const modes = {
      none: {},
      json_object: { response_format: { type: 'json_object' } },
      json_schema: { response_format: { type: 'json_schema', json_schema: { name: 'person', schema } } },
    };
    const messages = [{ role: 'user', content: 'Describe a person (name, age, city) as JSON.' }];
    // A file without a chat template (a synthetic model on a vocabulary-only donor) takes the
    // request's text as a plain prompt.
    const chat = model.info.hasChatTemplate;
    const complete = async (opts) => {
      if (chat) return (await model.chat.completions.create({ messages, ...opts })).choices[0].message.content;
      let text = '';
      for await (const piece of model.generate(messages[0].content, opts)) text += piece;
      return text;
    };
    // Warm-up: the first constrained call builds the vocabulary's trie.
    await complete({ max_tokens: 4, temperature: 0, ...modes.json_object });
    const out = [];
    for (let rep = 0; rep < 3; rep++) {
      for (const [mode, extra] of Object.entries(modes)) {
        const text = await complete({ max_tokens: 40, temperature: 0, ...extra });
        const s = model.lastStats;
        out.push({ mode, rep, tokens: s.completionTokens, msPerToken: s.decodeMs / Math.max(s.completionTokens - 1, 1), maskMsPerToken: s.constraintMs === undefined ? null : s.constraintMs / s.completionTokens, text: text.slice(0, 60) });
      }
    }
    await model.unload();
    return out;
  }, modelPath);
  for (const r of rows) console.log(JSON.stringify(r));
  for (const mode of ['none', 'json_object', 'json_schema']) {
    const v = rows.filter((r) => r.mode === mode).map((r) => r.msPerToken).sort((a, b) => a - b);
    const m = rows.filter((r) => r.mode === mode && r.maskMsPerToken !== null).map((r) => r.maskMsPerToken * 1e3).sort((a, b) => a - b);
    const mask = m.length ? `; constraint ${m[1].toFixed(0)} µs/token (${m.map((x) => x.toFixed(0)).join(', ')})` : '';
    console.log(`${mode}: median decode ${v[1].toFixed(2)} ms/token (${v.map((x) => x.toFixed(2)).join(', ')})${mask}`);
  }
} finally {
  await browser.close();
  server.stop();
}
