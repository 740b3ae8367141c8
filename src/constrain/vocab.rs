//! wick's vocabulary as llguidance sees it: a token trie (`toktrie::TokTrie`) of every token's
//! bytes, and a tokenizer environment that can encode bytes back into tokens.
//!
//! Conventions of the trie (toktrie's): a token is the bytes it decodes to; a special token is
//! its text behind the marker byte 0xFF (so no grammar of text can produce it, and a Lark
//! grammar can name it as `<|im_end|>`); the EOS set is every end-of-generation token of the
//! vocabulary, so that when a grammar may end, any of them ends it.

use std::sync::Arc;

use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// A wick tokenizer with the trie of its vocabulary.
struct WickTokEnv {
    tokenizer: Tokenizer,
    trie: TokTrie,
}

impl TokenizerEnv for WickTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Tokens of `s`: wick's own encoding where it is the canonical one (byte-level BPE on valid
    /// UTF-8), else the trie's greedy longest-match tokenization.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        if self.tokenizer.is_byte_level_bpe() {
            if let Ok(text) = std::str::from_utf8(s) {
                if let Ok(ids) = self.tokenizer.encode(text, false, false) {
                    return ids;
                }
            }
        }
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.tokenizer.is_byte_level_bpe()
    }
}

/// The bytes the trie holds for token `id`: the decoded bytes of a normal token, 0xFF + the
/// text of a control token, nothing for tokens that never appear in text (unknown, unused).
fn token_word(tok: &Tokenizer, id: u32) -> Vec<u8> {
    if tok.is_control(id) {
        let text = tok.token_text(id).unwrap_or("");
        if text.is_empty() {
            return Vec::new();
        }
        let mut w = Vec::with_capacity(text.len() + 1);
        w.push(TokTrie::SPECIAL_TOKEN_MARKER);
        w.extend_from_slice(text.as_bytes());
        return w;
    }
    tok.token_bytes(id).to_vec()
}

/// toktrie's limits, checked before building so that it never panics: token ids fit in 24 bits
/// (0xFFFFFF is its "no token"), a token is at most 1024 trie levels deep, and the whole trie
/// (at most one node per byte of every token, plus the root) has fewer than 2^22 nodes.
const MAX_VOCAB: usize = 0xFF_FFFF;
const MAX_TOKEN_BYTES: usize = 1000;
const MAX_TRIE_BYTES: usize = (1 << 22) - 2;

/// Build the llguidance tokenizer environment of `tok`'s vocabulary.
pub(crate) fn token_env(tok: &Tokenizer) -> Result<TokEnv> {
    let n = tok.n_vocab();
    if n == 0 || n >= MAX_VOCAB {
        return Err(Error::Grammar(format!("a vocabulary of {n} tokens cannot be constrained")));
    }
    // Every end-of-generation token ends a finished grammar; toktrie needs at least one.
    let mut eos: Vec<u32> = tok.eog_ids().iter().copied().filter(|&id| (id as usize) < n).collect();
    if let Some(e) = tok.eos_id().filter(|&e| (e as usize) < n && !eos.contains(&e)) {
        eos.insert(0, e);
    }
    let Some(&first) = eos.first() else {
        return Err(Error::Grammar(
            "the vocabulary has no end-of-generation token to end a grammar with".into(),
        ));
    };
    // A token too long for the trie is left out of it: such a token is never allowed.
    let words: Vec<Vec<u8>> = (0..n as u32)
        .map(|id| token_word(tok, id))
        .map(|w| if w.len() > MAX_TOKEN_BYTES { Vec::new() } else { w })
        .collect();
    let total: usize = words.iter().map(Vec::len).sum();
    if total > MAX_TRIE_BYTES {
        return Err(Error::Grammar(format!(
            "the vocabulary's {total} bytes of token text are more than a token trie holds ({MAX_TRIE_BYTES})"
        )));
    }
    let info = TokRxInfo {
        vocab_size: n as u32,
        tok_eos: first,
        tok_bos: tok.bos_id().filter(|&b| (b as usize) < n),
        tok_pad: None,
        tok_unk: None,
        tok_end_of_turn: None,
    };
    let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
    Ok(Arc::new(WickTokEnv { tokenizer: tok.clone(), trie }))
}
