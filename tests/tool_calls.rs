//! Tool-call parsing: outputs of each template family (written as the models write them:
//! Llama 3.1/3.2, Qwen 2.5/3 Hermes tags, Qwen3-Coder XML, Mistral's two forms, the generic
//! JSON fallback), parsed whole and streamed in pieces of every size, giving equal results;
//! malformed and cut-off calls come back as content or as unfinished, never as calls; the
//! family is detected from llama.cpp's real templates.
// Native: `wasm-pack test` builds every test target for wasm32, and the template references
// are read from files (the wasm build runs the same parser through tests/browser/tools.test.mjs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use serde_json::{json, Value};
use wick::chat::tools::{parse_tool_calls, ParsedOutput, ToolCallStream, ToolFamily};

/// One recorded output: family, text, expected content, expected calls (name, arguments JSON),
/// and whether a call is left open.
struct Case {
    family: ToolFamily,
    text: &'static str,
    content: &'static str,
    calls: Vec<(&'static str, Value)>,
    unfinished: bool,
}

fn case(
    family: ToolFamily,
    text: &'static str,
    content: &'static str,
    calls: Vec<(&'static str, Value)>,
) -> Case {
    Case { family, text, content, calls, unfinished: false }
}

fn cases() -> Vec<Case> {
    use ToolFamily::*;
    vec![
        // Llama 3.1 / 3.2 / 3.3.
        case(
            Llama3,
            r#"{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}"#,
            "",
            vec![("get_weather", json!({"city": "Paris", "unit": "celsius"}))],
        ),
        case(
            Llama3,
            r#"<|python_tag|>{"name": "get_weather", "parameters": {"city": "München"}}"#,
            "",
            vec![("get_weather", json!({"city": "München"}))],
        ),
        case(
            Llama3,
            r#"{"type": "function", "name": "search", "parameters": {"query": "rust \"async\" {braces} ]"}}"#,
            "",
            vec![("search", json!({"query": "rust \"async\" {braces} ]"}))],
        ),
        case(Llama3, "The weather in Paris is 18°C and sunny.", "The weather in Paris is 18°C and sunny.", vec![]),
        case(
            Llama3,
            r#"Here is {"name": "Bob", "age": 3} as asked."#,
            r#"Here is {"name": "Bob", "age": 3} as asked."#,
            vec![],
        ),
        case(Llama3, "<|python_tag|>brave_search.call(query=\"x\")", "<|python_tag|>brave_search.call(query=\"x\")", vec![]),
        // Qwen 2.5 and Qwen 3 (Hermes tags), with and without thinking, two calls.
        case(
            Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            "",
            vec![("get_weather", json!({"city": "Paris"}))],
        ),
        case(
            Hermes,
            "<think>\nThe user wants two cities.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Berlin\", \"days\": 2}}\n</tool_call>",
            "<think>\nThe user wants two cities.\n</think>",
            vec![("get_weather", json!({"city": "Paris"})), ("get_weather", json!({"city": "Berlin", "days": 2}))],
        ),
        case(
            Hermes,
            "I'll check. <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\nDone.",
            "I'll check.\nDone.",
            vec![("get_time", json!({}))],
        ),
        case(
            Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
            vec![],
        ),
        // The model stopped right after the JSON, without the closing tag.
        case(
            Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n",
            "",
            vec![("get_weather", json!({"city": "Oslo"}))],
        ),
        Case {
            family: Hermes,
            text: "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"argu",
            content: "Let me look.",
            calls: vec![],
            unfinished: true,
        },
        // Qwen3-Coder's XML.
        case(
            Qwen3Coder,
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            "",
            vec![("get_weather", json!({"city": "Paris", "days": 3}))],
        ),
        case(
            Qwen3Coder,
            "Writing it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.rs\n</parameter>\n<parameter=content>\nfn main() {\n    println!(\"hi\");\n}\n</parameter>\n</function>\n</tool_call>",
            "Writing it.",
            vec![("write_file", json!({"path": "src/main.rs", "content": "fn main() {\n    println!(\"hi\");\n}"}))],
        ),
        Case {
            family: Qwen3Coder,
            text: "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
            content: "",
            calls: vec![],
            unfinished: true,
        },
        // Mistral: the JSON list (Nemo) and NAME[ARGS] (Small 3.2, Devstral).
        case(
            Mistral,
            r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, {"name": "get_time", "arguments": {"tz": "Europe/Paris"}, "id": "f5g6h7i8j"}]"#,
            "",
            vec![("get_weather", json!({"city": "Paris"})), ("get_time", json!({"tz": "Europe/Paris"}))],
        ),
        case(
            MistralArgs,
            r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"tz": "Europe/Paris"}"#,
            "",
            vec![("get_weather", json!({"city": "Paris"})), ("get_time", json!({"tz": "Europe/Paris"}))],
        ),
        case(MistralArgs, "[TOOL_CALLS]get weather now", "[TOOL_CALLS]get weather now", vec![]),
        // The generic fallback.
        case(
            Generic,
            r#"{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}"#,
            "",
            vec![("get_weather", json!({"city": "Paris"}))],
        ),
        case(
            Generic,
            r#"Sure! {"name": "add", "arguments": {"a": 1, "b": 2.5}}"#,
            "Sure!",
            vec![("add", json!({"a": 1, "b": 2.5}))],
        ),
        case(
            Generic,
            r#"{"tool_calls": [{"name": "a", "arguments": {}}, {"function": {"name": "b", "arguments": "{\"x\": [1, 2]}"}}]}"#,
            "",
            vec![("a", json!({})), ("b", json!({"x": [1, 2]}))],
        ),
        case(Generic, "A set {1, 2} and a list [3]", "A set {1, 2} and a list [3]", vec![]),
    ]
}

/// The output as `ToolCallStream` gives it for `text` split into pieces of `size` characters.
fn streamed(family: ToolFamily, text: &str, size: usize, parallel: bool) -> ParsedOutput {
    let mut s = ToolCallStream::new(family).parallel(parallel);
    let mut out = ParsedOutput::default();
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(size) {
        for d in s.push(&piece.iter().collect::<String>()) {
            out.apply(d);
        }
    }
    let (rest, unfinished) = s.finish();
    for d in rest {
        out.apply(d);
    }
    out.unfinished = unfinished;
    out
}

fn args(a: &str) -> Value {
    serde_json::from_str(a).unwrap_or_else(|e| panic!("arguments {a:?} are not JSON: {e}"))
}

#[test]
fn recorded_outputs_parse() {
    for c in cases() {
        let out = parse_tool_calls(c.text, c.family, true);
        assert_eq!(out.content, c.content, "content of {:?}", c.text);
        let got: Vec<(String, Value)> =
            out.calls.iter().map(|k| (k.name.clone(), args(&k.arguments))).collect();
        let want: Vec<(String, Value)> = c.calls.iter().map(|(n, a)| (n.to_string(), a.clone())).collect();
        assert_eq!(got, want, "calls of {:?}", c.text);
        assert_eq!(out.unfinished.is_some(), c.unfinished, "unfinished of {:?}", c.text);
        // Ids are unique and non-empty.
        let mut ids: Vec<&str> = out.calls.iter().map(|k| k.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), out.calls.len());
        assert!(ids.iter().all(|i| !i.is_empty()));
    }
}

#[test]
fn streaming_in_any_pieces_equals_whole() {
    for c in cases() {
        let whole = parse_tool_calls(c.text, c.family, true);
        for size in 1..=c.text.chars().count() {
            assert_eq!(streamed(c.family, c.text, size, true), whole, "{:?} in pieces of {size}", c.text);
        }
    }
}

#[test]
fn stream_gives_name_before_arguments() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
    let mut s = ToolCallStream::new(ToolFamily::Hermes).id_prefix("call_abc_");
    let mut deltas = Vec::new();
    for ch in text.chars() {
        deltas.extend(s.push(&ch.to_string()));
    }
    deltas.extend(s.finish().0);
    use wick::chat::tools::ToolDelta::*;
    assert_eq!(
        deltas,
        vec![
            CallStart { index: 0, id: "call_abc_0".into(), name: "f".into() },
            Arguments { index: 0, fragment: r#"{"x":1}"#.into() },
        ]
    );
}

#[test]
fn mistral_ids_are_nine_alphanumerics() {
    let out =
        parse_tool_calls(r#"[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{}"#, ToolFamily::MistralArgs, true);
    assert_eq!(out.calls.len(), 2);
    for c in &out.calls {
        assert_eq!(c.id.len(), 9, "{}", c.id);
        assert!(c.id.chars().all(|ch| ch.is_ascii_alphanumeric()));
    }
    assert_ne!(out.calls[0].id, out.calls[1].id);
}

#[test]
fn parallel_off_keeps_the_first_call() {
    for c in cases().into_iter().filter(|c| c.calls.len() > 1) {
        let out = parse_tool_calls(c.text, c.family, false);
        assert_eq!(out.calls.len(), 1, "{:?}", c.text);
        assert_eq!(out.calls[0].name, c.calls[0].0);
        assert_eq!(streamed(c.family, c.text, 3, false), out);
    }
}

#[test]
fn qwen3_coder_string_parameters_stay_strings() {
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string"}, "n": {"type": "integer"}}}}}]);
    let text = "<tool_call>\n<function=lookup>\n<parameter=zip>\n75001\n</parameter>\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>";
    let mut s = ToolCallStream::new(ToolFamily::Qwen3Coder).tools(&tools);
    let mut out = ParsedOutput::default();
    s.push(text).into_iter().for_each(|d| out.apply(d));
    s.finish().0.into_iter().for_each(|d| out.apply(d));
    assert_eq!(args(&out.calls[0].arguments), json!({"zip": "75001", "n": 2}));
}

/// Mixtures of pieces of every recorded output, in every family: no panic, and any split
/// gives what the whole gives; text without a marker comes back as it was.
fn below(rng: &mut support::rng::Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

#[test]
fn malformed_mixtures_never_panic() {
    let all = cases();
    let mut rng = support::rng::Rng::new(17);
    let families = [
        ToolFamily::Llama3,
        ToolFamily::Hermes,
        ToolFamily::Qwen3Coder,
        ToolFamily::Mistral,
        ToolFamily::MistralArgs,
        ToolFamily::Generic,
    ];
    for _ in 0..300 {
        let mut text = String::new();
        for _ in 0..1 + below(&mut rng, 4) {
            let src: Vec<char> = all[below(&mut rng, all.len())].text.chars().collect();
            let a = below(&mut rng, src.len());
            let b = a + below(&mut rng, src.len() - a + 1);
            text.extend(&src[a..b]);
        }
        for &f in &families {
            let whole = parse_tool_calls(&text, f, true);
            for c in &whole.calls {
                assert!(args(&c.arguments).is_object());
            }
            let size = 1 + below(&mut rng, 7);
            assert_eq!(streamed(f, &text, size, true), whole, "{text:?} ({f:?}) in pieces of {size}");
        }
    }
    let plain = "No markers here: just [brackets], <angles> and {braces}.";
    for f in families {
        assert_eq!(parse_tool_calls(plain, f, true).content, plain);
    }
}

#[test]
fn families_of_real_templates() {
    let refs = support::models::reference("llamacpp_template_refs.json");
    let family = |name: &str| {
        let t = refs["templates"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap();
        ToolFamily::detect(t["source"].as_str().unwrap())
    };
    assert_eq!(family("meta-llama-Llama-3.1-8B-Instruct"), ToolFamily::Llama3);
    assert_eq!(family("meta-llama-Llama-3.2-3B-Instruct"), ToolFamily::Llama3);
    assert_eq!(family("Qwen-Qwen2.5-7B-Instruct"), ToolFamily::Hermes);
    assert_eq!(family("Qwen-Qwen3-0.6B"), ToolFamily::Hermes);
    assert_eq!(family("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"), ToolFamily::Hermes);
    assert_eq!(family("Qwen3-Coder"), ToolFamily::Qwen3Coder);
    assert_eq!(family("mistralai-Mistral-Nemo-Instruct-2407"), ToolFamily::Mistral);
    assert_eq!(family("Mistral-Small-3.2-24B-Instruct-2506"), ToolFamily::MistralArgs);
    assert_eq!(family("microsoft-Phi-3.5-mini-instruct"), ToolFamily::Generic);
}

/// Tools reach the template with their keys in the caller's order (serde_json's
/// `preserve_order`), as Python's dicts keep them for jinja2.
#[test]
fn tools_keep_the_callers_key_order() {
    let text = r#"[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}, "required": ["zeta"]}}}]"#;
    let tools: Value = serde_json::from_str(text).unwrap();
    let t = wick::chat::ChatTemplate::new("{{ tools | tojson }}", "", "").unwrap();
    let out = t.render_with_tools(&[], false, Some(&tools), &serde_json::Map::new()).unwrap();
    assert_eq!(
        out,
        r#"[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}, "required": ["zeta"]}}}]"#
    );
}
