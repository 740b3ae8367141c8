//! Long greedy agreement between two executors on one model (issue 14): both generate the
//! same number of tokens greedily from the same prompt; the report is how many tokens they
//! agree for and, where they part, the reference's own top-2 logit margin at that step (a
//! near-tie that float summation order may decide either way).
use wick::exec::Readback;
use wick::sampling::SamplingParams;
use wick::{GenerateOptions, Model, SessionOptions};

use super::block_on;

/// Greedy tokens after `prompt`: exactly `n` (stop strings and end-of-generation ignored, so
/// both executors run the same number of steps).
pub fn greedy_ids(model: &Model, prompt: &[u32], n: usize, n_ctx: usize) -> Vec<u32> {
    let mut s = model.session(SessionOptions { n_ctx, ..Default::default() }).expect("session");
    let opts = GenerateOptions {
        max_tokens: n,
        sampling: SamplingParams::greedy(),
        stop: vec![],
        ignore_eog: true,
        ..Default::default()
    };
    let mut gen = s.generate(prompt, opts).expect("generate");
    let mut out = Vec::new();
    while let Some(t) = block_on(gen.next()) {
        out.extend(t.expect("token").id);
    }
    out
}

/// Where two greedy runs part.
#[derive(Debug)]
pub struct Parting {
    /// Tokens both generated identically.
    pub agreed: usize,
    /// The reference's logit of its own token minus its logit of the other run's token, at
    /// the first different step (None if they never part).
    pub margin: Option<f32>,
}

/// Generate `n` tokens with `reference` and `other` and find where they part.
pub fn parting(reference: &Model, other: &Model, prompt: &[u32], n: usize) -> Parting {
    let n_ctx = (prompt.len() + n + 1).next_power_of_two();
    let want = greedy_ids(reference, prompt, n, n_ctx);
    let got = greedy_ids(other, prompt, n, n_ctx);
    assert_eq!(want.len(), n, "the reference stopped early");
    assert_eq!(got.len(), n, "the other executor stopped early");
    let agreed = want.iter().zip(&got).take_while(|(a, b)| a == b).count();
    if agreed == n {
        return Parting { agreed, margin: None };
    }
    let mut ctx = prompt.to_vec();
    ctx.extend_from_slice(&want[..agreed]);
    let mut s = reference.session(SessionOptions { n_ctx, ..Default::default() }).expect("session");
    let l = block_on(s.eval(&ctx, Readback::LastLogits)).expect("eval").logits;
    let margin = l[want[agreed] as usize] - l[got[agreed] as usize];
    Parting { agreed, margin: Some(margin) }
}
