//! `wick serve`: an OpenAI-compatible HTTP server (axum on tokio) in front of one model.
//!
//! The model lives on its own thread ([`engine`]), which batches every running request into
//! one forward pass per step; the HTTP side parses requests ([`openai`]), queues them (a
//! bounded queue: 503 when full), and streams the engine's events back as server-sent events.

mod engine;
mod openai;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use wick::chat::tools::{ParsedOutput, ToolCallStream};
use wick::{Error, Result};

use engine::{Cmd, EngineOptions, Event, Metrics};
use openai::{ApiError, Kind};

/// What `wick serve` was asked for.
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub parallel: usize,
    pub n_batch: usize,
    pub queue: usize,
    pub api_key: Option<String>,
    /// Shift a full window instead of ending the reply ([`EngineOptions::context_shift`]).
    pub context_shift: bool,
}

struct App {
    cmds: mpsc::Sender<Cmd>,
    /// Most generation requests queued or running (slots + queue).
    max_inflight: u64,
    metrics: Arc<Metrics>,
    api_key: Option<String>,
    model_name: String,
    started: u64,
}

type Shared = Arc<App>;

/// Load the model on its thread, then serve until the process ends.
pub fn serve(
    load: impl FnOnce() -> Result<wick::Model> + Send + 'static,
    n_ctx: usize,
    o: ServeOptions,
) -> Result<()> {
    // Generation requests are bounded by the in-flight count (slots + queue); the channel has
    // room for all of them and for the small commands (tokenize) beside.
    let (tx, rx) = mpsc::channel::<Cmd>(o.parallel.max(1) + o.queue + 256);
    let metrics = Arc::new(Metrics::default());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(String, usize)>>();
    let m = Arc::clone(&metrics);
    let (parallel, n_batch, context_shift) = (o.parallel.max(1), o.n_batch.max(1), o.context_shift);
    std::thread::Builder::new()
        .name("wick-engine".into())
        .spawn(move || {
            let model = match load() {
                Ok(m) => m,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let own = model.hparams().n_ctx_train;
            // The shared cache: --ctx, or 4096 positions a slot (each within the model's own).
            let total = if n_ctx == 0 { own.min(4096) * parallel } else { n_ctx };
            let opts =
                EngineOptions { parallel, n_batch, n_ctx: total, n_seq_max: own.min(total), context_shift };
            let name = model.name().unwrap_or("wick").to_string();
            let _ = ready_tx.send(Ok((name, total)));
            pollster::block_on(engine::run(model, opts, rx, m));
        })
        .map_err(|e| Error::io("starting the engine thread", e))?;
    let (model_name, total) =
        ready_rx.recv().map_err(|_| Error::InvalidArgument("the engine thread ended".into()))??;
    let started =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let max_inflight = (parallel + o.queue) as u64;
    let app =
        Arc::new(App { cmds: tx, max_inflight, metrics, api_key: o.api_key.clone(), model_name, started });
    let router = Router::new()
        .route("/health", get(|| async { Json(json!({ "status": "ok" })) }))
        .route("/metrics", get(metrics_text))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .layer(DefaultBodyLimit::max(8 << 20))
        .with_state(app);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the HTTP runtime", e))?;
    rt.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", o.host, o.port)
            .parse()
            .map_err(|e| Error::InvalidArgument(format!("--host {} --port {}: {e}", o.host, o.port)))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io(format!("listening on {addr}"), e))?;
        let local = listener.local_addr().map_err(|e| Error::io("reading the address", e))?;
        eprintln!(
            "wick serve: http://{local}/v1 ({} slots, a KV cache of {total} positions{})",
            parallel,
            if o.api_key.is_some() { ", API key required" } else { "" }
        );
        axum::serve(listener, router).await.map_err(|e| Error::io("serving", e))
    })
}

/// The key check: `Authorization: Bearer KEY` when a key is set.
fn authorized(app: &App, headers: &HeaderMap) -> std::result::Result<(), ApiError> {
    let Some(key) = &app.api_key else { return Ok(()) };
    let given =
        headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError::new(Kind::Unauthorized, "a valid API key is needed (Authorization: Bearer KEY)"))
    }
}

fn parse_body(body: &[u8]) -> std::result::Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(Kind::BadRequest, format!("the body is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::new(Kind::BadRequest, "the body must be a JSON object"));
    }
    Ok(v)
}

async fn models(State(app): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(e) = authorized(&app, &headers) {
        return e.into_response();
    }
    Json(json!({
        "object": "list",
        "data": [{ "id": app.model_name, "object": "model", "created": app.started, "owned_by": "wick" }]
    }))
    .into_response()
}

async fn metrics_text(State(app): State<Shared>) -> Response {
    let m = &app.metrics;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let queued = app.cmds.max_capacity() - app.cmds.capacity();
    let body = format!(
        "# HELP wick_requests_total Generation requests admitted.\n# TYPE wick_requests_total counter\nwick_requests_total {}\n\
         # HELP wick_prompt_tokens_total Prompt tokens of admitted requests.\n# TYPE wick_prompt_tokens_total counter\nwick_prompt_tokens_total {}\n\
         # HELP wick_prompt_tokens_cached_total Prompt tokens reused from the prefix cache.\n# TYPE wick_prompt_tokens_cached_total counter\nwick_prompt_tokens_cached_total {}\n\
         # HELP wick_generated_tokens_total Tokens generated.\n# TYPE wick_generated_tokens_total counter\nwick_generated_tokens_total {}\n\
         # HELP wick_steps_total Forward passes.\n# TYPE wick_steps_total counter\nwick_steps_total {}\n\
         # HELP wick_step_seconds_total Time in forward passes.\n# TYPE wick_step_seconds_total counter\nwick_step_seconds_total {:.6}\n\
         # HELP wick_active_requests Requests being generated.\n# TYPE wick_active_requests gauge\nwick_active_requests {}\n\
         # HELP wick_queued_commands Commands waiting for the engine.\n# TYPE wick_queued_commands gauge\nwick_queued_commands {}\n\
         # HELP wick_requests_in_flight Generation requests queued or running.\n# TYPE wick_requests_in_flight gauge\nwick_requests_in_flight {}\n\
         # HELP wick_context_shifts_total Full windows shifted to go on generating.\n# TYPE wick_context_shifts_total counter\nwick_context_shifts_total {}\n",
        get(&m.requests),
        get(&m.prompt_tokens),
        get(&m.cached_tokens),
        get(&m.generated_tokens),
        get(&m.steps),
        get(&m.step_seconds_micros) as f64 / 1e6,
        get(&m.active),
        queued,
        get(&m.inflight),
        get(&m.context_shifts),
    );
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

async fn tokenize(State(app): State<Shared>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let r = async {
        authorized(&app, &headers)?;
        let v = parse_body(&body)?;
        let text = v
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad("'content' must be a string"))?;
        let add_special = v.get("add_special").and_then(Value::as_bool).unwrap_or(false);
        let (reply, rx) = oneshot::channel();
        submit(&app, Cmd::Tokenize { text: text.to_string(), add_special, reply })?;
        let ids = rx.await.map_err(|_| ApiError::internal("the engine stopped"))?.map_err(ApiError::bad)?;
        Ok::<_, ApiError>(Json(json!({ "tokens": ids })))
    }
    .await;
    r.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

async fn detokenize(State(app): State<Shared>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let r = async {
        authorized(&app, &headers)?;
        let v = parse_body(&body)?;
        let ids: Vec<u32> = v
            .get("tokens")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok())).collect())
            .ok_or_else(|| ApiError::bad("'tokens' must be an array of token ids"))?;
        let (reply, rx) = oneshot::channel();
        submit(&app, Cmd::Detokenize { ids, reply })?;
        let text = rx.await.map_err(|_| ApiError::internal("the engine stopped"))?.map_err(ApiError::bad)?;
        Ok::<_, ApiError>(Json(json!({ "content": text })))
    }
    .await;
    r.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

/// Queue a command; 503 when the queue is full.
fn submit(app: &App, cmd: Cmd) -> std::result::Result<(), ApiError> {
    app.cmds.try_send(cmd).map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => {
            ApiError::new(Kind::Busy, "the server is busy: too many requests queued")
        }
        mpsc::error::TrySendError::Closed(_) => ApiError::internal("the engine stopped"),
    })
}

async fn chat(State(app): State<Shared>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    generate(app, headers, body, true).await
}

async fn completions(State(app): State<Shared>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    generate(app, headers, body, false).await
}

/// Both completion endpoints: parse, queue (a job per choice), then stream or collect the
/// engine's events.
async fn generate(app: Shared, headers: HeaderMap, body: axum::body::Bytes, chat: bool) -> Response {
    let prepared = async {
        authorized(&app, &headers)?;
        let v = parse_body(&body)?;
        let req = openai::Request::parse(&v, chat)?;
        // Count the request's choices in before queueing them; 503 past slots + queue.
        let k = req.n as u64;
        let n = app.metrics.inflight.fetch_add(k, Ordering::Relaxed);
        if n + k > app.max_inflight {
            app.metrics.inflight.fetch_sub(k, Ordering::Relaxed);
            return Err(ApiError::new(Kind::Busy, "the server is busy: every slot and the queue are full"));
        }
        let mut rxs = Vec::with_capacity(req.n);
        for i in 0..req.n {
            let (tx, rx) = mpsc::unbounded_channel();
            if let Err(e) = submit(&app, Cmd::Generate(Box::new(req.job(i, tx)))) {
                // The jobs queued already end when their receivers (dropped here) are gone.
                app.metrics.inflight.fetch_sub(k - i as u64, Ordering::Relaxed);
                return Err(e);
            }
            rxs.push(rx);
        }
        Ok::<_, ApiError>((req, rxs))
    }
    .await;
    let (req, mut rxs) = match prepared {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let shape = openai::Shape::new(chat, &app.model_name);
    // Each choice's first event decides the status: an error before any token is the response.
    // (The usage counts the prompt once, with choice 0's cached tokens, as OpenAI does.)
    let (mut cached, mut family) = (0, None);
    for (i, rx) in rxs.iter_mut().enumerate() {
        match rx.recv().await {
            Some(Event::Started { cached: c, tool_family, .. }) if i == 0 => {
                (cached, family) = (c, tool_family);
            }
            Some(Event::Started { .. }) => {}
            Some(Event::Error { message, bad_request, code }) => {
                let kind = if bad_request { Kind::BadRequest } else { Kind::Internal };
                return ApiError::new(kind, message).with_code(code).into_response();
            }
            _ => return ApiError::internal("the engine stopped").into_response(),
        }
    }
    let wants_lp = req.wants_logprobs();
    let mut choices: Vec<Choice> = (0..req.n)
        .map(|index| Choice {
            index,
            sent_role: false,
            held_lp: Vec::new(),
            text: String::new(),
            // The tool-call parser, when the request has tools in play.
            calls: family.map(|f| {
                ToolCallStream::new(f)
                    .parallel(req.parallel_tool_calls())
                    .id_prefix(shape.call_id_prefix(index))
                    .tools(&req.tool_list())
            }),
        })
        .collect();
    let mut events = tokio_stream::StreamMap::new();
    for (i, rx) in rxs.into_iter().enumerate() {
        events.insert(i, UnboundedReceiverStream::new(rx));
    }
    if !req.stream {
        let mut whole: Vec<Option<Value>> = vec![None; req.n];
        let mut completion = 0;
        while let Some((i, ev)) = events.next().await {
            match ev {
                Event::Text(t, lp) => {
                    choices[i].text.push_str(&t);
                    choices[i].held_lp.extend(lp);
                }
                Event::Done { finish, prompt_tokens, completion_tokens } => {
                    completion += completion_tokens;
                    whole[i] = Some(choices[i].whole(&shape, finish, wants_lp));
                    if whole.iter().all(Option::is_some) {
                        let all = whole.into_iter().flatten().collect();
                        return Json(shape.whole(all, prompt_tokens, completion, cached)).into_response();
                    }
                }
                Event::Error { message, .. } => return ApiError::internal(message).into_response(),
                Event::Started { .. } => {}
            }
        }
        return ApiError::internal("the engine stopped").into_response();
    }
    // Engine events to SSE events on a task of their own: when the client goes away the SSE
    // stream is dropped, the task's send fails, it drops the engine's receivers, and the
    // engine cancels the sequences at their next step.
    let include_usage = req.include_usage;
    let (sse_tx, sse_rx) = mpsc::unbounded_channel::<SseEvent>();
    tokio::spawn(async move {
        let send = |data: Value| sse_tx.send(SseEvent::default().data(data.to_string())).is_ok();
        let (mut left, mut completion) = (choices.len(), 0);
        while let Some((i, ev)) = events.next().await {
            let ok = match ev {
                Event::Text(t, lp) => choices[i].text_chunks(&shape, &t, lp, wants_lp).into_iter().all(send),
                Event::Done { finish, prompt_tokens, completion_tokens } => {
                    for c in choices[i].finish_chunks(&shape, finish, wants_lp) {
                        let _ = send(c);
                    }
                    completion += completion_tokens;
                    left -= 1;
                    if left > 0 {
                        continue;
                    }
                    if include_usage {
                        let _ = send(shape.usage_chunk(openai::usage(prompt_tokens, completion, cached)));
                    }
                    let _ = sse_tx.send(SseEvent::default().data("[DONE]"));
                    break;
                }
                Event::Error { message, .. } => {
                    let _ = send(
                        json!({ "error": { "message": message, "type": "server_error", "param": null, "code": null } }),
                    );
                    break;
                }
                Event::Started { .. } => true,
            };
            if !ok {
                break;
            }
        }
    });
    let stream = UnboundedReceiverStream::new(sse_rx).map(Ok::<_, std::convert::Infallible>);
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// One choice of a response as its events arrive.
struct Choice {
    index: usize,
    /// Whether a chunk (with the role) went out.
    sent_role: bool,
    /// Log-probability entries not sent yet: of text the tool-call parser holds back, or (not
    /// streamed) all of them.
    held_lp: Vec<Value>,
    /// The text so far (not streamed).
    text: String,
    calls: Option<ToolCallStream>,
}

impl Choice {
    /// Whether this chunk is the choice's first (and note that one went out).
    fn first(&mut self) -> bool {
        !std::mem::replace(&mut self.sent_role, true)
    }

    /// The chunks of a piece of text `t` and its entries `lp`.
    fn text_chunks(&mut self, shape: &openai::Shape, t: &str, lp: Vec<Value>, wants_lp: bool) -> Vec<Value> {
        if self.calls.is_none() {
            let first = self.first();
            return vec![shape.chunk(self.index, Some(t), first, None, wants_lp.then_some(lp))];
        }
        self.held_lp.extend(lp);
        let deltas = self.calls.as_mut().map(|p| p.push(t)).unwrap_or_default();
        deltas
            .iter()
            .map(|d| {
                let first = self.first();
                let lp = wants_lp.then(|| std::mem::take(&mut self.held_lp));
                shape.delta_chunk(self.index, openai::tool_delta(d), first, None, lp)
            })
            .collect()
    }

    /// The last chunks: what the tool-call parser still held, then the finish (`length` for
    /// a call cut off, `tool_calls` when it called).
    fn finish_chunks(&mut self, shape: &openai::Shape, finish: &'static str, wants_lp: bool) -> Vec<Value> {
        let mut out = Vec::new();
        let mut finish = finish;
        if let Some((rest, unfinished, n_calls)) = self.calls.as_mut().map(|p| {
            let (rest, unfinished) = p.finish();
            (rest, unfinished, p.calls())
        }) {
            for d in &rest {
                let first = self.first();
                let lp = wants_lp.then(|| std::mem::take(&mut self.held_lp));
                out.push(shape.delta_chunk(self.index, openai::tool_delta(d), first, None, lp));
            }
            if unfinished.is_some() {
                finish = "length";
            } else if n_calls > 0 {
                finish = "tool_calls";
            }
        }
        // Entries of text the parser held back and dropped (whitespace around calls).
        let lp = (wants_lp && !self.held_lp.is_empty()).then(|| std::mem::take(&mut self.held_lp));
        let first = self.first();
        out.push(shape.chunk(self.index, None, first, Some(finish), lp));
        out
    }

    /// The choice of a whole response, from the text collected (tool calls parsed).
    fn whole(&mut self, shape: &openai::Shape, finish: &'static str, wants_lp: bool) -> Value {
        let lp = wants_lp.then(|| std::mem::take(&mut self.held_lp));
        let Some(parser) = self.calls.as_mut() else {
            return shape.choice(self.index, &self.text, finish, lp);
        };
        let mut out = ParsedOutput::default();
        parser.push(&self.text).into_iter().for_each(|d| out.apply(d));
        let (rest, unfinished) = parser.finish();
        rest.into_iter().for_each(|d| out.apply(d));
        out.unfinished = unfinished;
        let (content, tool_calls, finish) = openai::tool_message(&out, finish);
        let mut c = shape.choice(self.index, "", finish, lp);
        c["message"]["content"] = content;
        if !tool_calls.is_empty() {
            c["message"]["tool_calls"] = Value::Array(tool_calls);
        }
        c
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match self.kind {
            Kind::BadRequest => StatusCode::BAD_REQUEST,
            Kind::Unauthorized => StatusCode::UNAUTHORIZED,
            Kind::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, Json(self.body())).into_response()
    }
}
