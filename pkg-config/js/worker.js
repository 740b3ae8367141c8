// The worker entry: runs one model in this dedicated worker, driven by messages from the
// main-thread proxy (remote.js). One worker holds one model; unloading ends the worker.

import { loadLocal } from './local.js';

let backend = null;
const aborts = new Map();

function post(msg, transfer) {
  self.postMessage(msg, transfer || []);
}

function errorOf(e) {
  return { name: e?.name || 'Error', message: e?.message || String(e) };
}

async function handle(msg) {
  const { id, type } = msg;
  switch (type) {
    case 'load': {
      const ctl = new AbortController();
      aborts.set(id, ctl);
      const onProgress = (progress) => post({ id, type: 'progress', progress });
      backend = await loadLocal(msg.source, { ...msg.opts, onProgress, signal: ctl.signal });
      return { executor: backend.executor, info: backend.info };
    }
    case 'template':
      return live().applyChatTemplate(msg.messages, msg.vars, msg.tools);
    case 'tools':
      return live().toolChoiceGrammar(msg.tools, msg.toolChoice, msg.parallel);
    case 'generate': {
      const ctl = new AbortController();
      aborts.set(id, ctl);
      const it = live().stream(msg.prompt, msg.opts, ctl.signal);
      let r;
      while (!(r = await it.next()).done) post({ id, type: 'token', text: r.value.text, tokenId: r.value.id, logprobs: r.value.logprobs, toolDeltas: r.value.toolDeltas });
      return r.value;
    }
    case 'unload':
      if (backend) await backend.unload();
      backend = null;
      return null;
    default:
      throw new Error(`unknown request '${type}'`);
  }
}

function live() {
  if (!backend) throw new Error('no model is loaded in this worker (or it was unloaded)');
  return backend;
}

self.onmessage = async (ev) => {
  const msg = ev.data;
  if (msg.type === 'abort') {
    aborts.get(msg.target)?.abort(new DOMException(msg.reason || 'The operation was aborted', 'AbortError'));
    return;
  }
  try {
    const value = await handle(msg);
    post({ id: msg.id, type: 'done', value });
  } catch (e) {
    post({ id: msg.id, type: 'error', error: errorOf(e) });
  } finally {
    aborts.delete(msg.id);
  }
};
