// Tool calls through the npm package in Node (node:test, CPU executor, no browser): the Rust
// call parser compiled to wasm gives the same calls however the text is cut, and
// chat.completions.create with `tools` and a forced `tool_choice` returns a call whose
// arguments match the function's schema, whole and streamed, on the tiny synthetic model
// (random weights: only the grammar makes it call). Needs the built package
// (WICK_PKG, default pkg/) and the model (WICK_TEST_MODEL).
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
const raw = await import(pathToFileURL(resolve(pkg, 'wasm/wick.js')).href);
await Wick.init(wasm);

/** The calls and content of `text` fed to the wasm parser in pieces of `size`. */
function parse(family, text, size) {
  const p = new raw.ToolCallParser(family, true, 'call_', undefined);
  const deltas = [];
  for (let i = 0; i < text.length; i += size) deltas.push(...p.push(text.slice(i, i + size)));
  const end = p.finish();
  deltas.push(...end.deltas);
  p.free();
  let content = '';
  const calls = [];
  for (const d of deltas) {
    if (d.content !== undefined) content += d.content;
    else if (d.name !== undefined) calls[d.index] = { id: d.id, name: d.name, arguments: '' };
    else calls[d.index].arguments += d.arguments;
  }
  return { content, calls, unfinished: end.unfinished };
}

test('the wasm parser gives the same calls in pieces of any size', () => {
  const cases = [
    ['hermes', 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>', 'Checking.', [['get_weather', { city: 'Lyon' }]]],
    ['mistral-args', '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}', '', [['add', { a: 1, b: 2 }]]],
    ['qwen3-coder', '<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>', '', [['add', { a: 1 }]]],
    ['llama3', '{"name": "get_weather", "parameters": {"city": "Paris"}}', '', [['get_weather', { city: 'Paris' }]]],
    ['generic', 'No call {here}.', 'No call {here}.', []],
    ['glm', '<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call><tool_call>get_time<arg_key>tz</arg_key><arg_value>Europe/Paris</arg_value></tool_call>', '', [['get_weather', { city: 'Paris' }], ['get_time', { tz: 'Europe/Paris' }]]],
    ['kimi-k2', "I'll check both.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"Europe/Paris\"}<|tool_call_end|><|tool_calls_section_end|>", "I'll check both.", [['get_weather', { city: 'Paris' }], ['get_time', { tz: 'Europe/Paris' }]]],
  ];
  for (const [family, text, content, calls] of cases) {
    for (let size = 1; size <= text.length; size++) {
      const got = parse(family, text, size);
      assert.equal(got.content, content, `${family} in pieces of ${size}`);
      assert.deepEqual(got.calls.map((c) => [c.name, JSON.parse(c.arguments)]), calls, `${family} in pieces of ${size}`);
      assert.equal(got.unfinished, undefined);
    }
  }
  const cut = parse('hermes', '<tool_call>\n{"name": "get_weather", "argu', 3);
  assert.deepEqual(cut.calls, []);
  assert.ok(cut.unfinished);
  assert.throws(() => new raw.ToolCallParser('klingon', true, 'c', undefined), /unknown tool-call family/);
});

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] } } },
  { type: 'function', function: { name: 'add', description: 'Add two numbers',
    parameters: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 }, b: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['a', 'b'] } } },
];

test('a forced call through chat.completions.create, whole and streamed', async () => {
  const bytes = readFileSync(modelPath);
  const model = await Wick.load(new Blob([bytes]), { worker: false, cache: false, executor: 'cpu', wasmUrl: wasm });
  try {
    const request = {
      messages: [{ role: 'user', content: 'Add 2 and 3.' }],
      tools,
      tool_choice: { type: 'function', function: { name: 'add' } },
      parallel_tool_calls: false,
      max_tokens: 64,
      temperature: 0,
    };
    const whole = await model.chat.completions.create(request);
    const choice = whole.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(whole));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'add');
    const args = JSON.parse(call.function.arguments);
    assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), call.function.arguments);
    assert.deepEqual(Object.keys(args).sort(), ['a', 'b']);
    // The forced call's grammar: its host time is reported.
    assert.ok(whole.timings.constraint_ms > 0 && whole.timings.constraint_ms_per_token > 0, JSON.stringify(whole.timings));

    const chunks = [];
    for await (const c of model.chat.completions.create({ ...request, stream: true })) chunks.push(c.choices[0]);
    const deltas = chunks.flatMap((c) => c.delta.tool_calls ?? []);
    assert.equal(deltas[0].index, 0);
    assert.equal(deltas[0].type, 'function');
    assert.equal(deltas[0].function.name, 'add');
    assert.ok(deltas[0].id.startsWith('call_'));
    assert.equal(deltas.map((d) => d.function.arguments).join(''), call.function.arguments);
    assert.equal(chunks.at(-1).finish_reason, 'tool_calls');

    // The call and its result in the history render; bad tools are a 400.
    const history = [
      ...request.messages,
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, name: 'add', content: '5' },
    ];
    const prompt = await model.applyChatTemplate(history, undefined, tools);
    assert.ok(prompt.includes('5'));
    const bad = [{ type: 'function', function: { name: 'has space' } }];
    await assert.rejects(model.chat.completions.create({ ...request, tools: bad, tool_choice: 'required' }), (e) => e instanceof BadRequestError && /has space/.test(e.message));
    await assert.rejects(model.chat.completions.create({ ...request, tool_choice: { type: 'function', function: { name: 'nope' } } }), BadRequestError);
  } finally {
    await model.unload();
  }
});
