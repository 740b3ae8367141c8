//! Incremental decoding for generation: each token's bytes are appended, and only complete
//! UTF-8 is handed out, so a character split over several byte tokens (emoji, CJK through
//! `<0xXX>` fallback) comes out whole.

use super::Tokenizer;

/// Decodes a token stream piece by piece, holding back incomplete UTF-8 sequences.
///
/// Pieces are concatenated as llama.cpp's `token_to_piece(special = false)` renders them (no
/// leading-space stripping and no space clean-up, unlike [`Tokenizer::decode`]).
#[derive(Debug, Clone)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder with nothing pending.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        StreamDecoder { tokenizer, pending: Vec::new() }
    }

    /// Add one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        self.pending.extend_from_slice(self.tokenizer.token_bytes(id));
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // Safe: from_utf8 just validated this prefix.
                    out.push_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        // Invalid bytes: replace them and go on.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        // An incomplete sequence at the end: wait for more bytes.
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drain_to = self.pending.len() - keep;
        self.pending.drain(..drain_to);
        out
    }

    /// Whatever is still held back, with an incomplete sequence rendered as U+FFFD.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}
