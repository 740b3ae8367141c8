//! Tokenizers built from GGUF metadata that match llama.cpp token for token.
//!
//! The pipeline, as in llama.cpp `llama_vocab::impl::tokenize`:
//! 1. **special tokens** (`special.rs`): control and user-defined token texts are cut out of the
//!    input first, longest first (control ones only when `parse_special`);
//! 2. **pre-tokenize** (`pretokenize.rs`, BPE only): the regex list named by `tokenizer.ggml.pre`;
//! 3. **model**: byte-level BPE with ranked merges (`bpe.rs`) or SentencePiece merges by score
//!    with byte fallback (`spm.rs`);
//! 4. **post-process**: BOS/EOS as the vocabulary asks.
//!
//! Decoding renders each token as llama.cpp's `token_to_piece(special = false)` does (control
//! tokens are empty); [`StreamDecoder`] holds back incomplete UTF-8 between tokens.
//!
//! Behaviour mirrors llama.cpp `src/llama-vocab.cpp` (read at 00ad355e) and `src/unicode.cpp`
//! (0c4093cc); the tests compare against llama-cpp-python 0.3.36. Known differences, none of
//! which the test corpus reaches:
//! - llama.cpp splits with hand-written code for the gpt2 and llama3 patterns; wick uses
//!   fancy-regex for every pattern. They differ only on unassigned code points.
//! - The per-model LSTRIP/RSTRIP token attributes llama.cpp sets by model name (phi-3, jina,
//!   modern-bert) are not applied.
//! - Where several tokens could be the implicit EOT, llama.cpp's choice follows hash-map order;
//!   wick takes the lowest id (all of them are end-of-generation either way).
//! - Only `gpt2` and `llama` tokenizer models; WPM, UGM, RWKV and PLaMo-2 are errors.

mod bpe;
mod bytes;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod vocab;

pub use stream::StreamDecoder;

use crate::gguf::Metadata;
use crate::{Error, Result};
use bpe::Merges;
use pretokenize::PreTokenizer;
use vocab::{attr, Kind, Vocab};

/// A tokenizer for one model's vocabulary.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
}

#[derive(Debug, Clone)]
enum Model {
    Bpe { merges: Box<Merges>, pre: PreTokenizer },
    Spm,
}

impl Tokenizer {
    /// Build the tokenizer that the `tokenizer.ggml.*` keys describe. Supported models: `gpt2`
    /// (byte-level BPE) and `llama` (SentencePiece).
    pub fn from_metadata(md: &Metadata) -> Result<Tokenizer> {
        const MODEL: &str = "tokenizer.ggml.model";
        let model_name = md.str(MODEL)?;
        match model_name {
            "gpt2" => {
                let pre = PreTokenizer::new(md.str_opt("tokenizer.ggml.pre")?)?;
                let vocab = Vocab::from_metadata(md, Kind::Bpe, Some(&pre.flags))?;
                let merges = Merges::from_metadata(md, &vocab)?;
                Ok(Tokenizer { vocab, model: Model::Bpe { merges: Box::new(merges), pre } })
            }
            "llama" => {
                let vocab = Vocab::from_metadata(md, Kind::Spm, None)?;
                Ok(Tokenizer { vocab, model: Model::Spm })
            }
            other => Err(Error::Tokenizer(format!(
                "tokenizer model '{other}' ({MODEL}) is not supported; wick supports gpt2 (BPE) and llama (SentencePiece)"
            ))),
        }
    }

    /// Turn text into token ids. `add_special`: add BOS/EOS where the vocabulary asks for them
    /// (`tokenizer.ggml.add_bos_token` / `add_eos_token`, else llama.cpp's defaults).
    /// `parse_special`: control-token texts in `text` (e.g. `<|im_start|>`) become their ids
    /// instead of being tokenized as plain text. User-defined tokens are always recognized.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let v = &self.vocab;
        // Positions inside the merge loops are u32.
        if text.len() >= u32::MAX as usize / 2 {
            return Err(Error::InvalidArgument(format!(
                "text of {} bytes is too long to tokenize",
                text.len()
            )));
        }
        let fragments = special::partition(v, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && v.add_bos {
            // from_metadata checked that a BOS id exists when add_bos is set.
            out.extend(v.specials.bos);
        }
        match &self.model {
            Model::Spm => {
                let mut prev_special = true;
                let mut buf = String::new();
                for f in fragments {
                    match f {
                        special::Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        special::Fragment::Text(s, e) => {
                            buf.clear();
                            if v.add_space_prefix && prev_special {
                                buf.push('\u{2581}');
                            }
                            for c in text[s..e].chars() {
                                buf.push(if c == ' ' { '\u{2581}' } else { c });
                            }
                            spm::encode(v, &buf, &mut out)?;
                            prev_special = false;
                        }
                    }
                }
            }
            Model::Bpe { merges, pre } => {
                for f in fragments {
                    match f {
                        special::Fragment::Token(id) => out.push(id),
                        special::Fragment::Text(s, e) => {
                            let part = &text[s..e];
                            for (ws, we) in pre.split(part)? {
                                merges.encode_word(v, &part.as_bytes()[ws..we], pre.ignore_merges, &mut out);
                            }
                        }
                    }
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.specials.eos);
        }
        Ok(out)
    }

    /// Turn token ids into text, as llama.cpp's `llama_detokenize(remove_special = false,
    /// unparse_special = false)` does: control tokens render as nothing, the first token loses
    /// one leading space when the vocabulary adds a space prefix, and vocabularies that ask for it
    /// get llama.cpp's clean-up of spaces before punctuation. Invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let v = &self.vocab;
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let mut p = v.piece(id);
            if i == 0 && v.add_space_prefix && p.first() == Some(&b' ') {
                p = &p[1..];
            }
            bytes.extend_from_slice(p);
        }
        if v.clean_spaces {
            bytes = clean_up_spaces(&bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The decoded bytes of one token (empty for control tokens and ids out of range).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.vocab.piece(id)
    }

    /// The token's string as stored in the vocabulary (e.g. `Ġthe`, `▁the`, `<0x0A>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The id of the token whose vocabulary string is exactly `text`.
    pub fn find_token(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }

    /// Beginning-of-sequence token.
    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.specials.bos
    }

    /// End-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.specials.eos
    }

    /// Whether generation should stop at this token: EOS, EOT, EOM and the texts llama.cpp
    /// treats as end of generation (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// Every end-of-generation token id (see [`Tokenizer::is_eog`]), ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    /// Whether the tokenizer is byte-level BPE (`gpt2`), whose encoding of any text is the
    /// one a model was trained on; SentencePiece adds a space prefix and normalizes.
    pub fn is_byte_level_bpe(&self) -> bool {
        matches!(self.model, Model::Bpe { .. })
    }

    /// Whether this is a control token (rendered as nothing by [`Tokenizer::decode`]).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.attr(id) & attr::CONTROL != 0
    }

    /// Whether BOS is added by `encode(.., add_special = true, ..)`.
    pub fn adds_bos(&self) -> bool {
        self.vocab.add_bos
    }
}

/// llama.cpp's `clean_spaces` pass: drop the space in " ?", " !", " .", " ,", in " ' " and
/// before the contractions 's, 'm, 're, 've.
fn clean_up_spaces(text: &[u8]) -> Vec<u8> {
    // Pass 1: space before ?!.,
    let mut a: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            a.pop();
        }
        a.push(x);
    }
    // Pass 2: a lone apostrophe between spaces loses both spaces. (llama.cpp overwrites the
    // second space with NUL, which the next position then sees as its predecessor.)
    let mut b: Vec<u8> = Vec::with_capacity(a.len());
    let mut i = 0;
    while i < a.len() {
        let x = a[i];
        if i > 0 && x == b'\'' && i + 1 < a.len() && a[i - 1] == b' ' && a[i + 1] == b' ' {
            b.pop();
            b.push(x);
            a[i + 1] = 0;
            i += 2;
            continue;
        }
        b.push(x);
        i += 1;
    }
    // Pass 3: " 's", " 'm", " 're", " 've" lose the space.
    let mut c: Vec<u8> = Vec::with_capacity(b.len());
    for i in 0..b.len() {
        let x = b[i];
        if i > 0 && b[i - 1] == b' ' && x == b'\'' && i + 1 < b.len() {
            let x1 = b[i + 1];
            let x2 = b.get(i + 2).copied();
            let drop = matches!(x1, b's' | b'm')
                || (i + 2 < b.len() && matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))));
            if drop {
                c.pop();
            }
        }
        c.push(x);
    }
    c
}
