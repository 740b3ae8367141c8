// The model picker shared by the chat and bench pages: a URL field, a drop zone for .gguf
// files, a progress bar and the WebGPU note. Calls `onLoaded(model)`.

import { Wick, hasWebGPU, listCachedModels, deleteCachedModel } from '../pkg/index.js';

const $ = (id) => document.getElementById(id);

export function setupPicker({ onLoaded, onUnloaded }) {
  const params = new URLSearchParams(location.search);
  const state = { model: null, progress: [], loading: null };
  const url = $('model-url');
  url.value = params.get('model') || url.value;
  const useWorker = $('use-worker');
  if (params.has('worker')) useWorker.checked = params.get('worker') !== '0';
  // ?executor=webgpu|cpu|auto (default auto: a hardware WebGPU adapter, else the CPU, which
  // beats a software adapter such as SwiftShader).
  const executor = params.get('executor') || undefined;
  // ?threads=N: the CPU executor's threads (default every core, at most 8, when the page is
  // cross-origin isolated; 1 takes the one-thread build). The first load of a page decides.
  const threads = params.has('threads') ? Number(params.get('threads')) : undefined;
  // ?simd=relaxed|simd128: the CPU executor's wasm SIMD build (default relaxed where the
  // browser has it). The first load of a page decides.
  const simd = params.get('simd') || undefined;
  const bar = $('progress');
  const status = $('load-status');
  const note = $('webgpu-note');
  const error = $('error');

  if (!hasWebGPU()) {
    note.hidden = false;
    note.textContent = 'This browser has no WebGPU: wick runs on its CPU fallback (much slower).';
  }

  async function refreshCache() {
    const list = $('cache-list');
    if (!list) return;
    const models = await listCachedModels().catch(() => []);
    list.replaceChildren(
      ...models.map((m) => {
        const li = document.createElement('li');
        li.textContent = `${m.url} (${m.size ? (m.size / 1048576).toFixed(1) + ' MB' : '?'}${m.complete ? '' : ', partial'}) `;
        const del = document.createElement('button');
        del.textContent = 'delete';
        del.onclick = async () => {
          await deleteCachedModel(m.url);
          refreshCache();
        };
        li.append(del);
        return li;
      }),
    );
  }

  async function load(source, label) {
    error.textContent = '';
    state.loading?.abort();
    const ctl = new AbortController();
    state.loading = ctl;
    if (state.model) {
      await state.model.unload();
      state.model = null;
      onUnloaded?.();
    }
    bar.value = 0;
    bar.removeAttribute('max');
    state.progress = [];
    status.textContent = `loading ${label}…`;
    const t0 = performance.now();
    try {
      const model = await Wick.load(source, {
        worker: useWorker.checked,
        executor,
        threads,
        simd,
        signal: ctl.signal,
        onProgress: (p) => {
          if (p.total) {
            bar.max = p.total;
            bar.value = p.loaded;
          }
          state.progress.push({ phase: p.phase, loaded: p.loaded, total: p.total ?? null });
          status.textContent = `${p.phase === 'download' ? 'downloading' : 'loading'} ${label}: ${(p.loaded / 1048576).toFixed(1)}${p.total ? ' / ' + (p.total / 1048576).toFixed(1) : ''} MB`;
        },
      });
      state.model = model;
      const secs = ((performance.now() - t0) / 1000).toFixed(2);
      status.textContent = `loaded ${model.info.name || label} on ${model.executor}${model.executor === 'cpu' ? ` (${model.info.threads} thread${model.info.threads === 1 ? '' : 's'}, ${model.info.simd})` : ''} in ${secs} s (${model.info.arch}, ${model.info.nLayer} layers)`;
      if (model.executor === 'cpu' && executor !== 'cpu') {
        note.hidden = false;
        note.textContent = hasWebGPU()
          ? 'Only a software WebGPU adapter here (slower than the CPU): the model runs on the CPU executor.'
          : 'No WebGPU adapter: the model runs on the CPU executor (much slower than a GPU).';
      }
      document.body.dataset.loaded = String(Date.now());
      onLoaded(model);
    } catch (e) {
      if (e.name !== 'AbortError') error.textContent = `Could not load ${label}: ${e.message}`;
      status.textContent = 'no model loaded';
    } finally {
      if (state.loading === ctl) state.loading = null;
      refreshCache();
    }
  }

  $('load').onclick = () => load(url.value.trim(), url.value.trim());
  const drop = $('drop');
  const file = $('model-file');
  drop.ondragover = (e) => {
    e.preventDefault();
    drop.classList.add('over');
  };
  drop.ondragleave = () => drop.classList.remove('over');
  drop.ondrop = (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    const f = e.dataTransfer.files[0];
    if (f) load(f, f.name);
  };
  file.onchange = () => file.files[0] && load(file.files[0], file.files[0].name);
  refreshCache();
  if (params.get('autoload') === '1') load(url.value.trim(), url.value.trim());
  return state;
}
