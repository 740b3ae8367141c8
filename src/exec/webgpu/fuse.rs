//! Which ops of a graph the WebGPU executor fuses into one dispatch (`WICK_WEBGPU_FUSE=0`
//! turns them all off). Every fusion computes exactly the values of the ops it replaces, in
//! the same order of float operations:
//! - a matrix product and the in-place residual add after it: the add is the product's
//!   epilogue (the product's own output is still written);
//! - RoPE of the queries, RoPE of the keys and the KV store after them: one dispatch, where
//!   the key slot is dead after the store (the rotated keys then go to the cache only);
//! - a whole-row RMSNorm (into another slot) and the q8 quantization of its output that the
//!   next matrix product needs: one dispatch (each workgroup recomputes the row's sum of
//!   squares in the order the RMSNorm kernel uses, then normalizes and quantizes one
//!   256-value piece).
//!
//! - the gate and up products and SiLU (cooperative kernels, weights of one type and shape in
//!   one part each): one dispatch computing both products of its rows (the up slot is still
//!   written).
//!
//! - three products of one input (Q, K and V; cooperative kernels, no bias, one part each,
//!   where the device allows 10 storage buffers per stage): one dispatch whose workgroups are
//!   split between the three matrices. Natively with `shader-f16` only: on an H100 the op
//!   tests of the f32 path (`WICK_WEBGPU_F16=0`) did not finish within the time allowed once
//!   this fusion existed (they had in 9 s before; the cause was not found), and browsers'
//!   compilers have not run it.
//!
//! A decode step of a Llama-like model goes from 22 dispatches per layer to 11.

use std::collections::{HashMap, HashSet};

use crate::exec::{ActId, Gate, Graph, Op};

/// The fusions chosen for a graph, by op index.
#[derive(Debug, Default)]
pub struct Fusions {
    /// Matrix product op → the slot its epilogue adds the result into (the next op, an Add).
    pub add_into: HashMap<usize, ActId>,
    /// Rope op (queries) → it, the next Rope (keys) and the KvStore after run as one dispatch.
    pub rope_kv: HashSet<usize>,
    /// Product op → it and the two products after it (same input; Q, K, V) as one dispatch.
    pub triple: HashSet<usize>,
    /// Gate product op → it, the up product after it and the SiLU after that as one dispatch.
    pub gate_up: HashSet<usize>,
    /// RMSNorm ops whose dispatch also quantizes the output for the next op (a matrix product).
    pub norm_quant: HashSet<usize>,
    /// Ops done by an earlier op's fused dispatch.
    pub skip: HashSet<usize>,
}

/// Whether fusions are on (`WICK_WEBGPU_FUSE` is not `0`).
pub fn enabled() -> bool {
    std::env::var("WICK_WEBGPU_FUSE").map_or(true, |v| v != "0")
}

/// Choose the fusions of `g`. `quantized(op)`: whether matrix product `op` reads quantized
/// activations (then a preceding RMSNorm may quantize for it); `pair(a, b)`: whether products
/// `a` and `b` can run as one gated dispatch (weights of one type and shape, kernels that can);
/// `triple(ops)`: whether three products of one input can run as one dispatch.
pub fn plan(
    g: &Graph,
    quantized: impl Fn(&Op) -> bool,
    pair: impl Fn(&Op, &Op) -> bool,
    triple: impl Fn(&[Op]) -> bool,
) -> Fusions {
    let mut f = Fusions::default();
    let ops = &g.ops;
    let n = |a: ActId| g.rows(a) * g.cols(a);
    for i in 0..ops.len() {
        if f.skip.contains(&i) {
            continue;
        }
        let next = ops.get(i + 1);
        if let Some(
            three @
            [Op::MatMul { x, dst: d1, bias: None, .. }, Op::MatMul { x: x2, dst: d2, bias: None, .. }, Op::MatMul { x: x3, dst: d3, bias: None, .. }],
        ) = ops.get(i..i + 3)
        {
            let distinct = d1 != d2 && d1 != d3 && d2 != d3 && ![*d1, *d2, *d3].contains(x);
            let gated = matches!(ops.get(i + 3), Some(Op::GatedAct { .. }));
            if x2 == x && x3 == x && distinct && !gated && triple(three) {
                f.triple.insert(i);
                f.skip.insert(i + 1);
                f.skip.insert(i + 2);
                continue;
            }
        }
        match (&ops[i], next) {
            (
                m1 @ &Op::MatMul { x, dst: gate, bias: None, .. },
                Some(m2 @ &Op::MatMul { x: x2, dst: up, bias: None, .. }),
            ) if matches!(ops.get(i + 2), Some(&Op::GatedAct { gate: g2, up: u2, act: Gate::Silu }) if g2 == gate && u2 == up)
                && x2 == x
                && gate != up
                && x != gate
                && x != up
                && pair(m1, m2) =>
            {
                f.gate_up.insert(i);
                f.skip.insert(i + 1);
                f.skip.insert(i + 2);
            }
            (&Op::MatMul { x, dst, .. }, Some(&Op::Add { a, b, dst: r })) => {
                let other = if a == r {
                    b
                } else if b == r {
                    a
                } else {
                    continue;
                };
                if other == dst && r != dst && r != x && n(r) == n(dst) {
                    f.add_into.insert(i, r);
                    f.skip.insert(i + 1);
                }
            }
            (
                &Op::Rope { x: q, head_dim, n_rot, base, freq_scale, mode, .. },
                Some(&Op::Rope {
                    x: k,
                    n_heads: nk,
                    head_dim: hd2,
                    n_rot: nr2,
                    base: b2,
                    freq_scale: fs2,
                    mode: m2,
                }),
            ) => {
                let Some(&Op::KvStore { k: sk, v, .. }) = ops.get(i + 2) else { continue };
                let same = head_dim == hd2 && n_rot == nr2 && base == b2 && freq_scale == fs2 && mode == m2;
                if same
                    && sk == k
                    && q != k
                    && v != q
                    && v != k
                    && g.rows(q) == g.rows(k)
                    && g.rows(v) == g.rows(k)
                    && nk * head_dim == g.cols(k)
                    && g.cols(v) % 2 == 0
                    && g.dead_after(i + 2, k)
                {
                    f.rope_kv.insert(i);
                    f.skip.insert(i + 1);
                    f.skip.insert(i + 2);
                }
            }
            (&Op::RmsNorm { x, dst, group, .. }, Some(m @ &Op::MatMul { x: mx, .. })) => {
                if x != dst
                    && mx == dst
                    && group == g.cols(x)
                    && g.cols(dst) == group
                    && group % 256 == 0
                    && quantized(m)
                {
                    f.norm_quant.insert(i);
                }
            }
            _ => {}
        }
    }
    f
}
