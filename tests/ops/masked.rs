//! The argmax under token masks (constrained greedy decoding on the device, `SeqStep::mask`):
//! each token must be exactly the host's pick, `wick::sampling::argmax` of the executor's own
//! logits with the ids the mask leaves out set to -inf (as `Guide::mask` sets them).
//!
//! Logits come straight from F32 tables whose values take a few levels, so that a row has
//! many ties (the lowest allowed id of the largest value must win); vocabularies of 33, 4099,
//! 49155 and 152067 ids (none a multiple of 32, so the last mask word is partial); masks
//! random (dense and sparse), of one id (the last, or a random one), of the last word's ids
//! only, of every id, and of none (all -inf: the host picks id 0); steps without a mask
//! between them (the mask must not stick). Graph shapes: a row per token (each sequence's
//! last row), a row per sequence of a step of three, and a one-token product whose argmax the
//! GPU decode plans fuse (a step with a mask must leave it to the argmax kernel).

use wick::exec::{mask_allows, mask_words, Op, Rows};
use wick::quant::GgmlType;

use super::{graph, row, tol, Case, Expect, Row, VOCAB};
use crate::support::tensors::f32_bytes;
use wick::exec::Readback;

/// `row` with every id that `mask` leaves out set to -inf.
pub fn apply(row: &[f32], mask: &[u32]) -> Vec<f32> {
    row.iter().enumerate().map(|(i, &v)| if mask_allows(mask, i) { v } else { f32::NEG_INFINITY }).collect()
}

/// The masks each single-sequence case steps through, for logits of `n` ids (`None`: a step
/// without a mask).
fn masks(c: &mut Case, n: usize) -> Vec<Option<Vec<u32>>> {
    let words = mask_words(n);
    let with = |ids: &mut dyn Iterator<Item = usize>| {
        let mut m = vec![0u32; words];
        for i in ids {
            m[i / 32] |= 1 << (i % 32);
        }
        m
    };
    let half = with(&mut (0..n).filter(|_| c.rng.below(2) == 0));
    let some = c.rng.below(n as u64) as usize;
    let sparse = with(&mut (0..n).filter(|_| c.rng.below(100) == 0).chain([some]));
    let one = c.rng.below(n as u64) as usize;
    let last_word = with(&mut ((words - 1) * 32..n));
    let all = with(&mut (0..n));
    vec![
        Some(half),
        None,
        Some(sparse),
        Some(with(&mut [n - 1].into_iter())),
        Some(with(&mut [one].into_iter())),
        Some(last_word),
        Some(vec![0; words]),
        Some(all),
        None,
    ]
}

/// An F32 table of [`VOCAB`] rows of `n` values, each one of four levels (ties everywhere).
fn tied_table(c: &mut Case, n: usize) -> wick::exec::WeightId {
    let v: Vec<f32> = (0..n * VOCAB).map(|_| c.rng.below(4) as f32 * 0.5 - 1.0).collect();
    c.weights.push((GgmlType::F32, vec![n as u64, VOCAB as u64], f32_bytes(&v)));
    wick::exec::WeightId(c.weights.len() as u32 - 1)
}

/// The rows (see the module's comment).
pub fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for (n, n_tok) in [(33, 1), (4099, 1), (4099, 3), (49155, 1), (49155, 7), (152067, 1)] {
        rows.push(row(
            format!("masked argmax vocab={n} rows={n_tok}"),
            tol::COPY,
            &[],
            move |c: &mut Case| {
                let t = tied_table(c, n);
                let g = c.graph(graph(n_tok, &[(t, n)], |_, s| s[0]));
                for m in masks(c, n) {
                    c.step_with(g, 0, VOCAB, Expect::Close(Readback::Argmax));
                    c.masks(vec![m]);
                }
            },
        ));
    }
    // Three sequences of a graph of four tokens, a row per sequence (the logits of each
    // sequence's last token), with masks on some.
    rows.push(row("masked argmax sequences vocab=4099".into(), tol::COPY, &[], |c: &mut Case| {
        let n = 4099;
        let t = tied_table(c, n);
        let mut g = graph(4, &[(t, n)], |g, s| {
            let last = g.act(Rows::Last, n);
            g.push(Op::TakeLast { x: s[0], dst: last });
            last
        });
        g.n_seqs = 3;
        let g = c.graph(g);
        c.kv(4 * wick::exec::KV_BLOCK, &[]);
        let ms = masks(c, n);
        for k in 0..ms.len() {
            c.step_seqs(
                g,
                &[(0, 2, vec![0]), (0, 1, vec![1]), (3, 1, vec![2])],
                Expect::Close(Readback::Argmax),
            );
            let pick = |j: usize| ms[(k + j) % ms.len()].clone();
            c.masks(vec![pick(0), pick(3), pick(5)]);
        }
    }));
    // A one-token product of the logits (fused with its argmax in the GPU decode plans).
    for t in [GgmlType::Q8_0, GgmlType::F32] {
        rows.push(row(format!("masked argmax of a product {t}"), tol::FUSED, &[t], move |c: &mut Case| {
            let (k, n) = (256, 5003);
            let tx = c.table(k, 3.0);
            let w = c.weight(t, k, n);
            let g = c.graph(graph(1, &[(tx, k)], |g, s| {
                let logits = g.act(Rows::All, n);
                g.push(Op::MatMul { w, x: s[0], dst: logits, bias: None });
                logits
            }));
            for m in masks(c, n) {
                c.step_with(g, 0, VOCAB, Expect::Close(Readback::Argmax));
                c.masks(vec![m]);
            }
        }));
    }
    rows
}
