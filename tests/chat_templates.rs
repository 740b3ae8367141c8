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
    // Map literals keep their insertion order, as Python's dicts (minijinja's preserve_order).
    let parts: Vec<&str> = out.split('|').collect();
    assert_eq!(parts.len(), 4, "{out}");
    assert_eq!(parts[0], r#"{"b": 1, "a": [1.5, true, null, "x\"\n\u0001é"]}"#);
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

/// Every chat template in llama.cpp's models/templates, rendered by wick to the same text as
/// jinja2 renders it (tests/data/llamacpp_template_refs.json, written by
/// tests/scripts/make_llamacpp_template_refs.py): a chat with and without the generation
/// prompt, with and without tools, and a conversation where the assistant calls a tool and
/// gets its result. Renders jinja2 itself cannot do (the template raises, or fails in Python)
/// are recorded as such and skipped; where the template raised, wick must raise the same.
#[test]
fn llamacpp_templates_match_jinja2_with_and_without_tools() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/llamacpp_template_refs.json");
    let refs: Json =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read llamacpp_template_refs.json"))
            .expect("parse llamacpp_template_refs.json");
    let fixed_time = refs["fixed_time"].as_i64().unwrap();
    let tools = &refs["tools"];
    let convs = refs["conversations"].as_object().unwrap();
    let conversation = |name: &str| -> Vec<ChatMessage> {
        serde_json::from_value(convs[name].clone()).unwrap_or_else(|e| panic!("conversation {name}: {e}"))
    };
    let templates = refs["templates"].as_array().unwrap();
    let (mut renders, mut with_tools, mut skipped, mut raised, mut matched_templates) = (0, 0, 0, 0, 0);
    let mut failures = Vec::new();
    for t in templates {
        let name = t["name"].as_str().unwrap();
        if t.get("compile_error").is_some() {
            skipped += 1;
            continue;
        }
        let tmpl = template(t, fixed_time);
        let mut ok = true;
        for case in t["cases"].as_array().unwrap() {
            let conv = case["conversation"].as_str().unwrap();
            let agp = case["add_generation_prompt"].as_bool().unwrap();
            let case_tools = case["tools"].as_bool().unwrap().then_some(tools);
            let what =
                format!("{name} / {conv}, tools={}, add_generation_prompt={agp}", case_tools.is_some());
            let Some(want) = case["expected"].as_str() else {
                skipped += 1;
                // The template rejected the conversation through raise_exception: so must wick.
                let err = case["error"].as_str().unwrap();
                if let Some(msg) = err.strip_prefix("TemplateError: ") {
                    match tmpl.render_with_tools(
                        &conversation(conv),
                        agp,
                        case_tools,
                        &serde_json::Map::new(),
                    ) {
                        Err(Error::Template(e)) if e.contains(msg) => raised += 1,
                        other => failures.push(format!("{what}: jinja2 raised {msg:?}, wick gave {other:?}")),
                    }
                }
                continue;
            };
            match tmpl.render_with_tools(&conversation(conv), agp, case_tools, &serde_json::Map::new()) {
                Ok(got) if got == want => {
                    renders += 1;
                    with_tools += usize::from(case_tools.is_some());
                }
                Ok(got) => {
                    let at = got.bytes().zip(want.bytes()).take_while(|(a, b)| a == b).count();
                    let lo = at.saturating_sub(60);
                    let snip = |s: &str| s.get(lo..(at + 60).min(s.len())).unwrap_or("").to_string();
                    failures.push(format!(
                        "{what}: differs at byte {at}:\n  wick:   {:?}\n  jinja2: {:?}",
                        snip(&got),
                        snip(want)
                    ));
                    ok = false;
                }
                Err(e) => {
                    failures.push(format!("{what}: {e}"));
                    ok = false;
                }
            }
        }
        matched_templates +=
            usize::from(ok && t["cases"].as_array().unwrap().iter().any(|c| c.get("expected").is_some()));
    }
    println!(
        "{matched_templates} of {} templates (those jinja2 renders at least once) match jinja2: {renders} renders \
         ({with_tools} with tools); {skipped} renders that jinja2 cannot do skipped, {raised} of them \
         raise_exception that wick raises too",
        templates.len() - templates.iter().filter(|t| t["cases"].as_array().unwrap().iter().all(|c| c.get("expected").is_none())).count()
    );
    assert!(failures.is_empty(), "{} renders differ from jinja2:\n{}", failures.len(), failures.join("\n"));
    assert!(templates.len() >= 60 && renders >= 250, "only {} templates, {renders} renders", templates.len());
}

/// Tool-call arguments given as OpenAI's JSON string reach the template as a mapping; a
/// message deserializes from OpenAI's JSON, and the template sees only the keys it has.
#[test]
fn tool_call_arguments_string_becomes_a_mapping() {
    let msgs: Vec<ChatMessage> = serde_json::from_value(serde_json::json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "not json"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "21"}
    ]))
    .unwrap();
    assert_eq!(msgs[0], ChatMessage::new("user", "weather?"));
    assert_eq!(msgs[1].content, "");
    assert_eq!(msgs[2], ChatMessage::tool_result("c1", "get_weather", "21"));
    // The expected text is jinja2's (transformers' environment) for the same template and
    // messages, arguments given as a mapping; it also checks Python's repr for a printed list
    // and markupsafe's `+` of a safe string and a plain one.
    let src = "{% for m in messages %}{{ m | tojson }}|{{ m.tool_calls is defined }}|\
               {% for c in m.tool_calls or [] %}{{ c.function.arguments is mapping }}{{ c.function.arguments.city }};{% endfor %}\n{% endfor %}\
               {{ tools is iterable }}|{{ ['a\\'b', \"it's\", 'x\\n\u{e9}\u{a0}', none, true, 1.5] }}|\
               {{ 'a<'|safe + '<b>' }}|{{ '<c>' + 'd'|safe }}|{{ '<e>' ~ 'f'|safe }}";
    let t = ChatTemplate::new(src, "", "").unwrap();
    let out = t.render_with_tools(&msgs, false, None, &serde_json::Map::new()).unwrap();
    let want = r#"{"role": "user", "content": "weather?"}|False|{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}, {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}|True|TrueParis;False;{"role": "tool", "content": "21", "tool_call_id": "c1", "name": "get_weather"}|False|False|["a'b", "it's", 'x\né\xa0', None, True, 1.5]|a<&lt;b&gt;|&lt;c&gt;d|<e>f"#;
    assert_eq!(out, want);
    let tools = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
    let t = ChatTemplate::new("{{ tools is iterable }}", "", "").unwrap();
    let out = t.render_with_tools(&[], false, Some(&tools), &serde_json::Map::new()).unwrap();
    assert_eq!(out, "True");
    // Round trip through OpenAI's JSON.
    let back: Vec<ChatMessage> = serde_json::from_value(serde_json::to_value(&msgs).unwrap()).unwrap();
    assert_eq!(back, msgs);
}

/// transformers' `{% generation %}` tag renders its body (LFM2.5's and Laguna's templates use it).
#[test]
fn generation_tag_renders_its_body() {
    let src = "{% for m in messages %}<{{ m.role }}>\n  {%- generation -%}\n  {{ m.content }}\n  {%- endgeneration %}\n</>\n{% endfor %}{{ '{%' }}";
    let t = ChatTemplate::new(src, "", "").unwrap();
    let out = t.render(&[ChatMessage::new("assistant", "hi")], false).unwrap();
    // jinja2 (transformers' environment) renders "<assistant>hi</>\n{%".
    assert_eq!(out, "<assistant>hi</>\n{%");
}

/// Found by fuzzing (`fuzz/corpus/chat_template/regression-overlapping-tag-end`): a `{%}` whose
/// `%}` overlaps its own opening panicked in the `{% generation %}` rewrite; now an error or a
/// render, never a panic.
#[test]
fn a_tag_closing_inside_its_opening_is_not_a_panic() {
    for src in [
        "{%}",
        "{%}}",
        "x {%} y {% generation %}z{% endgeneration %}",
        "{% macro r(n) %}{%}} ifuuu- set date_string = strftim %}{% endmacro %}{{ r(40) }}",
    ] {
        if let Ok(t) = ChatTemplate::new(src, "<s>", "</s>") {
            let _ = t.render(&[ChatMessage::new("user", "hi")], true);
        }
    }
    let t = ChatTemplate::new("a{%- generation -%} b {%- endgeneration %}c", "", "").unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "abc");
}

/// Found by the long fuzz run (`fuzz/corpus/chat_template/regression-format-key-multibyte`):
/// a `%(key)s` in the printf-style `format` filter whose key holds a multi-byte character
/// panicked in minijinja's format parser, which stepped through the key a byte at a time and
/// sliced the string inside the character. Now the key is read a character at a time.
#[test]
fn a_format_key_with_multibyte_characters_is_not_a_panic() {
    let t = ChatTemplate::new("{{ '%(é)s-%(日本)s'|format({'é': 1, '日本': 'x'}) }}", "", "").unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "1-x");
    // Unclosed, and a replacement character from bytes that were not UTF-8: an error, not a panic.
    for src in ["{{ '%(é'|format(1) }}", "{{ '%(\u{fffd}\u{fffd})s'|format(1) }}"] {
        let t = ChatTemplate::new(src, "", "").unwrap();
        let _ = t.render(&[], false);
    }
}
