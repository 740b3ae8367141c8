//! Greedy decoding chained on the device ([`wick::exec::Executor::run_greedy`]: the WebGPU
//! executor starts each step's successor on its argmax before the token is read back) gives the
//! tokens of steps run one at a time, bit for bit: across a block boundary of the KV cache, up
//! to the end of the context, through `generate`, and when the caller's next step is not the
//! one started (another token: that step's logits are those of a session that never chained).
//!
//! With a tiny synthetic model, on the CPU executor (the trait's default) and on the GPU
//! executors built in (WebGPU: lavapipe in CI; CUDA where a GPU is present).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::donor_metadata;
use wick::exec::Readback;
use wick::model::Arch;
use wick::sampling::SamplingParams;
use wick::synth::SynthSpec;
use wick::{ExecutorKind, GenerateOptions, LoadOptions, Model, Session, SessionOptions};

fn load(kind: ExecutorKind) -> Option<Model> {
    let bytes =
        wick::synth::write(Vec::new(), &SynthSpec::tiny(Arch::Llama, 5), &donor_metadata()).expect("synth");
    let opts = LoadOptions { executor: kind, ..Default::default() };
    match block_on(Model::load(wick::source::MemorySource::new(bytes), opts)) {
        Ok(m) => Some(m),
        Err(e) if kind != ExecutorKind::Cpu => {
            eprintln!("skipped on {kind:?}: {e}");
            None
        }
        Err(e) => panic!("load: {e}"),
    }
}

fn session(model: &Model, n_ctx: usize) -> Session<'_> {
    model.session(SessionOptions { n_ctx, ..Default::default() }).unwrap()
}

fn prompt() -> Vec<u32> {
    (0..12).map(|i| 3 + (37 * i) % 500).collect()
}

/// Greedy tokens after `prompt` until the context of `n_ctx` is full, each step alone (or, with
/// `chained`, through `eval_greedy`).
fn decode(model: &Model, n_ctx: usize, chained: bool) -> Vec<u32> {
    block_on(async {
        let mut s = session(model, n_ctx);
        let mut next = s.eval(&prompt(), Readback::Argmax).await.unwrap().token().unwrap();
        let mut out = vec![next];
        while s.tokens().len() < n_ctx {
            let step =
                if chained { s.eval_greedy(&[next]).await } else { s.eval(&[next], Readback::Argmax).await };
            next = step.unwrap().token().unwrap();
            out.push(next);
        }
        out
    })
}

#[test]
fn chained_greedy_steps_give_the_tokens_of_steps_alone() {
    for kind in support::executor_kinds() {
        let Some(model) = load(kind) else { continue };
        // 12 + 84 positions cross the block boundary at 64; the last steps have no room to
        // start a successor.
        let want = decode(&model, 96, false);
        let got = decode(&model, 96, true);
        assert_eq!(got, want, "{kind:?}");
        // `generate` chains when greedy without a constraint.
        let got = block_on(async {
            let mut s = session(&model, 96);
            let opts = GenerateOptions {
                max_tokens: 40,
                sampling: SamplingParams::greedy(),
                ignore_eog: true,
                stop: vec![],
                ..Default::default()
            };
            let mut gen = s.generate(&prompt(), opts).unwrap();
            let mut out = Vec::new();
            while let Some(t) = gen.next().await {
                out.extend(t.unwrap().id);
            }
            out
        });
        assert_eq!(got, want[..40], "{kind:?}: generate");
    }
}

#[test]
fn a_next_step_other_than_the_started_one_is_right() {
    for kind in support::executor_kinds() {
        let Some(model) = load(kind) else { continue };
        let n_vocab = model.n_vocab() as u32;
        block_on(async {
            // Not chained: the prompt, t0, t1, then another token x than t1's argmax t2, then
            // x's argmax u, with the logits after u.
            let mut alone = session(&model, 128);
            let t0 = alone.eval(&prompt(), Readback::Argmax).await.unwrap().token().unwrap();
            let t1 = alone.eval(&[t0], Readback::Argmax).await.unwrap().token().unwrap();
            let mut fork = session(&model, 128);
            fork.eval(&prompt(), Readback::Argmax).await.unwrap();
            fork.eval(&[t0], Readback::Argmax).await.unwrap();
            let t2 = alone.eval(&[t1], Readback::Argmax).await.unwrap().token().unwrap();
            let x = (t2 + 1) % n_vocab;
            let u = fork.eval(&[t1], Readback::Argmax).await.unwrap().token().unwrap();
            assert_eq!(u, t2);
            let u = fork.eval(&[x], Readback::Argmax).await.unwrap().token().unwrap();
            let want = fork.eval(&[u], Readback::LastLogits).await.unwrap().logits;

            let mut s = session(&model, 128);
            assert_eq!(s.eval(&prompt(), Readback::Argmax).await.unwrap().token(), Some(t0));
            // Each starts the next step: t1's, taken by a plain step with the argmax readback;
            // then t2's, where the caller evaluates x instead.
            assert_eq!(s.eval_greedy(&[t0]).await.unwrap().token(), Some(t1), "{kind:?}");
            assert_eq!(s.eval_greedy(&[t1]).await.unwrap().token(), Some(t2), "{kind:?}");
            assert_eq!(s.eval(&[x], Readback::Argmax).await.unwrap().token(), Some(u), "{kind:?}");
            let got = s.eval(&[u], Readback::LastLogits).await.unwrap().logits;
            assert!(got == want, "{kind:?}: the logits after another token differ");
        });
    }
}
