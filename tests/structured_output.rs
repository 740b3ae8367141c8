//! Structured output on the CPU executor with the real SmolLM2: every generation under a JSON
//! schema parses and validates against that schema (checked by the `jsonschema` crate, formats
//! included), a Lark grammar's output is in its language, invalid constraints fail before any
//! token, and logprobs are the log-softmax of the raw logits.
#![cfg(not(target_arch = "wasm32"))]

mod support;

use serde_json::{json, Value};
use support::block_on;
use support::chat::{chat_prompt, generate};
use support::models::{load_cpu, SMOLLM2};
use support::schemas::schemas;
use wick::exec::Readback;
use wick::sampling::SamplingParams;
use wick::{Constraint, Error, FinishReason, GenerateOptions, Session, SessionOptions};

/// The system message of every prompt.
const SYSTEM: &str = "You answer with JSON only.";

/// The sampling of generation `i`: greedy first (the device-argmax fallback path), then
/// llama.cpp's default chain with different seeds.
fn sampling(i: u64) -> SamplingParams {
    if i == 0 {
        SamplingParams::greedy()
    } else {
        SamplingParams { seed: 1000 + i, ..SamplingParams::default() }
    }
}

/// How many generations each schema gets.
const SAMPLES: u64 = 3;

#[test]
fn json_schema_outputs_validate() {
    let model = load_cpu(SMOLLM2);
    let mut session = model.session(SessionOptions { n_ctx: 512, ..Default::default() }).expect("session");
    let mut failures = Vec::new();
    let cases = schemas();
    for (what, schema) in &cases {
        let validator =
            jsonschema::options().should_validate_formats(true).build(schema).expect("a valid schema");
        let prompt = chat_prompt(&model, SYSTEM, &format!("Give me {what}."));
        for i in 0..SAMPLES {
            let opts = GenerateOptions {
                max_tokens: 160,
                sampling: sampling(i),
                constraint: Some(Constraint::JsonSchema(schema.clone())),
                ..Default::default()
            };
            let (text, finish) = generate(&mut session, &prompt, opts);
            let verdict = match serde_json::from_str::<Value>(&text) {
                _ if finish != FinishReason::Eog => Err(format!("finished with {finish:?}")),
                Err(e) => Err(format!("not JSON: {e}")),
                Ok(v) => match validator.iter_errors(&v).map(|e| e.to_string()).collect::<Vec<_>>() {
                    errs if errs.is_empty() => Ok(()),
                    errs => Err(errs.join("; ")),
                },
            };
            eprintln!("{what} #{i}: {text}");
            if let Err(e) = verdict {
                failures.push(format!("{what} #{i}: {e}\n  output: {text}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} outputs failed:\n{}",
        failures.len(),
        cases.len() * SAMPLES as usize,
        failures.join("\n")
    );
}

/// Greedy decoding under a constraint: the executor's argmax, applying the constraint's token
/// mask, picks the tokens that the host's masking of the logits picks.
#[test]
fn constrained_greedy_picks_on_the_executor_as_on_the_host() {
    support::chat::constrained_greedy_device_equals_host(&load_cpu(SMOLLM2), 64);
}

#[test]
fn json_object_and_response_format() {
    let model = load_cpu(SMOLLM2);
    let mut session = model.session(SessionOptions { n_ctx: 512, ..Default::default() }).expect("session");
    let prompt = chat_prompt(&model, SYSTEM, "Describe a cat in JSON with at most three short fields.");
    let rf = json!({"type": "json_object"});
    let c = Constraint::from_response_format(&rf).expect("valid").expect("a constraint");
    assert_eq!(c, Constraint::JsonObject);
    for i in 0..SAMPLES {
        let opts = GenerateOptions {
            max_tokens: 200,
            sampling: sampling(i),
            constraint: Some(c.clone()),
            ..Default::default()
        };
        let (text, finish) = generate(&mut session, &prompt, opts);
        eprintln!("json_object #{i}: {text}");
        // A free-form object may run past the budget; what it wrote must still be a prefix of
        // one, and a finished one must parse as an object.
        if finish == FinishReason::Eog {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
            assert!(v.is_object(), "not an object: {text}");
        } else {
            assert!(text.starts_with('{'), "{text}");
        }
    }
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false});
    let rf =
        json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": schema}});
    assert_eq!(Constraint::from_response_format(&rf).unwrap(), Some(Constraint::JsonSchema(schema)));
    assert_eq!(Constraint::from_response_format(&json!({"type": "text"})).unwrap(), None);
    for bad in [
        json!({}),
        json!({"type": "xml"}),
        json!({"type": "json_schema"}),
        json!({"type": "json_schema", "json_schema": {"schema": 3}}),
    ] {
        assert!(matches!(Constraint::from_response_format(&bad), Err(Error::Grammar(_))), "{bad}");
    }
}

/// A Lark grammar: a list of two to four colours, then a full stop.
#[test]
fn lark_grammar_output_is_in_the_language() {
    let model = load_cpu(SMOLLM2);
    let mut session = model.session(SessionOptions { n_ctx: 512, ..Default::default() }).expect("session");
    let grammar = r#"
start: "Colours: " colour (", " colour){1,3} "."
colour: "red" | "green" | "blue" | "yellow" | "purple"
"#;
    let prompt = chat_prompt(&model, SYSTEM, "Name a few colours.");
    for i in 0..SAMPLES {
        let opts = GenerateOptions {
            max_tokens: 40,
            sampling: sampling(i),
            constraint: Some(Constraint::Lark(grammar.into())),
            ..Default::default()
        };
        let (text, finish) = generate(&mut session, &prompt, opts);
        eprintln!("lark #{i}: {text}");
        assert_eq!(finish, FinishReason::Eog, "{text}");
        let body = text
            .strip_prefix("Colours: ")
            .and_then(|t| t.strip_suffix('.'))
            .unwrap_or_else(|| panic!("{text}"));
        let items: Vec<&str> = body.split(", ").collect();
        assert!((2..=4).contains(&items.len()), "{text}");
        for c in items {
            assert!(["red", "green", "blue", "yellow", "purple"].contains(&c), "{c} in {text}");
        }
    }
}

/// llama.cpp's example GBNF grammars (tests/data/gbnf, translated to Lark by wick) constrain
/// generation: each output, checked by plain code rather than by the grammar, is in the language.
#[test]
fn gbnf_example_grammars_constrain_generation() {
    let model = load_cpu(SMOLLM2);
    let mut session = model.session(SessionOptions { n_ctx: 512, ..Default::default() }).expect("session");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gbnf");
    let grammar = |name: &str| std::fs::read_to_string(dir.join(name)).expect("grammar file");
    // Each check takes the text and whether it is complete (else cut at max_tokens: a prefix).
    type Check = fn(&str, bool) -> Result<(), String>;
    let json_ok: Check = |t, complete| match complete {
        true => serde_json::from_str::<Value>(t).map(|_| ()).map_err(|e| e.to_string()),
        false if t.starts_with('{') => Ok(()),
        false => Err("does not open an object".into()),
    };
    let list_ok: Check = |t, complete| {
        let mut lines: Vec<&str> = t.split('\n').collect();
        let last = lines.pop().unwrap_or_default();
        if complete && !last.is_empty() {
            return Err("no final newline".into());
        }
        if !"- ".starts_with(last) && !last.starts_with("- ") {
            return Err(format!("the cut line {last:?} is not an item"));
        }
        match lines.into_iter().find(|l| l.len() < 3 || !l.starts_with("- ")) {
            Some(l) => Err(format!("line {l:?} is not an item")),
            None => Ok(()),
        }
    };
    let arithmetic_ok: Check = |t, complete| {
        if complete && (!t.ends_with('\n') || !t.contains('=')) {
            return Err("not an equation ending in a newline".into());
        }
        match t
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_+-*/()= \t\n".contains(*c)))
        {
            Some(c) => Err(format!("character {c:?}")),
            None => Ok(()),
        }
    };
    let cases: [(&str, &str, Check); 3] = [
        ("json.gbnf", "Describe a cat as a JSON object.", json_ok),
        ("list.gbnf", "List three fruits.", list_ok),
        ("arithmetic.gbnf", "Write a simple equation.", arithmetic_ok),
    ];
    for (file, ask, check) in cases {
        let prompt = chat_prompt(&model, SYSTEM, ask);
        let c = Constraint::grammar_text(grammar(file));
        assert!(matches!(c, Constraint::Gbnf(_)), "{file} is told apart as GBNF");
        for i in 0..SAMPLES {
            let opts = GenerateOptions {
                max_tokens: 160,
                sampling: sampling(i),
                constraint: Some(c.clone()),
                ..Default::default()
            };
            let (text, finish) = generate(&mut session, &prompt, opts);
            eprintln!("{file} #{i} ({finish:?}): {text:?}");
            assert!(matches!(finish, FinishReason::Eog | FinishReason::Length), "{file} #{i}: {finish:?}");
            check(&text, finish == FinishReason::Eog)
                .unwrap_or_else(|e| panic!("{file} #{i}: {e}: {text:?}"));
        }
    }
}

/// Bad schemas and grammars fail `generate` with a constraint error, before any step runs.
#[test]
fn invalid_constraints_fail_before_generating() {
    let model = load_cpu(SMOLLM2);
    let mut session = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).expect("session");
    let prompt = chat_prompt(&model, SYSTEM, "Hi");
    let bad = [
        (Constraint::JsonSchema(json!(5)), "object"),
        (Constraint::JsonSchema(json!(false)), "false"),
        (Constraint::JsonSchema(json!({"type": "strin"})), "strin"),
        (Constraint::JsonSchema(json!({"$ref": "#/$defs/missing"})), "missing"),
        (Constraint::JsonSchema(json!({"$ref": "https://example.com/schema.json"})), "example.com"),
        (Constraint::JsonSchema(json!({"type": "array", "uniqueItems": true})), "uniqueItems"),
        (Constraint::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 1})), ""),
        (Constraint::Lark("start: (".into()), ""),
        (Constraint::Lark("   ".into()), "empty"),
        (Constraint::Lark("start: foo".into()), "foo"),
        (Constraint::Gbnf("root ::= (".into()), "GBNF"),
        (Constraint::Gbnf("root ::= item".into()), "item"),
    ];
    for (c, mentions) in bad {
        let err = match session
            .generate(&prompt, GenerateOptions { constraint: Some(c.clone()), ..Default::default() })
        {
            Ok(_) => panic!("{c:?} was accepted"),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert!(matches!(err, Error::Grammar(_)), "{c:?}: {msg}");
        assert!(msg.contains(mentions), "{c:?}: the error does not mention {mentions:?}: {msg}");
        assert!(session.tokens().is_empty(), "{c:?}: a step ran");
    }
    // too many alternatives
    let opts = GenerateOptions { logprobs: Some(21), ..Default::default() };
    assert!(matches!(session.generate(&prompt, opts), Err(Error::InvalidArgument(_))));
}

/// Log-softmax of a row in f64, as the reference.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l)) as f64;
    let z = max + row.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
    row.iter().map(|&l| l as f64 - z).collect()
}

#[test]
fn logprobs_are_the_raw_log_softmax() {
    let model = load_cpu(SMOLLM2);
    let prompt = chat_prompt(&model, SYSTEM, "Say hello.");
    // The reference: the prompt's last row of logits, straight from the model.
    let mut s0 = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).expect("session");
    let row = block_on(s0.eval(&prompt, Readback::LastLogits)).expect("eval").logits;
    drop(s0);
    let want = log_softmax(&row);
    let mut session = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).expect("session");
    for (i, (sampling, constraint)) in [
        (SamplingParams::greedy(), None),
        (SamplingParams { seed: 7, ..SamplingParams::default() }, None),
        // Constrained: the reported logprobs are still the model's, before the mask.
        (SamplingParams { seed: 9, ..SamplingParams::default() }, Some(Constraint::JsonObject)),
    ]
    .into_iter()
    .enumerate()
    {
        let greedy = sampling.temperature <= 0.0;
        let opts =
            GenerateOptions { max_tokens: 8, sampling, constraint, logprobs: Some(5), ..Default::default() };
        let toks: Vec<wick::Token> = block_on(async {
            let mut gen = session.generate(&prompt, opts).expect("generate");
            let mut v = Vec::new();
            while let Some(t) = gen.next().await {
                v.push(t.expect("token"));
            }
            v
        });
        let with_ids: Vec<&wick::Token> = toks.iter().filter(|t| t.id.is_some()).collect();
        assert!(!with_ids.is_empty(), "case {i}: no tokens");
        for t in &with_ids {
            let lp = t.logprobs.as_ref().expect("logprobs asked for");
            assert_eq!(Some(lp.token.id), t.id);
            assert_eq!(lp.top.len(), 5);
            assert!(
                lp.top.windows(2).all(|w| w[0].logprob >= w[1].logprob),
                "case {i}: not sorted: {:?}",
                lp.top
            );
            let mass: f64 = lp.top.iter().map(|t| (t.logprob as f64).exp()).sum();
            assert!(mass <= 1.0 + 1e-5, "case {i}: top mass {mass}");
            assert!(lp.token.logprob <= 0.0 && lp.top.iter().all(|t| t.logprob <= 0.0));
            assert!(lp.token.logprob <= lp.top[0].logprob + 1e-6);
            if greedy {
                assert_eq!(lp.top[0].id, lp.token.id, "case {i}: greedy did not take the most likely token");
            }
        }
        // The first token's numbers against the direct log-softmax of the prompt's logits.
        let first = with_ids[0].logprobs.as_ref().unwrap();
        let id = first.token.id as usize;
        assert!(
            (first.token.logprob as f64 - want[id]).abs() < 1e-4,
            "case {i}: {} vs {}",
            first.token.logprob,
            want[id]
        );
        let mut order: Vec<usize> = (0..want.len()).collect();
        order.sort_by(|&a, &b| want[b].total_cmp(&want[a]).then(a.cmp(&b)));
        for (k, t) in first.top.iter().enumerate() {
            assert_eq!(t.id as usize, order[k], "case {i}: top {k}");
            assert!((t.logprob as f64 - want[order[k]]).abs() < 1e-4);
        }
    }
    // Without the option, no logprobs.
    block_on(async {
        let mut gen =
            session.generate(&prompt, GenerateOptions { max_tokens: 2, ..Default::default() }).unwrap();
        while let Some(t) = gen.next().await {
            assert_eq!(t.expect("token").logprobs, None);
        }
    });
}

/// `logit_bias`: -100 bans the greedy choice, +100 forces a token; out-of-range biases and
/// token ids are errors before any step.
#[test]
fn logit_bias_bans_and_forces() {
    let model = load_cpu(SMOLLM2);
    let mut session = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).expect("session");
    let prompt = chat_prompt(&model, SYSTEM, "Say hello.");
    let first = |session: &mut Session<'_>, bias: Vec<(u32, f32)>| {
        block_on(async {
            let opts = GenerateOptions {
                max_tokens: 1,
                sampling: SamplingParams::greedy(),
                logit_bias: bias,
                ..Default::default()
            };
            let mut gen = session.generate(&prompt, opts).expect("generate");
            let mut id = None;
            while let Some(t) = gen.next().await {
                id = id.or(t.expect("token").id);
            }
            id.expect("a token")
        })
    };
    let plain = first(&mut session, vec![]);
    let banned = first(&mut session, vec![(plain, -100.0)]);
    assert_ne!(banned, plain, "a -100 bias bans the greedy token");
    let forced = first(&mut session, vec![(1234, 100.0)]);
    assert_eq!(forced, 1234, "a +100 bias forces the token");
    let n_vocab = model.n_vocab() as u32;
    for bad in [vec![(1, 101.0)], vec![(1, f32::NAN)], vec![(n_vocab, 1.0)]] {
        let opts = GenerateOptions { logit_bias: bad.clone(), ..Default::default() };
        let err = session.generate(&prompt, opts).err().unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert!(matches!(err, Error::InvalidArgument(_)) && err.to_string().contains("logit_bias"), "{err}");
    }
}
