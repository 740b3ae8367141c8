//! Chat templates: turn a conversation into the prompt text a model was trained on.
//!
//! GGUF files carry the Hugging Face Jinja template in `tokenizer.chat_template`. wick renders
//! it with minijinja set up the way `transformers` sets up jinja2
//! (`transformers/utils/chat_template_utils.py`): `trim_blocks` and `lstrip_blocks` on, no
//! autoescape, the trailing newline of the template dropped, and the globals
//! `raise_exception(msg)` and `strftime_now(fmt)`, a `tojson` filter that writes what
//! Python's `json.dumps(ensure_ascii=False)` writes, and Python's string and dict methods
//! (`.strip()`, `.startswith()`, `.split()`, `.items()`, ...) from `minijinja-contrib`'s pycompat.
//! Maps keep their insertion order as Python's dicts do (minijinja's `preserve_order`), and
//! vendor/minijinja prints lists and dicts as Python does and follows Jinja2 where it differed
//! (`none is iterable`, a safe string `+` a plain one). transformers' `{% generation %}` tag
//! renders its body.
//! The render context is `messages` (each a map with the keys of OpenAI's message: `role`,
//! `content`, and `tool_calls`, `tool_call_id`, `name` where present), `add_generation_prompt`,
//! `bos_token`, `eos_token`, `tools` (the caller's list, or `none` as transformers passes it
//! when there are none; [`ChatTemplate::render_with_tools`]) and `documents` set to `none`.
//!
//! A template comes from the file, so it is untrusted code: every render runs with
//! [`RenderLimits`] scaled to the conversation, fuel (instructions, and the bytes they read)
//! and a size budget (the bytes the template builds and writes, through the size budget that
//! vendor/minijinja adds), and fails with [`Error::Template`] naming the limit it hit.

mod pyjson;
mod strftime;
pub mod tools;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use minijinja::value::{Enumerator, Kwargs, Object, Rest, Value};
use minijinja::{AutoEscape, Environment, ErrorKind, State};

use crate::gguf::Metadata;
use crate::{Error, Result};

/// The GGUF key holding the default chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The date `strftime_now` sees on targets without a clock (wasm32-unknown-unknown), unless
/// [`ChatTemplate::set_fixed_time`] says otherwise: 2025-01-01 00:00:00 UTC.
pub const FALLBACK_UNIX_TIME: i64 = 1_735_689_600;

/// Sentinel in the shared time cell meaning "read the clock".
const USE_CLOCK: i64 = i64::MIN;

/// Nesting limit for template evaluation (macros, includes, nested expressions).
const RECURSION_LIMIT: usize = 100;

/// Name under which the template is compiled (shows in error messages).
const NAME: &str = "chat_template";

/// Fuel every render gets whatever the conversation: template instructions (one each), plus one
/// per KiB a comparison, filter, function or method reads.
pub const BASE_FUEL: u64 = 1_000_000;
/// Fuel per message and per KiB of message text, on top of [`BASE_FUEL`].
pub const FUEL_PER_MESSAGE: u64 = 5_000;
/// Bytes every render may build whatever the conversation (strings, lists, output).
pub const BASE_BYTES: u64 = 16 << 20;
/// Bytes a render may build per byte of message text, on top of [`BASE_BYTES`].
pub const BYTES_PER_INPUT_BYTE: u64 = 64;

/// The longest string `tojson` accepts as `indent` (a number is clamped to this many spaces).
const MAX_JSON_INDENT: usize = 64;

/// One turn of a conversation, with the fields of OpenAI's chat messages that chat templates
/// read: an assistant's `tool_calls`, and a tool result's `tool_call_id` and `name`. It
/// (de)serializes as OpenAI's JSON message (a `null` content reads as empty).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// "system", "user", "assistant", "tool", ...
    pub role: String,
    /// The text of the turn.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// The tools an assistant turn calls (empty: none, and the template sees no `tool_calls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On a tool result: the name of the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// An assistant turn that calls tools (`content` may be empty).
    pub fn assistant_tool_calls(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage { tool_calls, ..ChatMessage::new("assistant", content) }
    }

    /// A tool's result: role `tool`, answering the call `tool_call_id` to the tool `name`.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> ChatMessage {
        ChatMessage {
            tool_call_id: Some(tool_call_id.into()),
            name: Some(name.into()),
            ..ChatMessage::new("tool", content)
        }
    }

    /// The bytes of text this message gives the template (for [`RenderLimits`]).
    fn text_len(&self) -> usize {
        let calls: usize =
            self.tool_calls.iter().map(|c| c.id.len() + c.name.len() + json_len(&c.arguments)).sum();
        self.role.len()
            + self.content.len()
            + calls
            + self.tool_call_id.as_ref().map_or(0, String::len)
            + self.name.as_ref().map_or(0, String::len)
    }
}

/// One call of a function tool in an assistant turn. It (de)serializes as OpenAI's
/// `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "OpenAiToolCall", into = "OpenAiToolCall")]
pub struct ToolCall {
    /// The call's id, which the tool result's `tool_call_id` repeats.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments: a JSON object, or the JSON text of one as OpenAI sends it. Templates get
    /// a mapping: a string that parses as a JSON object is parsed before rendering (as
    /// llama.cpp does); any other string is passed as it is.
    pub arguments: serde_json::Value,
}

impl ToolCall {
    /// A call with the given id, function name and arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: serde_json::Value) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments }
    }

    /// The arguments as the template sees them.
    fn template_arguments(&self) -> Value {
        if let serde_json::Value::String(s) = &self.arguments {
            if let Ok(parsed @ serde_json::Value::Object(_)) = serde_json::from_str::<serde_json::Value>(s) {
                return Value::from_serialize(&parsed);
            }
        }
        Value::from_serialize(&self.arguments)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct OpenAiToolCall {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: OpenAiFunction,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct OpenAiFunction {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

fn function_type() -> String {
    "function".to_string()
}

impl From<OpenAiToolCall> for ToolCall {
    fn from(c: OpenAiToolCall) -> ToolCall {
        ToolCall { id: c.id, name: c.function.name, arguments: c.function.arguments }
    }
}

impl From<ToolCall> for OpenAiToolCall {
    fn from(c: ToolCall) -> OpenAiToolCall {
        OpenAiToolCall {
            id: c.id,
            kind: function_type(),
            function: OpenAiFunction { name: c.name, arguments: c.arguments },
        }
    }
}

/// `null` (or a missing field) as the type's default.
fn null_as_empty<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    use serde::Deserialize;
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The length of a JSON value's text.
fn json_len(v: &serde_json::Value) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

/// A message as the template sees it: a map with exactly the keys Python's dict of the OpenAI
/// message would have, in its order (`role`, `content`, then `tool_calls`, `tool_call_id`,
/// `name` only when present, so `message.tool_calls is defined` means what it means in
/// transformers), so `tojson` and `.items()` match transformers.
///
/// The fields are made into values once: a value shares its string, so reading
/// `message.content` costs the same however long the content is (it was copied at every read,
/// and a template testing a 1 MiB message in a loop ran for 20 s on its default fuel).
#[derive(Debug)]
struct MessageValue {
    /// Which of the optional keys are present: bit 0 `tool_calls`, 1 `tool_call_id`, 2 `name`.
    present: usize,
    role: Value,
    content: Value,
    tool_calls: Value,
    tool_call_id: Value,
    name: Value,
}

/// The keys of a message, in order, by which optional ones are present (`MessageValue::present`).
const MESSAGE_KEYS: [&[&str]; 8] = [
    &["role", "content"],
    &["role", "content", "tool_calls"],
    &["role", "content", "tool_call_id"],
    &["role", "content", "tool_calls", "tool_call_id"],
    &["role", "content", "name"],
    &["role", "content", "tool_calls", "name"],
    &["role", "content", "tool_call_id", "name"],
    &["role", "content", "tool_calls", "tool_call_id", "name"],
];

impl MessageValue {
    fn new(msg: &ChatMessage) -> MessageValue {
        let present = usize::from(!msg.tool_calls.is_empty())
            | usize::from(msg.tool_call_id.is_some()) << 1
            | usize::from(msg.name.is_some()) << 2;
        let tool_calls = Value::from(
            msg.tool_calls.iter().map(|c| Value::from_object(ToolCallValue::new(c))).collect::<Vec<_>>(),
        );
        let opt = |s: &Option<String>| s.as_deref().map_or(Value::UNDEFINED, Value::from);
        MessageValue {
            present,
            role: Value::from(msg.role.as_str()),
            content: Value::from(msg.content.as_str()),
            tool_calls,
            tool_call_id: opt(&msg.tool_call_id),
            name: opt(&msg.name),
        }
    }
}

impl Object for MessageValue {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let (value, bit) = match key.as_str()? {
            "role" => return Some(self.role.clone()),
            "content" => return Some(self.content.clone()),
            "tool_calls" => (&self.tool_calls, 1),
            "tool_call_id" => (&self.tool_call_id, 2),
            "name" => (&self.name, 4),
            _ => return None,
        };
        (self.present & bit != 0).then(|| value.clone())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(MESSAGE_KEYS[self.present])
    }
}

/// A tool call as the template sees it: `{"id", "type", "function": {"name", "arguments"}}`
/// in that order, `arguments` a mapping.
#[derive(Debug)]
struct ToolCallValue {
    id: Value,
    function: Value,
}

impl ToolCallValue {
    fn new(c: &ToolCall) -> ToolCallValue {
        let function = Value::from_object(FunctionValue {
            name: Value::from(c.name.as_str()),
            arguments: c.template_arguments(),
        });
        ToolCallValue { id: Value::from(c.id.as_str()), function }
    }
}

impl Object for ToolCallValue {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "id" => Some(self.id.clone()),
            "type" => Some(Value::from("function")),
            "function" => Some(self.function.clone()),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["id", "type", "function"])
    }
}

#[derive(Debug)]
struct FunctionValue {
    name: Value,
    arguments: Value,
}

impl Object for FunctionValue {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "name" => Some(self.name.clone()),
            "arguments" => Some(self.arguments.clone()),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["name", "arguments"])
    }
}

/// What one render of a chat template may spend. Real templates use a small part of it
/// (tests/chat_templates.rs measures them); a template past a limit fails with
/// [`Error::Template`] naming it, within bounded time and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderLimits {
    /// minijinja fuel: one unit per instruction, plus one per 256 bytes that a comparison, `in`, a
    /// filter, function or method reads (a list or map item counting 128).
    pub fuel: u64,
    /// Bytes the template may build in all: every string, list and map it makes (charged by
    /// about the length of its string form) and everything it writes to the output or a
    /// captured block. Memory stays within a small multiple of this.
    pub bytes: u64,
}

impl RenderLimits {
    /// wick's default for `messages`: [`BASE_FUEL`] plus [`FUEL_PER_MESSAGE`] per message and
    /// per KiB of text; [`BASE_BYTES`] plus [`BYTES_PER_INPUT_BYTE`] per byte of text.
    pub fn for_conversation(messages: &[ChatMessage]) -> RenderLimits {
        let text: u64 = messages.iter().map(|m| m.text_len() as u64).sum();
        let units = messages.len() as u64 + text / 1024;
        RenderLimits {
            fuel: BASE_FUEL.saturating_add(FUEL_PER_MESSAGE.saturating_mul(units)),
            bytes: BASE_BYTES.saturating_add(BYTES_PER_INPUT_BYTE.saturating_mul(text)),
        }
    }
}

/// A compiled chat template with its special-token texts.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// Unix seconds `strftime_now` uses, or [`USE_CLOCK`]. Shared with the registered function.
    now: Arc<AtomicI64>,
    /// The syntax of tool calls, from the markers in the template's text.
    tool_family: tools::ToolFamily,
}

impl ChatTemplate {
    /// The template in `tokenizer.chat_template`; `None` when the file has none.
    /// `bos_token` and `eos_token` are the texts of those tokens (e.g. `"<s>"`).
    pub fn from_metadata(md: &Metadata, bos_token: &str, eos_token: &str) -> Result<Option<ChatTemplate>> {
        match md.str_opt(CHAT_TEMPLATE_KEY)? {
            Some(src) => ChatTemplate::new(src, bos_token, eos_token).map(Some),
            None => Ok(None),
        }
    }

    /// Compile `source` (Hugging Face Jinja). Syntax errors are reported here, not at render.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let now = Arc::new(AtomicI64::new(USE_CLOCK));
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        // Real chat templates nest a few levels (macros over JSON schemas); the default of 500
        // could exhaust the 1 MiB stack of a wasm32 build before minijinja reports an error.
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(bounded_method);
        env.add_function("raise_exception", raise_exception);
        let now_fn = Arc::clone(&now);
        env.add_function("strftime_now", move |fmt: &str| -> std::result::Result<String, minijinja::Error> {
            Ok(strftime::format(fmt, current_time(&now_fn)))
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, generation_tags_as_if(source))
            .map_err(|e| Error::Template(format!("cannot compile: {}", describe(&e))))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            now,
            tool_family: tools::ToolFamily::detect(source),
        })
    }

    /// The syntax of the tool calls of models with this template ([`tools::ToolFamily::detect`]).
    pub fn tool_family(&self) -> tools::ToolFamily {
        self.tool_family
    }

    /// Make `strftime_now` see this time (Unix seconds, UTC) instead of the clock; `None`
    /// returns to the clock (or to [`FALLBACK_UNIX_TIME`] where there is no clock).
    pub fn set_fixed_time(&self, unix_secs: Option<i64>) {
        let v = unix_secs.map_or(USE_CLOCK, |t| if t == USE_CLOCK { t + 1 } else { t });
        self.now.store(v, Ordering::Relaxed);
    }

    /// Render the conversation. With `add_generation_prompt` the template appends the start of
    /// an assistant turn. A template that calls `raise_exception` gives [`Error::Template`].
    /// The render runs within [`RenderLimits::for_conversation`].
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with_limits(messages, add_generation_prompt, RenderLimits::for_conversation(messages))
    }

    /// [`ChatTemplate::render`] with extra top-level variables (`enable_thinking`, as
    /// transformers' `chat_template_kwargs`): a JSON object whose keys the template sees beside
    /// `messages`; they cannot replace `messages`, `add_generation_prompt` or the special tokens.
    pub fn render_with_vars(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        self.render_inner(
            messages,
            add_generation_prompt,
            RenderLimits::for_conversation(messages),
            None,
            vars,
        )
    }

    /// [`ChatTemplate::render_with_vars`] with tools: `tools` is what the template sees as
    /// `tools`, as transformers' `apply_chat_template(tools=...)` passes it (OpenAI's list of
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`); `None` passes
    /// `none`, as with no tools. The limits grow with the tools' JSON text as with message text.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let mut limits = RenderLimits::for_conversation(messages);
        if let Some(t) = tools {
            let text = json_len(t) as u64;
            limits.fuel = limits.fuel.saturating_add(FUEL_PER_MESSAGE.saturating_mul(text / 1024));
            limits.bytes = limits.bytes.saturating_add(BYTES_PER_INPUT_BYTE.saturating_mul(text));
        }
        self.render_inner(messages, add_generation_prompt, limits, tools, vars)
    }

    /// [`ChatTemplate::render`] within the given limits; a template that passes one gets
    /// [`Error::Template`] saying which.
    pub fn render_with_limits(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        limits: RenderLimits,
    ) -> Result<String> {
        self.render_inner(messages, add_generation_prompt, limits, None, &serde_json::Map::new())
    }

    fn render_inner(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        limits: RenderLimits,
        tools: Option<&serde_json::Value>,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        // minijinja reads the limits from the environment when a render starts; a clone shares
        // the compiled template.
        let mut env = self.env.clone();
        env.set_fuel(Some(limits.fuel));
        env.set_size_budget(Some(limits.bytes));
        let tmpl = env.get_template(NAME).map_err(|e| Error::Template(describe(&e)))?;
        let msgs: Vec<Value> = messages.iter().map(|m| Value::from_object(MessageValue::new(m))).collect();
        let tools = tools.map_or(Value::from(()), Value::from_serialize);
        let ctx = minijinja::context! {
            messages => msgs,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => tools,
            documents => (),
        };
        // The first value of a key wins: the variables above before the caller's.
        let ctx = minijinja::context! { ..ctx, ..Value::from_serialize(vars) };
        tmpl.render(ctx).map_err(|e| {
            Error::Template(match e.kind() {
                ErrorKind::OutOfFuel => format!(
                    "the template ran out of fuel ({} units for this conversation: instructions, and \
                     one per 256 bytes read): {}",
                    limits.fuel,
                    describe(&e)
                ),
                ErrorKind::SizeBudgetExceeded => format!(
                    "the template exceeded its size budget ({} bytes for this conversation): {}",
                    limits.bytes,
                    describe(&e)
                ),
                _ => describe(&e),
            })
        })
    }
}

/// transformers' `{% generation %}...{% endgeneration %}` (its AssistantTracker extension:
/// it marks the assistant's tokens for training masks and renders its body unchanged) as
/// `{% if true %}...{% endif %}`, keeping the tags' whitespace control, since minijinja has no
/// such tag. (jinja2 renders the body as a call block, a scope of its own; no template in
/// llama.cpp's set sets a variable there that it reads after the block.)
fn generation_tags_as_if(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        // The tag's end, after its opening `{%` (in `{%}` the `%}` overlaps the opening).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            rest = tag;
            break;
        };
        let inner = &tag[2..end];
        let (open, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, close) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        let replacement = match body.trim() {
            "generation" => "if true",
            "endgeneration" => "endif",
            _ => {
                out.push_str("{%");
                rest = &tag[2..];
                continue;
            }
        };
        out.push_str(&format!("{{%{open} {replacement} {close}%}}"));
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The error text with its causes, e.g. "invalid operation: roles must alternate (in chat_template:3)".
fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

/// `raise_exception(msg)`: the template rejects its input.
fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, with the same keyword arguments (`indent` also positional, as jinja2's own).
fn tojson(
    state: &State,
    value: &Value,
    args: Rest<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let mut opts = pyjson::Options { max_len: size_left(state), ..Default::default() };
    let indent: Option<Value> = match args.first() {
        Some(v) => Some(v.clone()),
        None => kwargs.get("indent")?,
    };
    if let Some(ind) = indent.filter(|v| !v.is_none() && !v.is_undefined()) {
        opts.indent = Some(match ind.as_str() {
            Some(s) if s.len() > MAX_JSON_INDENT => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: an indent longer than {MAX_JSON_INDENT} characters"),
                ))
            }
            Some(s) => s.to_string(),
            None => {
                let n = i64::try_from(ind.clone())
                    .map_err(|_| minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: bad indent"))?;
                " ".repeat(n.clamp(0, MAX_JSON_INDENT as i64) as usize)
            }
        });
    }
    if let Some(b) = kwargs.get::<Option<bool>>("ensure_ascii")? {
        opts.ensure_ascii = b;
    }
    if let Some(b) = kwargs.get::<Option<bool>>("sort_keys")? {
        opts.sort_keys = b;
    }
    if let Some(seps) = kwargs.get::<Option<Value>>("separators")? {
        if !seps.is_none() {
            let item = seps.get_item_by_index(0).ok().and_then(|v| v.as_str().map(String::from));
            let key = seps.get_item_by_index(1).ok().and_then(|v| v.as_str().map(String::from));
            match (item, key) {
                (Some(i), Some(k)) => opts.separators = Some((i, k)),
                _ => {
                    return Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ))
                }
            }
        }
    }
    kwargs.assert_all_used()?;
    let mut out = String::new();
    pyjson::write(&mut out, value, &opts, 0)?;
    Ok(Value::from(out))
}

/// The bytes left in the render's size budget.
fn size_left(state: &State) -> usize {
    state.size_levels().map_or(usize::MAX, |(_, left)| usize::try_from(left).unwrap_or(usize::MAX))
}

fn too_big(what: &str, bytes: usize, left: usize) -> minijinja::Error {
    minijinja::Error::new(
        ErrorKind::SizeBudgetExceeded,
        format!("{what} would build {bytes} bytes with {left} left"),
    )
}

/// Python's string methods from pycompat, with the ones that can build far more than their
/// input (`replace`, `join`, `format`) sized against the budget before they run.
fn bounded_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> std::result::Result<Value, minijinja::Error> {
    if let Some(s) = value.as_str() {
        let left = size_left(state);
        match method {
            "replace" => {
                if let (Some(from), Some(to)) =
                    (args.first().and_then(|v| v.as_str()), args.get(1).and_then(|v| v.as_str()))
                {
                    let bytes = replaced_len(s, from, to);
                    if bytes > left {
                        return Err(too_big("str.replace", bytes, left));
                    }
                }
            }
            "join" => {
                let mut bytes = 0usize;
                for item in args.first().into_iter().flat_map(|v| v.try_iter().into_iter().flatten()) {
                    let n = item.as_str().map_or(16, str::len);
                    bytes = bytes.saturating_add(n).saturating_add(s.len());
                    if bytes > left {
                        return Err(too_big("str.join", bytes, left));
                    }
                }
            }
            "format" => {
                return minijinja::format_filter_bounded(minijinja::FormatStyle::StrFormat, s, args, left)
                    .map(Value::from)
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// The length of `s` with every `from` replaced by `to` (an empty `from` matches between
/// every two characters, as in Python).
fn replaced_len(s: &str, from: &str, to: &str) -> usize {
    if to.len() <= from.len() {
        return s.len();
    }
    let matches = if from.is_empty() { s.chars().count() + 1 } else { s.matches(from).count() };
    s.len().saturating_add(matches.saturating_mul(to.len() - from.len()))
}

/// Unix seconds for `strftime_now`.
fn current_time(cell: &AtomicI64) -> i64 {
    let t = cell.load(Ordering::Relaxed);
    if t != USE_CLOCK {
        return t;
    }
    clock_now()
}

#[cfg(not(target_arch = "wasm32"))]
fn clock_now() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(FALLBACK_UNIX_TIME),
        Err(_) => FALLBACK_UNIX_TIME,
    }
}

/// wasm32-unknown-unknown has no clock in std (`SystemTime::now` panics there).
#[cfg(target_arch = "wasm32")]
fn clock_now() -> i64 {
    FALLBACK_UNIX_TIME
}
