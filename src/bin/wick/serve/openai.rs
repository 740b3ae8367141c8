//! OpenAI's request and response shapes for the chat and text completion endpoints, and its
//! error object.

use serde_json::{json, Value};
use tokio::sync::mpsc;
use wick::chat::tools::{validate_tools, ParsedOutput, ToolChoice, ToolDelta};
use wick::chat::{ChatMessage, ToolCall};
use wick::constrain::Constraint;
use wick::sampling::SamplingParams;

use super::engine::{Event, Job, Prompt, Tools};

/// Which error status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    BadRequest,
    Unauthorized,
    Busy,
    Internal,
}

/// An error as OpenAI sends it: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub kind: Kind,
    message: String,
    code: Option<&'static str>,
}

impl ApiError {
    pub fn new(kind: Kind, message: impl Into<String>) -> ApiError {
        ApiError { kind, message: message.into(), code: None }
    }
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(Kind::BadRequest, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(Kind::Internal, message)
    }
    pub fn with_code(mut self, code: Option<&'static str>) -> ApiError {
        self.code = code;
        self
    }
    pub fn body(&self) -> Value {
        let kind = match self.kind {
            Kind::BadRequest => "invalid_request_error",
            Kind::Unauthorized => "authentication_error",
            Kind::Busy => "server_busy",
            Kind::Internal => "server_error",
        };
        let code = self.code.or(match self.kind {
            Kind::Unauthorized => Some("invalid_api_key"),
            _ => None,
        });
        json!({ "error": { "message": self.message, "type": kind, "param": null, "code": code } })
    }
}

/// A parsed completion request.
pub struct Request {
    prompt: Option<Prompt>,
    max_tokens: usize,
    sampling: SamplingParams,
    stop: Vec<String>,
    logit_bias: Vec<(u32, f32)>,
    ignore_eos: bool,
    logprobs: Option<usize>,
    /// `tools`, `tool_choice` and `parallel_tool_calls` (when `tools` is given).
    tools: Option<(Value, ToolChoice, bool)>,
    /// `response_format`, `json_schema` or `grammar`, enforced by a grammar.
    constraint: Option<Constraint>,
    pub stream: bool,
    pub include_usage: bool,
    /// Choices to generate (`n`): each its own sequence, choice i sampled with seed + i.
    pub n: usize,
    /// This request's number (in the server's life), which its choices share.
    number: u64,
}

/// The most choices one request may ask for (`n`); each takes a slot of the server.
pub const MAX_CHOICES: u64 = 64;

/// The output's constraint (`Constraint::from_options`: `response_format`, `json_schema` or
/// `grammar`).
fn constraint(v: &Value) -> Result<Option<Constraint>, ApiError> {
    let given = |key: &str| v.get(key).filter(|x| !x.is_null());
    let grammar = match given("grammar") {
        None => None,
        Some(g) => Some(
            g.as_str().ok_or_else(|| ApiError::bad("'grammar' must be a string (GBNF or Lark)"))?.to_string(),
        ),
    };
    Constraint::from_options(given("response_format"), given("json_schema"), grammar)
        .map_err(|e| ApiError::bad(e.to_string()))
}

fn num(v: &Value, key: &str) -> Result<Option<f64>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_f64()
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| ApiError::bad(format!("'{key}' must be a number"))),
    }
}

fn count(v: &Value, key: &str, max: u64) -> Result<Option<usize>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .filter(|&n| n <= max)
            .map(|n| Some(n as usize))
            .ok_or_else(|| ApiError::bad(format!("'{key}' must be an integer from 0 to {max}"))),
    }
}

fn flag(v: &Value, key: &str) -> Result<bool, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad(format!("'{key}' must be a boolean"))),
    }
}

/// A message's content: a string, or an array of `{type: "text", text}` parts.
fn content(m: &Value, i: usize) -> Result<String, ApiError> {
    match m.get("content") {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::Array(parts)) => {
            let mut s = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => s.push_str(t),
                    _ => {
                        return Err(ApiError::bad(format!(
                            "messages[{i}].content: only text parts are supported"
                        )))
                    }
                }
            }
            Ok(s)
        }
        Some(_) => {
            Err(ApiError::bad(format!("messages[{i}].content must be a string or an array of text parts")))
        }
    }
}

/// A chat message: role, content, and an assistant's `tool_calls` or a tool result's
/// `tool_call_id` and `name`.
fn message(m: &Value, role: &str, i: usize) -> Result<ChatMessage, ApiError> {
    let mut msg = ChatMessage::new(role, content(m, i)?);
    match m.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(calls) => {
            msg.tool_calls = serde_json::from_value::<Vec<ToolCall>>(calls.clone()).map_err(|e| {
                ApiError::bad(format!(
                    "messages[{i}].tool_calls must be a list of {{id, type, function: {{name, arguments}}}}: {e}"
                ))
            })?;
        }
    }
    for (key, field) in [("tool_call_id", &mut msg.tool_call_id), ("name", &mut msg.name)] {
        match m.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => *field = Some(s.clone()),
            Some(_) => return Err(ApiError::bad(format!("messages[{i}].{key} must be a string"))),
        }
    }
    Ok(msg)
}

/// `tools`, `tool_choice` and `parallel_tool_calls`: None without tools (`tool_choice` then
/// may only be `none` or `auto`).
fn tools(v: &Value) -> Result<Option<(Value, ToolChoice, bool)>, ApiError> {
    let choice = ToolChoice::from_json(v.get("tool_choice").unwrap_or(&Value::Null))
        .map_err(|e| ApiError::bad(e.to_string()))?;
    let parallel = match v.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad("'parallel_tool_calls' must be a boolean")),
    };
    match v.get("tools") {
        None | Some(Value::Null) => match choice {
            ToolChoice::Auto | ToolChoice::None => Ok(None),
            _ => Err(ApiError::bad("'tool_choice' asks for a call but there are no 'tools'")),
        },
        Some(list) => {
            validate_tools(list).map_err(|e| ApiError::bad(e.to_string()))?;
            if let ToolChoice::Function(name) = &choice {
                let known =
                    list.as_array().is_some_and(|l| l.iter().any(|t| t["function"]["name"] == name.as_str()));
                if !known {
                    return Err(ApiError::bad(format!(
                        "'tool_choice' names '{name}', which is not in 'tools'"
                    )));
                }
            }
            Ok(Some((list.clone(), choice, parallel)))
        }
    }
}

impl Request {
    /// Whether log-probabilities were asked for.
    pub fn wants_logprobs(&self) -> bool {
        self.logprobs.is_some()
    }

    /// `parallel_tool_calls` (true unless the request says false).
    pub fn parallel_tool_calls(&self) -> bool {
        self.tools.as_ref().is_none_or(|t| t.2)
    }

    /// The tools of the request (for the parser: Qwen3-Coder's string parameters).
    pub fn tool_list(&self) -> Value {
        self.tools.as_ref().map_or(Value::Null, |t| t.0.clone())
    }

    /// Parse a `/v1/chat/completions` (`chat`) or `/v1/completions` body.
    pub fn parse(v: &Value, chat: bool) -> Result<Request, ApiError> {
        let prompt = if chat {
            let msgs = v
                .get("messages")
                .and_then(Value::as_array)
                .ok_or_else(|| ApiError::bad("'messages' must be an array"))?;
            if msgs.is_empty() {
                return Err(ApiError::bad("'messages' is empty"));
            }
            let mut out = Vec::with_capacity(msgs.len());
            for (i, m) in msgs.iter().enumerate() {
                let role = m
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ApiError::bad(format!("messages[{i}].role must be a string")))?;
                out.push(message(m, role, i)?);
            }
            Prompt::Chat(out)
        } else {
            match v.get("prompt") {
                Some(Value::String(s)) => Prompt::Text(s.clone()),
                Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
                    Prompt::Text(a[0].as_str().unwrap_or_default().into())
                }
                _ => return Err(ApiError::bad("'prompt' must be a string")),
            }
        };
        let n = count(v, "n", MAX_CHOICES)?.unwrap_or(1);
        if n == 0 {
            return Err(ApiError::bad("'n' must be at least 1"));
        }
        let max_tokens = count(v, "max_completion_tokens", 1 << 24)?
            .or(count(v, "max_tokens", 1 << 24)?)
            .unwrap_or(if chat { 1 << 24 } else { 16 });
        let mut s = SamplingParams::default();
        if let Some(t) = num(v, "temperature")? {
            s.temperature = t as f32;
        }
        if let Some(x) = num(v, "top_p")? {
            s.top_p = x as f32;
        }
        if let Some(k) = count(v, "top_k", 1 << 24)? {
            s.top_k = k;
        }
        if let Some(x) = num(v, "min_p")? {
            s.min_p = x as f32;
        }
        if let Some(x) = num(v, "presence_penalty")? {
            s.presence_penalty = x as f32;
        }
        if let Some(x) = num(v, "frequency_penalty")? {
            s.frequency_penalty = x as f32;
        }
        if let Some(x) = num(v, "repeat_penalty")? {
            s.repeat_penalty = x as f32;
        }
        if let Some(seed) = count(v, "seed", u64::MAX >> 11)? {
            s.seed = seed as u64;
        }
        s.validate().map_err(|e| ApiError::bad(e.to_string()))?;
        let stop = match v.get("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(x)) => vec![x.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::bad("'stop' must be a string or an array of strings"))?,
            Some(_) => return Err(ApiError::bad("'stop' must be a string or an array of strings")),
        };
        let mut logit_bias = Vec::new();
        match v.get("logit_bias") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, b) in m {
                    let id: u32 = k
                        .parse()
                        .map_err(|_| ApiError::bad(format!("logit_bias: key '{k}' is not a token id")))?;
                    let b = b.as_f64().ok_or_else(|| ApiError::bad("logit_bias values must be numbers"))?;
                    logit_bias.push((id, b as f32));
                }
            }
            Some(_) => return Err(ApiError::bad("'logit_bias' must be an object of {token id: bias}")),
        }
        let include_usage = match v.get("stream_options") {
            None | Some(Value::Null) => false,
            Some(o) => flag(o, "include_usage")?,
        };
        let top = count(v, "top_logprobs", 20)?;
        let logprobs = match (flag(v, "logprobs"), chat) {
            (Ok(true), true) => Some(top.unwrap_or(0)),
            (Ok(false), _) if top.is_some_and(|n| n > 0) => {
                return Err(ApiError::bad("'top_logprobs' needs 'logprobs': true"))
            }
            (Ok(false), _) => None,
            (Ok(true), false) | (Err(_), false) => {
                return Err(ApiError::bad("'logprobs' is supported on /v1/chat/completions only"));
            }
            (Err(e), true) => return Err(e),
        };
        let tools = if chat { tools(v)? } else { None };
        let constraint = constraint(v)?;
        if constraint.is_some() && tools.as_ref().is_some_and(|t| t.1 != ToolChoice::None) {
            return Err(ApiError::bad(
                "give either a constraint ('response_format', 'json_schema', 'grammar') or 'tools' (with tool_choice other than none)",
            ));
        }
        Ok(Request {
            prompt: Some(prompt),
            max_tokens,
            sampling: s,
            stop,
            logit_bias,
            ignore_eos: flag(v, "ignore_eos")?,
            logprobs,
            tools,
            constraint,
            stream: flag(v, "stream")?,
            include_usage,
            n,
            number: {
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
        })
    }

    /// The engine's job for choice `index` of this request, reporting to `events`.
    pub fn job(&self, index: usize, events: mpsc::UnboundedSender<Event>) -> Job {
        let mut sampling = self.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(index as u64);
        let prompt = match &self.prompt {
            Some(Prompt::Text(t)) => Prompt::Text(t.clone()),
            Some(Prompt::Chat(m)) => Prompt::Chat(m.clone()),
            None => Prompt::Text(String::new()),
        };
        Job {
            prompt,
            max_tokens: self.max_tokens,
            sampling,
            stop: self.stop.clone(),
            logit_bias: self.logit_bias.clone(),
            ignore_eos: self.ignore_eos,
            logprobs: self.logprobs,
            tools: self.tools.as_ref().map(|(list, choice, parallel)| Tools {
                list: list.clone(),
                choice: choice.clone(),
                parallel: *parallel,
            }),
            constraint: self.constraint.clone(),
            choice: (self.n > 1).then_some((self.number, index)),
            events,
        }
    }
}

/// `usage`, with the prompt tokens reused from the prefix cache.
pub fn usage(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": { "cached_tokens": cached },
    })
}

/// The response shapes of one request.
pub struct Shape {
    chat: bool,
    id: String,
    created: u64,
    model: String,
}

impl Shape {
    pub fn new(chat: bool, model: &str) -> Shape {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let created =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let n = N.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-wick-{created:x}{n:x}", if chat { "chatcmpl" } else { "cmpl" });
        Shape { chat, id, created, model: model.to_string() }
    }

    /// A streamed chunk: a piece of text (the role with the first) with its tokens'
    /// log-probability entries (when asked), or the finish.
    pub fn chunk(
        &self,
        index: usize,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
        logprobs: Option<Vec<Value>>,
    ) -> Value {
        if self.chat {
            let mut delta = json!({});
            if let Some(t) = text {
                delta["content"] = json!(t);
            } else if first {
                delta["content"] = json!("");
            }
            self.delta_chunk(index, delta, first, finish, logprobs)
        } else {
            json!({
                "id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [{ "index": index, "text": text.unwrap_or(""), "finish_reason": finish, "logprobs": null }],
            })
        }
    }

    /// A chat chunk of choice `index` with this `delta` (the role added to the first).
    pub fn delta_chunk(
        &self,
        index: usize,
        mut delta: Value,
        first: bool,
        finish: Option<&str>,
        logprobs: Option<Vec<Value>>,
    ) -> Value {
        let lp = logprobs.map_or(Value::Null, |c| json!({ "content": c }));
        if first {
            delta["role"] = json!("assistant");
        }
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{ "index": index, "delta": delta, "finish_reason": finish, "logprobs": lp }],
        })
    }

    /// Ids of the tool calls of this response: `call_<response>_0`, ...
    /// (Choice `index` > 0: `call_<response>_<index>_0`, ...)
    pub fn call_id_prefix(&self, index: usize) -> String {
        let id = self.id.rsplit('-').next().unwrap_or_default();
        if index == 0 {
            format!("call_{id}_")
        } else {
            format!("call_{id}_{index}_")
        }
    }

    /// The last chunk of `stream_options.include_usage`: no choices, the usage.
    pub fn usage_chunk(&self, usage: Value) -> Value {
        let object = if self.chat { "chat.completion.chunk" } else { "text_completion" };
        json!({ "id": self.id, "object": object, "created": self.created, "model": self.model, "choices": [], "usage": usage })
    }

    /// Choice `index` of a whole (non-streamed) response.
    pub fn choice(&self, index: usize, text: &str, finish: &str, logprobs: Option<Vec<Value>>) -> Value {
        let lp = logprobs.map_or(Value::Null, |c| json!({ "content": c }));
        if self.chat {
            json!({ "index": index, "message": { "role": "assistant", "content": text }, "finish_reason": finish, "logprobs": lp })
        } else {
            json!({ "index": index, "text": text, "finish_reason": finish, "logprobs": null })
        }
    }

    /// A whole (non-streamed) response of these choices.
    pub fn whole(&self, choices: Vec<Value>, prompt: usize, completion: usize, cached: usize) -> Value {
        let object = if self.chat { "chat.completion" } else { "text_completion" };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": choices, "usage": usage(prompt, completion, cached),
        })
    }
}

/// A streamed tool-call delta as an OpenAI chunk's `delta`: content, or a `tool_calls` entry
/// (index, id, type and function name first, then argument fragments).
pub fn tool_delta(d: &ToolDelta) -> Value {
    match d {
        ToolDelta::Content(t) => json!({ "content": t }),
        ToolDelta::CallStart { index, id, name } => json!({ "tool_calls": [{
            "index": index, "id": id, "type": "function", "function": { "name": name, "arguments": "" },
        }] }),
        ToolDelta::Arguments { index, fragment } => {
            json!({ "tool_calls": [{ "index": index, "function": { "arguments": fragment } }] })
        }
    }
}

/// A parsed output's `message` fields (`content`, null when only calls came, and
/// `tool_calls`) and its finish reason: `tool_calls` when it called, `length` when a call was
/// cut off, else the engine's.
pub fn tool_message(out: &ParsedOutput, finish: &'static str) -> (Value, Vec<Value>, &'static str) {
    let calls: Vec<Value> = out
        .calls
        .iter()
        .map(|c| json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
        .collect();
    let content = if out.content.is_empty() && !calls.is_empty() { Value::Null } else { json!(out.content) };
    let finish = if out.unfinished.is_some() {
        "length"
    } else if !calls.is_empty() {
        "tool_calls"
    } else {
        finish
    };
    (content, calls, finish)
}
