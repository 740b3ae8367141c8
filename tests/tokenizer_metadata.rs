//! Tokenizers from hand-made metadata: bad metadata is an error (never a panic), and tiny
//! vocabularies behave as the algorithms say.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use wick::gguf::{MetaArray, MetaValue, Metadata};
use wick::tokenizer::Tokenizer;
use wick::Error;

fn strs(v: &[&str]) -> MetaValue {
    MetaValue::Array(MetaArray::Str(v.iter().map(|s| s.to_string()).collect()))
}

/// A byte-level BPE vocabulary: "a", "b", "c", "ab", "abc", "Ġ", "Ġab", a control token.
fn bpe_md() -> Metadata {
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", MetaValue::Str("gpt2".into()));
    md.insert("tokenizer.ggml.pre", MetaValue::Str("gpt-2".into()));
    md.insert("tokenizer.ggml.tokens", strs(&["<|endoftext|>", "a", "b", "c", "ab", "abc", "Ġ", "Ġab", "!"]));
    md.insert("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(vec![3, 1, 1, 1, 1, 1, 1, 1, 1])));
    md.insert("tokenizer.ggml.merges", strs(&["a b", "ab c", "Ġ ab"]));
    md.insert("tokenizer.ggml.eos_token_id", MetaValue::U32(0));
    md.insert("tokenizer.ggml.bos_token_id", MetaValue::U32(0));
    md
}

/// A SentencePiece vocabulary with byte fallback.
fn spm_md() -> Metadata {
    let mut md = Metadata::new();
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (t, s) in [("▁", -1.0), ("h", -2.0), ("i", -2.0), ("▁h", -1.5), ("▁hi", -0.5), ("hi", -3.0)] {
        tokens.push(t.into());
        types.push(1);
        scores.push(s);
    }
    md.insert("tokenizer.ggml.model", MetaValue::Str("llama".into()));
    md.insert("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::Str(tokens)));
    md.insert("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(types)));
    md.insert("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(scores)));
    md
}

fn err(md: &Metadata) -> Error {
    match Tokenizer::from_metadata(md) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn tiny_bpe_merges_by_rank() {
    let tok = Tokenizer::from_metadata(&bpe_md()).unwrap();
    let id = |t: &str| tok.find_token(t).unwrap();
    assert_eq!(tok.encode("abc", false, false).unwrap(), vec![id("abc")]);
    assert_eq!(tok.encode("ab ab", false, false).unwrap(), vec![id("ab"), id("Ġab")]);
    assert_eq!(tok.encode("cab!", false, false).unwrap(), vec![id("c"), id("ab"), id("!")]);
    // Bytes with no token are dropped, as llama.cpp drops them.
    assert_eq!(tok.encode("a\u{e9}", false, false).unwrap(), vec![id("a")]);
    assert_eq!(tok.encode("<|endoftext|>", false, true).unwrap(), vec![0]);
    assert!(tok.is_eog(0) && tok.is_control(0));
    assert_eq!(tok.decode(&[id("ab"), id("Ġab"), 0]), "ab ab");
    // gpt-2 pre-tokenizer does not add BOS.
    assert_eq!(tok.encode("a", true, false).unwrap(), vec![id("a")]);
}

#[test]
fn tiny_spm_merges_by_score_with_byte_fallback() {
    let tok = Tokenizer::from_metadata(&spm_md()).unwrap();
    let id = |t: &str| tok.find_token(t).unwrap();
    // add_space_prefix defaults to true for SentencePiece; BOS is added by default.
    assert_eq!(tok.encode("hi", true, false).unwrap(), vec![1, id("▁hi")]);
    assert_eq!(tok.encode("hi x", false, false).unwrap(), vec![id("▁hi"), id("▁"), id("<0x78>")]);
    // As llama_detokenize: the prefix space is stripped from the first token only, so a leading
    // BOS keeps it.
    assert_eq!(tok.decode(&tok.encode("hi x", false, false).unwrap()), "hi x");
    assert_eq!(tok.decode(&tok.encode("hi x", true, false).unwrap()), " hi x");
    assert_eq!(tok.decode(&[id("▁hi")]), "hi");
    let mut md = spm_md();
    md.insert("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false));
    md.insert("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
    let tok = Tokenizer::from_metadata(&md).unwrap();
    assert_eq!(tok.encode("hi", true, false).unwrap(), vec![id("hi")]);
    assert_eq!(tok.encode("é", false, false).unwrap(), vec![id("<0xC3>"), id("<0xA9>")]);
}

#[test]
fn missing_vocabulary_is_an_error() {
    let mut md = bpe_md();
    md.insert("tokenizer.ggml.tokens", MetaValue::U32(3));
    assert!(matches!(err(&md), Error::BadMetadata { .. }));
    let mut md2 = Metadata::new();
    md2.insert("tokenizer.ggml.model", MetaValue::Str("llama".into()));
    assert!(matches!(err(&md2), Error::MissingMetadata(k) if k == "tokenizer.ggml.tokens"));
    let mut md3 = spm_md();
    md3.insert("tokenizer.ggml.tokens", strs(&[]));
    assert!(matches!(err(&md3), Error::BadMetadata { .. }));
    assert!(matches!(err(&Metadata::new()), Error::MissingMetadata(k) if k == "tokenizer.ggml.model"));
}

#[test]
fn bad_merges_are_errors() {
    let mut md = bpe_md();
    md.insert("tokenizer.ggml.merges", strs(&["a b", "x y"]));
    let e = err(&md);
    assert!(matches!(&e, Error::Tokenizer(m) if m.contains("merge 1") && m.contains("\"x\"")), "{e}");
    md.insert("tokenizer.ggml.merges", strs(&["ab"]));
    assert!(matches!(err(&md), Error::Tokenizer(_)));
    md.insert("tokenizer.ggml.merges", MetaValue::Array(MetaArray::U32(vec![1, 2])));
    assert!(matches!(err(&md), Error::BadMetadata { .. }));
    let md = bpe_md();
    let mut without = Metadata::new();
    for (k, v) in md.iter() {
        if k != "tokenizer.ggml.merges" {
            without.insert(k.clone(), v.clone());
        }
    }
    assert!(matches!(err(&without), Error::MissingMetadata(k) if k == "tokenizer.ggml.merges"));
}

#[test]
fn other_bad_metadata_is_an_error() {
    let mut md = bpe_md();
    md.insert("tokenizer.ggml.pre", MetaValue::Str("no-such-pre".into()));
    assert!(matches!(err(&md), Error::Tokenizer(m) if m.contains("no-such-pre")));
    let mut md = bpe_md();
    md.insert("tokenizer.ggml.model", MetaValue::Str("t5".into()));
    assert!(matches!(err(&md), Error::Tokenizer(m) if m.contains("t5")));
    let mut md = bpe_md();
    md.insert("tokenizer.ggml.tokens", strs(&["a", "b", "a"]));
    assert!(matches!(err(&md), Error::BadMetadata { .. } | Error::Tokenizer(_)));
    let mut md = spm_md();
    md.insert("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(vec![0.0; 3])));
    assert!(matches!(err(&md), Error::BadMetadata { .. }));
    let mut md = spm_md();
    md.insert("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::Str(vec![])));
    assert!(matches!(err(&md), Error::BadMetadata { .. }));
    // add_bos without any BOS token (chatglm's pre-tokenizer has none by default).
    let mut md = bpe_md();
    md.insert("tokenizer.ggml.pre", MetaValue::Str("chatglm-bpe".into()));
    md.insert("tokenizer.ggml.bos_token_id", MetaValue::U32(1000));
    md.insert("tokenizer.ggml.add_bos_token", MetaValue::Bool(true));
    assert!(matches!(err(&md), Error::Tokenizer(m) if m.contains("BOS")));
}

#[test]
fn spm_without_byte_tokens_falls_back_to_unk() {
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", MetaValue::Str("llama".into()));
    md.insert("tokenizer.ggml.tokens", strs(&["<unk>", "<s>", "</s>", "▁a"]));
    let tok = Tokenizer::from_metadata(&md).unwrap();
    // "▁" is no token: each of its three bytes, and "b", becomes <unk>.
    assert_eq!(tok.encode("a b", false, false).unwrap(), vec![3, 0, 0, 0, 0]);
}

#[test]
fn control_looking_tokens_become_control() {
    let mut md = bpe_md();
    md.insert(
        "tokenizer.ggml.tokens",
        strs(&[
            "<|endoftext|>",
            "a",
            "b",
            "c",
            "ab",
            "abc",
            "Ġ",
            "Ġab",
            "!",
            "<fim_prefix>",
            "<|im_end|>",
            "<unused0>",
        ]),
    );
    md.insert(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(vec![3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3])),
    );
    let tok = Tokenizer::from_metadata(&md).unwrap();
    let fim = tok.find_token("<fim_prefix>").unwrap();
    let im_end = tok.find_token("<|im_end|>").unwrap();
    assert!(tok.is_control(fim) && !tok.is_eog(fim));
    assert!(tok.is_control(im_end) && tok.is_eog(im_end));
    assert_eq!(tok.token_bytes(im_end), b"");
    // Now a control token, so it is parsed only with parse_special.
    assert_eq!(tok.encode("<|im_end|>", false, true).unwrap(), vec![im_end]);
    assert_ne!(tok.encode("<|im_end|>", false, false).unwrap(), vec![im_end]);
    // Control tokens named "unused" are still parsed as specials (llama.cpp does too).
    assert_eq!(tok.encode("<unused0>", false, true).unwrap(), vec![11]);
}
