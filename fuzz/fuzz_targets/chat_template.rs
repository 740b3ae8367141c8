//! Fuzz chat templates: compile the input as a template and render it for a conversation
//! taken from the input, within wick's default limits. Any input must give `Ok` or `Err`
//! within bounded time and memory, never a panic.
//!
//! Input: the template source, then NUL-separated message contents (roles alternate user and
//! assistant, the first may be `system` when it starts with `S`). The input's length picks
//! `add_generation_prompt`. At most `MAX_MESSAGES` messages are taken: a template's fuel grows
//! with the conversation, so a long one mostly repeats the same loop for longer (on a grown
//! corpus, inputs of 32 messages or more took 97% of the time); the limits for long chats are
//! tested in `tests/chat_limits.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick::chat::{ChatMessage, ChatTemplate};

const MAX_MESSAGES: usize = 16;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let source = parts.next().unwrap_or_default();
    let msgs: Vec<ChatMessage> = parts
        .take(MAX_MESSAGES)
        .enumerate()
        .map(|(i, c)| {
            let role = match (i, c.starts_with('S')) {
                (0, true) => "system",
                (i, _) if i % 2 == 0 => "user",
                _ => "assistant",
            };
            ChatMessage::new(role, c)
        })
        .collect();
    let Ok(tmpl) = ChatTemplate::new(source, "<s>", "</s>") else { return };
    tmpl.set_fixed_time(Some(1_700_000_000));
    let _ = tmpl.render(&msgs, data.len() % 2 == 0);
});
