//! Fuzz the tokenizer built from file contents: a vocabulary, merges and a pre-tokenizer name
//! from the input, then encode and decode. Any input must give `Ok` or `Err`, never a panic.
//!
//! Input: lines. The first line names the model (`gpt2` or `llama`) and, after a space, the
//! pre-tokenizer (`tokenizer.ggml.pre`); then the tokens one a line up to a line `---`; then
//! the merges one a line up to the next `---`; the rest is the text to encode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick::gguf::{MetaArray, MetaValue, Metadata};
use wick::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let head = lines.next().unwrap_or_default();
    let (model, pre) = head.split_once(' ').unwrap_or((head, ""));
    let tokens: Vec<String> = lines.by_ref().take_while(|l| *l != "---").map(str::to_string).collect();
    let merges: Vec<String> = lines.by_ref().take_while(|l| *l != "---").map(str::to_string).collect();
    let input: Vec<&str> = lines.collect();
    let input = input.join("\n");

    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", MetaValue::Str(model.to_string()));
    if !pre.is_empty() {
        md.insert("tokenizer.ggml.pre", MetaValue::Str(pre.to_string()));
    }
    let n = tokens.len();
    // token types and scores derived from the bytes, so every kind of token is reached
    let types: Vec<i32> = tokens.iter().map(|t| (t.len() % 7) as i32).collect();
    let scores: Vec<f32> = tokens.iter().enumerate().map(|(i, t)| -(i as f32) - t.len() as f32).collect();
    md.insert("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::Str(tokens)));
    md.insert("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(types)));
    md.insert("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(scores)));
    md.insert("tokenizer.ggml.merges", MetaValue::Array(MetaArray::Str(merges)));
    md.insert("tokenizer.ggml.bos_token_id", MetaValue::U32((data.len() % (n + 2)) as u32));
    md.insert("tokenizer.ggml.eos_token_id", MetaValue::U32((data.len() / 3 % (n + 2)) as u32));

    let Ok(tok) = Tokenizer::from_metadata(&md) else { return };
    for (special, parse) in [(true, true), (false, false)] {
        if let Ok(ids) = tok.encode(&input, special, parse) {
            let _ = tok.decode(&ids);
        }
    }
    // ids from the raw bytes, valid or not
    let ids: Vec<u32> = data.iter().map(|&b| b as u32).collect();
    let _ = tok.decode(&ids);
});
