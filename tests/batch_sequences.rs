//! Several sequences in one step through a real model (SmolLM2): three prompts prefilled in one
//! forward pass and decoded together give what each gives alone (greedy, up to a near-tie of the
//! alone run's top two logits, since a batched step may round differently); a sequence forked
//! from another's prefix shares its whole blocks and continues as if it had evaluated them; a
//! full cache and bad steps are errors that leave the batch usable.
//!
//! On the CPU executor, and on the GPU executors built in (WebGPU: lavapipe in CI; CUDA where a
//! GPU is present, `WICK_REQUIRE_CUDA=1` to insist).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use wick::exec::Readback;
use wick::{Error, ExecutorKind, LoadOptions, Model, SessionOptions};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// A top-two margin below this is a near-tie: the batched and alone runs may pick differently.
const NEAR_TIE: f32 = 0.05;

fn load(kind: ExecutorKind) -> Option<Model> {
    let path = support::models::model_path(MODEL);
    block_on(async {
        let src = wick::source::FileSource::open(&path).await.expect("open the model");
        match Model::load(src, LoadOptions { executor: kind, ..Default::default() }).await {
            Ok(m) => Some(m),
            Err(e) if kind != ExecutorKind::Cpu => {
                eprintln!("skipped on {kind:?}: {e}");
                None
            }
            Err(e) => panic!("load: {e}"),
        }
    })
}

fn argmax(row: &[f32]) -> (u32, f32) {
    let mut best = (0usize, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        if v > best.1 {
            best = (i, v, best.1);
        } else if v > best.2 {
            best.2 = v;
        }
    }
    (best.0 as u32, best.1 - best.2)
}

/// Greedy continuation of `prompt` alone in a session: per step, the token and its margin.
fn alone(model: &Model, prompt: &[u32], n: usize) -> Vec<(u32, f32)> {
    block_on(async {
        let mut s = model.session(SessionOptions { n_ctx: 512, ..Default::default() }).unwrap();
        let mut out = Vec::new();
        let mut next = prompt.to_vec();
        for _ in 0..n {
            let logits = s.eval(&next, Readback::LastLogits).await.unwrap().logits;
            let (t, margin) = argmax(&logits);
            out.push((t, margin));
            next = vec![t];
        }
        out
    })
}

fn prompts(model: &Model) -> Vec<Vec<u32>> {
    let tok = model.tokenizer();
    [
        "The capital of France is",
        "Once upon a time, in a small village by the sea, there lived an old fisherman who",
        "def fibonacci(n):",
    ]
    .iter()
    .map(|p| tok.encode(p, true, true).unwrap())
    .collect()
}

#[allow(clippy::needless_range_loop)]
fn together(kind: ExecutorKind) {
    let Some(model) = load(kind) else { return };
    let prompts = prompts(&model);
    let n = 12;
    let want: Vec<Vec<(u32, f32)>> = prompts.iter().map(|p| alone(&model, p, n)).collect();
    let mut b = model.batch(1024).unwrap();
    let ids: Vec<_> = prompts.iter().map(|_| b.add()).collect();
    let mut next: Vec<Vec<u32>> = prompts.clone();
    let mut agree = vec![0usize; prompts.len()];
    let mut parted = vec![false; prompts.len()];
    for step in 0..n {
        let work: Vec<_> = ids.iter().zip(&next).map(|(&id, t)| (id, t.as_slice())).collect();
        // Alternate the readbacks: logits (checked against the host's argmax) and the argmax.
        let out =
            block_on(b.step(&work, if step % 2 == 0 { Readback::LastLogits } else { Readback::Argmax }))
                .unwrap();
        let got: Vec<u32> = if step % 2 == 0 {
            let v = out.logits.len() / ids.len();
            out.logits.chunks(v).map(|r| argmax(r).0).collect()
        } else {
            out.tokens.clone()
        };
        assert_eq!(got.len(), ids.len(), "{kind:?}: one result per sequence");
        for (i, &t) in got.iter().enumerate() {
            if parted[i] {
                continue;
            }
            let (w, margin) = want[i][step];
            if t != w {
                assert!(
                    margin < NEAR_TIE,
                    "{kind:?}: sequence {i} step {step}: {t} together, {w} alone, top-2 margin {margin}"
                );
                parted[i] = true;
                continue;
            }
            agree[i] += 1;
        }
        // Each sequence goes on with its own (alone) token, so a parted one stays comparable.
        next = (0..ids.len()).map(|i| vec![want[i][step].0]).collect();
    }
    eprintln!("{kind:?}: greedy tokens agreeing with each sequence alone: {agree:?} of {n}");
    for (i, p) in prompts.iter().enumerate() {
        assert_eq!(b.tokens(ids[i]).unwrap().len(), p.len() + n - 1);
    }
}

/// A fork of a 150-token conversation shares its two whole blocks; evaluating the rest and new
/// text gives the logits a fresh session gives for the whole text.
fn fork(kind: ExecutorKind) {
    let Some(model) = load(kind) else { return };
    let tok = model.tokenizer();
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(15);
    let mut prefix = tok.encode(&text, true, true).unwrap();
    prefix.truncate(150);
    assert_eq!(prefix.len(), 150, "the prefix text is long enough");
    let tail = tok.encode(" And then the fox", false, true).unwrap();
    let mut b = model.batch(512).unwrap();
    let a = b.add();
    block_on(b.step(&[(a, &prefix)], Readback::Argmax)).unwrap();
    let free = b.free_positions();
    let (f, rest) = b.fork(a, 150).unwrap();
    assert_eq!(rest.len(), 150 - 128, "two whole blocks shared");
    assert_eq!(b.free_positions(), free, "a fork takes no blocks until it writes");
    let mut todo = rest.clone();
    todo.extend_from_slice(&tail);
    // The fork and its source step together: the source writes its own third block.
    let out = block_on(b.step(&[(f, &todo), (a, &tail)], Readback::LastLogits)).unwrap();
    let v = model.n_vocab();
    let mut whole = prefix.clone();
    whole.extend_from_slice(&tail);
    let fresh = block_on(async {
        let mut s = model.session(SessionOptions { n_ctx: 512, ..Default::default() }).unwrap();
        s.eval(&whole, Readback::LastLogits).await.unwrap().logits
    });
    for (which, row) in [("fork", &out.logits[..v]), ("source", &out.logits[v..])] {
        let scale = fresh.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = row.iter().zip(&fresh).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
        assert!(err < 2e-3, "{kind:?}: the {which}'s logits differ from a fresh evaluation by {err:.2e}");
        eprintln!("{kind:?}: {which} logits within {err:.1e} of a fresh evaluation");
    }
    b.remove(a);
    b.remove(f);
    assert_eq!(b.free_positions(), 512, "every block back");
}

/// Errors: a sequence twice in one step, an unknown one, an empty one, more than the cache
/// holds (nothing taken), then a good step.
fn errors(kind: ExecutorKind) {
    let Some(model) = load(kind) else { return };
    let mut b = model.batch(128).unwrap();
    let (x, y) = (b.add(), b.add());
    let t = [1u32, 2, 3];
    assert!(block_on(b.step(&[(x, &t), (x, &t)], Readback::Argmax)).is_err());
    assert!(block_on(b.step(&[(x, &[])], Readback::Argmax)).is_err());
    b.remove(y);
    assert!(block_on(b.step(&[(y, &t)], Readback::Argmax)).is_err());
    let y = b.add();
    let long = vec![5u32; 100];
    let e = block_on(b.step(&[(x, &t), (y, &long)], Readback::Argmax)).unwrap_err();
    assert!(matches!(e, Error::ContextOverflow { .. }), "{kind:?}: {e}");
    assert_eq!(b.free_positions(), 128, "{kind:?}: a failed step takes no blocks");
    let bad = [model.n_vocab() as u32];
    assert!(block_on(b.step(&[(x, &bad)], Readback::Argmax)).is_err());
    assert_eq!(b.free_positions(), 128, "{kind:?}: a failed step takes no blocks");
    let out = block_on(b.step(&[(x, &t), (y, &long[..60])], Readback::Argmax)).unwrap();
    assert_eq!(out.tokens.len(), 2);
}

/// A sequence generating three times its window with context shifts (`Batch::shift_context`)
/// gives a session's tokens with `context_shift` (the same shift), while another sequence of the
/// batch keeps its cache.
fn shift(kind: ExecutorKind) {
    let Some(model) = load(kind) else { return };
    let prompt = prompts(&model).swap_remove(1);
    let (window, n_gen) = (256, 3 * 256);
    let alone: Vec<u32> = block_on(async {
        let mut s = model.session(SessionOptions { n_ctx: window, ..Default::default() }).unwrap();
        let opts = wick::GenerateOptions {
            max_tokens: n_gen,
            sampling: wick::sampling::SamplingParams::greedy(),
            ignore_eog: true,
            context_shift: Some(prompt.len()),
            ..Default::default()
        };
        let mut gen = s.generate(&prompt, opts).unwrap();
        let mut out = Vec::new();
        while let Some(t) = gen.next().await {
            out.extend(t.unwrap().id);
        }
        assert!(gen.n_context_shifts() >= 5, "{kind:?}: {} shifts", gen.n_context_shifts());
        out
    });
    let mut b = model.batch(2 * window).unwrap();
    let other = prompts(&model).swap_remove(0);
    let y = b.add();
    let y_next = block_on(b.step(&[(y, &other)], Readback::Argmax)).unwrap().tokens[0];
    let x = b.add();
    let (mut pending, mut out) = (prompt.clone(), Vec::new());
    while out.len() < n_gen {
        if b.tokens(x).unwrap().len() + pending.len() > window {
            pending = b.shift_context(x, window, prompt.len(), &pending).unwrap();
        }
        let t = block_on(b.step(&[(x, &pending)], Readback::Argmax)).unwrap().tokens[0];
        out.push(t);
        pending = vec![t];
    }
    assert!(b.tokens(x).unwrap().len() <= window && b.tokens(x).unwrap().starts_with(&prompt));
    assert_eq!(out, alone, "{kind:?}: the batch's shifted generation differs from the session's");
    // The other sequence's cache was left alone: it continues as a fresh copy of it does.
    let z = b.add();
    let z_next = block_on(b.step(&[(z, &other)], Readback::Argmax)).unwrap().tokens[0];
    assert_eq!(z_next, y_next);
    let mut after = |s| block_on(b.step(&[(s, &[y_next][..])], Readback::Argmax)).unwrap().tokens[0];
    let (ya, za) = (after(y), after(z));
    assert_eq!(ya, za, "{kind:?}: the idle sequence's cache changed");
}

#[test]
fn sequences_together_match_each_alone() {
    support::executor_kinds().into_iter().for_each(together);
}

#[test]
fn fork_shares_a_prefix() {
    support::executor_kinds().into_iter().for_each(fork);
}

#[test]
fn batch_errors() {
    support::executor_kinds().into_iter().for_each(errors);
}

#[test]
fn a_sequence_shifts_as_a_session_does() {
    support::executor_kinds().into_iter().for_each(shift);
}
