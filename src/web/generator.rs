//! The generation task of a [`super::WickModel`]: one long-lived async task per model that
//! owns a reference to the model and keeps one [`Session`] (its KV cache) from request to
//! request, so a chat's next turn evaluates only the tokens that are new (the session reuses
//! the longest common prefix). Requests arrive through a small single-threaded queue; each
//! is answered by resolving or rejecting the JS promise its caller holds.
//!
//! Owning the session inside the task's future is what lets it borrow the model without any
//! self-referential struct: the borrow lives in the future's state.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use js_sys::{Array, Function, Object, Promise};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use super::{js_err, now_ms, set};
use crate::{FinishReason, GenerateOptions, Logprobs, Model, Session, SessionOptions, TokenLogprob};

/// One generation asked for from JS.
pub(crate) struct Request {
    pub(crate) prompt: String,
    pub(crate) add_special: bool,
    /// Context size asked for (0: the model's, capped at 4096).
    pub(crate) n_ctx: usize,
    /// Context shift (options.rs `context_shift`): `Some(None)` keeps the prompt.
    pub(crate) shift: Option<Option<usize>>,
    pub(crate) opts: GenerateOptions,
    pub(crate) on_token: Function,
    pub(crate) resolve: Function,
    pub(crate) reject: Function,
}

/// Save the session's conversation as a prompt cache, handing its bytes to `on_chunk` (a
/// `Uint8Array` each; a returned Promise is awaited before the next).
pub(crate) struct SaveRequest {
    pub(crate) on_chunk: Function,
    pub(crate) resolve: Function,
    pub(crate) reject: Function,
}

/// Restore a saved prompt cache (`blob`) into the session for `n_ctx`, keeping the longest
/// common prefix with `prompt`.
pub(crate) struct RestoreRequest {
    pub(crate) blob: web_sys::Blob,
    pub(crate) prompt: String,
    pub(crate) add_special: bool,
    pub(crate) n_ctx: usize,
    pub(crate) resolve: Function,
    pub(crate) reject: Function,
}

/// What the task is asked to do, in order.
pub(crate) enum Job {
    Generate(Request),
    Save(SaveRequest),
    Restore(RestoreRequest),
}

impl Job {
    fn resolve(&self) -> &Function {
        match self {
            Job::Generate(r) => &r.resolve,
            Job::Save(r) => &r.resolve,
            Job::Restore(r) => &r.resolve,
        }
    }
    fn reject(&self) -> &Function {
        match self {
            Job::Generate(r) => &r.reject,
            Job::Save(r) => &r.reject,
            Job::Restore(r) => &r.reject,
        }
    }
}

#[derive(Default)]
struct State {
    items: VecDeque<Job>,
    waker: Option<Waker>,
    closed: bool,
}

/// The sending side, held by the `WickModel`; closing it ends the task once the current
/// generation is done (which drops the session and the task's reference to the model).
#[derive(Clone, Default)]
pub(crate) struct Queue(Rc<RefCell<State>>);

impl Queue {
    /// Queue `req`; rejects it at once when the queue is closed.
    pub(crate) fn push(&self, req: Job) {
        let mut s = self.0.borrow_mut();
        if s.closed {
            drop(s);
            let _ = req.reject().call1(&JsValue::NULL, &js_err("the model has been unloaded"));
            return;
        }
        s.items.push_back(req);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    /// Refuse new requests, reject the waiting ones, and let the task end.
    pub(crate) fn close(&self) {
        let waiting: Vec<Job> = {
            let mut s = self.0.borrow_mut();
            s.closed = true;
            if let Some(w) = s.waker.take() {
                w.wake();
            }
            s.items.drain(..).collect()
        };
        for r in waiting {
            let _ = r.reject().call1(&JsValue::NULL, &js_err("the model has been unloaded"));
        }
    }

    async fn next(&self) -> Option<Job> {
        poll_fn(|cx| {
            let mut s = self.0.borrow_mut();
            if let Some(r) = s.items.pop_front() {
                return Poll::Ready(Some(r));
            }
            if s.closed {
                return Poll::Ready(None);
            }
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// Start the task of `model`, fed by `queue`.
pub(crate) fn spawn(model: Rc<Model>, queue: Queue) {
    wasm_bindgen_futures::spawn_local(async move {
        let model: &Model = &model;
        // The session and the context size it was made for.
        let mut session: Option<(usize, Session<'_>)> = None;
        while let Some(job) = queue.next().await {
            let done = match &job {
                Job::Generate(req) => run(model, &mut session, req).await,
                Job::Save(req) => save(&session, req).await,
                Job::Restore(req) => restore(model, &mut session, req).await,
            };
            match done {
                Ok(v) => {
                    let _ = job.resolve().call1(&JsValue::NULL, &v);
                }
                Err(e) => {
                    // A failed step may leave the cache half-written: start afresh next time.
                    if !matches!(job, Job::Save(_)) {
                        session = None;
                    }
                    let _ = job.reject().call1(&JsValue::NULL, &e);
                }
            }
        }
    });
}

/// `{ token, logprob, bytes }` of one token, as OpenAI's `logprobs.content` entries have them.
fn token_entry(model: &Model, t: &TokenLogprob) -> Object {
    let bytes = model.tokenizer().token_bytes(t.id);
    let o = Object::new();
    set(&o, "token", String::from_utf8_lossy(bytes).into_owned());
    set(&o, "logprob", t.logprob as f64);
    let arr = Array::new();
    for &b in bytes {
        arr.push(&JsValue::from(b));
    }
    set(&o, "bytes", arr);
    o
}

/// An OpenAI `logprobs.content` entry: the token's, with `top_logprobs`.
fn logprobs_entry(model: &Model, lp: &Logprobs) -> JsValue {
    let o = token_entry(model, &lp.token);
    let top = Array::new();
    for t in &lp.top {
        top.push(&token_entry(model, t));
    }
    set(&o, "top_logprobs", top);
    o.into()
}

/// The kept session for a context of `n_ctx`, made anew when there is none or it was made for
/// another context size.
fn session_for<'s, 'm>(
    model: &'m Model,
    slot: &'s mut Option<(usize, Session<'m>)>,
    n_ctx: usize,
) -> Result<&'s mut Session<'m>, JsValue> {
    if slot.as_ref().is_some_and(|(n, _)| *n != n_ctx) {
        *slot = None;
    }
    Ok(match slot {
        Some((_, s)) => s,
        None => {
            let s = model.session(SessionOptions { n_ctx, ..Default::default() }).map_err(js_err)?;
            &mut slot.insert((n_ctx, s)).1
        }
    })
}

/// Save the kept session's conversation; resolves to `{ tokens: Uint32Array, bytes }`, or
/// `null` when there is nothing to save.
async fn save(slot: &Option<(usize, Session<'_>)>, req: &SaveRequest) -> Result<JsValue, JsValue> {
    let Some((_, session)) = slot.as_ref().filter(|(_, s)| !s.tokens().is_empty()) else {
        return Ok(JsValue::NULL);
    };
    let on_chunk = &req.on_chunk;
    let bytes = session
        .save_prompt_cache_to(|b| async move {
            let chunk = js_sys::Uint8Array::from(&b[..]);
            let ret = on_chunk
                .call1(&JsValue::NULL, &chunk)
                .map_err(|e| crate::Error::io("saving the prompt cache", js_text(&e)))?;
            if let Some(p) = ret.dyn_ref::<Promise>() {
                JsFuture::from(p.clone())
                    .await
                    .map_err(|e| crate::Error::io("saving the prompt cache", js_text(&e)))?;
            }
            Ok(())
        })
        .await
        .map_err(js_err)?;
    let o = Object::new();
    set(&o, "tokens", js_sys::Uint32Array::from(session.tokens()));
    set(&o, "bytes", bytes as f64);
    Ok(o.into())
}

/// A JS exception's text.
fn js_text(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

/// Restore a saved prompt cache into the session for the request's context; resolves to
/// `{ restored, promptTokens, ms }`.
async fn restore<'m>(
    model: &'m Model,
    slot: &mut Option<(usize, Session<'m>)>,
    req: &RestoreRequest,
) -> Result<JsValue, JsValue> {
    let ids = model.tokenizer().encode(&req.prompt, req.add_special, true).map_err(js_err)?;
    let session = session_for(model, slot, req.n_ctx)?;
    let t0 = now_ms();
    let restored = session
        .restore_prompt_cache_from(crate::source::BlobSource::new(&req.blob), &ids)
        .await
        .map_err(js_err)?;
    let o = Object::new();
    set(&o, "restored", restored as f64);
    set(&o, "promptTokens", ids.len() as f64);
    set(&o, "ms", now_ms() - t0);
    Ok(o.into())
}

/// One generation on the kept session; resolves to its stats object.
async fn run<'m>(
    model: &'m Model,
    slot: &mut Option<(usize, Session<'m>)>,
    req: &Request,
) -> Result<JsValue, JsValue> {
    let ids = model.tokenizer().encode(&req.prompt, req.add_special, true).map_err(js_err)?;
    let session = session_for(model, slot, req.n_ctx)?;
    let t0 = now_ms();
    let mut opts = req.opts.clone();
    opts.context_shift = req.shift.map(|keep| keep.unwrap_or(ids.len()));
    let mut gen = session.generate(&ids, opts).map_err(js_err)?;
    let n_eval = gen.n_prompt_evaluated();
    let (mut t_first, mut aborted) = (None, false);
    while let Some(tok) = gen.next().await {
        let tok = tok.map_err(js_err)?;
        t_first.get_or_insert_with(now_ms);
        let id = tok.id.map(JsValue::from).unwrap_or(JsValue::UNDEFINED);
        let lp = tok.logprobs.as_ref().map_or(JsValue::UNDEFINED, |lp| logprobs_entry(model, lp));
        let mut ret = req.on_token.call3(&JsValue::NULL, &JsValue::from_str(&tok.text), &id, &lp)?;
        if let Some(p) = ret.dyn_ref::<Promise>() {
            ret = JsFuture::from(p.clone()).await?;
        }
        if ret == JsValue::FALSE {
            aborted = true;
            break;
        }
    }
    let t_end = now_ms();
    let first = t_first.unwrap_or(t_end);
    let reason = match (aborted, gen.finish_reason()) {
        (true, _) => "abort",
        (false, Some(FinishReason::Length | FinishReason::ContextFull)) => "length",
        _ => "stop",
    };
    let o = Object::new();
    set(&o, "promptTokens", ids.len() as f64);
    set(&o, "promptEvaluated", n_eval as f64);
    set(&o, "completionTokens", gen.n_generated() as f64);
    set(&o, "prefillMs", first - t0);
    set(&o, "decodeMs", t_end - first);
    if let Some(s) = gen.constraint_secs() {
        set(&o, "constraintMs", s * 1e3);
    }
    set(&o, "finishReason", reason);
    drop(gen);
    // Context fill: the tokens the session holds now, of its context.
    set(&o, "contextTokens", session.tokens().len() as f64);
    set(&o, "nCtx", session.n_ctx() as f64);
    set(&o, "heapBytes", super::heap_bytes());
    Ok(o.into())
}
