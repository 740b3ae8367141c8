//! Sections of calls, each call with markers of its own:
//! - Kimi K2: `<|tool_calls_section_begin|>`, then calls
//!   `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>`,
//!   then `<|tool_calls_section_end|>`;
//! - DeepSeek: `<｜tool▁calls▁begin｜>`, then calls, then `<｜tool▁calls▁end｜>`, where a call is
//!   V3/R1's `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>`
//!   or V3.1's `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`.
//!
//! A section is read call by call: the calls complete so far are given out while the rest of
//! the section is still being written.

use serde_json::Value;

use super::calls::{arguments_text, valid_name, RawCall};
use super::markers::{json_end, JsonEnd};
use super::stream::Body;

/// A family whose calls come in a section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    /// Kimi K2.
    Kimi,
    /// DeepSeek V3, R1 and V3.1.
    DeepSeek,
}

/// The most bytes of a call's head (its id or name, before the arguments).
const MAX_HEAD: usize = 300;

impl Section {
    /// The marker that opens the section.
    pub(super) fn begin(self) -> &'static str {
        match self {
            Section::Kimi => "<|tool_calls_section_begin|>",
            Section::DeepSeek => "<｜tool▁calls▁begin｜>",
        }
    }

    /// The marker that closes it.
    pub(super) fn end(self) -> &'static str {
        match self {
            Section::Kimi => "<|tool_calls_section_end|>",
            Section::DeepSeek => "<｜tool▁calls▁end｜>",
        }
    }

    fn call(self, s: &str, end: bool) -> Step {
        match self {
            Section::Kimi => kimi_call(s, end),
            Section::DeepSeek => deepseek_call(s, end),
        }
    }
}

/// One call at the start of the text.
enum Step {
    /// A call, `len` bytes long.
    Call { len: usize, call: RawCall },
    /// The text ends before it can tell.
    Open,
    /// Not a call.
    Invalid,
}

/// The body of a section (the text after its opening marker, or after the calls already given
/// out when `fresh` is false): `Done` at its closing marker (or at the end of the text after a
/// call), `Progress` with the calls complete so far, `Open` when none is yet, `Invalid` when
/// what follows is not a call (text after the calls given out, or a section that opens with
/// no call).
pub(super) fn section_body(kind: Section, body: &str, end: bool, fresh: bool) -> Body {
    let close = kind.end();
    let mut pos = 0;
    let mut calls = Vec::new();
    // What the calls so far make of a text that can tell no more yet.
    let pending = |pos: usize, calls: Vec<RawCall>| {
        if calls.is_empty() {
            Body::Open
        } else {
            Body::Progress { len: pos, calls }
        }
    };
    loop {
        let rest = &body[pos..];
        let t = rest.trim_start();
        let at = pos + (rest.len() - t.len());
        if t.starts_with(close) {
            // A section with no call at all is not one.
            let calls = (!fresh || !calls.is_empty()).then_some(calls);
            return Body::Done { len: at + close.len(), calls };
        }
        if t.is_empty() {
            if end && (!fresh || !calls.is_empty()) {
                return Body::Done { len: body.len(), calls: Some(calls) };
            }
            return pending(pos, calls);
        }
        if !end && close.starts_with(t) {
            return pending(pos, calls);
        }
        match kind.call(t, end) {
            Step::Call { len, call } => {
                calls.push(call);
                pos = at + len;
            }
            Step::Open => return pending(pos, calls),
            Step::Invalid if calls.is_empty() => return Body::Invalid,
            Step::Invalid => return Body::Progress { len: pos, calls },
        }
    }
}

/// `s` after the literal `marker`: `Ok(rest)`, `Err(true)` while `s` is a prefix of the marker
/// (open), `Err(false)` when it does not start so.
fn after<'a>(s: &'a str, marker: &str) -> Result<&'a str, bool> {
    match s.strip_prefix(marker) {
        Some(rest) => Ok(rest),
        None => Err(marker.starts_with(s)),
    }
}

/// Whitespace, then each of `marks` in turn (whitespace allowed before each): how many bytes
/// they take. `Err(true)`: the text ends before they are all there (open, unless `end`, where
/// what came is enough); `Err(false)`: other text follows.
pub(super) fn closes(s: &str, marks: &[&str], end: bool) -> Result<usize, bool> {
    let mut pos = 0;
    for m in marks {
        let rest = &s[pos..];
        let t = rest.trim_start();
        if let Some(after) = t.strip_prefix(m) {
            pos = s.len() - after.len();
        } else if t.is_empty() || m.starts_with(t) {
            return if end { Ok(pos) } else { Err(true) };
        } else {
            return Err(false);
        }
    }
    Ok(pos)
}

/// A JSON object at the start of `s` (after whitespace), then `marks`: the arguments' text and
/// the bytes taken.
fn json_then(s: &str, marks: &[&str], end: bool) -> ArgsStep {
    let ws = s.len() - s.trim_start().len();
    let n = match json_end(&s[ws..]) {
        JsonEnd::At(n) => n,
        _ if ws == s.len() => return ArgsStep::Open,
        JsonEnd::Open => return ArgsStep::Open,
        JsonEnd::Invalid => return ArgsStep::Invalid,
    };
    let Some(args) =
        serde_json::from_str::<Value>(&s[ws..ws + n]).ok().and_then(|v| arguments_text(Some(&v)))
    else {
        return ArgsStep::Invalid;
    };
    match closes(&s[ws + n..], marks, end) {
        Ok(len) => ArgsStep::Args { len: ws + n + len, args },
        Err(true) => ArgsStep::Open,
        Err(false) => ArgsStep::Invalid,
    }
}

/// What [`json_then`] found.
enum ArgsStep {
    Args { len: usize, args: String },
    Open,
    Invalid,
}

/// The text of `s` up to `marker`, at most [`MAX_HEAD`] bytes: `Ok((head, rest after the
/// marker))`, `Err(true)` while it may still come, `Err(false)` when it is too far.
fn head<'a>(s: &'a str, marker: &str) -> Result<(&'a str, &'a str), bool> {
    match s.find(marker) {
        Some(p) if p <= MAX_HEAD => Ok((&s[..p], &s[p + marker.len()..])),
        Some(_) => Err(false),
        None => Err(s.len() <= MAX_HEAD + marker.len()),
    }
}

/// A step from the parts of a call.
fn step(taken: usize, name: &str, id: Option<String>, args: ArgsStep) -> Step {
    match args {
        ArgsStep::Args { len, args } => {
            Step::Call { len: taken + len, call: RawCall { name: name.to_string(), arguments: args, id } }
        }
        ArgsStep::Open => Step::Open,
        ArgsStep::Invalid => Step::Invalid,
    }
}

fn open_or_invalid(open: bool) -> Step {
    if open {
        Step::Open
    } else {
        Step::Invalid
    }
}

/// Kimi K2's `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>`;
/// the call's id is the model's `functions.NAME:IDX`.
fn kimi_call(s: &str, end: bool) -> Step {
    let r = match after(s, "<|tool_call_begin|>") {
        Ok(r) => r,
        Err(open) => return open_or_invalid(open),
    };
    let (id, args) = match head(r, "<|tool_call_argument_begin|>") {
        Ok(h) => h,
        Err(open) => return open_or_invalid(open),
    };
    let id = id.trim();
    let bare = id.strip_prefix("functions.").unwrap_or(id);
    let name = match bare.rsplit_once(':') {
        Some((n, i)) if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => bare,
    };
    if !valid_name(name) {
        return Step::Invalid;
    }
    let taken = s.len() - args.len();
    step(taken, name, Some(id.to_string()), json_then(args, &["<|tool_call_end|>"], end))
}

/// DeepSeek's two call forms (see the module's notes).
fn deepseek_call(s: &str, end: bool) -> Step {
    const END: &str = "<｜tool▁call▁end｜>";
    let r = match after(s, "<｜tool▁call▁begin｜>") {
        Ok(r) => r,
        // The R1 distills may leave the call's opening marker out before `function<｜tool▁sep｜>`.
        Err(false) if s.starts_with("function<｜tool▁sep｜>") => s,
        Err(false) if "function<｜tool▁sep｜>".starts_with(s) => return Step::Open,
        Err(open) => return open_or_invalid(open),
    };
    let (first, rest) = match head(r, "<｜tool▁sep｜>") {
        Ok(h) => h,
        Err(open) => return open_or_invalid(open),
    };
    let first = first.trim();
    let t = rest.trim_start();
    if t.is_empty() {
        return Step::Open;
    }
    if t.starts_with('{') {
        // V3.1: NAME<｜tool▁sep｜>{...}.
        if !valid_name(first) {
            return Step::Invalid;
        }
        return step(s.len() - rest.len(), first, None, json_then(rest, &[END], end));
    }
    // V3 / R1: TYPE<｜tool▁sep｜>NAME, a newline, then the arguments fenced as ```json.
    if !valid_name(first) {
        return Step::Invalid;
    }
    let Some(nl) = rest.find('\n') else {
        return open_or_invalid(rest.len() <= MAX_HEAD && valid_name(rest.trim_end()));
    };
    let name = rest[..nl].trim();
    if !valid_name(name) {
        return Step::Invalid;
    }
    let fenced = &rest[nl + 1..];
    let t = fenced.trim_start();
    if t.starts_with('{') {
        // The fence left out.
        return step(s.len() - fenced.len(), name, None, json_then(fenced, &[END], end));
    }
    if t.len() < "```json".len() && "```json".starts_with(t) {
        return Step::Open;
    }
    let Some(body) = t.strip_prefix("```json").or_else(|| t.strip_prefix("```")) else {
        return Step::Invalid;
    };
    let taken = s.len() - body.len();
    step(taken, name, None, json_then(body, &["```", END], end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(b: Body) -> (usize, Vec<String>) {
        match b {
            Body::Done { len, calls: Some(c) } | Body::Progress { len, calls: c } => {
                (len, c.into_iter().map(|c| c.name).collect())
            }
            _ => panic!("no calls"),
        }
    }

    #[test]
    fn kimi_calls_one_by_one() {
        let one = "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>";
        let two = format!("{one}<|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>{{\"a\"");
        let (len, n) = names(section_body(Section::Kimi, &two, false, true));
        assert_eq!((len, n), (one.len(), vec!["get_weather".to_string()]));
        assert!(matches!(section_body(Section::Kimi, "<|tool_call_beg", false, true), Body::Open));
        assert!(matches!(section_body(Section::Kimi, "hello", false, true), Body::Invalid));
        assert!(matches!(
            section_body(Section::Kimi, "<|tool_calls_section_end|>", false, true),
            Body::Done { calls: None, .. }
        ));
    }

    #[test]
    fn deepseek_forms() {
        let r1 = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        assert_eq!(names(section_body(Section::DeepSeek, r1, false, true)).1, vec!["get_weather"]);
        let v31 = "<｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        assert_eq!(names(section_body(Section::DeepSeek, v31, false, true)).1, vec!["add"]);
        let cut = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```";
        assert!(matches!(section_body(Section::DeepSeek, cut, false, true), Body::Open));
    }
}
