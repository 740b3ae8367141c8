// The chat page: OpenAI-style streaming chat completions, a stop button, tokens/s.

import { setupPicker } from './model-picker.js';

const $ = (id) => document.getElementById(id);
const log = $('log');
const send = $('send');
const stop = $('stop');
const stats = $('stats');
// The conversation survives a reload (localStorage); its KV cache too (the package's prompt
// cache in OPFS), so the next reply after a reload prefills only the new message.
const SAVED = 'wick-demo-chat';
let messages = [];
try {
  messages = JSON.parse(localStorage.getItem(SAVED) || '[]');
} catch {
  messages = [];
}
const keep = () => {
  try {
    localStorage.setItem(SAVED, JSON.stringify(messages));
  } catch {
    // Storage full or denied: the conversation lasts as long as the page.
  }
};
let model = null;
let running = null;
const memory = $('memory');
const mib = (b) => `${(b / (1 << 20)).toFixed(0)} MiB`;

/** Memory use (the estimator's, from the loaded model) and context fill (tokens / size). */
function showMemory(used) {
  const info = model?.info;
  if (!info?.memory) {
    memory.textContent = '';
    return;
  }
  const m = info.memory;
  const nCtx = model.lastStats?.nCtx ?? info.nCtx;
  const fill = used ?? model.lastStats?.contextTokens ?? 0;
  memory.textContent = `memory ${mib(m.total)} (weights ${mib(m.weights)} + KV ${mib(m.kv)} + scratch ${mib(m.scratch)}) · context ${fill} / ${nCtx} tokens`;
}

// For the browser tests: what the page saw.
window.wickDemo = { state: null, replies: [], generating: false, get model() { return model; } };

window.wickDemo.state = setupPicker({
  onLoaded: (m) => {
    model = m;
    send.disabled = false;
    showMemory();
  },
  onUnloaded: () => {
    model = null;
    send.disabled = true;
    showMemory();
  },
});

function bubble(role, text) {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.textContent = text;
  log.append(div);
  log.scrollTop = log.scrollHeight;
  return div;
}

const callText = (c) => `${c.function.name}(${c.function.arguments})`;

/** A message of the conversation as the log shows it (calls and tool results too). */
function show(m) {
  if (m.role === 'tool') return bubble('tool', m.content);
  if (m.content) bubble(m.role, m.content);
  for (const c of m.tool_calls ?? []) bubble('call', callText(c));
}

for (const m of messages) show(m);

// Structured output: any JSON object, or JSON under the schema in the text box (enforced token
// by token by the package's grammar).
const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 16 },
    mood: { enum: ['happy', 'tired', 'curious'] },
    stars: { type: 'integer', minimum: 1, maximum: 5 },
  },
  required: ['name', 'mood', 'stars'],
  additionalProperties: false,
};
$('schema').value = JSON.stringify(SCHEMA, null, 2);
const showSchema = () => ($('schema').hidden = $('format').value !== 'json_schema');
$('format').onchange = showSchema;
showSchema();

// The tool example: two functions the model may call, run here in the page; their results go
// back to the model, which answers with them (or calls again, up to ROUNDS replies).
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'add',
      description: 'Add two integers',
      parameters: {
        type: 'object',
        properties: { a: { type: 'integer', minimum: -1e6, maximum: 1e6 }, b: { type: 'integer', minimum: -1e6, maximum: 1e6 } },
        required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: "The current date and time in the user's time zone",
      parameters: { type: 'object', properties: {}, additionalProperties: false },
    },
  },
];
const RUN = {
  add: ({ a, b }) => String(a + b),
  get_time: () => new Date().toString(),
};
const ROUNDS = 3;

function runTool(call) {
  const f = RUN[call.function.name];
  if (!f) return `error: no tool named ${call.function.name}`;
  try {
    return f(JSON.parse(call.function.arguments || '{}'));
  } catch (e) {
    return `error: ${e.message}`;
  }
}

/** The request's structured-output and tool options from the page's controls. */
function shape() {
  const req = {};
  const format = $('format').value;
  if (format === 'json_object') req.response_format = { type: 'json_object' };
  if (format === 'json_schema') {
    let schema;
    try {
      schema = JSON.parse($('schema').value);
    } catch (e) {
      throw new Error(`The schema is not JSON: ${e.message}`);
    }
    req.response_format = { type: 'json_schema', json_schema: { name: 'reply', schema, strict: true } };
  }
  const tools = $('tools').value;
  if (tools !== 'off') {
    req.tools = TOOLS;
    req.tool_choice = tools;
  }
  return req;
}

/** One streamed reply into `out`: its text and tool calls (`turn.text`, `turn.calls`). */
async function streamReply(request, out, turn) {
  let t0 = null;
  const stream = model.chat.completions.create({ ...request, messages, stream: true });
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (c.delta.content) {
      turn.text += c.delta.content;
      out.textContent = turn.text;
      turn.pieces += 1;
      t0 ??= performance.now();
      const secs = (performance.now() - t0) / 1000;
      stats.textContent = `${turn.pieces} tokens${secs > 0 && turn.pieces > 1 ? `, ${((turn.pieces - 1) / secs).toFixed(1)} tokens/s` : ''}`;
      log.scrollTop = log.scrollHeight;
    }
    for (const d of c.delta.tool_calls ?? []) {
      turn.calls[d.index] ??= { id: d.id, type: 'function', function: { name: d.function.name, arguments: '' } };
      turn.calls[d.index].function.arguments += d.function.arguments;
    }
    if (c.finish_reason) turn.finish = c.finish_reason;
    if (c.finish_reason && chunk.timings) {
      const t = chunk.timings;
      const restored = t.prompt_tokens_restored ? `, ${t.prompt_tokens_restored} prompt tokens restored from the cache` : '';
      showMemory(model.lastStats?.contextTokens ?? chunk.usage.total_tokens);
      stats.textContent = `${chunk.usage.completion_tokens} tokens, prefill ${fmt(t.prefill_tokens_per_s)} tokens/s, decode ${fmt(t.decode_tokens_per_s)} tokens/s${restored} (${c.finish_reason})`;
    }
  }
}

async function chat() {
  const text = $('prompt').value.trim();
  if (!text || !model || running) return;
  let request;
  try {
    request = shape();
  } catch (e) {
    $('error').textContent = e.message;
    return;
  }
  $('error').textContent = '';
  $('prompt').value = '';
  messages.push({ role: 'user', content: text });
  bubble('user', text);
  const ctl = new AbortController();
  running = ctl;
  send.disabled = true;
  stop.disabled = false;
  window.wickDemo.generating = true;
  const record = { text: '', pieces: 0, outcome: 'done', calls: [] };
  let turn = null;
  request = { ...request, max_tokens: Number($('max-tokens').value) || 128, temperature: Number($('temperature').value), signal: ctl.signal };
  try {
    for (let round = 0; round < ROUNDS; round++) {
      turn = { text: '', pieces: 0, calls: [], finish: null };
      const out = bubble('assistant', '');
      await streamReply(request, out, turn);
      record.text = turn.text;
      record.pieces += turn.pieces;
      record.finish = turn.finish;
      const calls = turn.calls.filter(Boolean);
      if (!calls.length) break;
      if (!turn.text) out.remove();
      messages.push({ role: 'assistant', content: turn.text || null, tool_calls: calls });
      turn = null;
      for (const c of calls) {
        bubble('call', callText(c));
        const result = runTool(c);
        bubble('tool', result);
        messages.push({ role: 'tool', tool_call_id: c.id, name: c.function.name, content: result });
        record.calls.push({ name: c.function.name, arguments: c.function.arguments, result });
      }
      // The next reply reads the results; it may call again, the last may not.
      request = { ...request, tool_choice: round + 2 < ROUNDS ? 'auto' : 'none' };
    }
    if (request.response_format) {
      try {
        record.json = JSON.parse(record.text);
        stats.textContent += ' · valid JSON';
      } catch {
        stats.textContent += ' · not JSON (cut off?)';
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      record.outcome = 'stopped';
      stats.textContent += ' (stopped)';
    } else {
      record.outcome = 'error';
      $('error').textContent = `Generation failed: ${e.message}`;
    }
  } finally {
    if (turn) messages.push({ role: 'assistant', content: turn.text });
    keep();
    window.wickDemo.replies.push(record);
    window.wickDemo.generating = false;
    running = null;
    send.disabled = !model;
    stop.disabled = true;
  }
}

const fmt = (x) => (x == null ? '–' : x.toFixed(1));

send.onclick = chat;
stop.onclick = () => running?.abort();
$('prompt').onkeydown = (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    chat();
  }
};
$('clear').onclick = () => {
  running?.abort();
  messages = [];
  keep();
  log.replaceChildren();
  stats.textContent = '';
};
