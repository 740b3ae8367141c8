//! Tool-call parsing: outputs of each template family (written as the models write them:
//! Llama 3.1/3.2, Qwen 2.5/3 Hermes tags, Qwen3-Coder XML, Mistral's two forms, GLM's key and
//! value pairs, Seed-OSS, Nemotron's `<TOOLCALL>` list, Kimi K2's and DeepSeek's sections,
//! gpt-oss's harmony messages, the generic JSON fallback), parsed whole and streamed in pieces
//! of every size and at random places, giving equal results; malformed and cut-off calls come
//! back as content or as unfinished, never as calls; the family of every llama.cpp reference
//! template is pinned.
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
        // GLM 4.6 (newlines between the pairs) and 4.7 (none).
        case(
            Glm,
            "<think>The user wants the weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
            "<think>The user wants the weather.</think>",
            vec![("get_weather", json!({"city": "Paris", "days": 3}))],
        ),
        case(
            Glm,
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call><tool_call>get_time<arg_key>tz</arg_key><arg_value>Europe/Paris</arg_value></tool_call>",
            "",
            vec![("get_weather", json!({"city": "Paris"})), ("get_time", json!({"tz": "Europe/Paris"}))],
        ),
        case(
            Glm,
            "Searching.\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>rust </tool_call> docs</arg_value>\n<arg_key>filters</arg_key>\n<arg_value>{\"lang\": \"en\", \"years\": [2024, 2025]}</arg_value>\n</tool_call>",
            "Searching.\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>rust </tool_call> docs</arg_value>\n<arg_key>filters</arg_key>\n<arg_value>{\"lang\": \"en\", \"years\": [2024, 2025]}</arg_value>\n</tool_call>",
            vec![],
        ),
        case(
            Glm,
            "<tool_call>search\n<arg_key>filters</arg_key>\n<arg_value>{\"lang\": \"en\", \"years\": [2024, 2025]}</arg_value>\n</tool_call>",
            "",
            vec![("search", json!({"filters": {"lang": "en", "years": [2024, 2025]}}))],
        ),
        case(Glm, "<tool_call>get_time</tool_call>", "", vec![("get_time", json!({}))]),
        case(
            Glm,
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</tool_call>",
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</tool_call>",
            vec![],
        ),
        Case {
            family: Glm,
            text: "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par",
            content: "Checking.",
            calls: vec![],
            unfinished: true,
        },
        // A GLM call cut right after its name is not a call without arguments.
        Case { family: Glm, text: "<tool_call>get_wea", content: "", calls: vec![], unfinished: true },
        // Seed-OSS.
        case(
            SeedOss,
            "<seed:think>The user wants Paris.</seed:think>\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>3</parameter>\n</function>\n</seed:tool_call>",
            "<seed:think>The user wants Paris.</seed:think>",
            vec![("get_weather", json!({"city": "Paris", "days": 3}))],
        ),
        case(
            SeedOss,
            "<seed:tool_call>\n<function=write_file>\n<parameter=path>notes.txt</parameter>\n<parameter=content>first line\nsecond line</parameter>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=get_time>\n</function>\n</seed:tool_call>",
            "",
            vec![("write_file", json!({"path": "notes.txt", "content": "first line\nsecond line"})), ("get_time", json!({}))],
        ),
        Case {
            family: SeedOss,
            text: "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Par",
            content: "",
            calls: vec![],
            unfinished: true,
        },
        case(
            SeedOss,
            "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris\n</function>\n</seed:tool_call>",
            "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris\n</function>\n</seed:tool_call>",
            vec![],
        ),
        // NVIDIA Nemotron Nano 2.
        case(
            Nemotron,
            "<think>\nTwo lookups.\n</think>\n\n<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}]</TOOLCALL>",
            "<think>\nTwo lookups.\n</think>",
            vec![("get_weather", json!({"city": "Paris"})), ("get_time", json!({"tz": "Europe/Paris"}))],
        ),
        case(
            Nemotron,
            "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": }]</TOOLCALL>",
            "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": }]</TOOLCALL>",
            vec![],
        ),
        Case {
            family: Nemotron,
            text: "Sure.\n<TOOLCALL>[{\"name\": \"get_weather\", \"argu",
            content: "Sure.",
            calls: vec![],
            unfinished: true,
        },
        // Kimi K2 (Instruct, and Thinking with its newlines inside the section).
        case(
            KimiK2,
            "I'll check both.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"Europe/Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
            "I'll check both.",
            vec![("get_weather", json!({"city": "Paris"})), ("get_time", json!({"tz": "Europe/Paris"}))],
        ),
        case(
            KimiK2,
            "<think>The weather is needed.</think><|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:2<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>\n<|tool_calls_section_end|>",
            "<think>The weather is needed.</think>",
            vec![("get_weather", json!({"city": "Oslo"}))],
        ),
        case(
            KimiK2,
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": Paris}<|tool_call_end|><|tool_calls_section_end|>",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": Paris}<|tool_call_end|><|tool_calls_section_end|>",
            vec![],
        ),
        Case {
            family: KimiK2,
            text: "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argu",
            content: "",
            calls: vec![("get_weather", json!({"city": "Paris"}))],
            unfinished: true,
        },
        // DeepSeek V3 / R1 (fenced JSON) and V3.1 (bare JSON).
        case(
            DeepSeekR1,
            "<think>\nI need the weather and the time.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"tz\": \"Europe/Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "<think>\nI need the weather and the time.\n</think>",
            vec![("get_weather", json!({"city": "Paris"})), ("get_time", json!({"tz": "Europe/Paris"}))],
        ),
        case(
            DeepSeekR1,
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get weather now<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get weather now<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            vec![],
        ),
        Case {
            family: DeepSeekR1,
            text: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":",
            content: "",
            calls: vec![],
            unfinished: true,
        },
        // The R1 distills' misspelled section marker, and a call without its opening marker.
        case(
            DeepSeekR1,
            "<｜tool_calls_begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "",
            vec![("get_weather", json!({"city": "Paris"}))],
        ),
        case(
            DeepSeekV31,
            "Let me look that up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": 2.5}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "Let me look that up.",
            vec![("get_weather", json!({"city": "Paris"})), ("add", json!({"a": 1, "b": 2.5}))],
        ),
        // Each DeepSeek family reads the other's form.
        case(
            DeepSeekR1,
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "",
            vec![("add", json!({"a": 1, "b": 2}))],
        ),
        case(
            DeepSeekV31,
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 1, \"b\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "",
            vec![("add", json!({"a": 1, "b": 2}))],
        ),
        // gpt-oss: analysis, then a commentary message to a function (its `<|call|>` ends the
        // generation, so it is usually not in the text).
        case(
            GptOss,
            "<|channel|>analysis<|message|>The user asks for the weather in Paris. Call get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
            "<|channel|>analysis<|message|>The user asks for the weather in Paris. Call get_weather.<|end|>",
            vec![("get_weather", json!({"city": "Paris"}))],
        ),
        case(
            GptOss,
            " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}",
            "",
            vec![("get_weather", json!({"city": "Paris"}))],
        ),
        case(
            GptOss,
            "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}<|call|>",
            "",
            vec![("add", json!({"a": 1, "b": 2}))],
        ),
        case(
            GptOss,
            "<|channel|>analysis<|message|>Just greet.<|end|><|start|>assistant<|channel|>final<|message|>Hello, Ann! Say to=me.",
            "<|channel|>analysis<|message|>Just greet.<|end|><|start|>assistant<|channel|>final<|message|>Hello, Ann! Say to=me.",
            vec![],
        ),
        case(
            GptOss,
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": Paris}",
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": Paris}",
            vec![],
        ),
        Case {
            family: GptOss,
            text: "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Par",
            content: "",
            calls: vec![],
            unfinished: true,
        },
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

/// The output as `ToolCallStream` gives it for `text` cut at random places.
fn streamed_randomly(family: ToolFamily, text: &str, rng: &mut support::rng::Rng) -> ParsedOutput {
    let mut s = ToolCallStream::new(family);
    let mut out = ParsedOutput::default();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let n = (1 + below(rng, 12)).min(chars.len() - i);
        for d in s.push(&chars[i..i + n].iter().collect::<String>()) {
            out.apply(d);
        }
        i += n;
    }
    let (rest, unfinished) = s.finish();
    for d in rest {
        out.apply(d);
    }
    out.unfinished = unfinished;
    out
}

#[test]
fn streaming_in_random_pieces_equals_whole() {
    let mut rng = support::rng::Rng::new(5);
    for c in cases() {
        let whole = parse_tool_calls(c.text, c.family, true);
        for _ in 0..40 {
            assert_eq!(streamed_randomly(c.family, c.text, &mut rng), whole, "{:?} in random pieces", c.text);
        }
    }
}

/// A section's calls are given out one by one, each once complete, while the rest of the
/// section is still being written.
#[test]
fn section_calls_stream_one_by_one() {
    use wick::chat::tools::ToolDelta::*;
    let first = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>";
    let second = "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
    let mut s = ToolCallStream::new(ToolFamily::KimiK2);
    let mut deltas = Vec::new();
    for ch in first.chars() {
        deltas.extend(s.push(&ch.to_string()));
    }
    deltas.extend(s.push("<|tool_call_begin|>functions.get_ti"));
    // Kimi's own ids, `functions.NAME:IDX`, are kept.
    assert_eq!(
        deltas,
        vec![
            CallStart { index: 0, id: "functions.get_weather:0".into(), name: "get_weather".into() },
            Arguments { index: 0, fragment: r#"{"city":"Paris"}"#.into() },
        ]
    );
    let rest: Vec<_> = s.push(&second["<|tool_call_begin|>functions.get_ti".len()..]);
    assert_eq!(
        rest,
        vec![
            CallStart { index: 1, id: "functions.get_time:1".into(), name: "get_time".into() },
            Arguments { index: 1, fragment: "{}".into() },
        ]
    );
    assert_eq!(s.finish(), (vec![], None));
}

/// GLM's and Seed-OSS's values of a declared string type stay strings, as Qwen3-Coder's do.
#[test]
fn glm_and_seed_string_parameters_stay_strings() {
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string"}, "n": {"type": "integer"}}}}}]);
    let outputs = [
        (ToolFamily::Glm, "<tool_call>lookup\n<arg_key>zip</arg_key>\n<arg_value>75001</arg_value>\n<arg_key>n</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"),
        (ToolFamily::SeedOss, "<seed:tool_call>\n<function=lookup>\n<parameter=zip>75001</parameter>\n<parameter=n>2</parameter>\n</function>\n</seed:tool_call>"),
    ];
    for (family, text) in outputs {
        let mut s = ToolCallStream::new(family).tools(&tools);
        let mut out = ParsedOutput::default();
        s.push(text).into_iter().for_each(|d| out.apply(d));
        s.finish().0.into_iter().for_each(|d| out.apply(d));
        assert_eq!(args(&out.calls[0].arguments), json!({"zip": "75001", "n": 2}), "{family:?}");
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
    let families = ToolFamily::ALL;
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

/// The family of every template llama.cpp's references hold, pinned: a new family's markers
/// must not take a template from another, and a template added to the file must be pinned here.
const TEMPLATE_FAMILIES: &[(&str, &str)] = &[
    ("Apertus-8B-Instruct", "generic"),
    ("Apriel-1.6-15b-Thinker-fixed", "generic"),
    ("Bielik-11B-v3.0-Instruct", "hermes"),
    ("ByteDance-Seed-OSS", "seed-oss"),
    ("Cohere2MoE", "generic"),
    ("CohereForAI-c4ai-command-r-plus-tool_use", "generic"),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "generic"),
    ("GLM-4.6", "glm"),
    ("GLM-4.7-Flash", "glm"),
    ("GigaChat3-10B-A1.8B", "generic"),
    ("GigaChat3.1-10B-A1.8B", "generic"),
    ("HuggingFaceTB-SmolLM3-3B", "generic"),
    ("Kimi-K2-Instruct", "kimi-k2"),
    ("Kimi-K2-Thinking", "kimi-k2"),
    ("Kimi-K3", "generic"),
    ("LFM2-8B-A1B", "generic"),
    ("LFM2.5-8B-A1B", "generic"),
    ("LFM2.5-Instruct", "generic"),
    ("MiMo-VL", "hermes"),
    ("MiniMax-M1", "generic"),
    ("MiniMax-M2", "generic"),
    ("MiniMax-M3", "hermes"),
    ("Mistral-Small-3.2-24B-Instruct-2506", "mistral-args"),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen3-coder"),
    ("NVIDIA-Nemotron-Nano-v2", "nemotron"),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"),
    ("Qwen-QwQ-32B", "hermes"),
    ("Qwen-Qwen2.5-7B-Instruct", "hermes"),
    ("Qwen-Qwen3-0.6B", "hermes"),
    ("Qwen3-Coder", "qwen3-coder"),
    ("Qwen3.5-4B", "qwen3-coder"),
    ("Reka-Edge", "hermes"),
    ("Spark2.5", "glm"),
    ("StepFun3.5-Flash", "qwen3-coder"),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek-r1"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1"),
    ("deepseek-ai-DeepSeek-V3.1", "deepseek-v3.1"),
    ("deepseek-ai-DeepSeek-V3.2", "generic"),
    ("deepseek-ai-DeepSeek-V4-Flash-0731", "generic"),
    ("deepseek-ai-DeepSeek-V4", "generic"),
    ("fireworks-ai-llama-3-firefunction-v2", "generic"),
    ("google-gemma-2-2b-it", "generic"),
    ("google-gemma-4-31B-it-interleaved", "generic"),
    ("google-gemma-4-31B-it", "generic"),
    ("ibm-granite-granite-3.3-2B-Instruct", "generic"),
    ("ibm-granite-granite-4.0", "hermes"),
    ("ibm-granite-granite-4.1", "hermes"),
    ("inclusionai-ling-3.0-flash", "glm"),
    ("llama-cpp-deepseek-r1", "deepseek-r1"),
    ("llama-cpp-rwkv-world", "generic"),
    ("meetkai-functionary-medium-v3.1", "llama3"),
    ("meetkai-functionary-medium-v3.2", "generic"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3"),
    ("meta-llama-Llama-3.2-3B-Instruct", "llama3"),
    ("meta-llama-Llama-3.3-70B-Instruct", "llama3"),
    ("microsoft-Phi-3.5-mini-instruct", "generic"),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "mistral-args"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"),
    ("moonshotai-Kimi-K2", "kimi-k2"),
    ("muse-glimmer", "generic"),
    ("openai-gpt-oss-120b", "gpt-oss"),
    ("openbmb-MiniCPM5-1B", "generic"),
    ("poolside-Laguna-S-2.1", "glm"),
    ("poolside-Laguna-XS-2.1", "glm"),
    ("poolside-Laguna-XS.2", "glm"),
    ("tencent-Hy3", "generic"),
    ("unsloth-Apriel-1.5", "hermes"),
    ("unsloth-mistral-Devstral-Small-2507", "mistral-args"),
    ("upstage-Solar-Open-100B", "generic"),
];

#[test]
fn families_of_real_templates() {
    let refs = support::models::reference("llamacpp_template_refs.json");
    let templates = refs["templates"].as_array().unwrap();
    let mut wrong = Vec::new();
    for t in templates {
        let name = t["name"].as_str().unwrap();
        let Some((_, want)) = TEMPLATE_FAMILIES.iter().find(|(n, _)| *n == name) else {
            wrong.push(format!("{name}: not pinned"));
            continue;
        };
        let got = ToolFamily::detect(t["source"].as_str().unwrap()).name();
        if got != *want {
            wrong.push(format!("{name}: {got}, pinned {want}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(templates.len(), TEMPLATE_FAMILIES.len(), "pinned templates that are gone");
    for f in ToolFamily::ALL {
        assert_eq!(ToolFamily::from_name(f.name()), Some(f));
    }
}

/// Templates whose rendered `tool_call` turn is not read back: the R1 distill of Llama renders
/// calls only when the assistant's content is `none` (the references pass ""); the others
/// write a syntax no family reads yet, while their markers detect as another family's
/// (MiniMax M3's `<invoke name=...>` inside `<tool_call>`, functionary 3.1's
/// `<function=NAME>{...}</function>`, Apriel 1.5's `<tool_calls>[...]`).
const RENDER_NO_CALL: &[&str] = &[
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "MiniMax-M3",
    "meetkai-functionary-medium-v3.1",
    "unsloth-Apriel-1.5",
];

/// Each template's own rendering of an assistant call (jinja2's, from the references), read
/// back by its family's parser: the call syntax of every family is the one its templates write.
#[test]
fn calls_rendered_by_real_templates_parse_back() {
    let refs = support::models::reference("llamacpp_template_refs.json");
    let mut checked = Vec::new();
    let mut wrong = Vec::new();
    for t in refs["templates"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let family = ToolFamily::detect(t["source"].as_str().unwrap());
        if family == ToolFamily::Generic || RENDER_NO_CALL.contains(&name) {
            continue;
        }
        let rendered = t["cases"].as_array().unwrap().iter().find_map(|c| {
            (c["conversation"] == "tool_call" && c["tools"] == true).then(|| c["expected"].as_str()).flatten()
        });
        let Some(text) = rendered else { continue };
        // The assistant's turn: after the user's question, before the tool's answer.
        let question = "What is the weather in Paris?";
        let from = text.rfind(question).expect("the question") + question.len();
        let to = text[from..].find("temp").map_or(text.len(), |p| from + p);
        let out = parse_tool_calls(&text[from..to], family, true);
        let got: Vec<(String, Value)> =
            out.calls.iter().map(|k| (k.name.clone(), args(&k.arguments))).collect();
        if got != vec![("get_weather".to_string(), json!({"city": "Paris"}))] {
            wrong.push(format!("{name} ({}): {:?} from {:?}", family.name(), got, &text[from..to]));
        }
        checked.push(family);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every family but the generic one was checked against a template of its own.
    for f in ToolFamily::ALL.into_iter().filter(|f| *f != ToolFamily::Generic) {
        assert!(checked.contains(&f), "no reference template renders a {} call", f.name());
    }
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
