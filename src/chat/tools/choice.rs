//! `tools` checked, and `tool_choice` as a grammar: `required` or a named function force a call
//! in the family's syntax whose arguments match the function's JSON schema (llguidance's Lark,
//! `%json {...}` for the arguments).
//!
//! `auto` gets a lazy grammar (what llama.cpp does in its sampler with trigger words, here in
//! the grammar itself): any text that does not contain the family's trigger (`<tool_call>`,
//! `[TOOL_CALLS]`, or `{"name"` for the JSON families, with any whitespace after the brace), or text up to the first trigger, then
//! a call forced exactly as under `required`. The prefix is one `[lazy]` lexeme, so it ends at
//! the first trigger; the free alternative is a regex that excludes the trigger (`& ~`), so
//! once the trigger is written the free way is closed. A trigger that is a control token is
//! named by id and needs no exclusion (text lexemes never match a control token).

use serde_json::{json, Value};

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
    // Under `auto` the trigger opens the call: it is written by the free prefix, so the first
    // call (Hermes, Qwen3-Coder, JSON) or the start rule (Mistral) leaves it out.
    let trigger = match family {
        ToolFamily::Hermes | ToolFamily::Qwen3Coder => "<tool_call>",
        ToolFamily::Mistral | ToolFamily::MistralArgs => "[TOOL_CALLS]",
        ToolFamily::Llama3 | ToolFamily::Generic => "{\"name\"",
    };
    let in_call = !matches!(family, ToolFamily::Mistral | ToolFamily::MistralArgs);
    let mut g = Grammar { lines: Vec::new(), n: 0 };
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
    let marker = |text: &str| match special(text) {
        Some(id) => format!("<[{id}]>"),
        None => lit(text),
    };
    if lazy {
        // What follows the trigger: the rest of the first call, then what `required` allows.
        let rest = match (family, parallel) {
            (ToolFamily::Hermes | ToolFamily::Qwen3Coder, true) => "first_call (\"\\n\" call)*".to_string(),
            (ToolFamily::Mistral, p) => {
                format!("\"[\" call{} \"]\"", if p { " (\", \" call)*" } else { "" })
            }
            (ToolFamily::MistralArgs, true) => format!("call ({} call)*", marker("[TOOL_CALLS]")),
            (ToolFamily::MistralArgs, false) => "call".to_string(),
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
    let start = match (family, parallel) {
        (ToolFamily::Hermes | ToolFamily::Qwen3Coder, true) => "call (\"\\n\" call)*".to_string(),
        (ToolFamily::Mistral, p) => {
            let more = if p { " (\", \" call)*" } else { "" };
            format!("{} \"[\" call{more} \"]\"", marker("[TOOL_CALLS]"))
        }
        (ToolFamily::MistralArgs, p) => {
            format!("({} call){}", marker("[TOOL_CALLS]"), if p { "+" } else { "" })
        }
        _ => "call".to_string(),
    };
    g.lines.insert(0, format!("start: {start}"));
    Ok(Some(Constraint::Lark(g.lines.join("\n"))))
}

/// `s` as a regex matching itself, for a Lark `/.../` (which ends at an unescaped `/`).
fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$/-#&~\"".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A Lark string literal (JSON's escapes are Lark's).
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Every object of `schema` that lists `properties` and says nothing of others gets
/// `additionalProperties: false`: a function takes the parameters it declares (as llama.cpp's
/// tool grammars and OpenAI's strict mode read it), and a small model let free to add keys
/// keeps adding them until `max_tokens`.
fn close_objects(schema: &mut Value, depth: usize) {
    if depth > 64 {
        return;
    }
    let Value::Object(m) = schema else { return };
    if m.contains_key("properties") && !m.contains_key("additionalProperties") {
        m.insert("additionalProperties".into(), Value::Bool(false));
    }
    // The subschemas: maps of them, lists of them, and single ones.
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(sub)) = m.get_mut(key) {
            sub.values_mut().for_each(|v| close_objects(v, depth + 1));
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(sub)) = m.get_mut(key) {
            sub.iter_mut().for_each(|v| close_objects(v, depth + 1));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = m.get_mut(key) {
            close_objects(v, depth + 1);
        }
    }
}

/// A JSON schema with wick's compact layout (as [`Constraint::JsonSchema`] gets it) and its
/// objects closed ([`close_objects`]).
fn json_rule(schema: &Value) -> Result<String> {
    let mut s = match schema {
        Value::Object(_) => schema.clone(),
        Value::Bool(true) | Value::Null => json!({}),
        _ => return Err(Error::InvalidArgument("a parameter's schema must be a JSON schema object".into())),
    };
    close_objects(&mut s, 0);
    if let Value::Object(m) = &mut s {
        m.entry("x-guidance").or_insert(
            json!({ "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " }),
        );
    }
    Ok(format!("%json {}", serde_json::to_string(&s).map_err(|e| Error::InvalidArgument(e.to_string()))?))
}

/// The Lark rules being built.
struct Grammar {
    lines: Vec<String>,
    n: usize,
}

impl Grammar {
    /// A new rule holding `body`; returns its name.
    fn rule(&mut self, body: String) -> String {
        self.n += 1;
        let name = format!("r{}", self.n);
        self.lines.push(format!("{name}: {body}"));
        name
    }

    /// The expansion of one call of `f` in `family`'s syntax, less `lead` (the text already
    /// written before it: the trigger of a lazy grammar) where its first literal starts so.
    fn call(&mut self, family: ToolFamily, f: &Value, lead: &str) -> Result<String> {
        let name = f["name"].as_str().unwrap_or_default();
        let params = match f.get("parameters") {
            Some(p @ Value::Object(_)) => p.clone(),
            _ => json!({ "type": "object" }),
        };
        if family == ToolFamily::Qwen3Coder {
            return self.xml_call(name, &params, lead);
        }
        let args = self.rule(json_rule(&params)?);
        let head = |text: &str| lit(text.strip_prefix(lead).filter(|t| !t.is_empty()).unwrap_or(text));
        let obj = |key: &str, lead_here: bool| {
            let text = format!("{{\"name\": \"{name}\", \"{key}\": ");
            format!("{} {args} \"}}\"", if lead_here { head(&text) } else { lit(&text) })
        };
        Ok(match family {
            ToolFamily::Hermes => {
                format!("{} {} \"\\n</tool_call>\"", head("<tool_call>\n"), obj("arguments", false))
            }
            ToolFamily::Llama3 => obj("parameters", true),
            ToolFamily::MistralArgs => format!("{} {args}", lit(&format!("{name}[ARGS]"))),
            _ => obj("arguments", true),
        })
    }

    /// Qwen3-Coder's `<function=NAME>` call: each property of the schema in its order (the
    /// required ones always, the others optional), strings as raw text, the rest as JSON.
    fn xml_call(&mut self, name: &str, params: &Value, lead: &str) -> Result<String> {
        let required: Vec<&str> = params
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let open_call = format!("<tool_call>\n<function={name}>\n");
        let mut parts = vec![lit(open_call.strip_prefix(lead).unwrap_or(&open_call))];
        for (p, schema) in params.get("properties").and_then(Value::as_object).into_iter().flatten() {
            let open = lit(&format!("<parameter={p}>\n"));
            let close = lit("\n</parameter>\n");
            let plain_string = schema.get("type").and_then(Value::as_str) == Some("string")
                && !["enum", "const", "pattern", "format", "minLength", "maxLength"]
                    .iter()
                    .any(|k| schema.get(k).is_some());
            let entry = if plain_string {
                // Any text without "</" (so it cannot run past its closing tag), then the tag.
                let text = self.rule(r#"/([^<]|<[^\/])*\n<\/parameter>\n/"#.to_string());
                format!("{open} {text}")
            } else {
                let value = self.rule(json_rule(schema)?);
                format!("{open} {value} {close}")
            };
            if required.contains(&p.as_str()) {
                parts.push(entry);
            } else {
                parts.push(format!("({entry})?"));
            }
        }
        parts.push(lit("</function>\n</tool_call>"));
        Ok(parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn objects_are_closed() {
        let mut s = json!({"type": "object", "properties": {
            "properties": {"type": "string"},
            "inner": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "open": {"type": "object", "properties": {}, "additionalProperties": true}},
            "$defs": {"d": {"properties": {"y": {}}}}});
        close_objects(&mut s, 0);
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["inner"]["additionalProperties"], false);
        assert_eq!(s["properties"]["open"]["additionalProperties"], true);
        assert_eq!(s["$defs"]["d"]["additionalProperties"], false);
        assert!(s["properties"].get("additionalProperties").is_none());
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
