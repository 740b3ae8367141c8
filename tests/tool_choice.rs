//! `tool_choice` enforced by a grammar, on the CPU executor with the real SmolLM2: under
//! `required` and a named function, every generation in every family's syntax parses as a
//! call of a declared function whose arguments validate against its schema (the `jsonschema`
//! crate); `auto` and `none` give no grammar; bad tools and choices are errors.
#![cfg(not(target_arch = "wasm32"))]

mod support;

use serde_json::{json, Value};
use support::block_on;
use support::models::{load_cpu, SMOLLM2};
use wick::chat::tools::{parse_tool_calls, tool_choice_grammar, ToolChoice, ToolFamily};
use wick::chat::ChatMessage;
use wick::sampling::SamplingParams;
use wick::{FinishReason, GenerateOptions, Model, Session, SessionOptions};

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

const FAMILIES: [ToolFamily; 6] = [
    ToolFamily::Generic,
    ToolFamily::Hermes,
    ToolFamily::Llama3,
    ToolFamily::Qwen3Coder,
    ToolFamily::Mistral,
    ToolFamily::MistralArgs,
];

fn prompt(model: &Model, question: &str) -> Vec<u32> {
    let msgs = [
        ChatMessage::new("system", "You can call get_weather(city, unit) and add(a, b)."),
        ChatMessage::new("user", question),
    ];
    let text = model.chat_template().expect("a chat template").render(&msgs, true).expect("render");
    model.tokenizer().encode(&text, false, true).expect("encode")
}

fn generate(session: &mut Session<'_>, prompt: &[u32], opts: GenerateOptions) -> (String, FinishReason) {
    block_on(async {
        let mut gen = session.generate(prompt, opts).expect("generate");
        let mut text = String::new();
        while let Some(tok) = gen.next().await {
            text.push_str(&tok.expect("token").text);
        }
        (text, gen.finish_reason().expect("finished"))
    })
}

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
    let p = prompt(&model, "What is 12 plus 30.5? And the weather in Lyon?");
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
                let (text, finish) = generate(&mut session, &p, opts);
                eprintln!("{family:?} {choice:?} parallel={parallel} #{seed}: {text:?}");
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
        for choice in [ToolChoice::Auto, ToolChoice::None] {
            assert_eq!(tool_choice_grammar(family, &tools, &choice, true, &|_| None).expect("ok"), None);
        }
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
