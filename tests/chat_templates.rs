//! wick's chat-template rendering against jinja2 as transformers runs it.
//!
//! tests/data/chat_refs.json is written by tests/scripts/make_chat_refs.py: the SmolLM2 template
//! read from its GGUF, Gemma 3's published template (the gemma-3-270m GGUF carries none), and
//! Llama 3, Llama 3.2, Qwen2 (ChatML), Qwen2.5 and a pycompat-heavy template, each rendered
//! with jinja2 for several conversations with and without the generation prompt.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use serde_json::Value as Json;
use wick::chat::{ChatMessage, ChatTemplate};
use wick::gguf::{MetaValue, Metadata};
use wick::Error;

fn refs() -> Json {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/chat_refs.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read chat_refs.json"))
        .expect("parse chat_refs.json")
}

fn messages(j: &Json) -> Vec<ChatMessage> {
    j.as_array()
        .expect("messages array")
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

fn template(t: &Json, fixed_time: i64) -> ChatTemplate {
    let tmpl = ChatTemplate::new(
        t["source"].as_str().unwrap(),
        t["bos_token"].as_str().unwrap(),
        t["eos_token"].as_str().unwrap(),
    )
    .unwrap_or_else(|e| panic!("template {} does not compile: {e}", t["name"]));
    tmpl.set_fixed_time(Some(fixed_time));
    tmpl
}

#[test]
fn renders_match_jinja2_byte_for_byte() {
    let refs = refs();
    let fixed_time = refs["fixed_time"].as_i64().unwrap();
    let templates = refs["templates"].as_array().unwrap();
    let names: Vec<&str> = templates.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for want in ["smollm2", "gemma3", "llama3", "qwen2"] {
        assert!(names.contains(&want), "refs lack template {want}: {names:?}");
    }
    let mut checked = 0;
    for t in templates {
        let name = t["name"].as_str().unwrap();
        let tmpl = template(t, fixed_time);
        for case in t["cases"].as_array().unwrap() {
            let msgs = messages(&case["messages"]);
            let agp = case["add_generation_prompt"].as_bool().unwrap();
            let got =
                tmpl.render(&msgs, agp).unwrap_or_else(|e| panic!("{name} / {}: {e}", case["conversation"]));
            let want = case["expected"].as_str().unwrap();
            assert_eq!(
                got, want,
                "template {name}, conversation {}, add_generation_prompt={agp}",
                case["conversation"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 7 * 6, "only {checked} cases checked");
}

#[test]
fn raise_exception_is_a_template_error() {
    let refs = refs();
    let fixed_time = refs["fixed_time"].as_i64().unwrap();
    for e in refs["errors"].as_array().unwrap() {
        let t = refs["templates"].as_array().unwrap().iter().find(|t| t["name"] == e["template"]).unwrap();
        let tmpl = template(t, fixed_time);
        let msgs = messages(&e["messages"]);
        match tmpl.render(&msgs, e["add_generation_prompt"].as_bool().unwrap()) {
            Err(Error::Template(msg)) => {
                let needle = e["message_contains"].as_str().unwrap();
                assert!(msg.contains(needle), "error {msg:?} lacks {needle:?}");
            }
            other => panic!("expected Error::Template, got {other:?}"),
        }
    }
    // And directly.
    let tmpl = ChatTemplate::new("{{ raise_exception('nope: ' + messages[0].role) }}", "", "").unwrap();
    match tmpl.render(&[ChatMessage::new("user", "x")], false) {
        Err(Error::Template(msg)) => assert!(msg.contains("nope: user"), "{msg}"),
        other => panic!("expected Error::Template, got {other:?}"),
    }
}

#[test]
fn broken_templates_fail_at_construction() {
    for src in [
        "{% for m in messages %}{{ m.content }}",
        "{{ messages[0].content ",
        "{% if %}x{% endif %}",
        "{% endfor %}",
        "{{ 'unterminated }}",
    ] {
        match ChatTemplate::new(src, "<s>", "</s>") {
            Err(Error::Template(msg)) => assert!(!msg.is_empty()),
            Err(other) => panic!("{src:?}: expected Error::Template, got {other:?}"),
            Ok(_) => panic!("{src:?}: should not compile"),
        }
    }
}

#[test]
fn runtime_errors_are_errors_not_panics() {
    let msgs = [ChatMessage::new("user", "hi")];
    for src in [
        "{{ messages[0].content.nosuchmethod() }}",
        "{{ messages.nosuch.deeper }}",
        "{{ undefined_thing | tojson }}",
        "{% for i in range(100000000) %}{% endfor %}{{ 1 / 0 }}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    ] {
        let tmpl = ChatTemplate::new(src, "", "").expect(src);
        assert!(matches!(tmpl.render(&msgs, true), Err(Error::Template(_))), "{src}");
    }
}

#[test]
fn from_metadata_reads_the_key_or_says_none() {
    let mut md = Metadata::new();
    assert!(ChatTemplate::from_metadata(&md, "<s>", "</s>").unwrap().is_none());
    md.insert(
        "tokenizer.chat_template",
        MetaValue::Str(
            "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}"
                .into(),
        ),
    );
    let tmpl = ChatTemplate::from_metadata(&md, "<s>", "</s>").unwrap().unwrap();
    let out = tmpl.render(&[ChatMessage::new("user", "hi")], true).unwrap();
    assert_eq!(out, "<s>[user]hi</s>");
    md.insert("tokenizer.chat_template", MetaValue::U32(7));
    assert!(ChatTemplate::from_metadata(&md, "<s>", "</s>").is_err());
}

#[test]
fn tojson_like_python_json_dumps() {
    let tmpl = ChatTemplate::new(
        "{{ {'b': 1, 'a': [1.5, true, none, 'x\"\\n\u{1}é']} | tojson }}|{{ [] | tojson(indent=2) }}|{{ {'k': [1, {}]} | tojson(indent=1) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=[',', ':']) }}",
        "",
        "",
    )
    .unwrap();
    let out = tmpl.render(&[], false).unwrap();
    // Python: json.dumps({'b': 1, 'a': [1.5, True, None, 'x"\n\x01é']}, ensure_ascii=False) etc.
    // (minijinja map literals keep insertion order only with preserve_order; compare loosely there.)
    let parts: Vec<&str> = out.split('|').collect();
    assert_eq!(parts.len(), 4, "{out}");
    assert!(
        parts[0] == r#"{"b": 1, "a": [1.5, true, null, "x\"\n\u0001é"]}"#
            || parts[0] == r#"{"a": [1.5, true, null, "x\"\n\u0001é"], "b": 1}"#,
        "{}",
        parts[0]
    );
    assert_eq!(parts[1], "[]");
    assert_eq!(parts[2], "{\n \"k\": [\n  1,\n  {}\n ]\n}");
    assert_eq!(parts[3], r#"{"a":2,"b":1}"#);
}

/// Extra template variables (`enable_thinking`, as transformers' `chat_template_kwargs`) reach
/// the template; they cannot replace the conversation or the special tokens.
#[test]
fn template_variables_reach_the_template() {
    // Qwen 3's switch, reduced to its shape.
    let src = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{{ bos_token }}\
               {% if add_generation_prompt %}assistant:{% if enable_thinking is defined and enable_thinking is false %} \
               <think></think>{% endif %}{% endif %}";
    let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
    let msgs = [ChatMessage::new("user", "hi")];
    let vars = |v: serde_json::Value| v.as_object().unwrap().clone();
    assert_eq!(
        t.render_with_vars(&msgs, true, &vars(serde_json::json!({}))).unwrap(),
        "user: hi\n<s>assistant:"
    );
    let off = vars(serde_json::json!({ "enable_thinking": false }));
    assert_eq!(t.render_with_vars(&msgs, true, &off).unwrap(), "user: hi\n<s>assistant: <think></think>");
    let on = vars(serde_json::json!({ "enable_thinking": true }));
    assert_eq!(t.render_with_vars(&msgs, true, &on).unwrap(), "user: hi\n<s>assistant:");
    let sneaky =
        vars(serde_json::json!({ "messages": [], "bos_token": "X", "add_generation_prompt": false }));
    assert_eq!(t.render_with_vars(&msgs, true, &sneaky).unwrap(), "user: hi\n<s>assistant:");
}
