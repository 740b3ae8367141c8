//! wick's tokenizers against llama.cpp on real vocabularies. The reference ids come from
//! `tests/scripts/make_tokenizer_refs.py` (llama-cpp-python) and live in
//! `tests/data/tokenizer_refs.json`.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use std::time::Instant;

use serde_json::Value;
use wick::gguf::MetaValue;
use wick::tokenizer::{StreamDecoder, Tokenizer};

fn refs() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tokenizer_refs.json");
    let text = std::fs::read_to_string(path).expect("tests/data/tokenizer_refs.json is missing");
    serde_json::from_str(&text).expect("tokenizer_refs.json is not valid JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id list").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn bytes(v: &Value) -> Vec<u8> {
    v.as_array().expect("byte list").iter().map(|x| x.as_u64().expect("byte") as u8).collect()
}

fn load(name: &str, r: &Value) -> Tokenizer {
    let file = r["models"][name]["file"].as_str().expect("file");
    let mut md = support::models::read_metadata(&support::models::model_path(file));
    // Variants: the same vocabulary with some metadata replaced (another pre-tokenizer, flags).
    if let Some(overrides) = r["models"][name]["overrides"].as_object() {
        for (key, v) in overrides {
            let v = match v {
                Value::Bool(b) => MetaValue::Bool(*b),
                Value::String(s) => MetaValue::Str(s.clone()),
                other => panic!("unexpected override {key} = {other}"),
            };
            md.insert(key.clone(), v);
        }
    }
    let t0 = Instant::now();
    let tok = Tokenizer::from_metadata(&md).expect("tokenizer builds");
    let dt = t0.elapsed();
    eprintln!("{name}: built a {}-token tokenizer in {dt:?}", tok.n_vocab());
    assert!(dt.as_secs_f64() < 1.0, "building the {name} tokenizer took {dt:?}");
    tok
}

fn show(tok: &Tokenizer, ids: &[u32]) -> String {
    let parts: Vec<String> =
        ids.iter().map(|&i| format!("{i}:{:?}", tok.token_text(i).unwrap_or("?"))).collect();
    parts.join(" ")
}

/// Compare every corpus entry in every mode; panic listing the first differences.
fn check_model(name: &str) {
    let failures = model_failures(name, &refs());
    if !failures.is_empty() {
        panic!(
            "{} mismatches against llama.cpp; first ones:\n{}",
            failures.len(),
            failures[..failures.len().min(5)].join("\n")
        );
    }
}

fn model_failures(name: &str, r: &Value) -> Vec<String> {
    let tok = load(name, r);
    let m = &r["models"][name];
    assert_eq!(tok.n_vocab() as u64, m["n_vocab"].as_u64().unwrap());
    let opt = |v: &Value| v.as_i64().filter(|&x| x >= 0).map(|x| x as u32);
    assert_eq!(tok.bos_id(), opt(&m["bos"]), "bos");
    assert_eq!(tok.eos_id(), opt(&m["eos"]), "eos");
    let eog_ref = ids(&m["eog"]);
    let eog: Vec<u32> = (0..tok.n_vocab() as u32).filter(|&i| tok.is_eog(i)).collect();
    assert_eq!(eog, eog_ref, "end-of-generation tokens");

    let entries = m["entries"].as_array().unwrap();
    let mut failures = Vec::new();
    let t0 = Instant::now();
    for (i, e) in entries.iter().enumerate() {
        let text = e["text"].as_str().unwrap();
        for (mode, key, add, special) in [
            ("add_special, !parse_special", "ids", true, false),
            ("add_special, parse_special", "ids_special", true, true),
            ("!add_special, !parse_special", "ids_no_bos", false, false),
        ] {
            let want = ids(&e[key]);
            let got = tok.encode(text, add, special).expect("encode");
            if got != want {
                failures.push(format!(
                    "{name} entry {i} ({mode}) {text:?}\n  llama.cpp: {want:?}\n  wick:      {got:?}\n  llama.cpp: {}\n  wick:      {}",
                    show(&tok, &want),
                    show(&tok, &got)
                ));
            }
        }
        let want_detok = bytes(&e["detok"]);
        let got_detok = tok.decode(&ids(&e["ids"]));
        if got_detok.as_bytes() != want_detok.as_slice() {
            failures.push(format!(
                "{name} entry {i} decode {text:?}\n  llama.cpp: {:?}\n  wick:      {got_detok:?}",
                String::from_utf8_lossy(&want_detok)
            ));
        }
    }
    eprintln!("{name}: encoded {} entries x 3 modes in {:?}", entries.len(), t0.elapsed());
    for (id, piece) in m["pieces"].as_object().unwrap() {
        let id: u32 = id.parse().unwrap();
        let want = bytes(piece);
        if tok.token_bytes(id) != want.as_slice() {
            failures.push(format!(
                "{name} token {id} {:?}: piece llama.cpp {want:?}, wick {:?}",
                tok.token_text(id),
                tok.token_bytes(id)
            ));
        }
    }
    failures
}

#[test]
fn smollm2_bpe_matches_llamacpp() {
    check_model("smollm2");
}

#[test]
fn gemma3_spm_matches_llamacpp() {
    check_model("gemma3");
}

/// The real vocabularies with metadata replaced: other pre-tokenizers on SmolLM2's vocabulary,
/// and other BOS/EOS/space-prefix flags (PRE_VARIANTS and FLAG_VARIANTS in the script).
#[test]
fn variants_match_llamacpp() {
    let r = refs();
    let names: Vec<String> = r["models"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, m)| !m["overrides"].is_null())
        .map(|(k, _)| k.clone())
        .collect();
    assert!(names.len() >= 12, "expected variants in the refs, found {names:?}");
    let mut report = Vec::new();
    for name in &names {
        let f = model_failures(name, &r);
        if !f.is_empty() {
            report.push(format!("{name}: {} mismatches, first:\n{}", f.len(), f[0]));
        }
    }
    assert!(
        report.is_empty(),
        "{} of {} variants differ from llama.cpp:\n{}",
        report.len(),
        names.len(),
        report.join("\n")
    );
}

/// Push `ids` through a StreamDecoder; returns every chunk.
fn stream(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    let mut d = StreamDecoder::new(tok);
    let mut chunks: Vec<String> = ids.iter().map(|&i| d.push(i)).collect();
    chunks.push(d.flush());
    chunks
}

#[test]
fn stream_decoder_holds_split_emoji() {
    let r = refs();
    let emoji = "👨‍👩‍👧";
    // Gemma: the emoji spelled as <0xXX> byte-fallback tokens.
    let gemma = load("gemma3", &r);
    let byte_ids: Vec<u32> =
        emoji.bytes().map(|b| gemma.find_token(&format!("<0x{b:02X}>")).expect("byte token")).collect();
    let chunks = stream(&gemma, &byte_ids);
    assert_eq!(chunks.concat(), emoji);
    // Each character comes out whole, on the token that completes it.
    assert_eq!(&chunks[..4], &["", "", "", "👨"]);
    assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
    assert_eq!(gemma.decode(&byte_ids), emoji);

    // SmolLM2: byte-level BPE splits emoji across tokens.
    let smol = load("smollm2", &r);
    let text = "ok 🦀🎉 done 中文";
    let ids = smol.encode(text, false, false).unwrap();
    let chunks = stream(&smol, &ids);
    assert_eq!(chunks.concat(), text);
    assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
    // A dangling partial sequence is flushed lossily rather than lost.
    let mut d = StreamDecoder::new(&gemma);
    assert_eq!(d.push(gemma.find_token("<0xF0>").unwrap()), "");
    assert_eq!(d.flush(), "\u{FFFD}");
    // Control tokens render as nothing.
    let bos = gemma.bos_id().unwrap();
    assert!(gemma.is_control(bos));
    assert_eq!(StreamDecoder::new(&gemma).push(bos), "");
}

#[test]
fn round_trips_and_special_tokens() {
    let r = refs();
    let smol = load("smollm2", &r);
    let gemma = load("gemma3", &r);
    for text in ["Hello, world!", "  indented\n\tcode()\n", "naïve 日本語 🎉", ""] {
        for tok in [&smol, &gemma] {
            let ids = tok.encode(text, false, false).unwrap();
            assert_eq!(tok.decode(&ids), text);
        }
    }
    let im_start = smol.find_token("<|im_start|>").unwrap();
    let im_end = smol.find_token("<|im_end|>").unwrap();
    assert_eq!(smol.encode("<|im_start|>", false, true).unwrap(), vec![im_start]);
    assert_ne!(smol.encode("<|im_start|>", false, false).unwrap(), vec![im_start]);
    assert!(smol.is_eog(im_end) && smol.is_control(im_end));
    assert!(smol.is_eog(smol.find_token("<|endoftext|>").unwrap()));
    let sot = gemma.find_token("<start_of_turn>").unwrap();
    let eot = gemma.find_token("<end_of_turn>").unwrap();
    assert_eq!(gemma.encode("<start_of_turn>", false, true).unwrap(), vec![sot]);
    assert!(gemma.is_eog(eot) && !gemma.is_eog(sot));
    assert_eq!(gemma.encode("", true, false).unwrap(), vec![gemma.bos_id().unwrap()]);
    assert_eq!(smol.encode("", true, false).unwrap(), Vec::<u32>::new());
    // Out-of-range ids are harmless.
    assert_eq!(smol.token_bytes(u32::MAX), b"");
    assert_eq!(smol.token_text(u32::MAX), None);
    assert!(!smol.is_eog(u32::MAX) && !smol.is_control(u32::MAX));
    assert_eq!(smol.decode(&[u32::MAX, 0]), "");
}

/// Long and pathological inputs: no errors, no panics, reasonable time, lossless round trips.
#[test]
fn long_inputs() {
    let r = refs();
    let smol = load("smollm2", &r);
    let gemma = load("gemma3", &r);
    let corpus: Vec<String> =
        r["corpus"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    // (Without U+2581: SentencePiece reads it as a space, so it cannot round-trip.)
    let mixed = corpus.concat().replace('\u{2581}', "_").repeat(20);
    let cases = [
        ("mixed corpus x20", mixed),
        ("50k spaces then a word", " ".repeat(50_000) + "word"),
        ("50k newlines and tabs", "\n\t".repeat(25_000)),
        ("100k letters", "a".repeat(100_000)),
        ("30k digits", "7".repeat(30_000)),
        ("20k emoji", "🎉".repeat(20_000)),
        ("special tokens x5k", "<|im_start|><start_of_turn>".repeat(5_000)),
    ];
    for (what, text) in &cases {
        for (name, tok) in [("smollm2", &smol), ("gemma3", &gemma)] {
            for special in [false, true] {
                let t0 = Instant::now();
                let ids = tok.encode(text, false, special).unwrap_or_else(|e| panic!("{name} {what}: {e}"));
                let dt = t0.elapsed();
                eprintln!(
                    "{name} {what} (parse_special={special}): {} bytes -> {} tokens in {dt:?}",
                    text.len(),
                    ids.len()
                );
                assert!(dt.as_secs_f64() < 5.0, "{name} {what}: {dt:?}");
                if !special {
                    assert!(tok.decode(&ids) == *text, "{name} {what}: round trip differs");
                }
            }
        }
    }
}
