//! `tools` checked, and `tool_choice` as a grammar: `required` or a named function force a call
//! in the family's syntax whose arguments match the function's JSON schema (llguidance's Lark,
//! `%json {...}` for the arguments).
//!
//! `auto` gets a lazy grammar (what llama.cpp does in its sampler with trigger words, here in
//! the grammar itself): any text that does not contain the family's trigger (`<tool_call>`,
//! `[TOOL_CALLS]`, a section's opening marker, gpt-oss's `to=functions.`, or `{"name"` for the
//! JSON families, with any whitespace after the brace), or text up to the first trigger, then
//! a call forced exactly as under `required`. The prefix is one `[lazy]` lexeme, so it ends at
//! the first trigger; the free alternative is a regex that excludes the trigger (`& ~`), so
//! once the trigger is written the free way is closed. A trigger that is a control token is
//! named by id and needs no exclusion (text lexemes never match a control token).

use serde_json::Value;

use super::syntax::{regex_escape, Grammar};
use super::ToolFamily;
use crate::constrain::Constraint;
use crate::{Error, Result};

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may call tools or answer (the default with tools).
    Auto,
    /// No tools: they are not rendered and no call is parsed.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call this function.
    Function(String),
}

impl ToolChoice {
    /// Read OpenAI's `tool_choice`: `"auto"`, `"none"`, `"required"`, or
    /// `{"type": "function", "function": {"name": "..."}}`; `null` is `auto`.
    pub fn from_json(v: &Value) -> Result<ToolChoice> {
        let bad = || {
            Error::InvalidArgument(
                "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}"
                    .into(),
            )
        };
        match v {
            Value::Null => Ok(ToolChoice::Auto),
            Value::String(s) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                _ => Err(bad()),
            },
            Value::Object(_) => v
                .pointer("/function/name")
                .and_then(Value::as_str)
                .map(|n| ToolChoice::Function(n.to_string()))
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

/// The longest function name (OpenAI's limit).
const MAX_NAME: usize = 64;

/// Check OpenAI's `tools`: a list of `{"type": "function", "function": {"name", "description",
/// "parameters"}}` with names of letters, digits, `_`, `-` and `.` (at most 64), each once, and
/// `parameters` a JSON schema object when given.
pub fn validate_tools(tools: &Value) -> Result<()> {
    let bad = |m: String| Err(Error::InvalidArgument(m));
    let Some(list) = tools.as_array() else { return bad("tools must be a list".into()) };
    let mut names: Vec<&str> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") | None => {}
            Some(other) => {
                return bad(format!("tools[{i}].type '{other}' is not supported (only 'function')"))
            }
        }
        let Some(f) = t.get("function").filter(|f| f.is_object()) else {
            return bad(format!("tools[{i}] needs a 'function' object"));
        };
        let Some(name) = f.get("name").and_then(Value::as_str) else {
            return bad(format!("tools[{i}].function.name must be a string"));
        };
        if name.is_empty()
            || name.len() > MAX_NAME
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return bad(format!(
                "tools[{i}].function.name '{name}' must be 1 to {MAX_NAME} letters, digits, '_', '-' or '.'"
            ));
        }
        if names.contains(&name) {
            return bad(format!("tools[{i}]: the function '{name}' is declared twice"));
        }
        names.push(name);
        match f.get("parameters") {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(_) => return bad(format!("tools[{i}].function.parameters must be a JSON schema object")),
        }
    }
    Ok(())
}

/// The grammar for `choice`: one forcing a call for `required` and a named function, the lazy
/// one (free text, or a call once the model starts one) for `auto`, `None` for `none`. `tools` must pass
/// [`validate_tools`]; a named function must be one of them. `special` gives the id of a
/// control token by its text (`[TOOL_CALLS]`, `<|python_tag|>`), which the grammar then names
/// by id, as the model writes it; markers that are not control tokens are written as text.
/// With `parallel`, families that can write several calls may.
pub fn tool_choice_grammar(
    family: ToolFamily,
    tools: &Value,
    choice: &ToolChoice,
    parallel: bool,
    special: &dyn Fn(&str) -> Option<u32>,
) -> Result<Option<Constraint>> {
    validate_tools(tools)?;
    let all = tools.as_array().map(Vec::as_slice).unwrap_or_default();
    let functions: Vec<&Value> = match choice {
        ToolChoice::None => return Ok(None),
        ToolChoice::Auto if all.is_empty() => return Ok(None),
        ToolChoice::Auto | ToolChoice::Required => all.iter().filter_map(|t| t.get("function")).collect(),
        ToolChoice::Function(name) => {
            let f = all.iter().filter_map(|t| t.get("function")).find(|f| f["name"] == name.as_str());
            vec![f.ok_or_else(|| {
                Error::InvalidArgument(format!("tool_choice names '{name}', which is not in tools"))
            })?]
        }
    };
    if functions.is_empty() {
        return Err(Error::InvalidArgument("tool_choice 'required' needs at least one tool".into()));
    }
    let lazy = *choice == ToolChoice::Auto;
    let trigger = trigger(family);
    let mut g = Grammar::new(special);
    // The families whose calls are wrapped (a list, a section) rather than written one by one.
    let wrapped = wrapped(family, parallel, &g);
    // Under `auto` the trigger is written by the free prefix: where it opens a call (Hermes,
    // Qwen3-Coder, GLM, Seed-OSS, JSON) or lies inside one (gpt-oss's `to=functions.`), the
    // first call leaves it out; where it opens a wrapper, the wrapper follows it.
    let in_call = wrapped.is_none() && family != ToolFamily::MistralArgs;
    let mut calls = Vec::new();
    let mut firsts = Vec::new();
    for f in &functions {
        calls.push(g.call(family, f, "")?);
        if lazy && in_call {
            firsts.push(g.call(family, f, trigger)?);
        }
    }
    g.lines.push(format!("call: {}", calls.join(" | ")));
    if !firsts.is_empty() {
        g.lines.push(format!("first_call: {}", firsts.join(" | ")));
    }
    // The families whose calls follow each other on lines of their own.
    let lines =
        matches!(family, ToolFamily::Hermes | ToolFamily::Qwen3Coder | ToolFamily::Glm | ToolFamily::SeedOss);
    if lazy {
        // What follows the trigger: the rest of the first call, then what `required` allows.
        let rest = match (family, parallel, &wrapped) {
            (_, _, Some(w)) => w.clone(),
            (_, true, _) if lines => "first_call (\"\\n\" call)*".to_string(),
            (ToolFamily::MistralArgs, true, _) => format!("call ({} call)*", g.marker("[TOOL_CALLS]")),
            (ToolFamily::MistralArgs, false, _) => "call".to_string(),
            _ => "first_call".to_string(),
        };
        let start = match special(trigger) {
            Some(id) => {
                g.lines.push("TEXT: /(?s:.+)/".to_string());
                format!("start: TEXT? | TEXT? <[{id}]> {rest}")
            }
            None => {
                // The JSON families' trigger takes any whitespace after the brace, as models
                // write it (`{ "name"`, `{\n  "name"`).
                let t = match family {
                    ToolFamily::Llama3 | ToolFamily::Generic => r#"\{\s*"name""#.to_string(),
                    _ => regex_escape(trigger),
                };
                g.lines.push(format!("TEXT: /(?s:.+)/ & ~/(?s:.*){t}(?s:.*)/"));
                g.lines.push(format!("prefix[lazy]: /(?s:.*){t}/"));
                format!("start: TEXT? | prefix {rest}")
            }
        };
        // Llama 3.1 may also open a call with its `<|python_tag|>` control token, which the
        // free text cannot write.
        let start = match special("<|python_tag|>").filter(|_| family == ToolFamily::Llama3) {
            Some(id) => format!("{start} | TEXT? <[{id}]> call"),
            None => start,
        };
        g.lines.insert(0, start);
        return Ok(Some(Constraint::Lark(g.lines.join("\n"))));
    }
    let start = match (family, parallel, wrapped) {
        (_, _, Some(w)) => format!("{} {w}", g.marker(trigger)),
        (_, true, _) if lines => "call (\"\\n\" call)*".to_string(),
        (ToolFamily::MistralArgs, p, _) => {
            format!("({} call){}", g.marker("[TOOL_CALLS]"), if p { "+" } else { "" })
        }
        _ => "call".to_string(),
    };
    g.lines.insert(0, format!("start: {start}"));
    Ok(Some(Constraint::Lark(g.lines.join("\n"))))
}

/// The text whose writing starts a call under `auto`.
fn trigger(family: ToolFamily) -> &'static str {
    match family {
        ToolFamily::Hermes | ToolFamily::Qwen3Coder | ToolFamily::Glm => "<tool_call>",
        ToolFamily::SeedOss => "<seed:tool_call>",
        ToolFamily::Mistral | ToolFamily::MistralArgs => "[TOOL_CALLS]",
        ToolFamily::Nemotron => "<TOOLCALL>",
        ToolFamily::KimiK2 => "<|tool_calls_section_begin|>",
        ToolFamily::DeepSeekR1 | ToolFamily::DeepSeekV31 => "<｜tool▁calls▁begin｜>",
        ToolFamily::GptOss => "to=functions.",
        ToolFamily::Llama3 | ToolFamily::Generic => "{\"name\"",
    }
}

/// What follows the trigger of a family whose calls are wrapped: Mistral's and Nemotron's JSON
/// list, Kimi K2's and DeepSeek's section (closed by its marker). `None` for the others.
fn wrapped(family: ToolFamily, parallel: bool, g: &Grammar<'_>) -> Option<String> {
    let more = |sep: &str| if parallel { format!(" ({sep}call)*") } else { String::new() };
    Some(match family {
        ToolFamily::Mistral => format!("\"[\" call{} \"]\"", more("\", \" ")),
        ToolFamily::Nemotron => format!("\"[\" call{} \"]\" {}", more("\", \" "), g.marker("</TOOLCALL>")),
        ToolFamily::KimiK2 => format!("call{} {}", more(""), g.marker("<|tool_calls_section_end|>")),
        ToolFamily::DeepSeekR1 => format!("call{} {}", more("\"\\n\" "), g.marker("<｜tool▁calls▁end｜>")),
        ToolFamily::DeepSeekV31 => format!("call{} {}", more(""), g.marker("<｜tool▁calls▁end｜>")),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn choices_read() {
        assert_eq!(ToolChoice::from_json(&json!("required")).unwrap(), ToolChoice::Required);
        assert_eq!(
            ToolChoice::from_json(&json!({"type": "function", "function": {"name": "f"}})).unwrap(),
            ToolChoice::Function("f".into())
        );
        assert!(ToolChoice::from_json(&json!("always")).is_err());
    }

    #[test]
    fn bad_tools_are_errors() {
        for t in [
            json!({}),
            json!([{"type": "function"}]),
            json!([{"type": "function", "function": {"name": "a b"}}]),
            json!([{"type": "function", "function": {"name": "f", "parameters": 3}}]),
            json!([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]),
        ] {
            assert!(validate_tools(&t).is_err(), "{t}");
        }
    }
}
