//! The vocabulary: token texts, scores, attributes, special ids and the decoded piece of every
//! token, read from GGUF metadata the way llama.cpp's `llama_vocab::impl::load` reads it
//! (llama.cpp `src/llama-vocab.cpp`).

use std::collections::HashMap;

use crate::gguf::{MetaArray, Metadata};
use crate::{Error, Result};

/// Token attribute bits (llama.cpp's `llama_token_attr`; only the ones wick acts on).
pub(crate) mod attr {
    pub const UNKNOWN: u8 = 1 << 0;
    pub const UNUSED: u8 = 1 << 1;
    pub const NORMAL: u8 = 1 << 2;
    pub const CONTROL: u8 = 1 << 3;
    pub const USER_DEFINED: u8 = 1 << 4;
    pub const BYTE: u8 = 1 << 5;
}

/// GGUF `tokenizer.ggml.token_type` values → attribute bits. Unknown values become "undefined"
/// (no bits), which renders as empty text, as in llama.cpp.
fn attr_from_type(t: i64) -> u8 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0,
    }
}

/// Which tokenization algorithm the vocabulary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `tokenizer.ggml.model = gpt2`: byte-level BPE with merges.
    Bpe,
    /// `tokenizer.ggml.model = llama`: SentencePiece, merges by score, byte fallback.
    Spm,
}

/// Texts llama.cpp treats as end-of-turn when `eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Texts llama.cpp treats as end-of-generation, whatever the metadata says.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\u{FF5C}fim\u{2581}begin\u{FF5C}>",
    "<PRE>",
    "\u{2581}<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\u{FF5C}fim\u{2581}hole\u{FF5C}>",
    "<SUF>",
    "\u{2581}<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\u{FF5C}fim\u{2581}end\u{FF5C}>",
    "<MID>",
    "\u{2581}<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Special token ids (None: the vocabulary has none).
#[derive(Debug, Clone, Default)]
pub(crate) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
}

/// Everything the encoders and decoders need to know about the tokens.
#[derive(Debug, Clone)]
pub(crate) struct Vocab {
    pub kind: Kind,
    pub texts: Vec<String>,
    pub scores: Vec<f32>,
    pub attrs: Vec<u8>,
    pub text_to_id: HashMap<String, u32>,
    pub specials: Specials,
    pub eog: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    pub clean_spaces: bool,
    /// Control, user-defined and unknown tokens, longest text first: the order in which
    /// llama.cpp cuts them out of the input before running the tokenizer on the rest.
    pub special_cache: Vec<u32>,
    /// Decoded bytes of every token (llama.cpp `token_to_piece(special = false)`), concatenated.
    pieces: Vec<u8>,
    piece_ends: Vec<u32>,
}

/// Per-`tokenizer.ggml.pre` defaults that the vocabulary loader needs (the regexes live in
/// `pretokenize.rs`).
#[derive(Debug, Clone)]
pub(crate) struct PreFlags {
    pub add_bos: bool,
    pub clean_spaces: bool,
    pub bos_null: bool,
}

impl Vocab {
    /// Read the vocabulary. `pre_flags` is only consulted for BPE vocabularies.
    pub fn from_metadata(md: &Metadata, kind: Kind, pre_flags: Option<&PreFlags>) -> Result<Vocab> {
        const TOKENS: &str = "tokenizer.ggml.tokens";
        let raw = md.str_array(TOKENS)?;
        if raw.is_empty() {
            return Err(Error::bad_metadata(TOKENS, "the vocabulary is empty"));
        }
        if raw.len() > i32::MAX as usize {
            return Err(Error::bad_metadata(TOKENS, format!("{} tokens is too many", raw.len())));
        }
        let n = raw.len();

        let scores: Vec<f32> = match md.get("tokenizer.ggml.scores") {
            None => vec![0.0; n],
            Some(_) => {
                let key = "tokenizer.ggml.scores";
                let s: Vec<f32> = match md.array(key)? {
                    MetaArray::F32(v) => v.clone(),
                    MetaArray::I32(v) => v.iter().map(|&x| x as f32).collect(),
                    _ => return Err(Error::bad_metadata(key, "expected an array of f32 or i32")),
                };
                if s.len() < n {
                    return Err(Error::bad_metadata(key, format!("{} scores for {n} tokens", s.len())));
                }
                s
            }
        };

        let mut attrs: Vec<u8> = match md.get("tokenizer.ggml.token_type") {
            None => vec![attr::NORMAL; n],
            Some(_) => {
                let key = "tokenizer.ggml.token_type";
                let t = md.int_array(key)?;
                if t.len() < n {
                    return Err(Error::bad_metadata(key, format!("{} token types for {n} tokens", t.len())));
                }
                t[..n].iter().map(|&x| attr_from_type(x)).collect()
            }
        };

        let mut texts = Vec::with_capacity(n);
        let mut text_to_id = HashMap::with_capacity(n);
        for (i, word) in raw.iter().enumerate() {
            // llama.cpp renames empty tokens so that every text is unique and non-empty.
            let word = if word.is_empty() { format!("[EMPTY_{i}]") } else { word.clone() };
            if let Some(prev) = text_to_id.insert(word.clone(), i as u32) {
                return Err(Error::Tokenizer(format!(
                    "duplicate token in vocabulary: {word:?} has ids {prev} and {i}"
                )));
            }
            texts.push(word);
        }

        // Defaults per tokenizer model, then per pre-tokenizer, then metadata overrides.
        let (mut specials, mut add_bos, mut add_space_prefix, mut clean_spaces) = match kind {
            Kind::Spm => (
                Specials { bos: Some(1), eos: Some(2), unk: Some(0), ..Default::default() },
                true,
                true,
                false,
            ),
            Kind::Bpe => {
                let f =
                    pre_flags.unwrap_or(&PreFlags { add_bos: false, clean_spaces: true, bos_null: false });
                let bos = if f.bos_null { None } else { Some(11) };
                (Specials { bos, eos: Some(11), ..Default::default() }, f.add_bos, false, f.clean_spaces)
            }
        };
        let mut add_eos = false;
        if let Some(v) = md.bool_opt("tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }
        if kind == Kind::Bpe {
            // llama.cpp reads the key for BPE too, but its BPE path never adds the prefix.
            add_space_prefix = false;
        }

        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        specials.bos = in_range(specials.bos);
        specials.eos = in_range(specials.eos);
        specials.unk = in_range(specials.unk);
        let read_id = |key: &str, default: Option<u32>| -> Option<u32> {
            // A value that is absent, not an unsigned integer, or out of range keeps the default,
            // as llama.cpp does (it only warns).
            match md.u32_opt(key) {
                Ok(Some(id)) if (id as usize) < n => Some(id),
                _ => default,
            }
        };
        specials.bos = read_id("tokenizer.ggml.bos_token_id", specials.bos);
        specials.eos = read_id("tokenizer.ggml.eos_token_id", specials.eos);
        specials.eot = read_id("tokenizer.ggml.eot_token_id", None);
        specials.eom = read_id("tokenizer.ggml.eom_token_id", None);
        specials.unk = read_id("tokenizer.ggml.unknown_token_id", specials.unk);
        specials.pad = read_id("tokenizer.ggml.padding_token_id", None);
        // The deprecated prefix/suffix/middle keys win, as llama.cpp reads them last.
        let mut fim_pre =
            read_id("tokenizer.ggml.prefix_token_id", read_id("tokenizer.ggml.fim_pre_token_id", None));
        let mut fim_suf =
            read_id("tokenizer.ggml.suffix_token_id", read_id("tokenizer.ggml.fim_suf_token_id", None));
        let mut fim_mid =
            read_id("tokenizer.ggml.middle_token_id", read_id("tokenizer.ggml.fim_mid_token_id", None));
        let mut fim_pad = read_id("tokenizer.ggml.fim_pad_token_id", None);
        let mut fim_rep = read_id("tokenizer.ggml.fim_rep_token_id", None);
        let mut fim_sep = read_id("tokenizer.ggml.fim_sep_token_id", None);

        if let Some(v) = md.bool_opt("tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        if let Some(v) = md.bool_opt("tokenizer.ggml.add_eos_token")? {
            add_eos = v;
        }
        if add_bos && specials.bos.is_none() {
            return Err(Error::Tokenizer(
                "tokenizer.ggml.add_bos_token is true, but there is no BOS token".into(),
            ));
        }
        if add_eos && specials.eos.is_none() {
            return Err(Error::Tokenizer(
                "tokenizer.ggml.add_eos_token is true, but there is no EOS token".into(),
            ));
        }
        if kind == Kind::Spm {
            clean_spaces = false;
        }

        // Find end-of-turn and FIM tokens by their text when the metadata does not name them;
        // such tokens become control tokens. (llama.cpp walks a hash map here, so which of several
        // candidates it picks is unspecified; wick takes the lowest id.)
        let mark_control = |attrs: &mut Vec<u8>, id: u32| attrs[id as usize] |= attr::CONTROL;
        for (i, text) in texts.iter().enumerate() {
            let id = i as u32;
            let t = text.as_str();
            if specials.eot.is_none() && EOT_TEXTS.contains(&t) {
                specials.eot = Some(id);
                mark_control(&mut attrs, id);
            }
            if specials.eom.is_none() && t == "<|eom_id|>" {
                specials.eom = Some(id);
                mark_control(&mut attrs, id);
            }
            for (slot, list) in
                [(&mut fim_pre, FIM_PRE_TEXTS), (&mut fim_suf, FIM_SUF_TEXTS), (&mut fim_mid, FIM_MID_TEXTS)]
            {
                if slot.is_none() && list.contains(&t) {
                    *slot = Some(id);
                    mark_control(&mut attrs, id);
                }
            }
            if fim_pad.is_none() && FIM_PAD_TEXTS.contains(&t) {
                fim_pad = Some(id);
                mark_control(&mut attrs, id);
            }
            if fim_rep.is_none() && FIM_REP_TEXTS.contains(&t) {
                fim_rep = Some(id);
                mark_control(&mut attrs, id);
            }
            if fim_sep.is_none() && FIM_SEP_TEXTS.contains(&t) {
                fim_sep = Some(id);
                mark_control(&mut attrs, id);
            }
        }
        // Control tokens whose text says "unused" are unused.
        for (i, text) in texts.iter().enumerate() {
            if attrs[i] & attr::CONTROL != 0 && text.contains("unused") {
                attrs[i] |= attr::UNUSED;
            }
        }

        let mut eog: Vec<u32> = [fim_pad, fim_rep, fim_sep].into_iter().flatten().collect();
        for (i, text) in texts.iter().enumerate() {
            if EOG_TEXTS.contains(&text.as_str()) {
                eog.push(i as u32);
                attrs[i] |= attr::CONTROL;
            }
            // gpt-oss: these always render.
            if matches!(text.as_str(), "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>") {
                attrs[i] = attr::USER_DEFINED;
            }
        }
        eog.extend([specials.eos, specials.eot, specials.eom].into_iter().flatten());
        eog.sort_unstable();
        eog.dedup();
        let find_eog = |eog: &[u32], t: &str| eog.iter().copied().find(|&id| texts[id as usize] == t);
        // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
        let has = |eog: &[u32], t: &str| find_eog(eog, t).is_some();
        if (has(&eog, "<|return|>") && has(&eog, "<|call|>") && has(&eog, "<|end|>"))
            || ((has(&eog, "<|call|>") || has(&eog, "<|calls|>"))
                && has(&eog, "<|flush|>")
                && has(&eog, "<|end|>"))
        {
            if let Some(end) = find_eog(&eog, "<|end|>") {
                eog.retain(|&x| x != end);
                attrs[end as usize] = attr::USER_DEFINED;
            }
        }
        // gemma4 / paddleocr: "</s>" is ordinary text when "<|tool_response>" exists.
        if has(&eog, "<|tool_response>") {
            if let Some(s) = find_eog(&eog, "</s>") {
                eog.retain(|&x| x != s);
                attrs[s as usize] = attr::NORMAL;
            }
        }

        let mut special_cache: Vec<u32> = (0..n as u32)
            .filter(|&id| attrs[id as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .collect();
        // Longest first; equal lengths by id (llama.cpp's sort is unstable there).
        special_cache.sort_by(|&a, &b| texts[b as usize].len().cmp(&texts[a as usize].len()).then(a.cmp(&b)));

        let mut vocab = Vocab {
            kind,
            texts,
            scores: scores[..n].to_vec(),
            attrs,
            text_to_id,
            specials,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
            special_cache,
            pieces: Vec::new(),
            piece_ends: Vec::new(),
        };
        vocab.build_pieces();
        Ok(vocab)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn attr(&self, id: u32) -> u8 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.text_to_id.get(text).copied()
    }

    /// The decoded bytes of a token, as llama.cpp's `token_to_piece(special = false)` renders it.
    pub fn piece(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i >= self.piece_ends.len() {
            return &[];
        }
        let start = if i == 0 { 0 } else { self.piece_ends[i - 1] as usize };
        &self.pieces[start..self.piece_ends[i] as usize]
    }

    fn build_pieces(&mut self) {
        let unicode_to_byte = super::bytes::unicode_to_byte_table();
        let mut pieces = Vec::with_capacity(self.texts.iter().map(|t| t.len()).sum());
        let mut ends = Vec::with_capacity(self.texts.len());
        for (i, text) in self.texts.iter().enumerate() {
            let a = self.attrs[i];
            if a & (attr::UNKNOWN | attr::CONTROL) != 0 {
                // Rendered only with special = true.
            } else if a & attr::USER_DEFINED != 0 {
                pieces.extend_from_slice(text.as_bytes());
            } else if a & attr::NORMAL != 0 {
                match self.kind {
                    Kind::Spm => pieces.extend_from_slice(text.replace('\u{2581}', " ").as_bytes()),
                    Kind::Bpe => {
                        for c in text.chars() {
                            match unicode_to_byte(c) {
                                Some(b) => pieces.push(b),
                                // Not a byte-level character: keep it as it is (llama.cpp
                                // writes an "[UNK_BYTE_0x..]" marker here).
                                None => {
                                    let mut buf = [0u8; 4];
                                    pieces.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                                }
                            }
                        }
                    }
                }
            } else if a & attr::BYTE != 0 {
                if let Some(b) = parse_byte_token(text) {
                    pieces.push(b);
                }
            }
            ends.push(pieces.len() as u32);
        }
        self.pieces = pieces;
        self.piece_ends = ends;
    }
}

/// `<0xAB>` → 0xAB.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
