// The bench page: prefill and decode tokens/s of the loaded model (greedy, fixed prompts).

import { setupPicker } from './model-picker.js';

const $ = (id) => document.getElementById(id);
let model = null;
window.wickBench = { results: [], done: false };

setupPicker({
  onLoaded: (m) => {
    model = m;
    $('run').disabled = false;
  },
  onUnloaded: () => {
    model = null;
    $('run').disabled = true;
  },
});

const fmt = (x) => (x == null ? '–' : x.toFixed(1));

$('run').onclick = async () => {
  if (!model) return;
  const nPrompt = Math.max(1, Number($('n-prompt').value) || 128);
  const nGen = Math.max(1, Number($('n-gen').value) || 32);
  const runs = Math.max(1, Number($('runs').value) || 3);
  $('run').disabled = true;
  $('results').replaceChildren();
  window.wickBench = { results: [], done: false };
  // A prompt of about nPrompt tokens: common words, one token each in most vocabularies.
  const words = 'the of and to in is was for on that with as by at from his it an were are which this';
  const w = words.split(' ');
  // Each run's prompt starts differently: the model keeps its KV cache between calls, and a
  // shared prefix would not be evaluated again.
  const promptOf = (r) => Array.from({ length: nPrompt }, (_, i) => w[(i * 7 + r) % w.length]).join(' ');
  try {
    for (let r = 0; r < runs; r++) {
      const prompt = promptOf(r);
      const it = model.generate(prompt, { max_tokens: nGen, temperature: 0, stop: [] });
      let s;
      while (!(s = await it.next()).done);
      const st = s.value;
      window.wickBench.results.push(st);
      const tr = document.createElement('tr');
      for (const v of [r + 1, st.promptEvaluated, fmt(st.prefill_tokens_per_s), st.completionTokens, fmt(st.decode_tokens_per_s)]) {
        const td = document.createElement('td');
        td.textContent = String(v);
        tr.append(td);
      }
      $('results').append(tr);
    }
    const avg = (k) => window.wickBench.results.reduce((a, s) => a + (s[k] || 0), 0) / window.wickBench.results.length;
    $('summary').textContent = `${model.info.name || 'model'} on ${model.executor}${model.executor === 'cpu' ? ` (${model.info.threads} threads)` : ''}: prefill ${fmt(avg('prefill_tokens_per_s'))} tokens/s, decode ${fmt(avg('decode_tokens_per_s'))} tokens/s (mean of ${runs})`;
  } catch (e) {
    $('summary').textContent = `bench failed: ${e.message}`;
  } finally {
    window.wickBench.done = true;
    $('run').disabled = false;
  }
};
