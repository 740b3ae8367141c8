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

#[derive(Default)]
struct State {
    items: VecDeque<Request>,
    waker: Option<Waker>,
    closed: bool,
}

/// The sending side, held by the `WickModel`; closing it ends the task once the current
/// generation is done (which drops the session and the task's reference to the model).
#[derive(Clone, Default)]
pub(crate) struct Queue(Rc<RefCell<State>>);

impl Queue {
    /// Queue `req`; rejects it at once when the queue is closed.
    pub(crate) fn push(&self, req: Request) {
        let mut s = self.0.borrow_mut();
        if s.closed {
            drop(s);
            let _ = req.reject.call1(&JsValue::NULL, &js_err("the model has been unloaded"));
            return;
        }
        s.items.push_back(req);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    /// Refuse new requests, reject the waiting ones, and let the task end.
    pub(crate) fn close(&self) {
        let waiting: Vec<Request> = {
            let mut s = self.0.borrow_mut();
            s.closed = true;
            if let Some(w) = s.waker.take() {
                w.wake();
            }
            s.items.drain(..).collect()
        };
        for r in waiting {
            let _ = r.reject.call1(&JsValue::NULL, &js_err("the model has been unloaded"));
        }
    }

    async fn next(&self) -> Option<Request> {
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
        while let Some(req) = queue.next().await {
            match run(model, &mut session, &req).await {
                Ok(v) => {
                    let _ = req.resolve.call1(&JsValue::NULL, &v);
                }
                Err(e) => {
                    // A failed step may leave the cache half-written: start afresh next time.
                    session = None;
                    let _ = req.reject.call1(&JsValue::NULL, &e);
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

/// One generation on the kept session; resolves to its stats object.
async fn run<'m>(
    model: &'m Model,
    slot: &mut Option<(usize, Session<'m>)>,
    req: &Request,
) -> Result<JsValue, JsValue> {
    let ids = model.tokenizer().encode(&req.prompt, req.add_special, true).map_err(js_err)?;
    if slot.as_ref().is_some_and(|(n, _)| *n != req.n_ctx) {
        *slot = None;
    }
    let session = match slot {
        Some((_, s)) => s,
        None => {
            let s =
                model.session(SessionOptions { n_ctx: req.n_ctx, ..Default::default() }).map_err(js_err)?;
            &mut slot.insert((req.n_ctx, s)).1
        }
    };
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
    set(&o, "finishReason", reason);
    Ok(o.into())
}
