//! The sampler: greedy, determinism, each filter of the chain, penalties, bad logits.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::Rng;
use wick::sampling::{apply_penalties, argmax, Sampler, SamplingParams};

/// `n` logits uniform in [-scale/2, scale/2).
fn logits(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| (rng.unit() - 0.5) * scale).collect()
}

fn params(temperature: f32, top_k: usize, top_p: f32, min_p: f32, seed: u64) -> SamplingParams {
    SamplingParams { temperature, top_k, top_p, min_p, seed, ..SamplingParams::default() }
}

/// Draw `n` tokens from fresh copies of `logits`, returning counts per id.
fn histogram(p: SamplingParams, logits: &[f32], n: usize) -> Vec<usize> {
    let mut s = Sampler::new(p).unwrap();
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n {
        let mut l = logits.to_vec();
        counts[s.sample(&mut l, &[]) as usize] += 1;
    }
    counts
}

/// Assert empirical frequencies are within `tol` (absolute) of `expected` probabilities.
/// With N = 200,000 draws the standard error is at most 0.0011, so tol = 0.006 is > 5 sigma.
fn assert_freqs(counts: &[usize], expected: &[f64], tol: f64) {
    let n: usize = counts.iter().sum();
    for (id, (&c, &e)) in counts.iter().zip(expected).enumerate() {
        let f = c as f64 / n as f64;
        if e == 0.0 {
            assert_eq!(c, 0, "token {id} is excluded but was drawn {c} times");
        } else {
            assert!((f - e).abs() < tol, "token {id}: frequency {f:.4}, expected {e:.4} (counts {counts:?})");
        }
    }
}

// Probabilities, deliberately not in id order so the sorting matters.
// id:            0     1     2     3     4
const PROBS: [f64; 5] = [0.30, 0.10, 0.05, 0.40, 0.15];
const DRAWS: usize = 200_000;
const TOL: f64 = 0.006;

fn prob_logits() -> Vec<f32> {
    PROBS.iter().map(|p| p.ln() as f32 + 3.0).collect() // a shift must not matter
}

fn renormalised(keep: &[usize]) -> Vec<f64> {
    let sum: f64 = keep.iter().map(|&i| PROBS[i]).sum();
    (0..PROBS.len()).map(|i| if keep.contains(&i) { PROBS[i] / sum } else { 0.0 }).collect()
}

#[test]
fn greedy_is_argmax() {
    let mut rng = Rng(1);
    let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
    assert!(s.is_greedy());
    for n in [1, 2, 17, 1000, 32_000] {
        for _ in 0..20 {
            let logits = logits(&mut rng, n, 20.0);
            let mut l = logits.clone();
            let want = argmax(&logits);
            assert_eq!(s.sample(&mut l, &[1, 2, 3]), want);
            let best = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(logits[want as usize], best);
        }
    }
    // Lowest id on ties; NaN skipped; empty and all-NaN rows give 0.
    assert_eq!(argmax(&[1.0, 5.0, 2.0, 5.0]), 1);
    assert_eq!(argmax(&[f32::NAN, 1.0, f32::NAN, 3.0]), 3);
    assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
    assert_eq!(argmax(&[]), 0);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    assert_eq!(argmax(&[f32::NEG_INFINITY, 0.0, f32::INFINITY, f32::INFINITY]), 2);
}

#[test]
fn same_seed_same_sequence_different_seed_different() {
    let mut rng = Rng(7);
    let rows: Vec<Vec<f32>> = (0..300).map(|_| logits(&mut rng, 5000, 8.0)).collect();
    let run = |seed: u64| -> Vec<u32> {
        let p = SamplingParams {
            seed,
            top_k: 0,
            top_p: 0.98,
            min_p: 0.0,
            temperature: 1.2,
            ..Default::default()
        };
        let mut s = Sampler::new(p).unwrap();
        let mut hist = Vec::new();
        for r in &rows {
            let mut l = r.clone();
            let t = s.sample(&mut l, &hist);
            hist.push(t);
        }
        hist
    };
    let a = run(123);
    assert_eq!(a, run(123));
    let b = run(124);
    assert_ne!(a, b);
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same < a.len() / 2, "{same} of {} equal across seeds", a.len());
    // Default params are seeded too: reproducible out of the box.
    let mut s1 = Sampler::new(SamplingParams::default()).unwrap();
    let mut s2 = Sampler::new(SamplingParams::default()).unwrap();
    for r in &rows[..50] {
        assert_eq!(s1.sample(&mut r.clone(), &[]), s2.sample(&mut r.clone(), &[]));
    }
}

#[test]
fn top_k_1_is_greedy_at_any_temperature() {
    let mut rng = Rng(3);
    for temp in [0.1, 0.8, 1.0, 5.0, 100.0] {
        let mut s = Sampler::new(params(temp, 1, 0.9, 0.05, 9)).unwrap();
        assert!(s.is_greedy());
        for _ in 0..50 {
            let logits = logits(&mut rng, 3000, 2.0);
            assert_eq!(s.sample(&mut logits.clone(), &[]), argmax(&logits));
        }
    }
}

#[test]
fn top_p_draws_only_from_the_nucleus_in_proportion() {
    // Sorted: 3 (.40), 0 (.30), 4 (.15) => cumulative .85 >= .8; 1 and 2 are cut.
    let counts = histogram(params(1.0, 0, 0.8, 0.0, 11), &prob_logits(), DRAWS);
    assert_freqs(&counts, &renormalised(&[3, 0, 4]), TOL);
    // top_p = 0.35: the first token (.40) alone reaches it. (Exactly .40 would sit on a
    // rounding boundary.)
    let counts = histogram(params(1.0, 0, 0.35, 0.0, 12), &prob_logits(), 1000);
    assert_eq!(counts[3], 1000);
}

#[test]
fn min_p_draws_only_above_the_threshold_in_proportion() {
    // min_p 0.3 => p >= 0.12: ids 3, 0, 4.
    let counts = histogram(params(1.0, 0, 1.0, 0.3, 13), &prob_logits(), DRAWS);
    assert_freqs(&counts, &renormalised(&[3, 0, 4]), TOL);
    // min_p 0.2 => p >= 0.08: id 2 (.05) only is cut.
    let counts = histogram(params(1.0, 0, 1.0, 0.2, 14), &prob_logits(), DRAWS);
    assert_freqs(&counts, &renormalised(&[3, 0, 4, 1]), TOL);
}

#[test]
fn top_k_and_temperature_in_proportion() {
    // top-k 2 keeps 3 and 0.
    let counts = histogram(params(1.0, 2, 1.0, 0.0, 15), &prob_logits(), DRAWS);
    assert_freqs(&counts, &renormalised(&[3, 0]), TOL);
    // No filter, temperature 2: p_i^(1/2) renormalised.
    let counts = histogram(params(2.0, 0, 1.0, 0.0, 16), &prob_logits(), DRAWS);
    let sum: f64 = PROBS.iter().map(|p| p.sqrt()).sum();
    let want: Vec<f64> = PROBS.iter().map(|p| p.sqrt() / sum).collect();
    assert_freqs(&counts, &want, TOL);
    // Temperature applies after top-p: top-p .8 at temperature 2 still keeps exactly {3, 0, 4}.
    let counts = histogram(params(2.0, 0, 0.8, 0.0, 17), &prob_logits(), DRAWS);
    let sum: f64 = [3, 0, 4].iter().map(|&i| PROBS[i].sqrt()).sum();
    let want: Vec<f64> =
        (0..5).map(|i| if [3, 0, 4].contains(&i) { PROBS[i].sqrt() / sum } else { 0.0 }).collect();
    assert_freqs(&counts, &want, TOL);
}

#[test]
fn large_vocab_top_p_stays_in_the_nucleus() {
    // Gemma-sized row, top-p without top-k: the partial sort must find the same nucleus as a
    // full sort.
    let n = 262_144;
    let mut rng = Rng(21);
    let logits = logits(&mut rng, n, 30.0);
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
    let w: Vec<f64> = order.iter().map(|&i| ((logits[i as usize] - max) as f64).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut cum = 0.0;
    let mut nucleus = std::collections::HashSet::new();
    for (k, &i) in order.iter().enumerate() {
        cum += w[k];
        nucleus.insert(i);
        if cum >= 0.9 * total {
            break;
        }
    }
    assert!(nucleus.len() > 64, "test wants a nucleus larger than the first partial sort");
    let mut s = Sampler::new(params(1.0, 0, 0.9, 0.0, 5)).unwrap();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let t = s.sample(&mut logits.clone(), &[]);
        assert!(nucleus.contains(&t), "token {t} outside the top-p nucleus");
        seen.insert(t);
    }
    assert!(seen.len() > 10);
}

#[test]
fn penalties_follow_the_llama_cpp_formula() {
    let p = SamplingParams {
        repeat_penalty: 1.5,
        frequency_penalty: 0.25,
        presence_penalty: 0.5,
        penalty_last_n: 4,
        ..SamplingParams::greedy()
    };
    let orig = [2.0f32, -1.0, 0.5, 0.0, 3.0];
    // Window = last 4 = [0, 1, 1, 3] (the leading 4 is outside it, 99 is out of the vocab).
    let history = [4u32, 0, 1, 1, 3];
    let mut l = orig;
    apply_penalties(&p, &mut l, &history);
    let want = [
        2.0f32 / 1.5 - (1.0 * 0.25 + 0.5),    // positive: divided; seen once
        -(1.0f32 * 1.5) - (2.0 * 0.25 + 0.5), // negative: multiplied; seen twice
        0.5,                                  // not seen
        0.0f32 * 1.5 - (1.0 * 0.25 + 0.5),    // zero counts as non-positive
        3.0,                                  // outside the window
    ];
    assert_eq!(l, want);
    // The sampler applies the same change in place, and greedy then sees penalised logits.
    let mut s = Sampler::new(p.clone()).unwrap();
    let mut l2 = orig;
    assert_eq!(s.sample(&mut l2, &history), 4);
    assert_eq!(l2, want);
    // Out-of-vocab ids in the history are ignored.
    let mut l3 = orig;
    apply_penalties(&p, &mut l3, &[99, 99, 99, 99]);
    assert_eq!(l3, orig);
    // penalty_last_n = 0 and neutral values change nothing.
    let mut l4 = orig;
    apply_penalties(&SamplingParams { penalty_last_n: 0, ..p.clone() }, &mut l4, &history);
    assert_eq!(l4, orig);
    apply_penalties(&SamplingParams::default(), &mut l4, &history);
    assert_eq!(l4, orig);
    // Repeat penalty alone can flip the argmax.
    let rp = SamplingParams { repeat_penalty: 2.0, ..SamplingParams::greedy() };
    let mut s = Sampler::new(rp).unwrap();
    assert_eq!(s.sample(&mut [4.0, 3.0], &[0]), 1);
}

#[test]
fn bad_logits_do_not_panic() {
    let rows: Vec<Vec<f32>> = vec![
        vec![],
        vec![f32::NAN; 10],
        vec![f32::NEG_INFINITY; 10],
        vec![f32::NAN, 1.0, f32::NAN, 2.0],
        vec![0.0, f32::INFINITY, 1.0, f32::NAN],
        vec![f32::INFINITY, f32::INFINITY, f32::NAN],
        vec![f32::MAX, -f32::MAX, f32::MAX],
        vec![1e30, -1e30, 0.0],
    ];
    for p in [
        SamplingParams::default(),
        SamplingParams::greedy(),
        params(1.0, 0, 1.0, 0.0, 1),
        params(0.5, 0, 0.5, 0.1, 2),
        params(1e-6, 2, 1.0, 0.0, 3),
        SamplingParams { repeat_penalty: 1.3, presence_penalty: 1.0, ..Default::default() },
    ] {
        let mut s = Sampler::new(p.clone()).unwrap();
        for r in &rows {
            for _ in 0..20 {
                let t = s.sample(&mut r.clone(), &[0, 1, 2, 3]);
                assert!(r.is_empty() && t == 0 || (t as usize) < r.len(), "{p:?} {r:?} -> {t}");
                if !r.is_empty() {
                    assert!(!r[t as usize].is_nan() || r.iter().all(|x| x.is_nan()), "{p:?} {r:?} drew NaN");
                }
            }
        }
    }
    // +inf takes all the mass.
    let mut s = Sampler::new(params(1.0, 0, 1.0, 0.0, 4)).unwrap();
    for _ in 0..100 {
        assert_eq!(s.sample(&mut [0.0, f32::INFINITY, 1.0, f32::NAN], &[]), 1);
    }
}

#[test]
fn validate_rejects_out_of_range_params() {
    let ok = SamplingParams::default();
    assert!(ok.validate().is_ok());
    assert!(SamplingParams::greedy().validate().is_ok());
    assert!(SamplingParams { temperature: -1.0, ..ok.clone() }.validate().is_ok()); // greedy
    for bad in [
        SamplingParams { temperature: f32::NAN, ..ok.clone() },
        SamplingParams { temperature: f32::INFINITY, ..ok.clone() },
        SamplingParams { top_p: -0.1, ..ok.clone() },
        SamplingParams { top_p: 1.5, ..ok.clone() },
        SamplingParams { top_p: f32::NAN, ..ok.clone() },
        SamplingParams { min_p: f32::NAN, ..ok.clone() },
        SamplingParams { min_p: 2.0, ..ok.clone() },
        SamplingParams { repeat_penalty: 0.0, ..ok.clone() },
        SamplingParams { repeat_penalty: f32::NAN, ..ok.clone() },
        SamplingParams { presence_penalty: f32::INFINITY, ..ok.clone() },
        SamplingParams { frequency_penalty: f32::NAN, ..ok.clone() },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
        assert!(matches!(Sampler::new(bad), Err(wick::Error::InvalidArgument(_))));
    }
}

/// Timing on a Gemma-sized row; run with `cargo test --test sampling_chain -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing_262k_vocab() {
    let mut rng = Rng(99);
    let logits = logits(&mut rng, 262_144, 30.0);
    for (name, p) in [
        ("greedy", SamplingParams::greedy()),
        ("default (top-k 40)", SamplingParams::default()),
        ("top-p 0.95 only", params(0.8, 0, 0.95, 0.0, 1)),
        ("min-p 0.05 only", params(0.8, 0, 1.0, 0.05, 1)),
        ("no filters", params(0.8, 0, 1.0, 0.0, 1)),
    ] {
        let mut s = Sampler::new(p).unwrap();
        let mut buf = logits.clone();
        let t0 = std::time::Instant::now();
        for _ in 0..100 {
            buf.copy_from_slice(&logits);
            std::hint::black_box(s.sample(&mut buf, &[1, 2, 3]));
        }
        println!("{name}: {:.3} ms/token", t0.elapsed().as_secs_f64() * 10.0);
    }
}
