//! Generation past the end of the context (issue 18): with `GenerateOptions::context_shift`,
//! a full context keeps its first tokens, drops the older half of the rest and goes on, so a
//! generation three times the context runs to `max_tokens`; without it the generation ends
//! with `ContextFull`. After a shift the cache must hold exactly what a fresh session given the
//! same tokens would: the next greedy token of both is the same. CPU executor, SmolLM2.
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::*;
use wick::sampling::SamplingParams;
use wick::{FinishReason, GenerateOptions, Model, SessionOptions};

const N_CTX: usize = 256;

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

#[test]
fn a_generation_three_times_the_context_runs_to_the_end() {
    let model = load_cpu(SMOLLM2);
    let prompt = prompt(&model);
    let mut session = model.session(SessionOptions { n_ctx: N_CTX, ..Default::default() }).expect("session");
    let (n, finish, shifts) = block_on(async {
        let mut gen = session.generate(&prompt, opts(3 * N_CTX, Some(prompt.len()))).expect("generate");
        let mut n = 0;
        while let Some(t) = gen.next().await {
            n += usize::from(t.expect("token").id.is_some());
        }
        (n, gen.finish_reason(), gen.n_context_shifts())
    });
    assert_eq!(finish, Some(FinishReason::Length));
    assert_eq!(n, 3 * N_CTX);
    // Each shift frees at least a quarter of the context: 3 x 256 tokens need 5 or more.
    assert!(shifts >= 5, "{shifts} shifts");
    let tokens = session.tokens().to_vec();
    assert!(tokens.len() <= N_CTX);
    assert_eq!(&tokens[..prompt.len()], &prompt[..], "the prompt stays at the start");

    // The shifted cache equals a fresh evaluation of the same tokens: both continue alike.
    let next = |s: &mut wick::Session<'_>, t: &[u32]| {
        block_on(async {
            let mut gen = s.generate(t, opts(1, None)).expect("generate");
            let id = gen.next().await.expect("a token").expect("ok").id;
            id.expect("an id")
        })
    };
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
