//! What a generation may be constrained to, and its translation into an llguidance grammar.

use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

use crate::{Error, Result};

/// A constraint on the generated text, enforced token by token: every token that would leave
/// the language is masked out before sampling, and generation ends when the text is complete.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// Any JSON object (OpenAI's `response_format: {type: "json_object"}`).
    JsonObject,
    /// JSON that validates against this JSON Schema (draft 2020-12 and earlier keywords that
    /// llguidance supports; `$ref`s must point inside the schema, as `#/$defs/...`). A keyword
    /// llguidance cannot enforce is an error rather than silently ignored.
    JsonSchema(Value),
    /// Text in the language of this grammar, in llguidance's Lark dialect (`start: ...`
    /// rules, `/regex/` terminals, `%json {...}` for an embedded JSON schema).
    Lark(String),
    /// Text in the language of this llama.cpp GBNF grammar (`root ::= ...`), translated to
    /// Lark by [`super::gbnf_to_lark`].
    Gbnf(String),
}

/// The JSON formatting a schema gets unless it says otherwise in llguidance's `x-guidance`
/// key: compact, one space after `,` and `:` (the layout of OpenAI's and llama.cpp's output).
/// Free whitespace would let a small model pad its output with newlines until `max_tokens`.
fn default_json_options() -> Value {
    json!({ "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " })
}

impl Constraint {
    /// A grammar given as text: GBNF when it has `name ::=` rules ([`super::looks_like_gbnf`]),
    /// else Lark.
    pub fn grammar_text(text: String) -> Constraint {
        if super::looks_like_gbnf(&text) {
            Constraint::Gbnf(text)
        } else {
            Constraint::Lark(text)
        }
    }

    /// A request's constraint from its options as the JS API and `wick serve` take them:
    /// OpenAI's `response_format`, or `json_schema` (a schema) or `grammar` (GBNF or Lark
    /// text), as llama.cpp's server takes them. At most one of them.
    pub fn from_options(
        response_format: Option<&Value>,
        json_schema: Option<&Value>,
        grammar: Option<String>,
    ) -> Result<Option<Constraint>> {
        let mut found: Vec<Constraint> = Vec::new();
        if let Some(f) = response_format {
            found.extend(Constraint::from_response_format(f)?);
        }
        if let Some(s) = json_schema {
            if !(s.is_object() || s.is_boolean()) {
                return Err(Error::Grammar("json_schema must be a JSON Schema object".into()));
            }
            found.push(Constraint::JsonSchema(s.clone()));
        }
        found.extend(grammar.map(Constraint::grammar_text));
        if found.len() > 1 {
            return Err(Error::Grammar(
                "give only one of 'response_format', 'json_schema' and 'grammar'".into(),
            ));
        }
        Ok(found.pop())
    }

    /// The constraint of an OpenAI `response_format` object: `{"type": "text"}` (none),
    /// `{"type": "json_object"}`, or `{"type": "json_schema", "json_schema": {"name": ..,
    /// "schema": {..}, "strict": ..}}`. The schema is enforced whether `strict` is set or not.
    pub fn from_response_format(format: &Value) -> Result<Option<Constraint>> {
        let bad = |m: &str| Err(Error::Grammar(format!("response_format: {m}")));
        let Some(kind) = format.get("type").and_then(Value::as_str) else {
            return bad("needs a string 'type' (text, json_object or json_schema)");
        };
        match kind {
            "text" => Ok(None),
            "json_object" => Ok(Some(Constraint::JsonObject)),
            "json_schema" => {
                let Some(spec) = format.get("json_schema").filter(|v| v.is_object()) else {
                    return bad("type json_schema needs a 'json_schema' object ({name, schema, strict})");
                };
                match spec.get("schema") {
                    Some(s) if s.is_object() || s.is_boolean() => Ok(Some(Constraint::JsonSchema(s.clone()))),
                    Some(_) => bad("json_schema.schema must be a JSON Schema object"),
                    // OpenAI allows a missing schema: then any JSON value.
                    None => Ok(Some(Constraint::JsonSchema(json!({})))),
                }
            }
            other => bad(&format!("unknown type '{other}' (choose text, json_object or json_schema)")),
        }
    }

    /// The llguidance grammar of this constraint.
    pub(crate) fn grammar(&self) -> Result<TopLevelGrammar> {
        match self {
            Constraint::JsonObject => Ok(TopLevelGrammar::from_json_schema(with_json_options(json!({
                "type": "object"
            })))),
            Constraint::JsonSchema(schema) => match schema {
                Value::Object(_) => Ok(TopLevelGrammar::from_json_schema(with_json_options(schema.clone()))),
                // `true` accepts any value; `false` accepts none.
                Value::Bool(true) => Ok(TopLevelGrammar::from_json_schema(with_json_options(json!({})))),
                Value::Bool(false) => Err(Error::Grammar("the JSON schema `false` accepts no value".into())),
                _ => Err(Error::Grammar("a JSON schema must be an object (or true)".into())),
            },
            Constraint::Lark(text) => {
                if text.trim().is_empty() {
                    return Err(Error::Grammar("the Lark grammar is empty".into()));
                }
                Ok(TopLevelGrammar::from_lark(text.clone()))
            }
            Constraint::Gbnf(text) => Ok(TopLevelGrammar::from_lark(super::gbnf_to_lark(text)?)),
        }
    }
}

/// `schema` with wick's default JSON layout, unless it carries its own `x-guidance` options.
fn with_json_options(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema {
        if !map.contains_key("x-guidance") {
            map.insert("x-guidance".into(), default_json_options());
        }
    }
    schema
}
