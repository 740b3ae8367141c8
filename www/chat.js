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

for (const m of messages) bubble(m.role, m.content);

async function chat() {
  const text = $('prompt').value.trim();
  if (!text || !model || running) return;
  $('prompt').value = '';
  messages.push({ role: 'user', content: text });
  bubble('user', text);
  const out = bubble('assistant', '');
  const ctl = new AbortController();
  running = ctl;
  send.disabled = true;
  stop.disabled = false;
  window.wickDemo.generating = true;
  let reply = '';
  let n = 0;
  let t0 = null;
  let outcome = 'done';
  try {
    const stream = model.chat.completions.create({
      messages,
      stream: true,
      max_tokens: Number($('max-tokens').value) || 128,
      temperature: Number($('temperature').value),
      signal: ctl.signal,
    });
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (c.delta.content) {
        reply += c.delta.content;
        out.textContent = reply;
        n += 1;
        t0 ??= performance.now();
        const secs = (performance.now() - t0) / 1000;
        stats.textContent = `${n} tokens${secs > 0 && n > 1 ? `, ${((n - 1) / secs).toFixed(1)} tokens/s` : ''}`;
        log.scrollTop = log.scrollHeight;
      }
      if (c.finish_reason && chunk.timings) {
        const t = chunk.timings;
        const restored = t.prompt_tokens_restored ? `, ${t.prompt_tokens_restored} prompt tokens restored from the cache` : '';
        showMemory(model.lastStats?.contextTokens ?? chunk.usage.total_tokens);
        stats.textContent = `${chunk.usage.completion_tokens} tokens, prefill ${fmt(t.prefill_tokens_per_s)} tokens/s, decode ${fmt(t.decode_tokens_per_s)} tokens/s${restored} (${c.finish_reason})`;
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      outcome = 'stopped';
      stats.textContent += ' (stopped)';
    } else {
      outcome = 'error';
      $('error').textContent = `Generation failed: ${e.message}`;
    }
  } finally {
    messages.push({ role: 'assistant', content: reply });
    keep();
    window.wickDemo.replies.push({ text: reply, pieces: n, outcome });
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
