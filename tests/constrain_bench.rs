//! What a constraint costs per generated token on the host: llguidance's mask over the whole
//! vocabulary plus applying it to a row of logits, and advancing past the token.
//!
//! Run: `cargo test --release --test constrain_bench -- --ignored --nocapture`
//! (SmolLM2's 49,152-token vocabulary; Gemma 3's 262,144 where `bash .ci/get-models` put it;
//! more vocabularies from `WICK_VOCABS`, GGUF paths separated by `:`, such as llama.cpp's
//! `models/ggml-vocab-llama-bpe.gguf` (Llama 3, 128,256) and `ggml-vocab-qwen2.gguf` (151,936)).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use std::time::Instant;

use serde_json::json;
use support::models::{models_dir, read_metadata, GEMMA3, SMOLLM2};
use wick::constrain::ConstraintCompiler;
use wick::tokenizer::Tokenizer;
use wick::Constraint;

/// The constraints timed, each with a document in its language that the walk writes.
fn cases() -> Vec<(&'static str, Constraint, &'static str)> {
    let person = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 3},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": false}},
        "required": ["name", "age", "email", "tags", "address"], "additionalProperties": false});
    vec![
        (
            "json_object",
            Constraint::JsonObject,
            r#"{"title": "A walk in the park", "count": 12, "ok": true, "items": [1, 2.5, "three", null], "nested": {"deep": {"er": "value with spaces and punctuation, too!"}}}"#,
        ),
        (
            "schema (person)",
            Constraint::JsonSchema(person),
            r#"{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["admin", "user"], "address": {"city": "London", "zip": "12345"}}"#,
        ),
        (
            "lark (list)",
            Constraint::Lark(
                "start: \"Colours: \" colour (\", \" colour){1,9} \".\"\ncolour: /[a-z]{3,12}/\n".into(),
            ),
            "Colours: red, green, blue, yellow, purple, orange, magenta, cyan.",
        ),
    ]
}

#[test]
#[ignore]
fn mask_cost_per_token() {
    let extra = std::env::var("WICK_VOCABS").unwrap_or_default();
    let paths = [SMOLLM2, GEMMA3]
        .into_iter()
        .map(|m| models_dir().join(m))
        .chain(extra.split(':').filter(|p| !p.is_empty()).map(std::path::PathBuf::from));
    for path in paths {
        let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if !path.exists() {
            eprintln!("SKIPPED {name}: not downloaded");
            continue;
        }
        let tok = Tokenizer::from_metadata(&read_metadata(&path)).expect("tokenizer");
        let t0 = Instant::now();
        let compiler = ConstraintCompiler::new(&tok).expect("compiler");
        eprintln!("\n{name}: {} tokens; trie and slicer built in {:.0} ms", tok.n_vocab(), ms(t0));
        eprintln!("| constraint | compile ms | tokens | mask mean µs | p50 µs | max µs | accept mean µs |");
        eprintln!("|---|---|---|---|---|---|---|");
        for (label, c, doc) in cases() {
            // Twice, each with a fresh guide (as two requests): the machine is shared, so
            // two runs show how much of a difference is noise.
            for pass in 0..2 {
                let t0 = Instant::now();
                let mut guide = compiler.guide(&c).expect("compiles");
                let compile = ms(t0);
                let mut logits = vec![0.0f32; tok.n_vocab()];
                let (mut masks, mut accepts) = (Vec::new(), Vec::new());
                let mut rest = doc.as_bytes();
                while !rest.is_empty() {
                    logits.iter_mut().for_each(|l| *l = 0.0);
                    let t = Instant::now();
                    guide.mask(&mut logits).expect("mask");
                    masks.push(t.elapsed().as_secs_f64() * 1e6);
                    let id = longest_allowed(&tok, &logits, rest)
                        .unwrap_or_else(|| panic!("{label}: stuck at {:?}", String::from_utf8_lossy(rest)));
                    let t = Instant::now();
                    guide.accept(id).expect("accept");
                    accepts.push(t.elapsed().as_secs_f64() * 1e6);
                    rest = &rest[tok.token_bytes(id).len()..];
                }
                let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
                let mut sorted = masks.clone();
                sorted.sort_by(f64::total_cmp);
                eprintln!(
                    "| {label}{} | {compile:.1} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
                    if pass == 0 { ", run 1" } else { ", run 2" },
                    masks.len(),
                    mean(&masks),
                    sorted[sorted.len() / 2],
                    sorted[sorted.len() - 1],
                    mean(&accepts)
                );
            }
        }
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The allowed token (finite logit) whose bytes are the longest prefix of `rest`.
fn longest_allowed(tok: &Tokenizer, logits: &[f32], rest: &[u8]) -> Option<u32> {
    let mut best: Option<(usize, u32)> = None;
    for (id, l) in logits.iter().enumerate() {
        if !l.is_finite() {
            continue;
        }
        let b = tok.token_bytes(id as u32);
        if !b.is_empty() && rest.starts_with(b) && best.is_none_or(|(n, _)| b.len() > n) {
            best = Some((b.len(), id as u32));
        }
    }
    best.map(|(_, id)| id)
}
