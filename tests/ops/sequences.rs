//! The rows of steps that carry several sequences, each through its own block table: the KV
//! store and attention (plain, and with RoPE of queries and keys in front, which the GPU
//! executors fuse with the store), each sequence's last row and argmax read back, blocks
//! handed out out of order, a block shared by two sequences (a common prefix), steps with fewer
//! sequences than the graph takes, and decode steps of several sequences at once.

use wick::exec::{Graph, Op, Readback, RopeExt, RopeMode, Rows, KV_BLOCK};
use wick::quant::GgmlType;

use super::{graph, row, tol, Case, Expect, Row};

/// (query heads, KV heads, head size, window, soft-cap): GQA 3 and 7 as the real models, a
/// window with a soft-cap, head size 256, and head size 6 with a window (not a multiple of 4:
/// the WebGPU executor's per-row attention kernel).
type Shape = (usize, usize, usize, Option<usize>, Option<f32>);
const SHAPES: [Shape; 6] = [
    (4, 2, 64, None, None),
    (3, 1, 128, None, None),
    (7, 1, 128, None, None),
    (8, 2, 128, Some(40), Some(50.0)),
    (2, 1, 256, None, Some(30.0)),
    (4, 2, 6, Some(40), None),
];

/// A graph of `n_tok` tokens of up to `n_seqs` sequences: (RoPE of q and k when `rope`), the
/// KV store, attention; every row's output, or each sequence's last row with `last`.
fn seq_graph(c: &mut Case, n_tok: usize, n_seqs: usize, shape: Shape, rope: bool, last: bool) -> usize {
    let (n_heads, n_kv, hd, window, softcap) = shape;
    let (qd, kd) = (n_heads * hd, n_kv * hd);
    let (tq, tk, tv) = (c.table(qd, 2.0), c.table(kd, 2.0), c.table(kd, 1.0));
    let mut g: Graph = graph(n_tok, &[(tq, qd), (tk, kd), (tv, kd)], |g, s| {
        if rope {
            for (x, heads) in [(s[0], n_heads), (s[1], n_kv)] {
                g.push(Op::Rope {
                    x,
                    n_heads: heads,
                    head_dim: hd,
                    n_rot: hd,
                    base: 10000.0,
                    freq_scale: 1.0,
                    mode: RopeMode::Neox,
                    freqs: None,
                    ext: RopeExt::default(),
                });
            }
        }
        g.push(Op::KvStore { layer: 0, k: s[1], v: s[2] });
        let dst = g.act(Rows::All, qd);
        let scale = 1.0 / (hd as f32).sqrt();
        g.push(Op::Attention {
            layer: 0,
            q: s[0],
            dst,
            n_heads,
            n_kv_heads: n_kv,
            head_dim: hd,
            scale,
            window,
            softcap,
        });
        if !last {
            return dst;
        }
        let out = g.act(Rows::Last, qd);
        g.push(Op::TakeLast { x: dst, dst: out });
        out
    });
    g.n_seqs = n_seqs;
    c.graph(g)
}

/// The steps of a row, on a cache of 12 blocks:
/// - A (blocks 5, 2, 9, 0), B (7, 1, 11) and C (3, 10) prefill together: 20, 15 and 5 tokens;
/// - A alone goes on for 70 tokens, across its first block's end;
/// - A, B and C decode one token each, then two steps of it (one checking each sequence's argmax);
/// - D shares A's first block (its prefix) and writes its own (6): it decodes beside A and B,
///   B taking 17 tokens across a key tile;
/// - a step of two sequences on a graph of three.
fn case(c: &mut Case, shape: Shape, rope: bool) {
    let (_, n_kv, hd, ..) = shape;
    c.kv(12 * KV_BLOCK, &[n_kv * hd]);
    let (a, b, cc) = (vec![5, 2, 9, 0], vec![7, 1, 11], vec![3, 10]);
    let d = vec![5, 6];
    let all = Expect::Close(Readback::AllLogits);
    let prefill = seq_graph(c, 40, 3, shape, rope, false);
    c.step_seqs(prefill, &[(0, 20, a.clone()), (0, 15, b.clone()), (0, 5, cc.clone())], all);
    let more = seq_graph(c, 70, 1, shape, rope, false);
    c.step_seqs(more, &[(20, 70, a.clone())], all);
    let decode = seq_graph(c, 3, 3, shape, rope, true);
    c.step_seqs(
        decode,
        &[(90, 1, a.clone()), (15, 1, b.clone()), (5, 1, cc.clone())],
        Expect::Close(Readback::LastLogits),
    );
    c.step_seqs(
        decode,
        &[(91, 1, a.clone()), (16, 1, b.clone()), (6, 1, cc.clone())],
        Expect::Close(Readback::Argmax),
    );
    let mixed = seq_graph(c, 20, 3, shape, rope, false);
    c.step_seqs(mixed, &[(92, 1, a.clone()), (17, 17, b.clone()), (64, 2, d.clone())], all);
    let last = seq_graph(c, 20, 3, shape, rope, true);
    c.step_seqs(last, &[(93, 4, a), (66, 16, d)], Expect::Close(Readback::LastLogits));
}

/// The rows: each shape with the plain store, and the first two with RoPE in front.
pub fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, shape) in SHAPES.into_iter().enumerate() {
        for rope in [false, true] {
            if rope && i >= 2 {
                continue;
            }
            let (h, kvh, hd, window, softcap) = shape;
            let name = format!(
                "sequences{} heads={h}/{kvh} hd={hd} window={window:?} softcap={softcap:?}",
                if rope { " rope" } else { "" }
            );
            rows.push(row(name, tol::ATTENTION, &[], move |c: &mut Case| case(c, shape, rope)));
        }
    }
    rows
}

/// Each sequence's last row through a logits product, read back as argmax (fused into the
/// product on the GPU executors) and as logits: three sequences of a four-token decode graph,
/// and a 33-token graph of five.
pub fn readback() -> Vec<Row> {
    let mut rows = Vec::new();
    for t in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16] {
        rows.push(row(format!("sequences logits+argmax {t}"), tol::FUSED, &[t], move |c: &mut Case| {
            let ne = 256;
            let tx = c.table(ne, 3.0);
            let w = c.weight(t, ne, 5003);
            c.kv(4 * KV_BLOCK, &[]);
            let mut ids = Vec::new();
            for (n_tok, n_seqs) in [(4, 3), (33, 5)] {
                let mut g = graph(n_tok, &[(tx, ne)], |g, s| {
                    let last = g.act(Rows::Last, ne);
                    g.push(Op::TakeLast { x: s[0], dst: last });
                    let logits = g.act(Rows::Last, 5003);
                    g.push(Op::MatMul { w, x: last, dst: logits, bias: None });
                    logits
                });
                g.n_seqs = n_seqs;
                ids.push(c.graph(g));
            }
            let t = |i: u32| vec![i];
            for rb in [Readback::Argmax, Readback::LastLogits, Readback::Argmax] {
                c.step_seqs(ids[0], &[(0, 2, t(0)), (0, 1, t(1)), (3, 1, t(2))], Expect::Close(rb));
                c.step_seqs(ids[0], &[(0, 1, t(0)), (0, 3, t(1))], Expect::Close(rb));
                let five = [(0, 10, t(0)), (5, 1, t(1)), (0, 9, t(2)), (7, 13, t(3))];
                c.step_seqs(ids[1], &five, Expect::Close(rb));
            }
        }));
    }
    rows
}
