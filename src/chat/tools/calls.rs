//! A complete call's text to the calls it holds: JSON objects in their several shapes,
//! Qwen3-Coder's XML, GLM's key and value pairs, and Mistral's `NAME[ARGS]{...}`. `None` when the text is not a call.

use serde_json::{Map, Value};

/// A call read from the text, before it gets an id of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawCall {
    pub name: String,
    /// JSON text of an object.
    pub arguments: String,
    /// The model's own id for it (Mistral writes one).
    pub id: Option<String>,
}

/// The longest function name a call may have.
const MAX_NAME: usize = 256;

pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Arguments given as an object, or as the JSON text of one, as JSON text.
pub(super) fn arguments_text(v: Option<&Value>) -> Option<String> {
    match v {
        None | Some(Value::Null) => Some("{}".into()),
        Some(o @ Value::Object(_)) => serde_json::to_string(o).ok(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(o @ Value::Object(_)) => serde_json::to_string(&o).ok(),
            _ => None,
        },
        Some(_) => None,
    }
}

/// One call object: `{"name", "arguments"|"parameters"}` (Llama 3.2 adds `"type":
/// "function"`), `{"function": {"name", "arguments"}}`, or `{"tool_call": {...}}`.
fn call_object(v: &Value) -> Option<RawCall> {
    let o = v.as_object()?;
    if let Some(inner) = o.get("tool_call") {
        return call_object(inner);
    }
    if let Some(f @ Value::Object(_)) = o.get("function") {
        let mut c = call_object(f)?;
        c.id = c.id.or_else(|| o.get("id").and_then(Value::as_str).map(String::from));
        return Some(c);
    }
    let name = o.get("name")?.as_str()?;
    if !valid_name(name) {
        return None;
    }
    let args = match (o.get("arguments"), o.get("parameters")) {
        (Some(a), _) => a,
        (None, Some(p)) => p,
        (None, None) => return None,
    };
    Some(RawCall {
        name: name.to_string(),
        arguments: arguments_text(Some(args))?,
        id: o.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from),
    })
}

/// The calls of a JSON text: one call object, a list of them, or `{"tool_calls": [...]}`.
pub(super) fn json_calls(text: &str) -> Option<Vec<RawCall>> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let list = match &v {
        Value::Array(a) => a.as_slice(),
        Value::Object(o) => match o.get("tool_calls") {
            Some(Value::Array(a)) => a.as_slice(),
            Some(_) => return None,
            None => std::slice::from_ref(&v),
        },
        _ => return None,
    };
    if list.is_empty() {
        return None;
    }
    list.iter().map(call_object).collect()
}

/// Mistral's `NAME[ARGS]{...}` (with `[CALL_ID]ID` after the name in some versions); `args`
/// is the JSON object's text.
pub(super) fn mistral_named(head: &str, args: &str) -> Option<RawCall> {
    let (name, id) = match head.split_once("[CALL_ID]") {
        Some((n, id)) => (n.trim(), Some(id.trim().to_string()).filter(|s| !s.is_empty())),
        None => (head.trim(), None),
    };
    if !valid_name(name) {
        return None;
    }
    let v: Value = serde_json::from_str(args).ok()?;
    Some(RawCall { name: name.to_string(), arguments: arguments_text(Some(&v))?, id })
}

/// The text of one parameter as Qwen3-Coder writes it: the value between newlines.
fn xml_value(raw: &str) -> &str {
    let v = raw.strip_prefix('\n').unwrap_or(raw);
    v.strip_suffix('\n').unwrap_or(v)
}

/// Qwen3-Coder's XML calls: `<function=NAME>` then `<parameter=P>\nVALUE\n</parameter>`
/// entries, up to `</function>` (or the end of the body). A value that parses as JSON is
/// that JSON, unless `string_param(function, parameter)` says the tool declares a string.
pub(super) fn xml_calls(body: &str, string_param: &dyn Fn(&str, &str) -> bool) -> Option<Vec<RawCall>> {
    let mut calls = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let after = rest.strip_prefix("<function=")?;
        let (name, after) = after.split_once('>')?;
        if !valid_name(name) {
            return None;
        }
        let (inner, tail) = match after.split_once("</function>") {
            Some((i, t)) => (i, t),
            None => (after, ""),
        };
        let mut args = Map::new();
        let mut params = inner.trim();
        while !params.is_empty() {
            let p = params.strip_prefix("<parameter=")?;
            let (pname, p) = p.split_once('>')?;
            let (raw, p) = p.split_once("</parameter>")?;
            args.insert(pname.to_string(), typed_value(name, pname, xml_value(raw), string_param));
            params = p.trim();
        }
        calls.push(RawCall {
            name: name.to_string(),
            arguments: serde_json::to_string(&Value::Object(args)).ok()?,
            id: None,
        });
        rest = tail.trim();
    }
    (!calls.is_empty()).then_some(calls)
}

/// A parameter's value as the XML families write it: JSON where it reads as JSON, unless the
/// tool declares the parameter a string (`string_param(function, parameter)`).
fn typed_value(function: &str, param: &str, text: &str, string_param: &dyn Fn(&str, &str) -> bool) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v) if !string_param(function, param) => v,
        _ => Value::String(text.to_string()),
    }
}

/// GLM's call body: `NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>` pairs (with or
/// without newlines between them); values as [`typed_value`] reads them.
pub(super) fn arg_calls(body: &str, string_param: &dyn Fn(&str, &str) -> bool) -> Option<Vec<RawCall>> {
    let (name, mut rest) = match body.find("<arg_key>") {
        Some(p) => (body[..p].trim(), &body[p..]),
        None => (body.trim(), ""),
    };
    if !valid_name(name) {
        return None;
    }
    let mut args = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (key, r) = rest.strip_prefix("<arg_key>")?.split_once("</arg_key>")?;
        let (raw, r) = r.trim_start().strip_prefix("<arg_value>")?.split_once("</arg_value>")?;
        args.insert(key.trim().to_string(), typed_value(name, key.trim(), raw, string_param));
        rest = r;
    }
    Some(vec![RawCall {
        name: name.to_string(),
        arguments: serde_json::to_string(&Value::Object(args)).ok()?,
        id: None,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shapes() {
        let one = json_calls(r#"{"name": "f", "parameters": {"a": 1}}"#).unwrap();
        assert_eq!(one, vec![RawCall { name: "f".into(), arguments: r#"{"a":1}"#.into(), id: None }]);
        let nested = json_calls(r#"{"tool_call": {"name": "f", "arguments": "{\"b\": true}"}}"#).unwrap();
        assert_eq!(nested[0].arguments, r#"{"b":true}"#);
        assert!(json_calls(r#"{"name": "Bob", "age": 3}"#).is_none());
        assert!(json_calls(r#"{"name": "f", "arguments": [1]}"#).is_none());
        assert!(json_calls("[]").is_none());
    }

    #[test]
    fn xml_values() {
        let c = xml_calls(
            "<function=f>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>",
            &|_, p| p == "zip",
        )
        .unwrap();
        assert_eq!(c[0].arguments, r#"{"city":"Paris","days":3}"#);
        assert!(xml_calls("<function=f><parameter=x>1", &|_, _| false).is_none());
    }

    #[test]
    fn glm_pairs() {
        let c = arg_calls("get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n", &|_, _| false).unwrap();
        assert_eq!(c[0].arguments, r#"{"city":"Paris","days":3}"#);
        let c = arg_calls("f<arg_key>zip</arg_key><arg_value>75001</arg_value>", &|_, p| p == "zip").unwrap();
        assert_eq!(c[0].arguments, r#"{"zip":"75001"}"#);
        assert_eq!(arg_calls("get_time", &|_, _| false).unwrap()[0].arguments, "{}");
        assert!(arg_calls("two words", &|_, _| false).is_none());
        assert!(arg_calls("f<arg_key>x</arg_key>", &|_, _| false).is_none());
    }
}
