//! The decode plan: a one-token graph's ops regrouped into fewer kernel launches.
//!
//! A decode step is a few hundred small kernels, and at 1B parameters the fixed cost of each
//! launch (even replayed from a CUDA graph) is a large share of the step. Four fusions, each
//! computing exactly the values of the ops it replaces:
//! - a whole-row RMSNorm and the q8 conversion of its output for the next matrix product
//!   (one kernel instead of two);
//! - the q8 conversion of a matrix product's input is reused by the next products of the
//!   same input (Q, K and V take one conversion, not three);
//! - the gate and up projections and their gated activation (one kernel instead of three;
//!   the up projection's output is never written);
//! - a matrix product and the residual add after it (the add is the product's epilogue).
//!
//! A fusion applies only where the slot it skips writing is dead afterwards (read by no
//! later op before being overwritten, and not the logits).

use super::super::{ActId, Gate, Graph, Op, WeightId};

/// The q8 format a decode matrix product wants its input in (the split layout of
/// kernels/quantize.cu); the value is the `kind` argument of `rms_norm_q8s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActQuant {
    Q8_0 = 0,
    Q8_1 = 1,
    Q8K = 2,
}

/// One launch (or a few) of the decode plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Op `i` of the graph, launched as without the plan.
    Op(usize),
    /// RMSNorm op `i` (over whole rows), its output also converted to `kind`.
    NormQuant { op: usize, kind: ActQuant },
    /// Three products of the converted slot with weights of one type, in one launch.
    MatVec3 { w: [WeightId; 3], bias: [Option<WeightId>; 3], dst: [ActId; 3] },
    /// Rope ops `op` (queries) and `op + 1` (keys) and KV store `op + 2`, in one launch.
    RopeKv { op: usize },
    /// Convert slot `x` to `kind`.
    Quant { x: ActId, kind: ActQuant },
    /// dst = W·x (+ bias) (+ add), or with `gate`: dst = act(W·x) · (W2·x). x is the slot
    /// converted last. `argmax`: dst is the logits, and the product also keeps their argmax
    /// (so no separate argmax kernel reads them again).
    MatVec {
        w: WeightId,
        gate: Option<(WeightId, Gate)>,
        bias: Option<WeightId>,
        add: Option<ActId>,
        dst: ActId,
        argmax: bool,
    },
}

/// The decode plan of a one-token graph. `kind` gives the q8 format a weight's decode kernel
/// wants, or None when it has no decode kernel (float weights: launched as plain ops).
pub fn plan(
    g: &Graph,
    kind: impl Fn(WeightId) -> Option<ActQuant>,
    same_type: impl Fn(WeightId, WeightId) -> bool,
) -> Vec<Step> {
    let ops = &g.ops;
    let mut steps = Vec::with_capacity(ops.len());
    // The slot whose conversion the q8 scratch holds.
    let mut have: Option<(ActId, ActQuant)> = None;
    let mut i = 0;
    while i < ops.len() {
        let mut written: Vec<ActId> = Vec::new();
        match ops[i] {
            Op::RmsNorm { x, dst, group, .. } if group == g.cols(x) => {
                match next_conversion(g, i, dst, &kind) {
                    // The fused kernel: 256 values a block, q8_K blocks whole.
                    Some(k) if k != ActQuant::Q8K || group % 256 == 0 => {
                        steps.push(Step::NormQuant { op: i, kind: k });
                        have = Some((dst, k));
                        i += 1;
                        continue;
                    }
                    _ => {
                        steps.push(Step::Op(i));
                        written.push(dst);
                    }
                }
            }
            Op::MatMul { w, x, dst, bias } if kind(w).is_some() => {
                let k = kind(w).unwrap_or(ActQuant::Q8_0);
                if have != Some((x, k)) {
                    steps.push(Step::Quant { x, kind: k });
                    have = Some((x, k));
                }
                // Gate and up projections of the same input, then their gated activation.
                if let (
                    Some(&Op::MatMul { w: w2, x: x2, dst: d2, bias: None }),
                    Some(&Op::GatedAct { gate, up, act }),
                ) = (ops.get(i + 1), ops.get(i + 2))
                {
                    let pair = (gate == dst && up == d2) || (gate == d2 && up == dst);
                    if bias.is_none()
                        && x2 == x
                        && d2 != dst
                        && d2 != x
                        && kind(w2) == Some(k)
                        && pair
                        && g.dead_after(i + 2, up)
                    {
                        let (wg, wu) = if gate == dst { (w, w2) } else { (w2, w) };
                        steps.push(Step::MatVec {
                            w: wg,
                            gate: Some((wu, act)),
                            bias: None,
                            add: None,
                            dst: gate,
                            argmax: false,
                        });
                        if have.is_some_and(|(h, _)| h == gate) {
                            have = None;
                        }
                        i += 3;
                        continue;
                    }
                }
                // Three products of the same input (Q, K, V).
                if let (
                    Some(&Op::MatMul { w: w1, x: x1, dst: d1, bias: b1 }),
                    Some(&Op::MatMul { w: w2, x: x2, dst: d2, bias: b2 }),
                ) = (ops.get(i + 1), ops.get(i + 2))
                {
                    let distinct = dst != d1 && dst != d2 && d1 != d2 && ![dst, d1, d2].contains(&x);
                    if x1 == x && x2 == x && distinct && same_type(w, w1) && same_type(w, w2) {
                        steps.push(Step::MatVec3 {
                            w: [w, w1, w2],
                            bias: [bias, b1, b2],
                            dst: [dst, d1, d2],
                        });
                        if have.is_some_and(|(h, _)| [dst, d1, d2].contains(&h)) {
                            have = None;
                        }
                        i += 3;
                        continue;
                    }
                }
                // A residual add of the product.
                if let Some(&Op::Add { a, b, dst: sum }) = ops.get(i + 1) {
                    if (a == dst) != (b == dst) && (sum == dst || g.dead_after(i + 1, dst)) {
                        let other = if a == dst { b } else { a };
                        steps.push(Step::MatVec {
                            w,
                            gate: None,
                            bias,
                            add: Some(other),
                            dst: sum,
                            argmax: false,
                        });
                        if have.is_some_and(|(h, _)| h == sum) {
                            have = None;
                        }
                        i += 2;
                        continue;
                    }
                }
                steps.push(Step::MatVec { w, gate: None, bias, add: None, dst, argmax: dst == g.logits });
                written.push(dst);
            }
            Op::Rope { x: q, head_dim, n_rot, base, freq_scale, mode, .. } => {
                // The keys' rope: same rotation, another slot (n_heads differs).
                let same = |o: Option<&Op>| match o {
                    Some(&Op::Rope { x, head_dim: d, n_rot: r, base: b, freq_scale: f, mode: m, .. }) => {
                        let key = (d, r, b.to_bits(), f.to_bits(), m);
                        (key == (head_dim, n_rot, base.to_bits(), freq_scale.to_bits(), mode)).then_some(x)
                    }
                    _ => None,
                };
                if let (Some(k), Some(&Op::KvStore { k: sk, v, .. })) = (same(ops.get(i + 1)), ops.get(i + 2))
                {
                    if sk == k && k != q && v != q && v != k {
                        steps.push(Step::RopeKv { op: i });
                        if have.is_some_and(|(h, _)| h == q || h == k) {
                            have = None;
                        }
                        i += 3;
                        continue;
                    }
                }
                steps.push(Step::Op(i));
                written.push(q);
            }
            ref op => {
                steps.push(Step::Op(i));
                written = op.reads_writes().1;
                // Float-weight products convert their input into the same scratch.
                if matches!(op, Op::MatMul { .. }) {
                    have = None;
                }
            }
        }
        if have.is_some_and(|(h, _)| written.contains(&h)) {
            have = None;
        }
        i += 1;
    }
    steps
}

/// The conversion the first matrix product reading `a` after op `i` wants, if one reads it
/// before it is overwritten.
fn next_conversion(
    g: &Graph,
    i: usize,
    a: ActId,
    kind: &impl Fn(WeightId) -> Option<ActQuant>,
) -> Option<ActQuant> {
    for op in &g.ops[i + 1..] {
        if let Op::MatMul { w, x, .. } = *op {
            if x == a {
                return kind(w);
            }
        }
        if op.reads_writes().1.contains(&a) {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Rows;

    /// A llama-style block: norm, Q/K/V, attention, output + residual, norm, gate/up, down +
    /// residual, and the logits.
    #[test]
    fn llama_block_fuses() {
        let mut g = Graph::new(1);
        let x = g.act(Rows::All, 64);
        let n = g.act(Rows::All, 64);
        let q = g.act(Rows::All, 64);
        let k = g.act(Rows::All, 16);
        let v = g.act(Rows::All, 16);
        let att = g.act(Rows::All, 64);
        let t = g.act(Rows::All, 64);
        let gt = g.act(Rows::All, 128);
        let up = g.act(Rows::All, 128);
        let logits = g.act(Rows::All, 100);
        let w = |i| WeightId(i);
        g.push(Op::Embed { table: w(0), dst: x, scale: 1.0 });
        g.push(Op::RmsNorm { x, weight: w(1), dst: n, group: 64, eps: 1e-5 });
        g.push(Op::MatMul { w: w(2), x: n, dst: q, bias: None });
        g.push(Op::MatMul { w: w(3), x: n, dst: k, bias: None });
        g.push(Op::MatMul { w: w(4), x: n, dst: v, bias: None });
        let rope = |x, n_heads| Op::Rope {
            x,
            n_heads,
            head_dim: 16,
            n_rot: 16,
            base: 1e4,
            freq_scale: 1.0,
            mode: crate::exec::RopeMode::Neox,
        };
        g.push(rope(q, 4));
        g.push(rope(k, 1));
        g.push(Op::KvStore { layer: 0, k, v });
        g.push(Op::Attention {
            layer: 0,
            q,
            dst: att,
            n_heads: 4,
            n_kv_heads: 1,
            head_dim: 16,
            scale: 0.25,
            window: None,
            softcap: None,
        });
        g.push(Op::MatMul { w: w(5), x: att, dst: t, bias: None });
        g.push(Op::Add { a: x, b: t, dst: x });
        g.push(Op::RmsNorm { x, weight: w(6), dst: n, group: 64, eps: 1e-5 });
        g.push(Op::MatMul { w: w(7), x: n, dst: gt, bias: None });
        g.push(Op::MatMul { w: w(8), x: n, dst: up, bias: None });
        g.push(Op::GatedAct { gate: gt, up, act: Gate::Silu });
        g.push(Op::MatMul { w: w(9), x: gt, dst: t, bias: None });
        g.push(Op::Add { a: x, b: t, dst: x });
        g.push(Op::RmsNorm { x, weight: w(1), dst: n, group: 64, eps: 1e-5 });
        g.push(Op::MatMul { w: w(0), x: n, dst: logits, bias: None });
        g.logits = logits;
        let q8 = ActQuant::Q8_0;
        let steps = plan(&g, |_| Some(q8), |_, _| true);
        let mv = |i, add: Option<ActId>, dst| Step::MatVec {
            w: w(i),
            gate: None,
            bias: None,
            add,
            dst,
            argmax: dst == logits,
        };
        assert_eq!(
            steps,
            vec![
                Step::Op(0),
                Step::NormQuant { op: 1, kind: q8 },
                Step::MatVec3 { w: [w(2), w(3), w(4)], bias: [None; 3], dst: [q, k, v] },
                Step::RopeKv { op: 5 },
                Step::Op(8),
                Step::Quant { x: att, kind: q8 },
                mv(5, Some(x), x),
                Step::NormQuant { op: 11, kind: q8 },
                Step::MatVec {
                    w: w(7),
                    gate: Some((w(8), Gate::Silu)),
                    bias: None,
                    add: None,
                    dst: gt,
                    argmax: false
                },
                Step::Quant { x: gt, kind: q8 },
                mv(9, Some(x), x),
                Step::NormQuant { op: 17, kind: q8 },
                mv(0, None, logits),
            ]
        );
        // Float weights are left as ops, and their conversion is not reused.
        let steps = plan(&g, |wi| (wi != w(3)).then_some(q8), |a, b| a == b);
        assert_eq!(
            &steps[2..6],
            &[mv(2, None, q), Step::Op(3), Step::Quant { x: n, kind: q8 }, mv(4, None, v)]
        );
    }

    /// A product whose output is read again is not fused with the add after it.
    #[test]
    fn live_outputs_are_kept() {
        let mut g = Graph::new(1);
        let x = g.act(Rows::All, 32);
        let t = g.act(Rows::All, 32);
        let y = g.act(Rows::All, 32);
        g.push(Op::MatMul { w: WeightId(0), x, dst: t, bias: None });
        g.push(Op::Add { a: x, b: t, dst: y });
        g.push(Op::Add { a: y, b: t, dst: y });
        g.logits = y;
        let steps = plan(&g, |_| Some(ActQuant::Q8K), |_, _| true);
        assert!(matches!(steps[1], Step::MatVec { add: None, dst, .. } if dst == t), "{steps:?}");
    }
}
