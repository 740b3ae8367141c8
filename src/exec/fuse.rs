//! The fusion planner of the GPU executors: a graph's ops regrouped into fewer launches.
//!
//! A decode step is a few hundred small kernels, and at 1B parameters the fixed cost of each
//! launch is a large share of the step. The planner finds the patterns once, for every
//! executor; each executor states in [`Capabilities`] which fused kernels it has and what they
//! write, and gets back the [`Step`]s to launch. Every fusion computes exactly the values of
//! the ops it replaces:
//! - a whole-row RMSNorm and the q8 conversion of its output for a matrix product;
//! - where the executor keeps one converted input in a scratch, the conversion is reused by
//!   the next products of the same input (Q, K and V take one conversion, not three);
//! - three products of one input (Q, K and V) in one launch;
//! - the gate and up products and their gated activation in one launch;
//! - a matrix product and the residual add after it (the add is the product's epilogue), and
//!   the logits' product keeping their argmax;
//! - RoPE of the queries and of the keys and the KV store after them, in one launch.
//!
//! A fusion that skips writing a slot applies only where that slot is dead afterwards (read by
//! no later op before being overwritten, and not the logits: [`Graph::dead_after`]).

use super::{ActId, Gate, Graph, Op, WeightId};

/// The q8 format a matrix product wants its input in (the value is the `kind` of the CUDA
/// `rms_norm_q8s` kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActQuant {
    /// 32-value blocks: scale and quants.
    Q8_0 = 0,
    /// 32-value blocks: scale, scaled sum and quants.
    Q8_1 = 1,
    /// 256-value super-blocks (the K-quants' partner).
    Q8K = 2,
}

/// The q8 format a product reads its input in (None: floats).
pub type QuantOf<'a> = Box<dyn Fn(&Op) -> Option<ActQuant> + 'a>;
/// Whether a gate product, an up product and their activation can run as one launch.
pub type PairTest<'a> = Box<dyn Fn(&Op, &Op, Gate) -> bool + 'a>;
/// Whether some products can run as one launch.
pub type OpsTest<'a> = Box<dyn Fn(&[Op]) -> bool + 'a>;

/// The RMSNorm + q8 conversion kernel an executor has.
#[derive(Debug, Clone, Copy)]
pub struct NormQuant {
    /// It converts for the first product reading the norm's output even when other ops come
    /// between (else only for a product right after the norm).
    pub later_product: bool,
    /// q8_0 and q8_1 rows of any length (else every format needs whole 256-value blocks; q8_K
    /// always does).
    pub any_length: bool,
    /// The norm may write its output over its input.
    pub in_place: bool,
}

/// What a product's residual-add epilogue writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// The sum only, into the add's destination (the product's own slot is not written, so it
    /// must be dead, unless it is the destination); the product reads its converted input,
    /// so the destination may be the input.
    Sum,
    /// Into the add's destination, which must be the add's other operand (`r += W·x`), and
    /// the product's own slot too; the product reads its input slot, so the destination must
    /// not be it.
    InPlace,
}

/// The gate/up kernel an executor has.
pub struct GateUp<'a> {
    /// The up product's slot is written too (else it must be dead after the activation).
    pub writes_up: bool,
    /// The gate may be either product (else the first).
    pub either_order: bool,
    /// Whether the gate product, the up product and the activation can run as one launch.
    pub pair: PairTest<'a>,
}

/// The three-product kernel an executor has.
pub struct Triple<'a> {
    /// Products with a bias may be fused.
    pub bias: bool,
    /// Whether these three products (of one input) can run as one launch.
    pub same: OpsTest<'a>,
}

/// The RoPE + RoPE + KV store kernel an executor has.
#[derive(Debug, Clone, Copy)]
pub struct RopeKv {
    /// The rotated keys are written to their slot too (else it must be dead after the store).
    pub writes_keys: bool,
    /// It stores values in pairs (a value row must have an even length).
    pub even_values: bool,
}

/// What an executor can fuse. `None`: that fusion is not planned.
pub struct Capabilities<'a> {
    /// The q8 format a product (a MatMul op) reads its input in; None where it reads floats.
    pub quant: QuantOf<'a>,
    /// Products reading floats may be fused too (else they stay plain ops).
    pub float_products: bool,
    /// One converted input is kept in a scratch and reused by later products of the same
    /// input: the plan says where conversions happen ([`Step::Quant`]).
    pub shared_conversion: bool,
    /// RMSNorm with the conversion of its output.
    pub norm_quant: Option<NormQuant>,
    /// A product with the residual add after it.
    pub epilogue: Option<Epilogue>,
    /// The logits' product keeps their argmax.
    pub argmax: bool,
    /// Gate and up with their activation.
    pub gate_up: Option<GateUp<'a>>,
    /// Three products of one input.
    pub triple: Option<Triple<'a>>,
    /// RoPE of queries and keys with the KV store.
    pub rope_kv: Option<RopeKv>,
}

/// One launch (or a few) of the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Op `i` of the graph, launched as without the plan.
    Op(usize),
    /// RMSNorm op `op` (over whole rows), its output also converted to `kind`.
    NormQuant { op: usize, kind: ActQuant },
    /// Products `op`, `op + 1`, `op + 2` of one input, in one launch.
    MatVec3 { op: usize, w: [WeightId; 3], bias: [Option<WeightId>; 3], dst: [ActId; 3] },
    /// Rope ops `op` (queries) and `op + 1` (keys) and KV store `op + 2`, in one launch.
    RopeKv { op: usize },
    /// Convert slot `x` to `kind` (executors with a shared conversion).
    Quant { x: ActId, kind: ActQuant },
    /// Product op `op`: dst = W·x (+ bias) (+ add), or with `gate`: dst = act(W·x) · (W2·x)
    /// (ops `op` to `op + 2`; `w` is the gate's weight). With `add`, the Add op `op + 1` is
    /// done too and `dst` is its destination. `argmax`: dst is the logits, and the product
    /// also keeps their argmax (so no separate argmax kernel reads them again).
    MatVec {
        op: usize,
        w: WeightId,
        gate: Option<(WeightId, Gate)>,
        bias: Option<WeightId>,
        add: Option<ActId>,
        dst: ActId,
        argmax: bool,
    },
}

/// The plan of `g` for an executor that can do `caps`.
pub fn plan(g: &Graph, caps: &Capabilities) -> Vec<Step> {
    let ops = &g.ops;
    let quant = |op: &Op| (caps.quant)(op);
    let n = |a: ActId| g.rows(a) * g.cols(a);
    let mut steps = Vec::with_capacity(ops.len());
    // The slot whose conversion the shared scratch holds.
    let mut have: Option<(ActId, ActQuant)> = None;
    let mut i = 0;
    while i < ops.len() {
        let mut written: Vec<ActId> = Vec::new();
        match ops[i] {
            Op::RmsNorm { x, dst, group, .. }
                if caps.norm_quant.is_some_and(|nq| nq.in_place || x != dst)
                    && group == g.cols(x)
                    && g.cols(dst) == group =>
            {
                let kind = caps.norm_quant.and_then(|nq| {
                    let k = conversion_after(g, i, dst, nq.later_product, &quant)?;
                    ((nq.any_length && k != ActQuant::Q8K) || group % 256 == 0).then_some(k)
                });
                if let Some(k) = kind {
                    steps.push(Step::NormQuant { op: i, kind: k });
                    if caps.shared_conversion {
                        have = Some((dst, k));
                    }
                    i += 1;
                    continue;
                }
                steps.push(Step::Op(i));
                written.push(dst);
            }
            Op::MatMul { w, x, dst, bias } if caps.float_products || quant(&ops[i]).is_some() => {
                if let (true, Some(k)) = (caps.shared_conversion, quant(&ops[i])) {
                    if have != Some((x, k)) {
                        steps.push(Step::Quant { x, kind: k });
                        have = Some((x, k));
                    }
                }
                // Three products of the same input (Q, K, V), unless the last two are a gate
                // and up pair.
                if let (Some(t), Some(three)) = (&caps.triple, ops.get(i..i + 3)) {
                    if let [_, Op::MatMul { w: w1, x: x1, dst: d1, bias: b1 }, Op::MatMul { w: w2, x: x2, dst: d2, bias: b2 }] =
                        *three
                    {
                        let distinct = dst != d1 && dst != d2 && d1 != d2 && ![dst, d1, d2].contains(&x);
                        let gated = matches!(ops.get(i + 3), Some(Op::GatedAct { .. }));
                        let biased = bias.is_some() || b1.is_some() || b2.is_some();
                        if x1 == x && x2 == x && distinct && !gated && (t.bias || !biased) && (t.same)(three)
                        {
                            steps.push(Step::MatVec3 {
                                op: i,
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
                }
                // Gate and up projections of the same input, then their gated activation.
                if let (
                    Some(gu),
                    Some(&Op::MatMul { w: w2, x: x2, dst: d2, bias: None }),
                    Some(&Op::GatedAct { gate, up, act }),
                ) = (&caps.gate_up, ops.get(i + 1), ops.get(i + 2))
                {
                    let ordered = (gate == dst && up == d2) || (gu.either_order && gate == d2 && up == dst);
                    if bias.is_none()
                        && x2 == x
                        && d2 != dst
                        && d2 != x
                        && dst != x
                        && ordered
                        && (gu.writes_up || g.dead_after(i + 2, up))
                    {
                        let (gi, ui) = if gate == dst { (i, i + 1) } else { (i + 1, i) };
                        let (wg, wu) = if gate == dst { (w, w2) } else { (w2, w) };
                        if (gu.pair)(&ops[gi], &ops[ui], act) {
                            steps.push(Step::MatVec {
                                op: i,
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
                }
                // A residual add of the product.
                if let (Some(ep), Some(&Op::Add { a, b, dst: sum })) = (caps.epilogue, ops.get(i + 1)) {
                    let fits = match ep {
                        Epilogue::Sum => (a == dst) != (b == dst) && (sum == dst || g.dead_after(i + 1, dst)),
                        Epilogue::InPlace => {
                            let other = if a == sum {
                                Some(b)
                            } else if b == sum {
                                Some(a)
                            } else {
                                None
                            };
                            other == Some(dst) && sum != dst && sum != x && n(sum) == n(dst)
                        }
                    };
                    if fits {
                        let other = if a == dst { b } else { a };
                        steps.push(Step::MatVec {
                            op: i,
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
                let argmax = caps.argmax && dst == g.logits;
                steps.push(Step::MatVec { op: i, w, gate: None, bias, add: None, dst, argmax });
                written.push(dst);
            }
            Op::Rope { x: q, head_dim, n_rot, base, freq_scale, mode, freqs, ext, .. }
                if caps.rope_kv.is_some() =>
            {
                // The keys' rope: same rotation, another slot (n_heads differs).
                let keys = match ops.get(i + 1) {
                    Some(&Op::Rope {
                        x,
                        n_heads,
                        head_dim: d,
                        n_rot: r,
                        base: b,
                        freq_scale: f,
                        mode: m,
                        freqs: ff,
                        ext: e,
                    }) => {
                        let key = (d, r, b.to_bits(), f.to_bits(), m, ff);
                        (key == (head_dim, n_rot, base.to_bits(), freq_scale.to_bits(), mode, freqs)
                            && e == ext)
                            .then_some((x, n_heads))
                    }
                    _ => None,
                };
                let fused = match (caps.rope_kv, keys, ops.get(i + 2)) {
                    (Some(rk), Some((k, nk)), Some(&Op::KvStore { k: sk, v, .. })) => {
                        sk == k
                            && k != q
                            && v != q
                            && v != k
                            && g.rows(q) == g.rows(k)
                            && g.rows(v) == g.rows(k)
                            && nk * head_dim == g.cols(k)
                            && (!rk.even_values || g.cols(v).is_multiple_of(2))
                            && (rk.writes_keys || g.dead_after(i + 2, k))
                    }
                    _ => false,
                };
                if fused {
                    let k = keys.map_or(q, |(k, _)| k);
                    steps.push(Step::RopeKv { op: i });
                    if have.is_some_and(|(h, _)| h == q || h == k) {
                        have = None;
                    }
                    i += 3;
                    continue;
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

/// The conversion wanted by the product reading `a` that follows op `i`: the next op only, or
/// with `later` the first product reading `a` before it is overwritten.
fn conversion_after(
    g: &Graph,
    i: usize,
    a: ActId,
    later: bool,
    quant: &impl Fn(&Op) -> Option<ActQuant>,
) -> Option<ActQuant> {
    let rest = if later { &g.ops[i + 1..] } else { g.ops.get(i + 1..(i + 2).min(g.ops.len()))? };
    for op in rest {
        if let Op::MatMul { x, .. } = *op {
            if x == a {
                return quant(op);
            }
        }
        if op.reads_writes().1.contains(&a) {
            return None;
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests;
