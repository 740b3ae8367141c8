//! The streaming parser: text in, OpenAI-style deltas out.

use super::calls::{arg_calls, json_calls, mistral_named, xml_calls, RawCall};
use super::harmony::harmony_body;
use super::markers::{json_end, match_at, may_start, JsonEnd, Match, Opening, TagBody};
use super::sections::section_body;
use super::ToolFamily;

/// A piece of parsed output, as OpenAI streams a chat completion's `delta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDelta {
    /// Text outside the calls.
    Content(String),
    /// A call begins: its index among the calls, id and function name.
    CallStart {
        /// Index of the call (0, 1, ...).
        index: usize,
        /// The call's id.
        id: String,
        /// The function's name.
        name: String,
    },
    /// A fragment of the JSON text of call `index`'s arguments.
    Arguments {
        /// Index of the call.
        index: usize,
        /// The next bytes of the arguments' JSON text.
        fragment: String,
    },
}

/// The most bytes of a Mistral `NAME` (and `[CALL_ID]ID`) before `[ARGS]`.
const MAX_MISTRAL_HEAD: usize = 300;

/// How far a call's body has come.
pub(super) enum Body {
    /// Complete: `len` bytes (end marker included), holding these calls (None: not a call).
    Done { len: usize, calls: Option<Vec<RawCall>> },
    /// A section of calls goes on: its first `len` bytes held these calls, given out now.
    Progress { len: usize, calls: Vec<RawCall> },
    /// The text ends inside it.
    Open,
    /// Not a call after all: the marker is content.
    Invalid,
}

/// A parser fed the model's output piece by piece ([`ToolCallStream::push`]), giving content
/// as soon as it cannot be the start of a call, and each call once it is complete.
/// The deltas of any split of a text add up to the same output.
pub struct ToolCallStream {
    family: ToolFamily,
    parallel: bool,
    id_prefix: String,
    /// (function, parameter) pairs the tools declare as strings (Qwen3-Coder's values).
    string_params: Vec<(String, String)>,
    /// Text not yet decided: a possible marker, or a call's text from its marker.
    buf: String,
    /// Inside a call: the marker's length and how its body reads.
    open: Option<(usize, Opening)>,
    /// Whitespace at the end of the content so far (dropped if a call follows).
    held_ws: String,
    /// Calls given out.
    n_calls: usize,
    /// Whether the last thing seen was a call (trailing whitespace is dropped).
    after_call: bool,
}

impl ToolCallStream {
    /// A parser for the calls of `family` (parallel calls kept; ids `call_0`, `call_1`, ...).
    pub fn new(family: ToolFamily) -> ToolCallStream {
        ToolCallStream {
            family,
            parallel: true,
            id_prefix: "call_".into(),
            string_params: Vec::new(),
            buf: String::new(),
            open: None,
            held_ws: String::new(),
            n_calls: 0,
            after_call: false,
        }
    }

    /// Keep every call (true, the default) or only the first (`parallel_tool_calls: false`).
    pub fn parallel(mut self, parallel: bool) -> ToolCallStream {
        self.parallel = parallel;
        self
    }

    /// Ids of calls the model gives none for: `PREFIX0`, `PREFIX1`, ... (Mistral's templates
    /// want nine letters and digits: those are made from the prefix and index instead).
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> ToolCallStream {
        self.id_prefix = prefix.into();
        self
    }

    /// The tools of the request (OpenAI's list): the XML families' parameter values (Qwen3-Coder,
    /// Seed-OSS, GLM) of a declared `string` type stay strings even when they read as JSON (`"123"`).
    pub fn tools(mut self, tools: &serde_json::Value) -> ToolCallStream {
        self.string_params.clear();
        for t in tools.as_array().map(Vec::as_slice).unwrap_or_default() {
            let f = t.get("function").unwrap_or(t);
            let Some(name) = f.get("name").and_then(|n| n.as_str()) else { continue };
            let props = f.get("parameters").and_then(|p| p.get("properties")).and_then(|p| p.as_object());
            for (p, schema) in props.into_iter().flatten() {
                if schema.get("type").and_then(|t| t.as_str()) == Some("string") {
                    self.string_params.push((name.to_string(), p.clone()));
                }
            }
        }
        self
    }

    /// Calls given out so far.
    pub fn calls(&self) -> usize {
        self.n_calls
    }

    /// Feed the next piece of output; returns what it completes.
    pub fn push(&mut self, text: &str) -> Vec<ToolDelta> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        self.drain(false, &mut out);
        out
    }

    /// The output has ended: returns the rest, and the raw text of a call left open (which is
    /// not parsed: the caller reports the generation as cut short).
    pub fn finish(&mut self) -> (Vec<ToolDelta>, Option<String>) {
        let mut out = Vec::new();
        self.drain(true, &mut out);
        let unfinished = (!self.buf.is_empty()).then(|| std::mem::take(&mut self.buf));
        self.open = None;
        if !self.after_call && unfinished.is_none() && !self.held_ws.is_empty() {
            out.push(ToolDelta::Content(std::mem::take(&mut self.held_ws)));
        }
        self.held_ws.clear();
        (out, unfinished)
    }

    fn content(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        if text.is_empty() {
            return;
        }
        let body = text.trim_end();
        if body.is_empty() {
            self.held_ws.push_str(text);
            return;
        }
        let mut s = std::mem::take(&mut self.held_ws);
        s.push_str(body);
        self.held_ws.push_str(&text[body.len()..]);
        self.after_call = false;
        out.push(ToolDelta::Content(s));
    }

    fn emit_calls(&mut self, calls: Vec<RawCall>, out: &mut Vec<ToolDelta>) {
        self.held_ws.clear();
        self.after_call = true;
        for c in calls {
            if !self.parallel && self.n_calls >= 1 {
                break;
            }
            let index = self.n_calls;
            let id = c.id.unwrap_or_else(|| self.make_id(index));
            out.push(ToolDelta::CallStart { index, id, name: c.name });
            out.push(ToolDelta::Arguments { index, fragment: c.arguments });
            self.n_calls += 1;
        }
    }

    fn make_id(&self, index: usize) -> String {
        if !matches!(self.family, ToolFamily::Mistral | ToolFamily::MistralArgs) {
            return format!("{}{index}", self.id_prefix);
        }
        // FNV-1a of prefix and index, written as nine base-36 digits.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.id_prefix.bytes().chain(index.to_le_bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        (0..9)
            .map(|_| {
                let d = DIGITS[(h % 36) as usize] as char;
                h /= 36;
                d
            })
            .collect()
    }

    /// Decide as much of `buf` as can be decided (all of it when `end`).
    fn drain(&mut self, end: bool, out: &mut Vec<ToolDelta>) {
        loop {
            if let Some((skip, opening)) = self.open {
                match self.body(opening, &self.buf[skip..], end, skip > 0) {
                    Body::Progress { len, calls } => {
                        // The marker and these calls are taken; the section stays open.
                        self.buf.drain(..skip + len);
                        self.open = Some((0, opening));
                        self.emit_calls(calls, out);
                    }
                    Body::Done { len, calls } => {
                        let raw: String = self.buf.drain(..skip + len).collect();
                        self.open = None;
                        match calls {
                            Some(c) => self.emit_calls(c, out),
                            None => self.content(&raw, out),
                        }
                    }
                    Body::Open => return,
                    Body::Invalid => {
                        // The marker is text; look for calls after its first character.
                        let n = skip.max(self.buf.chars().next().map_or(1, char::len_utf8));
                        let raw: String = self.buf.drain(..n).collect();
                        self.open = None;
                        self.content(&raw, out);
                    }
                }
                continue;
            }
            let mut hold = None;
            let mut start = None;
            for (i, c) in self.buf.char_indices() {
                if !may_start(self.family, c) {
                    continue;
                }
                match match_at(self.family, &self.buf[i..]) {
                    Match::Start { skip, opening } => {
                        start = Some((i, skip, opening));
                        break;
                    }
                    Match::Partial if !end => {
                        hold = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            if let Some((i, skip, opening)) = start {
                let before: String = self.buf.drain(..i).collect();
                self.content(&before, out);
                self.open = Some((skip, opening));
                continue;
            }
            let upto = hold.unwrap_or(self.buf.len());
            let text: String = self.buf.drain(..upto).collect();
            self.content(&text, out);
            return;
        }
    }

    /// How far the body of a call (the text after its marker) has come; `fresh`: its marker is
    /// still in the text (a section whose calls are being given out is not fresh).
    fn body(&self, opening: Opening, body: &str, end: bool, fresh: bool) -> Body {
        match opening {
            Opening::Tagged { end: close, body: kind } => {
                let string = |f: &str, p: &str| self.string_params.iter().any(|(a, b)| a == f && b == p);
                let parse = |text: &str| match kind {
                    TagBody::Json => json_calls(text),
                    TagBody::Xml => xml_calls(text, &string).or_else(|| json_calls(text)),
                    TagBody::ArgPairs => arg_calls(text, &string).or_else(|| json_calls(text)),
                };
                match body.find(close) {
                    Some(p) => Body::Done { len: p + close.len(), calls: parse(&body[..p]) },
                    // A model that ends right after a complete call without closing the tag: a
                    // JSON call (complete when its brackets close) or a whole `<function=>`
                    // (GLM's pairs cannot tell a cut call from a whole one).
                    None if end
                        && (kind == TagBody::Json
                            || (kind == TagBody::Xml && body.trim_end().ends_with("</function>"))) =>
                    {
                        match parse(body) {
                            Some(c) => Body::Done { len: body.len(), calls: Some(c) },
                            None => Body::Open,
                        }
                    }
                    None => Body::Open,
                }
            }
            Opening::Json => json_body(body, 0, json_calls),
            Opening::Section(kind) => section_body(kind, body, end, fresh),
            Opening::Harmony => harmony_body(body, end),
            Opening::Mistral => {
                let ws = body.len() - body.trim_start().len();
                let rest = &body[ws..];
                match rest.as_bytes().first() {
                    None => Body::Open,
                    Some(b'[' | b'{') => json_body(body, 0, json_calls),
                    // A name has no whitespace: text with some is not a call.
                    Some(_)
                        if rest[..rest.find("[ARGS]").unwrap_or(rest.len())]
                            .contains(char::is_whitespace) =>
                    {
                        Body::Invalid
                    }
                    Some(_) => match rest.find("[ARGS]") {
                        Some(p) if p <= MAX_MISTRAL_HEAD => {
                            let head = &rest[..p];
                            let at = ws + p + "[ARGS]".len();
                            json_body(body, at, |args| mistral_named(head, args).map(|c| vec![c]))
                        }
                        Some(_) => Body::Invalid,
                        None if rest.len() > MAX_MISTRAL_HEAD + "[ARGS]".len() => Body::Invalid,
                        None => Body::Open,
                    },
                }
            }
        }
    }
}

/// A body whose call is the JSON value from byte `from` of `body` (after whitespace).
fn json_body(body: &str, from: usize, parse: impl Fn(&str) -> Option<Vec<RawCall>>) -> Body {
    let rest = &body[from..];
    let ws = rest.len() - rest.trim_start().len();
    if ws == rest.len() {
        return Body::Open;
    }
    match json_end(&rest[ws..]) {
        JsonEnd::At(n) => Body::Done { len: from + ws + n, calls: parse(&rest[ws..ws + n]) },
        JsonEnd::Open => Body::Open,
        JsonEnd::Invalid => Body::Invalid,
    }
}
