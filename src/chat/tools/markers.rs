//! Where a call starts in the text, and where a JSON value ends.

use super::sections::Section;
use super::ToolFamily;

/// How the text between a call's tags reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TagBody {
    /// JSON: one call object or a list of them.
    Json,
    /// Qwen3-Coder's (and Seed-OSS's) `<function=NAME><parameter=P>` XML, else JSON.
    Xml,
    /// GLM's `NAME<arg_key>K</arg_key><arg_value>V</arg_value>...`, else JSON.
    ArgPairs,
}

/// How the text after a start marker is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    /// Everything up to `end` is the call's body.
    Tagged { end: &'static str, body: TagBody },
    /// One JSON value (object or list) is the body; leading whitespace is skipped.
    Json,
    /// Mistral: a JSON list, or `NAME[ARGS]{...}`.
    Mistral,
    /// A section of calls (Kimi K2, DeepSeek), each given out as soon as it is complete.
    Section(Section),
    /// A gpt-oss message header naming `functions.NAME`, then the JSON arguments.
    Harmony,
}

/// What the text at a position is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Match {
    /// A call starts here; the marker is `skip` bytes long (0: the body starts here).
    Start { skip: usize, opening: Opening },
    /// The text ends before it can tell.
    Partial,
    /// No call starts here.
    No,
}

/// Keys a bare JSON call may open with.
const JSON_CALL_KEYS: [&str; 5] = ["name", "function", "tool_call", "tool_calls", "type"];

/// The most whitespace between `{` and the first key of a bare JSON call.
const MAX_JSON_WS: usize = 16;

/// A literal marker at the start of `s`: Full, Partial or No.
fn literal(s: &str, marker: &str) -> Option<bool> {
    if s.starts_with(marker) {
        Some(true)
    } else if marker.starts_with(s) {
        Some(false)
    } else {
        None
    }
}

fn tagged(s: &str, marker: &'static str, opening: Opening, consume: bool) -> Match {
    match literal(s, marker) {
        Some(true) => Match::Start { skip: if consume { marker.len() } else { 0 }, opening },
        Some(false) => Match::Partial,
        None => Match::No,
    }
}

/// A bare JSON call at the start of `s`: `{`, whitespace, then one of `keys` as the first key.
fn json_call(s: &str, keys: &[&str]) -> Match {
    let b = s.as_bytes();
    if b.first() != Some(&b'{') {
        return Match::No;
    }
    let mut i = 1;
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
        if i > MAX_JSON_WS {
            return Match::No;
        }
    }
    if i == b.len() {
        return Match::Partial;
    }
    if b[i] != b'"' {
        return Match::No;
    }
    let rest = &s[i + 1..];
    let mut partial = false;
    for k in keys {
        let quoted = format!("{k}\"");
        match literal(rest, &quoted) {
            Some(true) => {
                // Then whitespace and a colon.
                let after = rest[quoted.len()..].trim_start();
                if after.is_empty() {
                    partial = true;
                } else if after.starts_with(':') {
                    return Match::Start { skip: 0, opening: Opening::Json };
                }
            }
            Some(false) => partial = true,
            None => {}
        }
    }
    if partial {
        Match::Partial
    } else {
        Match::No
    }
}

/// DeepSeek's section opening, and the spellings of it the R1 distills write.
const DEEPSEEK_BEGINS: [&str; 5] = [
    "<｜tool▁calls▁begin｜>",
    "<｜tool_calls_begin｜>",
    "<｜tool calls begin｜>",
    "<｜tool\\_calls\\_begin｜>",
    "<｜tool▁calls｜>",
];

/// The first of two alternatives that is not `No`.
fn either(a: Match, b: impl FnOnce() -> Match) -> Match {
    match a {
        Match::No => b(),
        m => m,
    }
}

/// Whether the character `c` may begin a call of `family` (the only places [`match_at`] is asked).
pub(super) fn may_start(family: ToolFamily, c: char) -> bool {
    matches!(c, '<' | '[' | '{') || (c == ' ' && family == ToolFamily::GptOss)
}

/// Whether a call of `family` starts at the beginning of `s`.
pub(super) fn match_at(family: ToolFamily, s: &str) -> Match {
    let hermes = Opening::Tagged { end: "</tool_call>", body: TagBody::Json };
    let xml = |end| Opening::Tagged { end, body: TagBody::Xml };
    let first = match s.as_bytes().first() {
        Some(c) => *c,
        None => return Match::No,
    };
    let candidates: Match = match (family, first) {
        (ToolFamily::Hermes, b'<') => tagged(s, "<tool_call>", hermes, true),
        (ToolFamily::Generic, b'<') => tagged(s, "<tool_call>", hermes, true),
        (ToolFamily::Generic, b'{') => json_call(s, &JSON_CALL_KEYS[..4]),
        (ToolFamily::Qwen3Coder, b'<') => either(tagged(s, "<tool_call>", xml("</tool_call>"), true), || {
            tagged(s, "<function=", xml("</function>"), false)
        }),
        (ToolFamily::SeedOss, b'<') => {
            either(tagged(s, "<seed:tool_call>", xml("</seed:tool_call>"), true), || {
                tagged(s, "<function=", xml("</function>"), false)
            })
        }
        (ToolFamily::Glm, b'<') => {
            tagged(s, "<tool_call>", Opening::Tagged { end: "</tool_call>", body: TagBody::ArgPairs }, true)
        }
        (ToolFamily::Nemotron, b'<') => {
            tagged(s, "<TOOLCALL>", Opening::Tagged { end: "</TOOLCALL>", body: TagBody::Json }, true)
        }
        (ToolFamily::KimiK2, b'<') => tagged(s, Section::Kimi.begin(), Opening::Section(Section::Kimi), true),
        (ToolFamily::DeepSeekR1 | ToolFamily::DeepSeekV31, b'<') => {
            // The R1 distills also misspell the section's opening marker.
            let opening = Opening::Section(Section::DeepSeek);
            let mut m = Match::No;
            for marker in DEEPSEEK_BEGINS {
                m = match (m, tagged(s, marker, opening, true)) {
                    (_, start @ Match::Start { .. }) => return start,
                    (Match::Partial, _) | (_, Match::Partial) => Match::Partial,
                    _ => Match::No,
                };
            }
            m
        }
        // The header is read whole by the harmony parser, from `<|start|>assistant`, from
        // `<|channel|>`, or from ` to=` where the generation prompt wrote `<|start|>assistant`.
        (ToolFamily::GptOss, b'<') => {
            either(tagged(s, "<|start|>assistant", Opening::Harmony, false), || {
                tagged(s, "<|channel|>", Opening::Harmony, false)
            })
        }
        (ToolFamily::GptOss, b' ') => tagged(s, " to=functions.", Opening::Harmony, false),
        (ToolFamily::Llama3, b'<') => tagged(s, "<|python_tag|>", Opening::Json, true),
        (ToolFamily::Llama3, b'{') => json_call(s, &["name", "type", "function"]),
        (ToolFamily::Mistral | ToolFamily::MistralArgs, b'[') => {
            tagged(s, "[TOOL_CALLS]", Opening::Mistral, true)
        }
        _ => Match::No,
    };
    candidates
}

/// How a JSON value at the start of `s` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JsonEnd {
    /// It ends after this many bytes.
    At(usize),
    /// Not yet: the text ends inside it.
    Open,
    /// `s` does not start with an object or list, or its brackets do not match.
    Invalid,
}

/// The most nesting a call's JSON may have (deeper is not a call).
const MAX_DEPTH: usize = 128;

/// Where the JSON object or list at the start of `s` ends, by its brackets (strings and their
/// escapes skipped); whether it is valid JSON is for the caller to check.
pub(super) fn json_end(s: &str) -> JsonEnd {
    let b = s.as_bytes();
    if !matches!(b.first(), Some(b'{' | b'[')) {
        return JsonEnd::Invalid;
    }
    let mut stack: Vec<u8> = Vec::new();
    let mut in_str = false;
    let mut escaped = false;
    for (i, &c) in b.iter().enumerate() {
        if in_str {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_str = false;
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            b'}' | b']' => {
                if stack.pop() != Some(c) {
                    return JsonEnd::Invalid;
                }
                if stack.is_empty() {
                    return JsonEnd::At(i + 1);
                }
            }
            _ => {}
        }
        if stack.len() > MAX_DEPTH {
            return JsonEnd::Invalid;
        }
    }
    JsonEnd::Open
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_ends() {
        assert_eq!(json_end(r#"{"a": "}"} x"#), JsonEnd::At(10));
        assert_eq!(json_end(r#"[{"a": "\"]"}]"#), JsonEnd::At(14));
        assert_eq!(json_end(r#"{"a": ["#), JsonEnd::Open);
        assert_eq!(json_end(r#"{"a": ]"#), JsonEnd::Invalid);
        assert_eq!(json_end("x"), JsonEnd::Invalid);
    }

    #[test]
    fn bare_json_starts() {
        let f = ToolFamily::Generic;
        assert!(matches!(match_at(f, r#"{"name": "x"}"#), Match::Start { skip: 0, .. }));
        assert_eq!(match_at(f, r#"{ "na"#), Match::Partial);
        assert_eq!(match_at(f, r#"{"name""#), Match::Partial);
        assert_eq!(match_at(f, r#"{"age": 3}"#), Match::No);
        assert_eq!(match_at(f, r#"{"named": 3}"#), Match::No);
    }
}
