//! A whole tool-calling loop on the real SmolLM2 (CPU, greedy): the model calls a tool under
//! `tool_choice: "auto"` (its lazy grammar), the call's result goes back as a `tool` message
//! answering its `tool_call_id`, and the second turn, rendered through the chat template with
//! the history, ends in a text answer. Twice: with SmolLM2's own template (ChatML, which
//! renders no `tool_calls`; the JSON family) and with Qwen 2.5's real template from llama.cpp
//! (the same `<|im_start|>` turns; Hermes `<tool_call>`, results in `<tool_response>`).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use serde_json::{json, Value};
use support::block_on;
use support::models::{load_cpu, SMOLLM2};
use wick::chat::tools::{parse_tool_calls, tool_choice_grammar, ToolChoice, ToolFamily};
use wick::chat::{ChatMessage, ChatTemplate};
use wick::sampling::SamplingParams;
use wick::{FinishReason, GenerateOptions, Model, Session, SessionOptions};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"]}}},
    ])
}

/// Render `msgs` with the tools, generate greedily under `auto`; the rendered prompt, the
/// output and its finish reason.
fn turn(
    model: &Model,
    tmpl: &ChatTemplate,
    session: &mut Session<'_>,
    msgs: &[ChatMessage],
) -> (String, String, FinishReason) {
    let tools = tools();
    let prompt = tmpl.render_with_tools(msgs, true, Some(&tools), &serde_json::Map::new()).expect("render");
    let ids = model.tokenizer().encode(&prompt, false, true).expect("encode");
    let family = tmpl.tool_family();
    let grammar =
        tool_choice_grammar(family, &tools, &ToolChoice::Auto, false, &|_| None).expect("a grammar");
    let opts = GenerateOptions {
        max_tokens: 100,
        sampling: SamplingParams::greedy(),
        constraint: grammar,
        ..Default::default()
    };
    let (text, finish) = block_on(async {
        let mut gen = session.generate(&ids, opts).expect("generate");
        let mut text = String::new();
        while let Some(tok) = gen.next().await {
            text.push_str(&tok.expect("token").text);
        }
        (text, gen.finish_reason().expect("finished"))
    });
    eprintln!("--- prompt:\n{prompt}\n--- output ({finish:?}): {text:?}");
    (prompt, text, finish)
}

/// One loop through `tmpl`: call, result, answer.
fn call_result_answer(model: &Model, tmpl: &ChatTemplate) {
    let family = tmpl.tool_family();
    let mut session = model.session(SessionOptions { n_ctx: 2048, ..Default::default() }).expect("session");
    // A few-shot turn shows the call syntax of the template's family.
    let example = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    let example = match family {
        ToolFamily::Hermes => format!("<tool_call>\n{example}\n</tool_call>"),
        _ => example.to_string(),
    };
    let mut msgs = vec![
        ChatMessage::new(
            "system",
            "You can call get_weather(city). To call it, write the call and nothing else. \
             When a tool result comes back, answer the user in one sentence.",
        ),
        ChatMessage::new("user", "What is the weather in Paris?"),
        ChatMessage::new("assistant", example),
        ChatMessage::new("user", "And what is the weather in Lyon?"),
    ];
    // Turn 1: a call.
    let (_, text, finish) = turn(model, tmpl, &mut session, &msgs);
    assert_eq!(finish, FinishReason::Eog, "{text:?}");
    let out = parse_tool_calls(&text, family, false);
    assert_eq!(out.calls.len(), 1, "{text:?} parsed as {out:?}");
    let call = &out.calls[0];
    assert_eq!(call.name, "get_weather");
    let args: Value = serde_json::from_str(&call.arguments).expect("arguments are JSON");
    let schema = &tools()[0]["function"]["parameters"];
    assert!(jsonschema::validator_for(schema).expect("a schema").is_valid(&args), "{args}");
    let city = args["city"].as_str().expect("a city").to_string();
    // The tool runs; its result answers the call's id.
    let result = format!("{city}: 18 degrees C, sunny, light wind");
    msgs.push(ChatMessage::assistant_tool_calls(out.content.clone(), vec![call.to_tool_call()]));
    msgs.push(ChatMessage::tool_result(call.id.clone(), call.name.clone(), result.clone()));
    // Turn 2: the history renders (the result is in the prompt, after the call) and the
    // model answers in text.
    let (prompt, answer, finish) = turn(model, tmpl, &mut session, &msgs);
    let asked = prompt.find("And what is the weather in Lyon?").expect("the question");
    let at = prompt.find(&result).expect("the tool result is in the second prompt");
    assert!(asked < at, "the result comes after the question: {prompt}");
    if family == ToolFamily::Hermes {
        // This template renders the call itself, between the question and its result.
        let call_text = format!("\"arguments\": {{\"city\": \"{city}\"}}");
        let c = prompt[asked..].find(&call_text).expect("the call is in the history") + asked;
        assert!(c < at, "the call comes before its result: {prompt}");
        assert!(prompt[..at].ends_with("<tool_response>\n"), "{prompt}");
    }
    assert!(prompt[at..].contains("assistant"), "the prompt ends with the assistant's turn: {prompt}");
    assert_eq!(finish, FinishReason::Eog, "{answer:?}");
    let out = parse_tool_calls(&answer, family, false);
    assert!(out.calls.is_empty() && out.unfinished.is_none(), "a call instead of an answer: {answer:?}");
    assert!(out.content.contains("18"), "the answer does not use the result: {answer:?}");
}

#[test]
fn call_result_answer_smollm2_template() {
    let model = load_cpu(SMOLLM2);
    call_result_answer(&model, model.chat_template().expect("a chat template"));
}

#[test]
fn call_result_answer_qwen25_template() {
    let model = load_cpu(SMOLLM2);
    let refs = support::models::reference("llamacpp_template_refs.json");
    let source = refs["templates"]
        .as_array()
        .expect("templates")
        .iter()
        .find(|t| t["name"] == "Qwen-Qwen2.5-7B-Instruct")
        .and_then(|t| t["source"].as_str())
        .expect("Qwen 2.5's template");
    let tmpl = ChatTemplate::new(source, "", "<|im_end|>").expect("the template");
    assert_eq!(tmpl.tool_family(), ToolFamily::Hermes);
    call_result_answer(&model, &tmpl);
}
