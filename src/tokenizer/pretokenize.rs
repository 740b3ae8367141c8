//! Pre-tokenizers for BPE vocabularies: the regex lists llama.cpp picks by `tokenizer.ggml.pre`
//! (llama.cpp `llm_tokenizer_bpe::llm_tokenizer_bpe`, `unicode_regex_split`). The patterns are
//! compatibility data, copied as llama.cpp spells them. Each regex of a list further splits
//! the pieces the previous one produced; text between matches stays a piece of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use fancy_regex::Regex;

use super::vocab::PreFlags;
use crate::{Error, Result};

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const PORO: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

/// The pre-tokenizer of a BPE vocabulary.
#[derive(Debug, Clone)]
pub(crate) struct PreTokenizer {
    /// The name it was chosen by (`tokenizer.ggml.pre`).
    pub name: String,
    regexes: Vec<Arc<Regex>>,
    /// Whether a whole word that is itself a token skips the merges (llama3 and a few others).
    pub ignore_merges: bool,
    /// Vocabulary defaults that depend on the pre-tokenizer.
    pub flags: PreFlags,
}

/// The names wick knows, for error messages.
pub(crate) const SUPPORTED: &str = "default, llama3 (llama-bpe, llama-v3, falcon3, falcon-h1, pixtral, midm-2.0, lfm2), \
dbrx, smaug-bpe, deepseek-llm, deepseek-coder, deepseek-v3, falcon, mpt, starcoder, gpt-2 (phi-2, jina-*, gigachat, \
a.x-4.0, mellum, modern-bert, roberta-bpe, exaone4), refact, command-r, qwen2 (deepseek-r1-qwen, megrez), stablelm2, \
olmo, poro-chat, chatglm-bpe (glm4), viking, jais, tekken, smollm, codeshell, bloom, gpt3-finnish, exaone, minerva-7b, \
gpt-4o (llama4), trillion, granite-docling, bailingmoe (bailingmoe2, llada-moe), seed-coder, grok-2, hunyuan";

/// The compiled regex of a pattern, shared by every tokenizer of the process: compiling a
/// pattern's Unicode classes takes milliseconds, longer than loading a small vocabulary, and a
/// page or a test that loads several models would otherwise pay it at every load. Shared, not
/// cloned: a clone of a `Regex` starts with empty search caches, so every new tokenizer built
/// its lazy DFA states again while encoding (40% of the tokenizer fuzz target's time).
fn compiled(pattern: &'static str) -> std::result::Result<Arc<Regex>, String> {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, Arc<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(re) = cache.lock().ok().and_then(|c| c.get(pattern).cloned()) {
        return Ok(re);
    }
    let re = Arc::new(Regex::new(pattern).map_err(|e| e.to_string())?);
    if let Ok(mut c) = cache.lock() {
        c.insert(pattern, Arc::clone(&re));
    }
    Ok(re)
}

impl PreTokenizer {
    /// The pre-tokenizer that `tokenizer.ggml.pre` names (None or empty: "default").
    pub fn new(name: Option<&str>) -> Result<PreTokenizer> {
        let name = name.filter(|n| !n.is_empty()).unwrap_or("default");
        let mut ignore_merges = false;
        let mut add_bos = false;
        let mut clean_spaces = true;
        let mut bos_null = false;
        let default: &[&'static str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];
        let starcoder: &[&'static str] = &[r"\p{N}", GPT2];
        let patterns: &[&'static str] = match name {
            "default" => default,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
            | "lfm2" | "jina-v5-nano" => {
                ignore_merges = true;
                add_bos = true;
                &[LLAMA3]
            }
            "dbrx" | "smaug-bpe" => &[LLAMA3],
            "deepseek-llm" => {
                clean_spaces = false;
                // Characters that Unicode normalization would change are written as escapes.
                &[
                    "[\r\n]",
                    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u{1F7D}ᾀ-ᾴᾶ-ᾼ\u{1FBE}ῂ-ῄῆ-ῌῐ-\u{1FD3}ῖ-\u{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u{2126}ℨ\u{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
                    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
                    "\\s+$",
                    "[一-龥ࠀ-一가-퟿]+",
                    "\\p{N}+",
                ]
            }
            "deepseek-coder" => {
                clean_spaces = false;
                &["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"]
            }
            "deepseek-v3" | "hunyuan-dense" => {
                clean_spaces = false;
                &[
                    "\\p{N}{1,3}",
                    "[一-龥぀-ゟ゠-ヿ]+",
                    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
                ]
            }
            "falcon" => &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => starcoder,
            "command-r" | "smollm" => {
                clean_spaces = false;
                starcoder
            }
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
            | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe"
            | "exaone4" | "mpt" | "olmo" | "jais" => &[GPT2],
            "trillion" | "granite-docling" => {
                clean_spaces = false;
                &[GPT2]
            }
            "qwen2" | "deepseek-r1-qwen" | "hunyuan" | "kormo" | "f2llmv2" => {
                clean_spaces = false;
                &[QWEN2]
            }
            "stablelm2" | "megrez" => &[QWEN2],
            "poro-chat" => {
                clean_spaces = false;
                &[PORO]
            }
            "bloom" | "gpt3-finnish" => &[PORO],
            "viking" => {
                clean_spaces = false;
                &[PORO, r"\p{N}"]
            }
            "glm4" | "chatglm-bpe" => {
                bos_null = true;
                &[LLAMA3]
            }
            "tekken" => {
                clean_spaces = false;
                ignore_merges = true;
                add_bos = true;
                &[TEKKEN]
            }
            "gpt-4o" | "llama4" => {
                clean_spaces = false;
                &[GPT4O]
            }
            "bailingmoe" | "bailingmoe2" | "llada-moe" => {
                clean_spaces = false;
                &[BAILINGMOE]
            }
            "seed-coder" => {
                clean_spaces = false;
                &[SEED_CODER]
            }
            "grok-2" => {
                clean_spaces = false;
                &[QWEN2]
            }
            other => {
                return Err(Error::Tokenizer(format!(
                    "unknown pre-tokenizer type '{other}' (tokenizer.ggml.pre); wick supports: {SUPPORTED}"
                )))
            }
        };
        let regexes = patterns
            .iter()
            .map(|p| {
                compiled(p)
                    .map_err(|e| Error::Tokenizer(format!("pre-tokenizer '{name}': bad regex {p:?}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PreTokenizer {
            name: name.to_string(),
            regexes,
            ignore_merges,
            flags: PreFlags { add_bos, clean_spaces, bos_null },
        })
    }

    /// Split `text` into words (byte ranges, in order, covering all of `text`).
    pub fn split(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        let mut pieces = vec![(0, text.len())];
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let mut next = Vec::new();
        for re in &self.regexes {
            next.clear();
            for &(start, end) in &pieces {
                let sub = &text[start..end];
                let mut last = 0;
                for m in re.find_iter(sub) {
                    let m = m.map_err(|e| Error::Tokenizer(format!("pre-tokenizer '{}': {e}", self.name)))?;
                    if m.start() == m.end() {
                        continue;
                    }
                    if m.start() > last {
                        next.push((start + last, start + m.start()));
                    }
                    next.push((start + m.start(), start + m.end()));
                    last = m.end();
                }
                if last < sub.len() {
                    next.push((start + last, end));
                }
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        Ok(pieces)
    }
}
