//! The JavaScript API of the wasm build (wasm32 only): one class, [`WickModel`], that the npm
//! package's hand-written ESM layer (`pkg-config/`) wraps into async iterators, OpenAI-shaped
//! chunks, a worker proxy and the OPFS weight cache.
//!
//! Design decisions:
//! - Generation is driven from Rust and reports each token to a JS callback. The callback may
//!   return a `Promise`; it is awaited before the next token, which gives the JS side
//!   backpressure and a place to yield to its event loop (so an abort message or a click is seen
//!   between tokens even when the CPU executor computes synchronously). A callback result of
//!   `false` stops generation (finish reason `"abort"`).
//! - Generations run in one task per model that keeps its session (the KV cache) between
//!   calls, so the next turn of a chat evaluates only its new tokens (see `generator`). They
//!   run one after another, in the order asked. The task holds its own reference to the model:
//!   [`WickModel::unload`] during a generation frees the weights when that generation ends.
//! - Every failure is a JS `Error` whose message is wick's error text; nothing here panics.

mod abortable;
mod generator;
mod inspect;
mod options;
mod threads;
mod tools;

pub use tools::ToolCallParser;

use std::rc::Rc;

use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use web_sys::{Blob, ReadableStream};

use abortable::Abortable;

use crate::source::{BlobSource, ReadableStreamSource, UrlSource};
use crate::{LoadOptions, Model};

/// A JS `Error` with `msg`.
fn js_err(msg: impl std::fmt::Display) -> JsValue {
    js_sys::Error::new(&msg.to_string()).into()
}

/// Milliseconds from the core's clock (`performance.now()` in windows and workers).
fn now_ms() -> f64 {
    crate::clock::now_secs() * 1e3
}

/// Bytes of this module's wasm memory. It only grows, so this is also the peak so far: what the
/// tab holds for wick beyond the GPU's buffers.
fn heap_bytes() -> f64 {
    let mem: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    mem.buffer().unchecked_into::<js_sys::ArrayBuffer>().byte_length() as f64
}

/// Set `obj[key] = value` on a fresh object (cannot fail on a plain object).
fn set(obj: &Object, key: &str, value: impl Into<JsValue>) {
    let _ = Reflect::set(obj, &JsValue::from_str(key), &value.into());
}

/// A model loaded into the browser: on WebGPU when the browser has an adapter, else on the
/// CPU (see [`WickModel::executor`]).
#[wasm_bindgen]
pub struct WickModel {
    model: Option<Rc<Model>>,
    executor: &'static str,
    /// Requests to the model's generation task (see `generator`).
    queue: generator::Queue,
}

#[wasm_bindgen]
impl WickModel {
    /// Load a GGUF model. `source`: a URL string, a `Blob`/`File`, or a `ReadableStream` of
    /// bytes. `opts`: `{ executor?: "auto"|"webgpu"|"cpu", onProgress?: (p) => void, size?:
    /// number (a stream's length, for progress), signal?: AbortSignal }`. `onProgress` receives
    /// `{ loaded, total, tensorsDone, tensorsTotal }` (`total` may be `undefined`). Aborting
    /// `signal` stops the load at its next chunk ("the load was aborted").
    pub async fn load(source: JsValue, opts: JsValue) -> Result<WickModel, JsValue> {
        let executor = options::executor(&opts).map_err(js_err)?;
        let on_progress = options::function(&opts, "onProgress").map_err(js_err)?;
        let size = options::number(&opts, "size").map_err(js_err)?;
        let signal = options::field(&opts, "signal");
        let progress = move |p: &crate::gguf::Progress| {
            if let Some(f) = &on_progress {
                let o = Object::new();
                set(&o, "loaded", p.bytes_done as f64);
                set(
                    &o,
                    "total",
                    p.bytes_total.map(|t| JsValue::from_f64(t as f64)).unwrap_or(JsValue::UNDEFINED),
                );
                set(&o, "tensorsDone", p.tensors_done as f64);
                set(&o, "tensorsTotal", p.tensors_total as f64);
                set(&o, "heapBytes", heap_bytes());
                // A throwing progress callback must not abort the load.
                let _ = f.call1(&JsValue::NULL, &o);
            }
        };
        let memory_budget = options::number(&opts, "memoryBudget").map_err(js_err)?.filter(|b| *b > 0.0);
        let lo = LoadOptions {
            executor,
            on_progress: Some(Box::new(progress)),
            memory_budget: memory_budget.map(|b| b as u64),
            ..Default::default()
        };
        let loaded = if let Some(url) = source.as_string() {
            Model::load(Abortable::new(UrlSource::open(&url).await.map_err(js_err)?, signal), lo).await
        } else if let Some(blob) = source.dyn_ref::<Blob>() {
            Model::load(Abortable::new(BlobSource::new(blob), signal), lo).await
        } else if let Some(stream) = source.dyn_ref::<ReadableStream>() {
            let mut src = ReadableStreamSource::new(stream).map_err(js_err)?;
            if let Some(n) = size.filter(|n| *n >= 0.0) {
                src = src.with_len(n as u64);
            }
            Model::load(Abortable::new(src, signal), lo).await
        } else {
            return Err(js_err("a model source must be a URL string, a Blob or File, or a ReadableStream"));
        };
        let model = Rc::new(loaded.map_err(js_err)?);
        let queue = generator::Queue::default();
        generator::spawn(Rc::clone(&model), queue.clone());
        Ok(WickModel { executor: model.executor_name(), model: Some(model), queue })
    }

    fn get(&self) -> Result<&Rc<Model>, JsValue> {
        self.model.as_ref().ok_or_else(|| js_err("the model has been unloaded"))
    }

    /// The executor the model runs on: `"webgpu"` or `"cpu"` (the fallback when the browser
    /// has no WebGPU adapter).
    #[wasm_bindgen(getter)]
    pub fn executor(&self) -> String {
        self.executor.to_string()
    }

    /// Whether [`unload`](Self::unload) has been called.
    #[wasm_bindgen(getter)]
    pub fn unloaded(&self) -> bool {
        self.model.is_none()
    }

    /// The model's `general.name`, if it has one.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> Option<String> {
        self.model.as_ref().and_then(|m| m.name().map(str::to_string))
    }

    /// `{ name, executor, arch, nLayer, nEmbd, nCtxTrain, nVocab, hasChatTemplate, threads,
    /// simd, nCtx, memory: { weights, kv, scratch, total } }`: `threads` is how many threads the
    /// CPU executor's loops run on (more than 1 in the threaded build), `simd` the wasm SIMD
    /// this build's CPU kernels use (`relaxed` or `simd128`), `nCtx` the context a
    /// generation gets by default (the largest that fits the memory budget) and `memory` the
    /// estimate there.
    pub fn info(&self) -> Result<JsValue, JsValue> {
        let m = self.get()?;
        let hp = m.hparams();
        let o = Object::new();
        set(&o, "name", m.name().map(JsValue::from_str).unwrap_or(JsValue::NULL));
        set(&o, "executor", self.executor);
        set(&o, "arch", format!("{:?}", hp.arch).to_lowercase());
        set(&o, "nLayer", hp.n_layer as f64);
        set(&o, "nEmbd", hp.n_embd as f64);
        set(&o, "nCtxTrain", hp.n_ctx_train as f64);
        set(&o, "nVocab", m.n_vocab() as f64);
        set(&o, "hasChatTemplate", m.chat_template().is_some());
        set(&o, "threads", crate::exec::cpu::threads() as f64);
        set(&o, "simd", if cfg!(target_feature = "relaxed-simd") { "relaxed" } else { "simd128" });
        if let Ok((n_ctx, e)) = m.default_context(0).and_then(|n| Ok((n, m.memory_estimate(n, 0)?))) {
            set(&o, "nCtx", n_ctx as f64);
            let mem = Object::new();
            set(&mem, "weights", e.weights as f64);
            set(&mem, "kv", e.kv as f64);
            set(&mem, "scratch", e.scratch as f64);
            set(&mem, "total", e.total() as f64);
            set(&o, "memory", mem);
        }
        Ok(o.into())
    }

    /// Render `messages` (`[{ role, content }]`) with the model's chat template, ending with
    /// the assistant's turn opened. `vars`: extra template variables (`{ enable_thinking }`),
    /// or undefined. `tools`: OpenAI's `tools` list the template sees (checked), or undefined.
    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(
        &self,
        messages: JsValue,
        vars: JsValue,
        tools: JsValue,
    ) -> Result<String, JsValue> {
        let msgs = options::messages(&messages).map_err(js_err)?;
        let vars = options::template_vars(&vars).map_err(js_err)?;
        let tools = options::json(&tools, "tools").map_err(js_err)?;
        if let Some(t) = &tools {
            crate::chat::tools::validate_tools(t).map_err(js_err)?;
        }
        let t = self
            .get()?
            .chat_template()
            .ok_or_else(|| js_err("this model has no chat template (tokenizer.chat_template)"))?;
        t.render_with_tools(&msgs, true, tools.as_ref(), &vars).map_err(js_err)
    }

    /// Token ids of `text`. `addSpecial`: add BOS/EOS as the vocabulary asks (true for a raw
    /// prompt, false for chat-template output, which has them already).
    pub fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>, JsValue> {
        self.get()?.tokenizer().encode(text, add_special, true).map_err(js_err)
    }

    /// Generate a continuation of `prompt`, calling `onToken(text, id)` for every piece of
    /// text (the callback may return a Promise, awaited before the next token; `false`, or a
    /// Promise of `false`, stops). `opts`: sampling options (see the package's types) plus
    /// `addSpecial` (default true), `nCtx` (default: the model's, capped at 4096) and
    /// `context_shift` (`true`: keep the prompt and go on when the context is full, dropping
    /// the older half of the generated text; a number: keep that many tokens from the start).
    /// Resolves to `{ promptTokens, promptEvaluated, completionTokens, prefillMs, decodeMs,
    /// finishReason }` with `finishReason` one of `"stop"`, `"length"`, `"abort"`.
    pub fn generate(&self, prompt: String, opts: JsValue, on_token: Function) -> Result<Promise, JsValue> {
        self.get()?;
        let gen_opts = options::generate_options(&opts).map_err(js_err)?;
        let add_special = options::field(&opts, "addSpecial").as_bool().unwrap_or(true);
        let n_ctx = options::count(&opts, "nCtx").map_err(js_err)?.unwrap_or(0);
        let shift = options::context_shift(&opts).map_err(js_err)?;
        let mut req = None;
        let promise = Promise::new(&mut |resolve, reject| {
            req = Some(generator::Request {
                prompt: prompt.clone(),
                add_special,
                n_ctx,
                shift,
                opts: gen_opts.clone(),
                on_token: on_token.clone(),
                resolve,
                reject,
            });
        });
        match req {
            Some(r) => self.queue.push(generator::Job::Generate(r)),
            None => return Err(js_err("could not create the generation's promise")),
        }
        Ok(promise)
    }

    /// The model's identity for prompt caches: the hex of [`Model::digest`].
    #[wasm_bindgen(getter)]
    pub fn digest(&self) -> Result<String, JsValue> {
        Ok(crate::digest::hex(&self.get()?.digest()))
    }

    /// Save the conversation the model's session holds (after the generations queued before
    /// this call) as a prompt cache: `onChunk(bytes: Uint8Array)` receives its bytes in
    /// order (it may return a Promise, awaited before the next piece). Resolves to
    /// `{ tokens: Uint32Array, bytes }`, or `null` when the session holds nothing.
    #[wasm_bindgen(js_name = savePromptCache)]
    pub fn save_prompt_cache(&self, on_chunk: Function) -> Result<Promise, JsValue> {
        self.get()?;
        let mut req = None;
        let promise = Promise::new(&mut |resolve, reject| {
            req = Some(generator::SaveRequest { on_chunk: on_chunk.clone(), resolve, reject });
        });
        let req = req.ok_or_else(|| js_err("could not create the save's promise"))?;
        self.queue.push(generator::Job::Save(req));
        Ok(promise)
    }

    /// Restore a saved prompt cache (`blob`: a `Blob`/`File` of what `savePromptCache` wrote)
    /// into the session a generation of `prompt` with `opts` (`{ addSpecial, nCtx }`) would
    /// use, keeping the longest common prefix of its tokens and the prompt's: the next
    /// generation evaluates only the rest. Resolves to `{ restored, promptTokens, ms }`; a
    /// stale or corrupt cache rejects ("prompt cache rejected: ...") and leaves the session
    /// empty.
    #[wasm_bindgen(js_name = restorePromptCache)]
    pub fn restore_prompt_cache(
        &self,
        blob: Blob,
        prompt: String,
        opts: JsValue,
    ) -> Result<Promise, JsValue> {
        self.get()?;
        let add_special = options::field(&opts, "addSpecial").as_bool().unwrap_or(true);
        let n_ctx = options::count(&opts, "nCtx").map_err(js_err)?.unwrap_or(0);
        let mut req = None;
        let promise = Promise::new(&mut |resolve, reject| {
            req = Some(generator::RestoreRequest {
                blob: blob.clone(),
                prompt: prompt.clone(),
                add_special,
                n_ctx,
                resolve,
                reject,
            });
        });
        let req = req.ok_or_else(|| js_err("could not create the restore's promise"))?;
        self.queue.push(generator::Job::Restore(req));
        Ok(promise)
    }

    /// Free the model's weights (GPU buffers or CPU memory). A generation still running keeps
    /// them until it ends. Later calls fail with "the model has been unloaded".
    pub fn unload(&mut self) {
        self.model = None;
        self.queue.close();
    }
}

impl Drop for WickModel {
    /// `free()` from JS: the generation task ends too.
    fn drop(&mut self) {
        self.queue.close();
    }
}
