//! Generation past the end of the context (issue 18): with `GenerateOptions::context_shift`,
//! a full context keeps its first tokens, drops the older half of the rest and goes on, so a
//! generation three times the context runs to `max_tokens`; without it the generation ends
//! with `ContextFull`. By default (`ShiftMode::Rotate`) the kept blocks are re-positioned by
//! rotating their cached keys and nothing is evaluated again; the cache then differs from a
//! fresh evaluation of the same tokens (the kept tokens were computed while they saw the
//! dropped ones), so the bar is perplexity: a long text read through shifts scores within 5%
//! of reading each window afresh, and far worse when the keys are not rotated.
//! `ShiftMode::Recompute` still gives exactly a fresh session's cache. CPU executor.
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::*;
use wick::exec::Readback;
use wick::sampling::SamplingParams;
use wick::{FinishReason, GenerateOptions, Model, SessionOptions, ShiftMode};

const N_CTX: usize = 256;
const KV_BLOCK: usize = wick::exec::KV_BLOCK;

fn prompt(model: &Model) -> Vec<u32> {
    model.tokenizer().encode("Once upon a time, in a small village by the sea,", true, true).expect("encode")
}

fn opts(max_tokens: usize, context_shift: Option<usize>) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: SamplingParams::greedy(),
        ignore_eog: true,
        context_shift,
        ..Default::default()
    }
}

/// Generate 3 x N_CTX tokens greedily with shifts; returns the session's tokens, every token
/// of the conversation (prompt and generated), the shift count and the re-evaluated count.
fn long_generation(session: &mut wick::Session<'_>, prompt: &[u32]) -> (Vec<u32>, Vec<u32>, usize, usize) {
    let (history, finish, shifts, re) = block_on(async {
        let mut gen = session.generate(prompt, opts(3 * N_CTX, Some(prompt.len()))).expect("generate");
        let mut history = prompt.to_vec();
        while let Some(t) = gen.next().await {
            history.extend(t.expect("token").id);
        }
        (history, gen.finish_reason(), gen.n_context_shifts(), gen.n_shift_reevaluated())
    });
    assert_eq!(finish, Some(FinishReason::Length));
    assert_eq!(history.len(), prompt.len() + 3 * N_CTX);
    // Each shift frees at least a quarter of the context: 3 x 256 tokens need 5 or more.
    assert!(shifts >= 5, "{shifts} shifts");
    let tokens = session.tokens().to_vec();
    assert!(tokens.len() <= N_CTX);
    assert_eq!(&tokens[..prompt.len()], prompt, "the prompt stays at the start");
    (tokens, history, shifts, re)
}

/// The greedy next token after `t`.
fn next(s: &mut wick::Session<'_>, t: &[u32]) -> u32 {
    block_on(async {
        let mut gen = s.generate(t, opts(1, None)).expect("generate");
        gen.next().await.expect("a token").expect("ok").id.expect("an id")
    })
}

#[test]
fn a_generation_three_times_the_context_runs_to_the_end() {
    let model = load_cpu(SMOLLM2);
    let prompt = prompt(&model);
    let mut session = model.session(SessionOptions { n_ctx: N_CTX, ..Default::default() }).expect("session");
    let (tokens, history, shifts, re) = long_generation(&mut session, &prompt);
    // Rotated, not recomputed: no token was evaluated twice.
    assert_eq!((re, session.n_shift_reevaluated()), (0, 0), "after {shifts} shifts");
    // The kept prefix is the prompt rounded up to a whole block; the rest is the newest tokens
    // but the last one (generated, not yet evaluated): the history and the cache agree.
    let kept = prompt.len().div_ceil(KV_BLOCK) * KV_BLOCK;
    assert_eq!(&tokens[..kept], &history[..kept]);
    let tail = tokens.len() - kept;
    assert_eq!(&tokens[kept..], &history[history.len() - 1 - tail..history.len() - 1]);
    // The shifted cache goes on from where it is: the next step evaluates only the pending token.
    let with_last = [&tokens[..], &history[history.len() - 1..]].concat();
    let n_evaluated = block_on(async {
        let mut gen = session.generate(&with_last, opts(1, None)).expect("generate");
        gen.next().await.expect("a token").expect("ok");
        gen.n_prompt_evaluated()
    });
    assert_eq!(n_evaluated, 1);
    assert_eq!(session.tokens(), &with_last[..]);
}

#[test]
fn a_recomputing_shift_leaves_what_a_fresh_session_would() {
    let model = load_cpu(SMOLLM2);
    let prompt = prompt(&model);
    let mut session = model.session(SessionOptions { n_ctx: N_CTX, ..Default::default() }).expect("session");
    session.set_shift_mode(ShiftMode::Recompute);
    let (tokens, _, shifts, re) = long_generation(&mut session, &prompt);
    assert!(re >= shifts * N_CTX / 4, "{re} tokens re-evaluated in {shifts} shifts");
    // The shifted cache equals a fresh evaluation of the same tokens: both continue alike.
    let continued = next(&mut session, &tokens);
    let mut fresh = model.session(SessionOptions { n_ctx: N_CTX, ..Default::default() }).expect("session");
    assert_eq!(continued, next(&mut fresh, &tokens));
}

#[test]
fn without_a_shift_a_full_context_ends_the_generation() {
    let model = load_cpu(SMOLLM2);
    let prompt = prompt(&model);
    let mut session = model.session(SessionOptions { n_ctx: N_CTX, ..Default::default() }).expect("session");
    let (n, finish) = block_on(async {
        let mut gen = session.generate(&prompt, opts(3 * N_CTX, None)).expect("generate");
        let mut n = 0;
        while let Some(t) = gen.next().await {
            n += usize::from(t.expect("token").id.is_some());
        }
        (n, gen.finish_reason())
    });
    assert_eq!(finish, Some(FinishReason::ContextFull));
    assert_eq!(n, N_CTX - prompt.len() + 1);
}

/// Negative log-likelihood (nats) of `targets[j]` under logits row j.
fn nll(logits: &[f32], n_vocab: usize, targets: &[u32]) -> f64 {
    logits
        .chunks(n_vocab)
        .zip(targets)
        .map(|(row, &t)| {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
            let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
            lse - row[t as usize] as f64
        })
        .sum()
}

/// What reading a text through shifts scored.
struct Read {
    /// Perplexity of the tokens read after the first shift.
    ppl: f64,
    /// The same tokens' perplexity with each window (cache contents and chunk) evaluated in a
    /// fresh session; only when asked.
    fresh_ppl: Option<f64>,
    shifts: usize,
    reevaluated: usize,
}

/// Read `text` in chunks of `CHUNK` tokens through a session of N_CTX tokens that shifts
/// (keeping the first `KEEP` tokens) whenever a chunk does not fit; score each chunk's tokens
/// after its first (every token of a chunk predicted from the cache and the chunk before it).
fn read(model: &Model, text: &[u32], mode: ShiftMode, with_fresh: bool) -> Read {
    const CHUNK: usize = 64;
    const KEEP: usize = 16;
    let n_vocab = model.n_vocab();
    let mut s = model.session(SessionOptions { n_ctx: N_CTX, ..Default::default() }).expect("session");
    s.set_shift_mode(mode);
    let (mut sum, mut fresh_sum, mut n, mut shifts) = (0.0, 0.0, 0usize, 0);
    for chunk in text.chunks(CHUNK).filter(|c| c.len() > 1) {
        let mut evaluate = chunk.to_vec();
        if s.tokens().len() + chunk.len() > N_CTX {
            evaluate = s.shift_context(KEEP, chunk);
            shifts += 1;
        }
        let window: Vec<u32> = [s.tokens(), &evaluate[..evaluate.len() - chunk.len()]].concat();
        let out = block_on(s.eval(&evaluate, Readback::AllLogits)).expect("eval");
        if shifts == 0 {
            continue;
        }
        let rows = &out.logits[(evaluate.len() - chunk.len()) * n_vocab..];
        sum += nll(&rows[..(chunk.len() - 1) * n_vocab], n_vocab, &chunk[1..]);
        n += chunk.len() - 1;
        if with_fresh {
            let mut f =
                model.session(SessionOptions { n_ctx: N_CTX, ..Default::default() }).expect("session");
            let all = [&window[..], chunk].concat();
            let out = block_on(f.eval(&all, Readback::AllLogits)).expect("eval");
            let rows = &out.logits[window.len() * n_vocab..];
            fresh_sum += nll(&rows[..(chunk.len() - 1) * n_vocab], n_vocab, &chunk[1..]);
        }
    }
    assert!(n > 0, "the text never filled the context");
    Read {
        ppl: (sum / n as f64).exp(),
        fresh_ppl: with_fresh.then(|| (fresh_sum / n as f64).exp()),
        shifts,
        reevaluated: s.n_shift_reevaluated(),
    }
}

/// The bar on `model`: perplexity through rotating shifts within 5% of fresh windows,
/// nothing re-evaluated, and far worse without the rotation.
fn perplexity_through_shifts(name: &str, n_tokens: usize) {
    let model = load_cpu(name);
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/shift_text.txt"))
        .expect("read the text");
    let mut tokens = model.tokenizer().encode(&text, true, false).expect("encode");
    tokens.truncate(n_tokens);
    let rotated = read(&model, &tokens, ShiftMode::Rotate, true);
    let unrotated = read(&model, &tokens, ShiftMode::NoRotate, false);
    let fresh = rotated.fresh_ppl.expect("fresh");
    eprintln!(
        "{name}: {} tokens, {} shifts: perplexity {:.3} rotated, {:.3} fresh windows ({:+.2}%), {:.3} not rotated",
        tokens.len(),
        rotated.shifts,
        rotated.ppl,
        fresh,
        100.0 * (rotated.ppl / fresh - 1.0),
        unrotated.ppl
    );
    assert!(rotated.shifts >= 4, "{} shifts", rotated.shifts);
    assert_eq!(rotated.reevaluated, 0, "tokens re-evaluated by rotating shifts");
    assert!((rotated.ppl / fresh - 1.0).abs() < 0.05, "rotated {} against fresh {fresh}", rotated.ppl);
    assert!(
        unrotated.ppl > 1.25 * rotated.ppl,
        "not rotated {} against rotated {}",
        unrotated.ppl,
        rotated.ppl
    );
}

#[test]
fn perplexity_through_shifts_smollm2() {
    perplexity_through_shifts(SMOLLM2, 1024);
}

#[test]
fn perplexity_through_shifts_gemma3() {
    perplexity_through_shifts(GEMMA3, 1024);
}
