//! Chat prompts and whole generations on a loaded model (native: `block_on` cannot wait for
//! the browser).

use wick::chat::ChatMessage;
use wick::sampling::SamplingParams;
use wick::{Constraint, FinishReason, GenerateOptions, Model, Session, SessionOptions};

use super::block_on;

/// The tokens of a chat turn: `system`, then `user`, then the assistant's turn opened.
pub fn chat_prompt(model: &Model, system: &str, user: &str) -> Vec<u32> {
    let msgs = [ChatMessage::new("system", system), ChatMessage::new("user", user)];
    let text = model.chat_template().expect("a chat template").render(&msgs, true).expect("render");
    model.tokenizer().encode(&text, false, true).expect("encode")
}

/// Generate under `opts` to the end; returns the text and the finish reason.
pub fn generate(session: &mut Session<'_>, prompt: &[u32], opts: GenerateOptions) -> (String, FinishReason) {
    block_on(async {
        let constrained = opts.constraint.is_some();
        let mut gen = session.generate(prompt, opts).expect("generate");
        let mut text = String::new();
        while let Some(tok) = gen.next().await {
            text.push_str(&tok.expect("token").text);
        }
        // The constraint's host time is counted when there is one, and only then.
        let spent = gen.constraint_secs();
        assert_eq!(constrained, spent.is_some(), "constraint time {spent:?}");
        assert_eq!(
            constrained && gen.n_generated() > 0,
            spent.is_some_and(|s| s > 0.0),
            "constraint time {spent:?}"
        );
        (text, gen.finish_reason().expect("finished"))
    })
}

/// Greedy generations under constraints (two JSON schemas, any JSON object, a Lark grammar),
/// each of up to `max_tokens` tokens, with every token picked on the executor (greedy: its
/// argmax applies the constraint's token mask, and only the id comes back) and on the host
/// (asking for log-probabilities reads the logits back, masked there): the same token ids.
/// Plain prompts (no chat template), so that synthetic models take it too.
pub fn constrained_greedy_device_equals_host(model: &Model, max_tokens: usize) {
    let colours = r#"
start: "Colours: " colour (", " colour){1,3} "."
colour: "red" | "green" | "blue" | "yellow" | "purple"
"#;
    let mut cases: Vec<(String, Constraint)> = super::schemas::schemas()
        .into_iter()
        .take(2)
        .map(|(what, s)| (format!("Give me {what}."), Constraint::JsonSchema(s)))
        .collect();
    cases.push(("Describe a cat in JSON.".into(), Constraint::JsonObject));
    cases.push(("Name a few colours.".into(), Constraint::Lark(colours.into())));
    let mut session = model.session(SessionOptions { n_ctx: 512, ..Default::default() }).expect("session");
    for (ask, constraint) in cases {
        let prompt = model.tokenizer().encode(&ask, true, false).expect("encode");
        let mut run = |logprobs: Option<usize>| {
            let opts = GenerateOptions {
                max_tokens,
                sampling: SamplingParams::greedy(),
                constraint: Some(constraint.clone()),
                logprobs,
                ..Default::default()
            };
            block_on(async {
                let mut gen = session.generate(&prompt, opts).expect("generate");
                let (mut ids, mut text) = (Vec::new(), String::new());
                while let Some(tok) = gen.next().await {
                    let tok = tok.expect("token");
                    ids.extend(tok.id);
                    text.push_str(&tok.text);
                }
                (ids, text)
            })
        };
        let (device, text) = run(None);
        let (host, host_text) = run(Some(1));
        eprintln!("{ask} {text}");
        assert_eq!(device, host, "{ask}: device {text:?}, host {host_text:?}");
    }
}
