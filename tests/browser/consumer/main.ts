// A tiny consumer of wick-llm: `tsc --noEmit` must accept it against the package's types
// (tests/browser/consumer, run by .ci/web-tests). It is type-checked, never run.

import Wick, {
  Wick as NamedWick,
  WickModel,
  WickStorageError,
  BadRequestError,
  listCachedModels,
  deleteCachedModel,
  type ChatCompletionChunk,
  type ChatCompletion,
  type ChatCompletionTool,
  type ChatMessage,
  type ToolCall,
  type GenerationStats,
  type LoadProgress,
  type CachedModel,
} from 'wick-llm';

export async function demo(file: File): Promise<string> {
  const ctl = new AbortController();
  const model: WickModel = await Wick.load('https://example.com/model.gguf', {
    onProgress: (p: LoadProgress) => console.log(p.phase, p.loaded, p.total ?? '?'),
    signal: ctl.signal,
    worker: true,
    executor: 'auto',
  });
  const fromFile = await NamedWick.load(file, { cache: false });
  const executor: 'webgpu' | 'cpu' = fromFile.executor;

  let text = '';
  for await (const chunk of model.chat.completions.create({
    messages: [{ role: 'user', content: 'Hello' }],
    stream: true,
    temperature: 0.7,
    max_tokens: 64,
    stop: ['\n\n'],
    signal: ctl.signal,
  })) {
    const c: ChatCompletionChunk = chunk;
    text += c.choices[0].delta.content ?? '';
    if (c.choices[0].finish_reason === 'length') console.log(c.usage?.completion_tokens, c.timings?.decode_tokens_per_s);
  }
  const stream = await model.chat.completions.create({ messages: [{ role: 'system', content: 'Be brief.' }], stream: true });
  for await (const c of stream) text += c.choices[0].delta.content ?? '';

  const whole: ChatCompletion = await model.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }] });
  text += whole.choices[0].message.content;

  const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
  const json: ChatCompletion = await model.chat.completions.create({
    messages: [{ role: 'user', content: 'A name?' }],
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
    logprobs: true,
    top_logprobs: 3,
  });
  for (const t of json.choices[0].logprobs?.content ?? []) console.log(t.token, t.logprob, t.bytes, t.top_logprobs[0]?.logprob);
  await model.chat.completions.create({ messages: [], response_format: { type: 'json_object' } });
  for await (const piece of model.generate('Colours:', { grammar: 'start: " red" | " blue"' })) text += piece;

  const many: ChatCompletion = await model.chat.completions.create({
    messages: [{ role: 'user', content: 'Think first.' }],
    n: 2,
    enable_thinking: true,
    chat_template_kwargs: { custom: 1 },
    logit_bias: { '13': -100 },
    ignore_eos: false,
    grammar: 'root ::= "yes" | "no"',
  });
  for (const c of many.choices) text += `${c.index}: ${c.message.reasoning_content ?? ''} ${c.message.content}`;
  for await (const c of model.chat.completions.create({ messages: [], stream: true, stream_options: { include_usage: true } })) {
    text += c.choices[0]?.delta.reasoning_content ?? '';
    if (c.choices.length === 0) console.log(c.usage?.total_tokens);
  }
  try {
    await model.chat.completions.create({ messages: [], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: false } } });
  } catch (e) {
    if (e instanceof BadRequestError) console.log(e.status, e.error.type, e.error.code ?? '');
  }
  text += await model.applyChatTemplate([{ role: 'user', content: 'Hi' }], { enable_thinking: false });

  const tools: ChatCompletionTool[] = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  ];
  const called: ChatCompletion = await model.chat.completions.create({
    messages: [{ role: 'user', content: 'Weather in Lyon?' }],
    tools,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
    parallel_tool_calls: false,
  });
  const call: ToolCall | undefined = called.choices[0].message.tool_calls?.[0];
  if (called.choices[0].finish_reason === 'tool_calls' && call) {
    const history: ChatMessage[] = [
      { role: 'user', content: 'Weather in Lyon?' },
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, name: call.function.name, content: '18 C' },
    ];
    text += await model.applyChatTemplate(history, undefined, tools);
  }
  for await (const c of model.chat.completions.create({ messages: [], tools, tool_choice: 'required', stream: true })) {
    for (const d of c.choices[0]?.delta.tool_calls ?? []) text += `${d.index} ${d.id ?? ''} ${d.function.name ?? ''} ${d.function.arguments}`;
  }

  const gen = model.generate('Once upon a time', { maxTokens: 16, topK: 40, signal: ctl.signal });
  for await (const piece of gen) text += piece;
  const stats: GenerationStats | null = model.lastStats;
  console.log(stats?.decode_tokens_per_s, stats?.finishReason, executor, model.info.nVocab);

  const prompt: string = await model.applyChatTemplate([{ role: 'user', content: 'x' }]);
  const cached: CachedModel[] = await listCachedModels();
  const removed: boolean = await deleteCachedModel(cached[0]?.url ?? prompt);
  try {
    await Wick.load(new URL('https://example.com/big.gguf'));
  } catch (e) {
    if (e instanceof WickStorageError) console.log(e.message, removed);
  }
  await model.unload();
  await fromFile.unload();
  return text;
}

// Types that must NOT compile (checked with @ts-expect-error: an error here means the types are too loose).
// @ts-expect-error: the source must be a URL, Blob, File or stream
Wick.load(42);
// @ts-expect-error: messages are required
Wick.load('x').then((m) => m.chat.completions.create({ stream: true }));
// @ts-expect-error: executors are 'auto' | 'webgpu' | 'cpu'
Wick.load('x', { executor: 'cuda' });
