//! `tool_choice` enforced by a grammar, on the CPU executor with the real SmolLM2: under
//! `required` and a named function, every generation in every family's syntax parses as a
//! call of a declared function whose arguments validate against its schema (the `jsonschema`
//! crate); `auto`'s lazy grammar leaves text free until the model starts a call, then forces
//! the call the same way; `none` gives no grammar; bad tools and choices are errors.
#![cfg(not(target_arch = "wasm32"))]

mod support;

use serde_json::{json, Value};
use support::chat::{chat_prompt, generate};
use support::models::{load_cpu, SMOLLM2};
use wick::chat::tools::{parse_tool_calls, tool_choice_grammar, ToolChoice, ToolFamily};
use wick::chat::ChatMessage;
use wick::sampling::SamplingParams;
use wick::{FinishReason, GenerateOptions, Model, SessionOptions};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "description": "Add two numbers",
            "parameters": {"type": "object", "properties": {
                "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                "b": {"type": "number"}},
            "required": ["a", "b"]}}},
    ])
}

const FAMILIES: [ToolFamily; 13] = ToolFamily::ALL;

/// The system message of every prompt.
const SYSTEM: &str = "You can call get_weather(city, unit) and add(a, b).";

/// The schema of function `name` in `tools`.
fn schema(tools: &Value, name: &str) -> Option<Value> {
    tools
        .as_array()?
        .iter()
        .find(|t| t["function"]["name"] == name)
        .map(|t| t["function"]["parameters"].clone())
}

#[test]
fn required_and_named_calls_parse_and_validate() {
    let model = load_cpu(SMOLLM2);
    let mut session = model.session(SessionOptions { n_ctx: 1024, ..Default::default() }).expect("session");
    let tools = tools();
    let p = chat_prompt(&model, SYSTEM, "What is 12 plus 30.5? And the weather in Lyon?");
    let mut failures = Vec::new();
    let mut n = 0;
    for family in FAMILIES {
        for (choice, parallel) in [
            (ToolChoice::Required, false),
            (ToolChoice::Required, true),
            (ToolChoice::Function("add".into()), false),
            (ToolChoice::Function("get_weather".into()), false),
        ] {
            let grammar = tool_choice_grammar(family, &tools, &choice, parallel, &|_| None)
                .expect("a grammar")
                .expect("required and named choices have one");
            for seed in 0..2u64 {
                n += 1;
                let sampling = if seed == 0 {
                    SamplingParams::greedy()
                } else {
                    SamplingParams { seed: 7 + seed, ..SamplingParams::default() }
                };
                let opts = GenerateOptions {
                    max_tokens: 200,
                    sampling,
                    constraint: Some(grammar.clone()),
                    ..Default::default()
                };
                let (mut text, finish) = generate(&mut session, &p, opts);
                eprintln!("{family:?} {choice:?} parallel={parallel} #{seed}: {text:?}");
                // Cut by max_tokens inside a character (SmolLM2 spells DeepSeek's markers in
                // bytes): the replacement character at the end is not text the model wrote.
                if finish == FinishReason::Length && text.ends_with('\u{FFFD}') {
                    text.pop();
                }
                let out = parse_tool_calls(&text, family, parallel);
                let mut problems = Vec::new();
                // One call ends the text; several may go on until max_tokens (a small model
                // repeats its call), where the last is reported unfinished, never half parsed.
                let cut = parallel && finish == FinishReason::Length;
                if finish != FinishReason::Eog && !cut {
                    problems.push(format!("finished with {finish:?}"));
                }
                if out.calls.is_empty()
                    || (out.unfinished.is_some() && !cut)
                    || !out.content.trim().is_empty()
                {
                    problems.push(format!("parsed as {out:?}"));
                }
                if !parallel && out.calls.len() != 1 {
                    problems.push(format!("{} calls without parallel_tool_calls", out.calls.len()));
                }
                for c in &out.calls {
                    if let ToolChoice::Function(f) = &choice {
                        if &c.name != f {
                            problems.push(format!("called {} instead of {f}", c.name));
                        }
                    }
                    let Some(s) = schema(&tools, &c.name) else {
                        problems.push(format!("called an undeclared function {}", c.name));
                        continue;
                    };
                    let args: Value = serde_json::from_str(&c.arguments).expect("arguments are JSON");
                    let v = jsonschema::validator_for(&s).expect("a valid schema");
                    problems.extend(v.iter_errors(&args).map(|e| format!("{}: {e}", c.name)));
                }
                if !problems.is_empty() {
                    failures.push(format!(
                        "{family:?} {choice:?} #{seed}: {}\n  output: {text:?}",
                        problems.join("; ")
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {n} generations failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn auto_none_and_bad_choices() {
    let tools = tools();
    for family in FAMILIES {
        assert_eq!(
            tool_choice_grammar(family, &tools, &ToolChoice::None, true, &|_| None).expect("ok"),
            None
        );
        assert!(tool_choice_grammar(family, &tools, &ToolChoice::Auto, true, &|_| None)
            .expect("ok")
            .is_some());
        let missing = ToolChoice::Function("nope".into());
        assert!(tool_choice_grammar(family, &tools, &missing, true, &|_| None).is_err());
        assert!(tool_choice_grammar(family, &json!([]), &ToolChoice::Required, true, &|_| None).is_err());
    }
    let bad = json!([{"type": "function", "function": {"name": "has space"}}]);
    let e =
        tool_choice_grammar(ToolFamily::Hermes, &bad, &ToolChoice::Required, true, &|_| None).unwrap_err();
    assert!(e.to_string().contains("has space"), "{e}");
}

/// A control token as the call marker is named by id in the grammar (so the model writes the
/// token, not its spelling).
#[test]
fn control_markers_are_named_by_id() {
    let g = tool_choice_grammar(ToolFamily::MistralArgs, &tools(), &ToolChoice::Required, false, &|t| {
        (t == "[TOOL_CALLS]").then_some(9)
    })
    .expect("ok")
    .expect("a grammar");
    match g {
        wick::Constraint::Lark(text) => assert!(text.contains("<[9]>"), "{text}"),
        other => panic!("{other:?}"),
    }
}

/// Whether `c` takes the tokens of `text` one by one, and whether it may end after them.
fn takes(model: &Model, c: &wick::Constraint, text: &str) -> (bool, bool) {
    let mut guide = model.constraints().expect("constraints").guide(c).expect("the grammar compiles");
    let tok = model.tokenizer();
    let mut logits = vec![0f32; tok.n_vocab()];
    for id in tok.encode(text, false, false).expect("encode") {
        if let Err(e) = guide.mask(&mut logits).and_then(|_| guide.accept(id)) {
            eprintln!("{text:?}: token {id} {:?}: {e}", tok.decode(&[id]));
            return (false, false);
        }
    }
    let ends = guide.is_finished()
        || (guide.mask(&mut logits).is_ok() && tok.eog_ids().iter().any(|&e| guide.allows(e)));
    (true, ends)
}

/// `auto`'s lazy grammar, token by token: free text (with braces, tags and brackets that are
/// not the trigger) passes and may end; text that starts a call must go on as a valid call of
/// a declared function; a whole valid call after some text passes and ends.
#[test]
fn auto_grammar_is_free_until_the_trigger() {
    let model = load_cpu(SMOLLM2);
    let tools = tools();
    let free = "Sure! The weather is {mild} <b>today</b> [really], {\"city\": 3}.";
    let cases: &[(ToolFamily, &str, &str)] = &[
        (ToolFamily::Hermes, "Let me check.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 12, \"b\": 30.5}}\n</tool_call>", "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"twelve\""),
        (ToolFamily::Qwen3Coder, "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>", "<tool_call>\n<function=get_time>"),
        (ToolFamily::Generic, "OK: {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}", "{\"name\": \"get_weather\", \"arguments\": {\"town\""),
        (ToolFamily::Llama3, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", "{\"name\": \"add\", \"arguments\""),
        (ToolFamily::Mistral, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]", "[TOOL_CALLS] hello"),
        (ToolFamily::MistralArgs, "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}", "[TOOL_CALLS]sub[ARGS]"),
        (ToolFamily::Glm, "Let me check.\n<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>12</arg_value>\n<arg_key>b</arg_key>\n<arg_value>30.5</arg_value>\n</tool_call>", "<tool_call>sub"),
        // A string enum's value is written raw, as the templates write strings.
        (ToolFamily::Glm, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>\"Lyon: old town\"</arg_value><arg_key>unit</arg_key><arg_value>celsius</arg_value></tool_call>", "<tool_call>get_weather<arg_key>town"),
        (ToolFamily::SeedOss, "<seed:tool_call>\n<function=get_weather>\n<parameter=city>\"Lyon\"</parameter>\n<parameter=unit>fahrenheit</parameter>\n</function>\n</seed:tool_call>", "<seed:tool_call>\n<function=get_weather>\n<parameter=city>\"Lyon\"</parameter>\n<parameter=unit>kelvin"),
        (ToolFamily::SeedOss, "<seed:tool_call>\n<function=add>\n<parameter=a>1</parameter>\n<parameter=b>2</parameter>\n</function>\n</seed:tool_call>", "<seed:tool_call>\n<function=get_time>"),
        (ToolFamily::Nemotron, "<TOOLCALL>[{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]</TOOLCALL>", "<TOOLCALL> hello"),
        (ToolFamily::KimiK2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{\"a\": 1, \"b\": 2}<|tool_call_end|><|tool_calls_section_end|>", "<|tool_calls_section_begin|><|tool_call_begin|>functions.sub"),
        (ToolFamily::DeepSeekR1, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 1, \"b\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>sub"),
        (ToolFamily::DeepSeekV31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>sub"),
        (ToolFamily::GptOss, "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}", "<|channel|>commentary to=functions.sub"),
    ];
    for &(family, call, bad) in cases {
        let g = tool_choice_grammar(family, &tools, &ToolChoice::Auto, true, &|_| None)
            .expect("ok")
            .expect("auto has a grammar");
        let req = tool_choice_grammar(family, &tools, &ToolChoice::Required, true, &|_| None)
            .expect("ok")
            .expect("required has a grammar");
        let bare = &call[call.find(['<', '{', '[']).expect("a call")..];
        assert_eq!(takes(&model, &req, bare), (true, true), "{family:?} required: {bare}");
        assert_eq!(takes(&model, &g, free), (true, true), "{family:?}: free text");
        assert_eq!(takes(&model, &g, ""), (true, true), "{family:?}: nothing");
        assert_eq!(takes(&model, &g, call), (true, true), "{family:?}: {call}");
        assert!(!takes(&model, &g, bad).0, "{family:?} takes {bad}");
        // Once the trigger is written, text cannot end without the call.
        let cut = &call[..call.rfind([':', '\n']).expect("a cut") + 1];
        assert_eq!(takes(&model, &g, cut), (true, false), "{family:?}: {cut}");
    }
    // gpt-oss under `auto`: the analysis message is free text; the call's header may name the
    // recipient in the channel part or before it.
    let g = tool_choice_grammar(ToolFamily::GptOss, &tools, &ToolChoice::Auto, false, &|_| None)
        .expect("ok")
        .expect("auto has a grammar");
    for text in [
        "<|channel|>analysis<|message|>Need to add.<|end|><|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}",
        "<|start|>assistant to=functions.add<|channel|>commentary json<|message|>{\"a\": 1, \"b\": 2}",
        "<|channel|>analysis<|message|>Just greet.<|end|><|start|>assistant<|channel|>final<|message|>Hello, Ann!",
    ] {
        assert_eq!(takes(&model, &g, text), (true, true), "gpt-oss: {text}");
        let out = parse_tool_calls(text, ToolFamily::GptOss, false);
        assert_eq!(out.calls.len(), usize::from(text.contains("to=functions.")), "{out:?}");
    }
    // Markers that are control tokens are named by id inside the calls too, and compile.
    for family in [ToolFamily::KimiK2, ToolFamily::DeepSeekR1, ToolFamily::DeepSeekV31, ToolFamily::Nemotron]
    {
        let ids = |t: &str| {
            [
                "<|tool_calls_section_begin|>",
                "<|tool_call_begin|>",
                "<|tool_call_argument_begin|>",
                "<|tool_call_end|>",
                "<|tool_calls_section_end|>",
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁call▁begin｜>",
                "<｜tool▁sep｜>",
                "<｜tool▁call▁end｜>",
                "<｜tool▁calls▁end｜>",
                "<TOOLCALL>",
                "</TOOLCALL>",
            ]
            .iter()
            .position(|m| *m == t)
            .map(|i| 100 + i as u32)
        };
        for choice in [ToolChoice::Required, ToolChoice::Auto] {
            let g = tool_choice_grammar(family, &tools, &choice, true, &ids).expect("ok").expect("a grammar");
            match &g {
                wick::Constraint::Lark(text) => {
                    assert!(text.contains("<[1"), "{family:?} {choice:?}: {text}")
                }
                other => panic!("{other:?}"),
            }
            model.constraints().expect("constraints").guide(&g).expect("the grammar compiles");
        }
    }
    // The JSON trigger takes whitespace after the brace, and then forces the call too.
    let g = tool_choice_grammar(ToolFamily::Generic, &tools, &ToolChoice::Auto, false, &|_| None)
        .expect("ok")
        .expect("auto has a grammar");
    let spaced = "Here:\n{\n  \"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}";
    assert_eq!(takes(&model, &g, spaced), (true, true), "{spaced}");
    assert!(!takes(&model, &g, "{ \"name\": \"sub\"").0, "an undeclared function after {{ \"name\"");
    let out = parse_tool_calls(spaced, ToolFamily::Generic, false);
    assert_eq!(out.calls.len(), 1, "{out:?}");
    // A control-token trigger is named by id: the grammar compiles and text stays free.
    let g = tool_choice_grammar(ToolFamily::MistralArgs, &tools, &ToolChoice::Auto, true, &|t| {
        (t == "[TOOL_CALLS]").then_some(9)
    })
    .expect("ok")
    .expect("auto has a grammar");
    match &g {
        wick::Constraint::Lark(text) => assert!(text.contains("<[9]>"), "{text}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(takes(&model, &g, free), (true, true), "a control trigger: free text");
    // Llama 3's <|python_tag|> (a control token) may open a call too; the grammar compiles.
    let g = tool_choice_grammar(ToolFamily::Llama3, &tools, &ToolChoice::Auto, true, &|t| {
        (t == "<|python_tag|>").then_some(7)
    })
    .expect("ok")
    .expect("auto has a grammar");
    match &g {
        wick::Constraint::Lark(text) => assert!(text.contains("<[7]> call"), "{text}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(takes(&model, &g, free), (true, true), "Llama 3 with <|python_tag|>: free text");
}

/// The calls the families' own templates write (jinja2's renderings, from llama.cpp's
/// reference templates) are taken by the `required` grammar of the template's family, and by
/// `auto`'s after the text before them: the grammars write the syntax the models were shown.
#[test]
fn grammars_take_the_calls_templates_write() {
    let model = load_cpu(SMOLLM2);
    let refs = support::models::reference("llamacpp_template_refs.json");
    let tools = refs["tools"].clone();
    let mut checked = 0;
    for t in refs["templates"].as_array().expect("templates") {
        let family = ToolFamily::detect(t["source"].as_str().expect("source"));
        // Where the call starts and ends in the rendering.
        let (open, close) = match family {
            ToolFamily::Glm => ("<tool_call>", "</tool_call>"),
            ToolFamily::SeedOss => ("<seed:tool_call>", "</seed:tool_call>"),
            ToolFamily::Nemotron => ("<TOOLCALL>", "</TOOLCALL>"),
            ToolFamily::KimiK2 => ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
            ToolFamily::DeepSeekR1 | ToolFamily::DeepSeekV31 => {
                ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
            }
            ToolFamily::GptOss => ("<|start|>assistant to=", "<|call|>"),
            _ => continue,
        };
        let rendered = t["cases"].as_array().expect("cases").iter().find_map(|c| {
            (c["conversation"] == "tool_call" && c["tools"] == true).then(|| c["expected"].as_str()).flatten()
        });
        let Some(text) = rendered else { continue };
        let question = text.rfind("What is the weather in Paris?").expect("the question");
        let Some(start) = text[question..].find(open).map(|p| question + p) else { continue };
        let end = start + text[start..].find(close).expect("the call's end");
        let name = t["name"].as_str().unwrap_or_default();
        // gpt-oss's `<|call|>` ends the generation (an end-of-generation token, not text).
        let call =
            if family == ToolFamily::GptOss { &text[start..end] } else { &text[start..end + close.len()] };
        let auto = tool_choice_grammar(family, &tools, &ToolChoice::Auto, true, &|_| None)
            .expect("ok")
            .expect("a grammar");
        assert_eq!(takes(&model, &auto, &format!("Let me see. {call}")), (true, true), "{name} auto: {call}");
        if family != ToolFamily::GptOss {
            let req = tool_choice_grammar(family, &tools, &ToolChoice::Required, true, &|_| None)
                .expect("ok")
                .expect("a grammar");
            assert_eq!(takes(&model, &req, call), (true, true), "{name} required: {call}");
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} templates checked");
}

/// Generate under `auto` with `family`'s syntax explained in the system prompt; returns the
/// outputs and their finish reasons.
fn auto_outputs(
    model: &Model,
    family: ToolFamily,
    question: &str,
    seeds: u64,
) -> Vec<(String, FinishReason)> {
    // One example of a call in the family's syntax, as a few-shot turn.
    let example = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    let example = match family {
        ToolFamily::Hermes => format!("<tool_call>\n{example}\n</tool_call>"),
        _ => example.to_string(),
    };
    let msgs = [
        ChatMessage::new("system", "You can call get_weather(city, unit) and add(a, b). To call one, write the call and nothing else. Otherwise answer in words."),
        ChatMessage::new("user", "What is the weather in Paris?"),
        ChatMessage::new("assistant", example),
        ChatMessage::new("user", question),
    ];
    let text = model.chat_template().expect("a chat template").render(&msgs, true).expect("render");
    let p = model.tokenizer().encode(&text, false, true).expect("encode");
    let g = tool_choice_grammar(family, &tools(), &ToolChoice::Auto, false, &|_| None).expect("ok");
    let mut session = model.session(SessionOptions { n_ctx: 1024, ..Default::default() }).expect("session");
    (0..seeds)
        .map(|seed| {
            let sampling = if seed == 0 {
                SamplingParams::greedy()
            } else {
                SamplingParams { seed: 11 + seed, ..SamplingParams::default() }
            };
            let opts =
                GenerateOptions { max_tokens: 120, sampling, constraint: g.clone(), ..Default::default() };
            let out = generate(&mut session, &p, opts);
            eprintln!("{family:?} {question:?} #{seed}: {out:?}");
            out
        })
        .collect()
}

/// `auto` on SmolLM2: asked something a tool answers, the model's calls always parse and
/// their arguments validate; asked to just talk, it answers in text with no call.
#[test]
fn auto_calls_parse_and_text_stays_free() {
    let model = load_cpu(SMOLLM2);
    let tools = tools();
    let mut failures = Vec::new();
    let mut calls = 0;
    for family in [ToolFamily::Hermes, ToolFamily::Generic] {
        let mut outputs = auto_outputs(&model, family, "And what is the weather in Lyon?", 3);
        outputs.extend(auto_outputs(&model, family, "And what is 12 plus 30.5?", 3));
        for (text, finish) in outputs {
            let out = parse_tool_calls(&text, family, false);
            if finish == FinishReason::Length && !out.calls.is_empty() {
                failures.push(format!("{family:?}: a call ran to max_tokens: {text:?}"));
            }
            for c in &out.calls {
                calls += 1;
                let Some(s) = schema(&tools, &c.name) else {
                    failures.push(format!("{family:?}: undeclared function {}", c.name));
                    continue;
                };
                let args: Value = serde_json::from_str(&c.arguments).expect("arguments are JSON");
                let v = jsonschema::validator_for(&s).expect("a valid schema");
                failures.extend(v.iter_errors(&args).map(|e| format!("{family:?} {}: {e}", c.name)));
            }
            if out.calls.is_empty() && out.unfinished.is_none() && text.contains("<tool_call>") {
                failures.push(format!("{family:?}: a started call did not parse: {text:?}"));
            }
        }
        for (text, finish) in auto_outputs(&model, family, "Say hello to Ann in one short sentence.", 1) {
            let out = parse_tool_calls(&text, family, false);
            if !out.calls.is_empty() || out.content.trim().is_empty() || finish != FinishReason::Eog {
                failures.push(format!("{family:?}: a direct answer came out as {out:?} ({finish:?})"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(calls > 0, "no generation called a tool");
}
