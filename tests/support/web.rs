//! Helpers shared by the browser tests (`tests/web_*.rs`): a synthetic tokenizer (no model
//! files in the browser) and JS `ReadableStream`s over bytes made in the test.

use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wick::gguf::{MetaArray, MetaValue, Metadata};

#[wasm_bindgen(inline_js = r#"
export function makeStream(chunks) {
  let i = 0;
  return new ReadableStream({
    pull(c) { if (i < chunks.length) c.enqueue(chunks[i++]); else c.close(); },
  });
}
// `head`, then `zeros` zero bytes, made on the fly `chunk` bytes at a time: a large file that
// exists nowhere in full, neither in JS nor in wasm memory.
export function zeroTailStream(head, zeros, chunk) {
  let sentHead = false;
  let left = zeros;
  return new ReadableStream({
    pull(c) {
      if (!sentHead) { sentHead = true; c.enqueue(head.slice()); return; }
      if (left <= 0) { c.close(); return; }
      const n = Math.min(chunk, left);
      left -= n;
      c.enqueue(new Uint8Array(n));
    },
  });
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = makeStream)]
    fn make_stream(chunks: &Array) -> web_sys::ReadableStream;
    #[wasm_bindgen(js_name = zeroTailStream)]
    fn zero_tail_stream(head: &Uint8Array, zeros: f64, chunk: u32) -> web_sys::ReadableStream;
}

/// A JS `ReadableStream` yielding `bytes` as `Uint8Array` chunks of `chunk` bytes (copies in
/// JS memory, like a network body).
pub fn stream_of(bytes: &[u8], chunk: usize) -> web_sys::ReadableStream {
    let chunks = Array::new();
    for c in bytes.chunks(chunk.max(1)) {
        chunks.push(&Uint8Array::from(c));
    }
    make_stream(&chunks)
}

/// A JS `ReadableStream` of `head` followed by `zeros` zero bytes, generated as it is read.
pub fn zero_tail_stream_of(head: &[u8], zeros: u64, chunk: u32) -> web_sys::ReadableStream {
    zero_tail_stream(&Uint8Array::from(head), zeros as f64, chunk)
}

/// Metadata of a SentencePiece vocabulary of `n_vocab` tokens (at least 259): the control
/// tokens, the 256 byte-fallback tokens, then made-up pieces. It stands in for a real model's
/// tokenizer as the donor of synthetic models.
pub fn donor(n_vocab: usize) -> Metadata {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    let mut i = 0usize;
    while tokens.len() < n_vocab {
        // "▁a", "▁b", ..., then "▁aa"-style pieces: unique, and plain text when decoded.
        let (mut j, mut piece) = (i, String::from("\u{2581}"));
        loop {
            piece.push(letters[j % 26] as char);
            j /= 26;
            if j == 0 {
                break;
            }
        }
        tokens.push(piece);
        types.push(1);
        i += 1;
    }
    let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", MetaValue::Str("llama".into()));
    md.insert("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::Str(tokens)));
    md.insert("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(types)));
    md.insert("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(scores)));
    md.insert("tokenizer.ggml.bos_token_id", MetaValue::U32(1));
    md.insert("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
    md
}

/// Print to the test runner's output (the browser console, which wasm-bindgen-test captures).
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => { wasm_bindgen_test::console_log!($($t)*) };
}
