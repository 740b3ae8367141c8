//! Reading the plain JS option objects of the wasm API into wick's Rust options.
//!
//! Every field is optional; a field of the wrong type is an error that names it (a silently
//! ignored `temperature: "0.5"` would be worse than a clear message).

use js_sys::{Array, Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use crate::chat::ChatMessage;
use crate::sampling::SamplingParams;
use crate::{Constraint, ExecutorKind, GenerateOptions};

/// A field of a JS options object (`undefined` when `obj` is not an object or has no such field).
pub(crate) fn field(obj: &JsValue, key: &str) -> JsValue {
    if !obj.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn absent(v: &JsValue) -> bool {
    v.is_undefined() || v.is_null()
}

/// An optional finite number.
pub(crate) fn number(obj: &JsValue, key: &str) -> Result<Option<f64>, String> {
    let v = field(obj, key);
    if absent(&v) {
        return Ok(None);
    }
    match v.as_f64() {
        Some(x) if x.is_finite() => Ok(Some(x)),
        _ => Err(format!("option '{key}' must be a finite number")),
    }
}

/// An optional non-negative integer.
pub(crate) fn count(obj: &JsValue, key: &str) -> Result<Option<usize>, String> {
    match number(obj, key)? {
        None => Ok(None),
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x <= 9.0e15 => Ok(Some(x as usize)),
        Some(_) => Err(format!("option '{key}' must be a non-negative integer")),
    }
}

/// An optional string.
pub(crate) fn string(obj: &JsValue, key: &str) -> Result<Option<String>, String> {
    let v = field(obj, key);
    if absent(&v) {
        return Ok(None);
    }
    v.as_string().map(Some).ok_or_else(|| format!("option '{key}' must be a string"))
}

/// An optional function.
pub(crate) fn function(obj: &JsValue, key: &str) -> Result<Option<Function>, String> {
    let v = field(obj, key);
    if absent(&v) {
        return Ok(None);
    }
    v.dyn_into::<Function>().map(Some).map_err(|_| format!("option '{key}' must be a function"))
}

/// The `executor` option: `"auto"` (default), `"webgpu"` or `"cpu"`.
pub(crate) fn executor(obj: &JsValue) -> Result<ExecutorKind, String> {
    match string(obj, "executor")?.as_deref() {
        None | Some("auto") => Ok(ExecutorKind::Auto),
        Some("webgpu") => Ok(ExecutorKind::WebGpu),
        Some("cpu") => Ok(ExecutorKind::Cpu),
        Some(other) => Err(format!("unknown executor '{other}' (choose auto, webgpu or cpu)")),
    }
}

/// The `context_shift` option: absent or `false`, none (a full context ends the generation);
/// `true`, keep the prompt and scroll the generated text (`Some(None)`); a number, keep that
/// many tokens from the start (`Some(Some(n))`). Either way at most half the context stays.
pub(crate) fn context_shift(obj: &JsValue) -> Result<Option<Option<usize>>, String> {
    let v = field(obj, "context_shift");
    if absent(&v) {
        return Ok(None);
    }
    if let Some(on) = v.as_bool() {
        return Ok(on.then_some(None));
    }
    match count(obj, "context_shift") {
        Ok(Some(n)) => Ok(Some(Some(n))),
        _ => {
            Err("option 'context_shift' must be a boolean or a non-negative integer (tokens to keep)".into())
        }
    }
}

/// An optional JS value as JSON (through `JSON.stringify`); `what` names it in errors.
pub(crate) fn json(v: &JsValue, what: &str) -> Result<Option<serde_json::Value>, String> {
    if absent(v) {
        return Ok(None);
    }
    let text = js_sys::JSON::stringify(v)
        .ok()
        .and_then(|s| s.as_string())
        .ok_or_else(|| format!("'{what}' cannot be turned into JSON"))?;
    serde_json::from_str(&text).map(Some).map_err(|e| format!("'{what}': {e}"))
}

/// An optional field of a JS options object as JSON.
fn json_value(obj: &JsValue, key: &str) -> Result<Option<serde_json::Value>, String> {
    json(&field(obj, key), &format!("option {key}"))
}

/// The constraint options: OpenAI's `response_format` (`{type: "json_object"}` or `{type:
/// "json_schema", json_schema: {name, schema, strict}}`), or wick's `json_schema` (a schema
/// object) or `grammar` (Lark text). At most one of them.
fn constraint(obj: &JsValue) -> Result<Option<Constraint>, String> {
    let format = json_value(obj, "response_format")?;
    let schema = json_value(obj, "json_schema")?;
    Constraint::from_options(format.as_ref(), schema.as_ref(), string(obj, "grammar")?)
        .map_err(|e| e.to_string())
}

/// Generation options, in the OpenAI spelling where one exists: `max_tokens` (or
/// `maxTokens`), `temperature`, `top_p`, `top_k`, `min_p`, `repeat_penalty`,
/// `presence_penalty`, `frequency_penalty`, `seed`, `stop` (a string or an array of strings),
/// `response_format` / `json_schema` / `grammar` (see [`constraint`]), `logprobs` (a boolean)
/// with `top_logprobs` (0 to 20), `logit_bias` (`{token id: -100..100}`), `ignore_eos`.
pub(crate) fn generate_options(obj: &JsValue) -> Result<GenerateOptions, String> {
    let mut o = GenerateOptions::default();
    let either =
        |a: &str, b: &str| -> Result<Option<f64>, String> { Ok(number(obj, a)?.or(number(obj, b)?)) };
    if let Some(n) = count(obj, "max_tokens")?.or(count(obj, "maxTokens")?) {
        o.max_tokens = n;
    }
    let s: &mut SamplingParams = &mut o.sampling;
    if let Some(x) = number(obj, "temperature")? {
        s.temperature = x as f32;
    }
    if let Some(x) = either("top_p", "topP")? {
        s.top_p = x as f32;
    }
    if let Some(x) = count(obj, "top_k")?.or(count(obj, "topK")?) {
        s.top_k = x;
    }
    if let Some(x) = either("min_p", "minP")? {
        s.min_p = x as f32;
    }
    if let Some(x) = either("repeat_penalty", "repeatPenalty")? {
        s.repeat_penalty = x as f32;
    }
    if let Some(x) = either("presence_penalty", "presencePenalty")? {
        s.presence_penalty = x as f32;
    }
    if let Some(x) = either("frequency_penalty", "frequencyPenalty")? {
        s.frequency_penalty = x as f32;
    }
    if s.presence_penalty != 0.0 || s.frequency_penalty != 0.0 || s.repeat_penalty != 1.0 {
        s.penalty_last_n = s.penalty_last_n.max(64);
    }
    if let Some(x) = count(obj, "seed")? {
        s.seed = x as u64;
    }
    let stop = field(obj, "stop");
    if let Some(one) = stop.as_string() {
        o.stop = vec![one];
    } else if Array::is_array(&stop) {
        let arr = Array::from(&stop);
        for v in arr.iter() {
            o.stop.push(v.as_string().ok_or("option 'stop' must be a string or an array of strings")?);
        }
    } else if !absent(&stop) {
        return Err("option 'stop' must be a string or an array of strings".into());
    }
    o.constraint = constraint(obj)?;
    if let Some(bias) = json_value(obj, "logit_bias")? {
        let map = bias.as_object().ok_or("option 'logit_bias' must be an object of {token id: bias}")?;
        for (k, v) in map {
            let id: u32 = k.parse().map_err(|_| format!("logit_bias: key '{k}' is not a token id"))?;
            let b = v.as_f64().filter(|b| (-100.0..=100.0).contains(b));
            let b = b.ok_or_else(|| {
                format!("logit_bias: the bias of token {id} must be a number from -100 to 100")
            })?;
            o.logit_bias.push((id, b as f32));
        }
    }
    match field(obj, "ignore_eos") {
        v if absent(&v) => {}
        v => o.ignore_eog = v.as_bool().ok_or("option 'ignore_eos' must be a boolean")?,
    }
    match field(obj, "controlText") {
        v if absent(&v) => {}
        v => o.control_text = v.as_bool().ok_or("option 'controlText' must be a boolean")?,
    }
    let logprobs = field(obj, "logprobs");
    let top = count(obj, "top_logprobs")?;
    match logprobs.as_bool() {
        Some(true) => o.logprobs = Some(top.unwrap_or(0)),
        Some(false) if top.is_some_and(|n| n > 0) => {
            return Err("'top_logprobs' needs 'logprobs: true'".into())
        }
        Some(false) => {}
        None if absent(&logprobs) && top.is_some_and(|n| n > 0) => {
            return Err("'top_logprobs' needs 'logprobs: true'".into())
        }
        None if absent(&logprobs) => {}
        None => return Err("option 'logprobs' must be a boolean".into()),
    }
    Ok(o)
}

/// Extra chat-template variables: a plain object (undefined or null: none).
pub(crate) fn template_vars(v: &JsValue) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    if absent(v) {
        return Ok(serde_json::Map::new());
    }
    let text = js_sys::JSON::stringify(v)
        .ok()
        .and_then(|s| s.as_string())
        .ok_or("template variables cannot be turned into JSON")?;
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        _ => Err("template variables must be an object, e.g. { enable_thinking: false }".into()),
    }
}

/// An array of `{ role, content }` objects (OpenAI's messages: an assistant's may have
/// `tool_calls` and a null `content`, a tool result has `tool_call_id` and `name`).
pub(crate) fn messages(v: &JsValue) -> Result<Vec<ChatMessage>, String> {
    if !Array::is_array(v) {
        return Err("messages must be an array of { role, content } objects".into());
    }
    let mut out = Vec::new();
    for (i, m) in Array::from(v).iter().enumerate() {
        let role = string(&m, "role").ok().flatten();
        let content = field(&m, "content");
        let content_ok = content.is_string() || (absent(&content) && !absent(&field(&m, "tool_calls")));
        if role.is_none() || !content_ok {
            return Err(format!("messages[{i}] must have string 'role' and 'content' fields"));
        }
        let value = json(&m, &format!("messages[{i}]"))?.unwrap_or_default();
        let msg: ChatMessage = serde_json::from_value(value).map_err(|e| format!("messages[{i}]: {e}"))?;
        out.push(msg);
    }
    Ok(out)
}
