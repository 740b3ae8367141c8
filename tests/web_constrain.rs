//! Constrained decoding in the wasm build, in a real browser (`wasm-pack test --headless
//! --chrome`): the schemas of the native test compile here too (`$ref` included), invalid ones
//! fail the same way, and a walk through the masks of a schema writes JSON that has its shape.
#![cfg(target_arch = "wasm32")]

mod support;

use serde_json::{json, Value};
use support::schemas::schemas;
use support::Rng;
use wasm_bindgen_test::*;
use wick::constrain::ConstraintCompiler;
use wick::tokenizer::Tokenizer;
use wick::{Constraint, Error};

wasm_bindgen_test_configure!(run_in_browser);

fn compiler() -> (Tokenizer, ConstraintCompiler) {
    // A SentencePiece vocabulary with byte fallback: every byte has a token.
    let tok = Tokenizer::from_metadata(&support::web::donor(3000)).expect("tokenizer");
    let c = ConstraintCompiler::new(&tok).expect("compiler");
    (tok, c)
}

#[wasm_bindgen_test]
fn the_native_schemas_compile_in_wasm() {
    let (_, c) = compiler();
    for (what, schema) in schemas() {
        c.check(&Constraint::JsonSchema(schema)).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    c.check(&Constraint::JsonObject).expect("json_object");
    c.check(&Constraint::Lark("start: \"a\" | \"b\"".into())).expect("lark");
    for bad in [
        Constraint::JsonSchema(json!({"$ref": "#/$defs/missing"})),
        Constraint::JsonSchema(json!({"type": "array", "uniqueItems": true})),
        Constraint::Lark("start: (".into()),
    ] {
        assert!(matches!(c.check(&bad), Err(Error::Grammar(_))), "{bad:?} accepted");
    }
}

/// Random walks through the masks (llguidance's timers run on `performance.now()` here): every
/// walk that ends writes JSON with the schema's required keys.
#[wasm_bindgen_test]
fn random_walks_under_a_schema_write_its_json() {
    let (tok, c) = compiler();
    let schema = json!({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
                                        "required": ["x"], "additionalProperties": false}},
                        "type": "object", "properties": {"a": {"$ref": "#/$defs/p"}, "ok": {"type": "boolean"}},
                        "required": ["a", "ok"], "additionalProperties": false});
    let mut rng = Rng::new(3);
    let mut ended = 0;
    for _ in 0..5 {
        let Some(text) = walk(&tok, &c, &schema, &mut rng, 200, false) else { continue };
        say!("walk: {text}");
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            assert!(v["a"]["x"].is_u64() && v["ok"].is_boolean(), "{text}");
            ended += 1;
        }
    }
    assert!(ended > 0, "no walk finished");
}

/// Every schema of the native test (`tests/support/schemas.rs`, 25) in wasm: seeded random
/// walks through its masks ([`walk`], closing brackets favoured); each walk that ends must
/// write JSON that validates against the schema (the `jsonschema` crate, in wasm too), and each
/// schema must see a walk end. Seeded: the same walks every run.
#[wasm_bindgen_test]
fn every_schema_walks_to_json_that_validates() {
    let (tok, c) = compiler();
    let mut rng = Rng::new(11);
    let mut failures = Vec::new();
    for (what, schema) in schemas() {
        let validator =
            jsonschema::options().should_validate_formats(true).build(&schema).expect("a valid schema");
        let mut ended = 0;
        for _ in 0..4 {
            let Some(text) = walk(&tok, &c, &schema, &mut rng, 400, true) else { continue };
            ended += 1;
            match serde_json::from_str::<Value>(&text) {
                Err(e) => failures.push(format!("{what}: not JSON ({e}): {text}")),
                Ok(v) => {
                    let errs: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
                    if !errs.is_empty() {
                        failures.push(format!("{what}: {}: {text}", errs.join("; ")));
                    }
                }
            }
        }
        if ended == 0 {
            failures.push(format!("{what}: no walk ended in 400 tokens"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A seeded random walk of at most `steps` tokens through the masks of `schema`: any allowed
/// token, ending as soon as the end is allowed; with `favour_closers`, half the time a `}` or
/// `]` where one is allowed (open objects take any key, and a uniform walk would add keys for
/// ever). The text written, if the walk ended.
fn walk(
    tok: &Tokenizer,
    c: &ConstraintCompiler,
    schema: &Value,
    rng: &mut Rng,
    steps: usize,
    favour_closers: bool,
) -> Option<String> {
    let mut guide = c.guide(&Constraint::JsonSchema(schema.clone())).expect("compiles");
    let mut logits = vec![0.0f32; tok.n_vocab()];
    let mut text = Vec::new();
    for _ in 0..steps {
        if guide.is_finished() {
            return Some(String::from_utf8(text).expect("UTF-8"));
        }
        logits.iter_mut().for_each(|l| *l = 0.0);
        guide.mask(&mut logits).expect("mask");
        let allowed: Vec<u32> =
            (0..logits.len() as u32).filter(|&i| logits[i as usize].is_finite()).collect();
        if allowed.iter().any(|&i| tok.is_eog(i)) {
            return Some(String::from_utf8(text).expect("UTF-8"));
        }
        let closers: Vec<u32> =
            allowed.iter().copied().filter(|&i| matches!(tok.token_bytes(i), b"}" | b"]")).collect();
        let id = if favour_closers && !closers.is_empty() && rng.below(2) == 0 {
            closers[rng.below(closers.len() as u64) as usize]
        } else {
            allowed[rng.below(allowed.len() as u64) as usize]
        };
        guide.accept(id).expect("accept");
        text.extend_from_slice(tok.token_bytes(id));
    }
    None
}
