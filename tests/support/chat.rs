//! Chat prompts and whole generations on a loaded model (native: `block_on` cannot wait for
//! the browser).

use wick::chat::ChatMessage;
use wick::{FinishReason, GenerateOptions, Model, Session};

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
        let mut gen = session.generate(prompt, opts).expect("generate");
        let mut text = String::new();
        while let Some(tok) = gen.next().await {
            text.push_str(&tok.expect("token").text);
        }
        (text, gen.finish_reason().expect("finished"))
    })
}
