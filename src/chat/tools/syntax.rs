//! One call in each family's syntax as Lark rules (llguidance's), its arguments matching the
//! function's JSON schema (`%json {...}`), for [`super::tool_choice_grammar`].

use serde_json::{json, Value};

use super::ToolFamily;
use crate::{Error, Result};

/// `s` as a regex matching itself, for a Lark `/.../` (which ends at an unescaped `/`).
pub(super) fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c == '\n' {
            out.push_str("\\n");
            continue;
        }
        if "\\.+*?()|[]{}^$/-#&~\"".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A Lark string literal (JSON's escapes are Lark's).
pub(super) fn lit(s: &str) -> String {
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
pub(super) struct Grammar<'a> {
    pub lines: Vec<String>,
    n: usize,
    /// The id of a control token by its text.
    special: &'a dyn Fn(&str) -> Option<u32>,
}

/// One parameter of a function, as the XML families write it.
struct Param<'s> {
    name: &'s str,
    schema: &'s Value,
    required: bool,
}

/// The properties of a parameters schema, in its order, each with whether it is required.
fn params_of(params: &Value) -> Vec<Param<'_>> {
    let required: Vec<&str> = params
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    params
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, schema)| Param { name, schema, required: required.contains(&name.as_str()) })
        .collect()
}

/// Whether a schema is a string with no constraint on its text: written raw by the XML families.
fn plain_string(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("string")
        && !["enum", "const", "pattern", "format", "minLength", "maxLength"]
            .iter()
            .any(|k| schema.get(k).is_some())
}

/// The values of a string `enum` or `const` where each reads back as that string when written
/// raw (not as JSON of another type, not empty, no `<`); `None` where one does not.
fn raw_strings(schema: &Value) -> Option<Vec<&str>> {
    let values: Vec<&Value> = match (schema.get("enum"), schema.get("const")) {
        (Some(Value::Array(a)), None) if !a.is_empty() => a.iter().collect(),
        (None, Some(c)) => vec![c],
        _ => return None,
    };
    values
        .into_iter()
        .map(|v| {
            v.as_str().filter(|s| {
                !s.is_empty()
                    && !s.contains('<')
                    && s.trim() == *s
                    && serde_json::from_str::<Value>(s).is_err()
            })
        })
        .collect()
}

impl<'a> Grammar<'a> {
    pub(super) fn new(special: &'a dyn Fn(&str) -> Option<u32>) -> Grammar<'a> {
        Grammar { lines: Vec::new(), n: 0, special }
    }

    /// A marker: its control token by id where it is one, else its text.
    pub(super) fn marker(&self, text: &str) -> String {
        match (self.special)(text) {
            Some(id) => format!("<[{id}]>"),
            None => lit(text),
        }
    }

    /// A new rule holding `body`; returns its name.
    fn rule(&mut self, body: String) -> String {
        self.n += 1;
        let name = format!("r{}", self.n);
        self.lines.push(format!("{name}: {body}"));
        name
    }

    /// The expansion of one call of `f` in `family`'s syntax, less `lead` (the text already
    /// written before it: the trigger of a lazy grammar) where its first literal starts so.
    pub(super) fn call(&mut self, family: ToolFamily, f: &Value, lead: &str) -> Result<String> {
        let name = f["name"].as_str().unwrap_or_default();
        let params = match f.get("parameters") {
            Some(p @ Value::Object(_)) => p.clone(),
            _ => json!({ "type": "object" }),
        };
        let strip = |text: String| {
            text.strip_prefix(lead).filter(|t| !t.is_empty()).map(String::from).unwrap_or(text)
        };
        match family {
            ToolFamily::Qwen3Coder => {
                let style = XmlStyle { open: "<tool_call>\n", value_open: "\n", close: "</tool_call>" };
                return self.xml_call(name, &params, &style, lead);
            }
            ToolFamily::SeedOss => {
                let style =
                    XmlStyle { open: "<seed:tool_call>\n", value_open: "", close: "</seed:tool_call>" };
                return self.xml_call(name, &params, &style, lead);
            }
            ToolFamily::Glm => return self.glm_call(&params, &strip(format!("<tool_call>{name}"))),
            ToolFamily::GptOss => return self.harmony_call(name, &params, !lead.is_empty()),
            _ => {}
        }
        let args = self.rule(json_rule(&params)?);
        let obj = |key: &str, lead_here: bool| {
            let text = format!("{{\"name\": \"{name}\", \"{key}\": ");
            format!("{} {args} \"}}\"", lit(&if lead_here { strip(text) } else { text }))
        };
        Ok(match family {
            ToolFamily::Hermes => {
                format!(
                    "{} {} \"\\n</tool_call>\"",
                    lit(&strip("<tool_call>\n".into())),
                    obj("arguments", false)
                )
            }
            ToolFamily::Llama3 => obj("parameters", true),
            ToolFamily::MistralArgs => format!("{} {args}", lit(&format!("{name}[ARGS]"))),
            ToolFamily::KimiK2 => {
                let index = self.rule("/[0-9]{1,4}/".to_string());
                format!(
                    "{} {} {index} {} {args} {}",
                    self.marker("<|tool_call_begin|>"),
                    lit(&format!("functions.{name}:")),
                    self.marker("<|tool_call_argument_begin|>"),
                    self.marker("<|tool_call_end|>")
                )
            }
            ToolFamily::DeepSeekR1 => format!(
                "{} \"function\" {} {} {args} \"\\n```\" {}",
                self.marker("<｜tool▁call▁begin｜>"),
                self.marker("<｜tool▁sep｜>"),
                lit(&format!("{name}\n```json\n")),
                self.marker("<｜tool▁call▁end｜>")
            ),
            ToolFamily::DeepSeekV31 => format!(
                "{} {} {} {args} {}",
                self.marker("<｜tool▁call▁begin｜>"),
                lit(name),
                self.marker("<｜tool▁sep｜>"),
                self.marker("<｜tool▁call▁end｜>")
            ),
            // Generic and Nemotron: the JSON object (Nemotron's inside its list).
            _ => obj("arguments", true),
        })
    }

    /// A parameter's value: raw text up to `close` for a plain string (any text without `</`,
    /// so it cannot run past its closing tag), one of the raw texts of a string `enum` or
    /// `const` (as the templates write strings), else JSON then `close`.
    fn xml_value(&mut self, schema: &Value, close: &str) -> Result<String> {
        if plain_string(schema) {
            Ok(self.rule(format!("/([^<]|<[^\\/])*{}/", regex_escape(close))))
        } else if let Some(texts) = raw_strings(schema) {
            let alternatives: Vec<String> = texts.into_iter().map(lit).collect();
            Ok(format!("({}) {}", alternatives.join(" | "), lit(close)))
        } else {
            let value = self.rule(json_rule(schema)?);
            Ok(format!("{value} {}", lit(close)))
        }
    }

    /// Qwen3-Coder's and Seed-OSS's `<function=NAME>` call: each property of the schema in its
    /// order (the required ones always, the others optional), strings as raw text, the rest as
    /// JSON.
    fn xml_call(&mut self, name: &str, params: &Value, style: &XmlStyle, lead: &str) -> Result<String> {
        let open_call = format!("{}<function={name}>\n", style.open);
        let mut parts = vec![lit(open_call.strip_prefix(lead).unwrap_or(&open_call))];
        for p in params_of(params) {
            let open = lit(&format!("<parameter={}>{}", p.name, style.value_open));
            let value = self.xml_value(p.schema, &format!("{}</parameter>\n", style.value_open))?;
            let entry = format!("{open} {value}");
            parts.push(if p.required { entry } else { format!("({entry})?") });
        }
        parts.push(lit(&format!("</function>\n{}", style.close)));
        Ok(parts.join(" "))
    }

    /// GLM's call: `head` (`<tool_call>NAME`, less the trigger), then a key and value pair for
    /// each property (newlines between them optional: GLM 4.6 writes them, 4.7 does not).
    fn glm_call(&mut self, params: &Value, head: &str) -> Result<String> {
        let mut parts = vec![lit(head)];
        for p in params_of(params) {
            let key = lit(&format!("<arg_key>{}</arg_key>", p.name));
            let value = self.xml_value(p.schema, "</arg_value>")?;
            let entry = format!("\"\\n\"? {key} \"\\n\"? \"<arg_value>\" {value}");
            parts.push(if p.required { entry } else { format!("({entry})?") });
        }
        parts.push("\"\\n\"? \"</tool_call>\"".to_string());
        Ok(parts.join(" "))
    }

    /// gpt-oss's call: the header of a `commentary` message to `functions.NAME`, then the JSON
    /// arguments. After the lazy trigger (`to=functions.`) the rest of either header form.
    fn harmony_call(&mut self, name: &str, params: &Value, after_trigger: bool) -> Result<String> {
        let args = self.rule(json_rule(params)?);
        let (channel, constrain, message) =
            (self.marker("<|channel|>"), self.marker("<|constrain|>"), self.marker("<|message|>"));
        if !after_trigger {
            return Ok(format!(
                "{channel} {} {constrain} \"json\" {message} {args}",
                lit(&format!("commentary to=functions.{name} "))
            ));
        }
        let json = format!("(\" \" {constrain}? \"json\" | {constrain} \"json\")");
        let tail = self.rule(format!("{json}? {message} | {channel} \"commentary\" {json}? {message}"));
        Ok(format!("{} {tail} {args}", lit(name)))
    }
}

/// Where Qwen3-Coder and Seed-OSS differ: the call's tags, and a newline before a value (and
/// after it) or not.
struct XmlStyle {
    open: &'static str,
    value_open: &'static str,
    close: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn raw_enum_values() {
        assert_eq!(
            raw_strings(&json!({"enum": ["celsius", "fahrenheit"]})),
            Some(vec!["celsius", "fahrenheit"])
        );
        assert_eq!(raw_strings(&json!({"const": "on"})), Some(vec!["on"]));
        // Values that would read back as another type (or run into a tag) stay JSON.
        assert_eq!(raw_strings(&json!({"enum": ["1", "2"]})), None);
        assert_eq!(raw_strings(&json!({"enum": ["a", 3]})), None);
        assert_eq!(raw_strings(&json!({"enum": ["<b>"]})), None);
        assert_eq!(raw_strings(&json!({"type": "string"})), None);
    }
}
