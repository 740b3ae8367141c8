//! gpt-oss's calls, in OpenAI's harmony format: a message whose header names the recipient
//! `functions.NAME` and whose body is the JSON arguments, ended by `<|call|>` (an
//! end-of-generation token, so usually not in the text). The recipient stands in the channel
//! part, `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`, or before
//! it, `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}` (where
//! the generation prompt already wrote `<|start|>assistant`, the output starts at ` to=`).
//! Messages to no function (`analysis`, `final`) are left as they are, as content.

use serde_json::Value;

use super::calls::{arguments_text, valid_name, RawCall};
use super::markers::{json_end, JsonEnd};
use super::sections::closes;
use super::stream::Body;

/// The longest header (from `<|start|>` to `<|message|>`).
const MAX_HEADER: usize = 512;

const MESSAGE: &str = "<|message|>";

/// Whether a header cut short (or whole) has gone past a message's end: not one header.
fn spans_messages(header: &str) -> bool {
    header.contains('\n')
        || header.contains("<|end|>")
        || header.contains("<|return|>")
        || header.contains("<|call|>")
}

/// The call whose header starts `s` (at `<|start|>assistant`, `<|channel|>` or ` to=`).
pub(super) fn harmony_body(s: &str, end: bool) -> Body {
    let (header, rest) = match s.find(MESSAGE) {
        Some(p) if p <= MAX_HEADER && !spans_messages(&s[..p]) => (&s[..p], &s[p + MESSAGE.len()..]),
        Some(_) => return Body::Invalid,
        None if s.len() > MAX_HEADER + MESSAGE.len() || spans_messages(s) => return Body::Invalid,
        None => return Body::Open,
    };
    let Some(p) = header.find("to=functions.") else { return Body::Invalid };
    let after = &header[p + "to=functions.".len()..];
    let name = &after[..after.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(after.len())];
    if !valid_name(name) {
        return Body::Invalid;
    }
    let taken = s.len() - rest.len();
    let ws = rest.len() - rest.trim_start().len();
    let n = match json_end(&rest[ws..]) {
        JsonEnd::At(n) => n,
        _ if ws == rest.len() => return Body::Open,
        JsonEnd::Open => return Body::Open,
        JsonEnd::Invalid => return Body::Invalid,
    };
    let args = serde_json::from_str::<Value>(&rest[ws..ws + n]).ok().and_then(|v| arguments_text(Some(&v)));
    // `<|call|>` after the arguments is taken with them; other text after them is content.
    let len = match closes(&rest[ws + n..], &["<|call|>"], end) {
        Ok(len) => taken + ws + n + len,
        Err(true) => return Body::Open,
        Err(false) => taken + ws + n,
    };
    let calls = args.map(|arguments| vec![RawCall { name: name.to_string(), arguments, id: None }]);
    Body::Done { len, calls }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let a = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
        assert!(matches!(harmony_body(a, false), Body::Done { len, calls: Some(_) } if len == a.len()));
        let b = " to=functions.add<|channel|>commentary json<|message|>{\"a\": 1}";
        assert!(matches!(harmony_body(b, true), Body::Done { calls: Some(_), .. }));
        assert!(matches!(harmony_body(b, false), Body::Open));
        let final_ = "<|channel|>final<|message|>Hello";
        assert!(matches!(harmony_body(final_, false), Body::Invalid));
        assert!(matches!(harmony_body("<|channel|>analysis", false), Body::Open));
    }
}
