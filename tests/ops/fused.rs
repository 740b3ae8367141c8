//! The rows of the patterns the GPU executors fuse, each as the ops a model emits (the
//! executor finds the pattern itself): RMSNorm into the next product's q8 conversion; the
//! three products of one input (Q, K, V); gate and up products with the gated activation;
//! a product with the residual add after it; RoPE of queries and keys with the KV store; the
//! logits product with the argmax; and a whole Llama-like layer of all of them.

use wick::exec::{ActId, Gate, Graph, Op, Readback, RopeExt, RopeMode, Rows, WeightId};
use wick::quant::GgmlType;

use super::{graph, row, tol, Case, Expect, Row, VOCAB};

/// Weight types of the fused products, with the token rows each is tried at.
const PRODUCTS: [(GgmlType, usize); 6] = [
    (GgmlType::Q4_K, 1),
    (GgmlType::Q8_0, 3),
    (GgmlType::Q6_K, 17),
    (GgmlType::Q4_0, 1),
    (GgmlType::F16, 16),
    (GgmlType::Q5_1, 64),
];

/// Hidden width of the fused rows.
const NE: usize = 512;

/// RMSNorm of the embedded input into `h`, for the products that follow.
fn norm(c: &mut Case, g: &mut Graph, x: ActId) -> ActId {
    let w = c.weight(GgmlType::F32, NE, 1);
    let h = g.act(Rows::All, NE);
    g.push(Op::RmsNorm { x, weight: w, dst: h, group: NE, eps: 1e-5 });
    h
}

fn matmul(g: &mut Graph, w: WeightId, x: ActId, n: usize) -> ActId {
    let dst = g.act(Rows::All, n);
    g.push(Op::MatMul { w, x, dst, bias: None });
    dst
}

/// A row of a fused pattern over the embedded input: `body` builds the ops after it.
fn pattern(
    name: &str,
    t: GgmlType,
    n_tok: usize,
    body: fn(&mut Case, &mut Graph, ActId, GgmlType) -> ActId,
) -> Row {
    let types = [t, GgmlType::Q4_K, GgmlType::Q6_K];
    row(format!("fused {name} {t} rows={n_tok}"), tol::FUSED, &types, move |c: &mut Case| {
        let tx = c.table(NE, 3.0);
        let mut g = Graph::new(n_tok);
        let x = g.act(Rows::All, NE);
        g.push(Op::Embed { table: tx, dst: x, scale: 1.0 });
        g.logits = body(c, &mut g, x, t);
        let g = c.graph(g);
        c.step(g, 0);
    })
}

/// Every fused pattern but the layer, for each product type.
pub fn patterns() -> Vec<Row> {
    let mut rows = Vec::new();
    for (t, n_tok) in PRODUCTS {
        rows.push(pattern("rms_norm+matmul", t, n_tok, |c, g, x, t| {
            let h = norm(c, g, x);
            let w = c.weight(t, NE, 300);
            matmul(g, w, h, 300)
        }));
        rows.push(pattern("q,k,v of one input", t, n_tok, |c, g, x, t| {
            let h = norm(c, g, x);
            let (wq, wk, wv) =
                (c.weight(t, NE, 256), c.weight(GgmlType::Q4_K, NE, 128), c.weight(GgmlType::Q6_K, NE, 128));
            let (q, k, v) = (matmul(g, wq, h, 256), matmul(g, wk, h, 128), matmul(g, wv, h, 128));
            let (qk, out) = (g.act(Rows::All, 128), g.act(Rows::All, 128));
            // Every product is read: q's first half, k and v summed.
            let wsum = c.weight(GgmlType::F32, 256, 128);
            g.push(Op::MatMul { w: wsum, x: q, dst: qk, bias: None });
            g.push(Op::Add { a: k, b: v, dst: out });
            g.push(Op::Add { a: out, b: qk, dst: out });
            out
        }));
        rows.push(pattern("gate+up+silu", t, n_tok, |c, g, x, t| {
            let h = norm(c, g, x);
            let (wg, wu) = (c.weight(t, NE, 768), c.weight(t, NE, 768));
            let (gate, up) = (matmul(g, wg, h, 768), matmul(g, wu, h, 768));
            g.push(Op::GatedAct { gate, up, act: Gate::Silu });
            gate
        }));
        rows.push(pattern("gate+up+gelu", t, n_tok, |c, g, x, t| {
            let (wg, wu) = (c.weight(t, NE, 200), c.weight(t, NE, 200));
            let (gate, up) = (matmul(g, wg, x, 200), matmul(g, wu, x, 200));
            g.push(Op::GatedAct { gate, up, act: Gate::Gelu });
            gate
        }));
        rows.push(pattern("matmul+residual add", t, n_tok, |c, g, x, t| {
            let w = c.weight(t, NE, NE);
            let o = matmul(g, w, x, NE);
            g.push(Op::Add { a: x, b: o, dst: x });
            let w2 = c.weight(t, NE, NE);
            let o2 = matmul(g, w2, x, NE);
            g.push(Op::Add { a: o2, b: x, dst: x });
            x
        }));
        rows.push(pattern("logits", t, n_tok, |c, g, x, t| {
            let h = norm(c, g, x);
            let w = c.weight(t, NE, 5003);
            matmul(g, w, h, 5003)
        }));
    }
    // The logits product read back by the argmax on the device.
    for (t, n_tok) in PRODUCTS {
        rows.push(row(
            format!("fused logits+argmax {t} rows={n_tok}"),
            tol::FUSED,
            &[t],
            move |c: &mut Case| {
                let tx = c.table(NE, 3.0);
                let w = c.weight(t, NE, 5003);
                let g = c.graph(graph(n_tok, &[(tx, NE)], |g, s| matmul(g, w, s[0], 5003)));
                for rb in [Readback::Argmax, Readback::LastLogits, Readback::Argmax] {
                    c.step_with(g, 0, VOCAB, Expect::Close(rb));
                }
            },
        ));
    }
    rows.extend(rope_kv());
    rows
}

/// RoPE of the queries and keys with the KV store (fused into one kernel), over steps; plain,
/// and with Llama 3.1's frequency factors and YaRN at positions past 3000.
fn rope_kv() -> Vec<Row> {
    let mut rows = Vec::new();
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for scaled in [false, true] {
            for n_tok in [1, 3, 17] {
                let what = if scaled { " factors+yarn" } else { "" };
                rows.push(row(
                    format!("fused rope(q)+rope(k)+kv_store {mode:?}{what} rows={n_tok}"),
                    tol::ATTENTION,
                    &[],
                    move |c: &mut Case| rope_kv_case(c, mode, scaled, n_tok),
                ));
            }
        }
    }
    rows
}

fn rope_kv_case(c: &mut Case, mode: RopeMode, scaled: bool, n_tok: usize) {
    let (n_heads, n_kv, hd) = (4, 2, 64);
    let (qd, kd) = (n_heads * hd, n_kv * hd);
    let start = if scaled { 3000 } else { 0 };
    c.kv(start + 64, &[kd]);
    let (tq, tk, tv) = (c.table(qd, 2.0), c.table(kd, 2.0), c.table(kd, 1.0));
    let (freqs, freq_scale, ext) = if scaled {
        let f = wick::synth::llama3_rope_factors(hd, 500_000.0, 8.0, 1.0, 4.0, 8192.0);
        let (fs, ext) = super::cases::yarn(4.0, 1024, 1.0, 1.0);
        (Some(c.values(&f)), fs, ext)
    } else {
        (None, 1.0, RopeExt::default())
    };
    let g = c.graph(graph(n_tok, &[(tq, qd), (tk, kd), (tv, kd)], |g, s| {
        let rope = |x, n_heads| Op::Rope {
            x,
            n_heads,
            head_dim: hd,
            n_rot: hd,
            base: if scaled { 500_000.0 } else { 10000.0 },
            freq_scale,
            mode,
            freqs,
            ext,
        };
        g.push(rope(s[0], n_heads));
        g.push(rope(s[1], n_kv));
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
            window: None,
            softcap: None,
        });
        dst
    }));
    for i in 0..3 {
        c.step(g, start + i * n_tok);
    }
}

/// A Llama-like layer with model-like weights, every fusion at once, over four steps (with
/// history). With a residual of 1e5 times the block's output a lost residual add shows; with
/// one of the block's size, the block's own precision does.
pub fn layer() -> Vec<Row> {
    let mut rows = Vec::new();
    for (wt, mode, n_tok, residual) in [
        (GgmlType::Q4_K, RopeMode::Normal, 1, 1e5),
        (GgmlType::Q8_0, RopeMode::Neox, 3, 1e5),
        (GgmlType::Q6_K, RopeMode::Normal, 2, 1e5),
        (GgmlType::Q4_0, RopeMode::Normal, 1, 1e5),
        (GgmlType::F16, RopeMode::Normal, 17, 1e5),
        (GgmlType::Q4_K, RopeMode::Neox, 2, 1e5),
        (GgmlType::Q4_K, RopeMode::Normal, 1, 1.0),
        (GgmlType::Q8_0, RopeMode::Neox, 16, 1.0),
        (GgmlType::Q5_1, RopeMode::Normal, 33, 1.0),
    ] {
        let types = [wt, GgmlType::Q4_K, GgmlType::Q6_K];
        rows.push(row(
            format!("fused layer {wt} {mode:?} rows={n_tok} residual={residual:e}"),
            if residual > 1.0 { tol::FUSED } else { tol::LAYER },
            &types,
            move |c: &mut Case| {
                let (n_heads, n_kv, hd, nf) = (4, 2, 64, 768);
                let (qd, kd) = (n_heads * hd, n_kv * hd);
                c.kv(4 * n_tok, &[kd]);
                let tx = c.table(NE, residual);
                let (wq, wk, wv) = (
                    c.model_weight(wt, NE, qd),
                    c.model_weight(GgmlType::Q4_K, NE, kd),
                    c.model_weight(GgmlType::Q6_K, NE, kd),
                );
                let wo = c.model_weight(wt, qd, NE);
                let (wg, wu, wd) = (
                    c.model_weight(wt, NE, nf),
                    c.model_weight(wt, NE, nf),
                    c.model_weight(GgmlType::Q6_K, nf, NE),
                );
                let (n1, n2) = (c.weight(GgmlType::F32, NE, 1), c.weight(GgmlType::F32, NE, 1));
                let g = c.graph(graph(n_tok, &[(tx, NE)], |g, s| {
                    let x = s[0];
                    let h = g.act(Rows::All, NE);
                    g.push(Op::RmsNorm { x, weight: n1, dst: h, group: NE, eps: 1e-5 });
                    let (q, k, v) = (matmul(g, wq, h, qd), matmul(g, wk, h, kd), matmul(g, wv, h, kd));
                    let rope = |x, n_heads| Op::Rope {
                        x,
                        n_heads,
                        head_dim: hd,
                        n_rot: hd,
                        base: 10000.0,
                        freq_scale: 1.0,
                        mode,
                        freqs: None,
                        ext: RopeExt::default(),
                    };
                    g.push(rope(q, n_heads));
                    g.push(rope(k, n_kv));
                    g.push(Op::KvStore { layer: 0, k, v });
                    let att = g.act(Rows::All, qd);
                    let scale = 1.0 / (hd as f32).sqrt();
                    g.push(Op::Attention {
                        layer: 0,
                        q,
                        dst: att,
                        n_heads,
                        n_kv_heads: n_kv,
                        head_dim: hd,
                        scale,
                        window: None,
                        softcap: None,
                    });
                    let o = matmul(g, wo, att, NE);
                    g.push(Op::Add { a: x, b: o, dst: x });
                    g.push(Op::RmsNorm { x, weight: n2, dst: h, group: NE, eps: 1e-5 });
                    let (gate, up) = (matmul(g, wg, h, nf), matmul(g, wu, h, nf));
                    g.push(Op::GatedAct { gate, up, act: Gate::Silu });
                    g.push(Op::MatMul { w: wd, x: gate, dst: o, bias: None });
                    g.push(Op::Add { a: o, b: x, dst: x });
                    x
                }));
                for i in 0..4 {
                    c.step(g, i * n_tok);
                }
            },
        ));
    }
    rows
}
