//! Which ops of a graph the WebGPU executor fuses into one dispatch (`WICK_WEBGPU_FUSE=0`
//! turns them all off). The patterns are found by the shared planner (`exec/fuse.rs`); this
//! file says what the WebGPU kernels can do ([`capabilities`]) and turns the plan into the
//! per-op answers the compile loop reads ([`Fusions`]). Every fusion computes exactly the values of the ops it replaces, in
//! the same order of float operations:
//! - a matrix product and the in-place residual add after it: the add is the product's
//!   epilogue (the product's own output is still written);
//! - RoPE of the queries, RoPE of the keys and the KV store after them: one dispatch, where
//!   the key slot is dead after the store (the rotated keys then go to the cache only); its
//!   angles come from a table made once a step for all layers (rope_table.wgsl);
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

use crate::exec::fuse::{ActQuant, Capabilities, Epilogue, GateUp, NormQuant, RopeKv, Step, Triple};
use crate::exec::{ActId, Gate, Op};

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

/// The fusions of a plan made by the shared planner (`exec/fuse.rs`), by op index: the shape
/// the WebGPU compile loop reads.
pub fn from_steps(steps: &[Step]) -> Fusions {
    let mut f = Fusions::default();
    for s in steps {
        match *s {
            Step::NormQuant { op, .. } => {
                f.norm_quant.insert(op);
            }
            Step::MatVec3 { op, .. } => {
                f.triple.insert(op);
                f.skip.extend([op + 1, op + 2]);
            }
            Step::RopeKv { op } => {
                f.rope_kv.insert(op);
                f.skip.extend([op + 1, op + 2]);
            }
            Step::MatVec { op, gate: Some(_), .. } => {
                f.gate_up.insert(op);
                f.skip.extend([op + 1, op + 2]);
            }
            Step::MatVec { op, add: Some(_), dst, .. } => {
                f.add_into.insert(op, dst);
                f.skip.insert(op + 1);
            }
            Step::MatVec { .. } | Step::Op(_) | Step::Quant { .. } => {}
        }
    }
    f
}

/// What the WebGPU kernels can fuse, for the shared planner. `quant(op)`: the q8 format matrix
/// product `op` reads (None: it reads floats, or its rows are not whole 256-value blocks);
/// `pair(a, b)`: whether products `a` and `b` can run as one gated dispatch; `triple(ops)`:
/// whether three products of one input can run as one dispatch.
pub fn capabilities<'a>(
    quant: impl Fn(&Op) -> Option<ActQuant> + 'a,
    pair: impl Fn(&Op, &Op) -> bool + 'a,
    triple: impl Fn(&[Op]) -> bool + 'a,
) -> Capabilities<'a> {
    Capabilities {
        quant: Box::new(quant),
        float_products: true,
        // Each product converts its own input (quantize.wgsl) unless a norm did it for it.
        shared_conversion: false,
        // norm_quant.wgsl: the product right after, 256-value pieces, into another slot.
        norm_quant: Some(NormQuant { later_product: false, any_length: false, in_place: false }),
        // The epilogue adds into the residual and the product's own slot is written too.
        epilogue: Some(Epilogue::InPlace),
        argmax: false,
        gate_up: Some(GateUp {
            writes_up: true,
            either_order: false,
            pair: Box::new(move |a: &Op, b: &Op, act| act == Gate::Silu && pair(a, b)),
        }),
        triple: Some(Triple { bias: false, same: Box::new(triple) }),
        rope_kv: Some(RopeKv { writes_keys: false, even_values: true }),
    }
}
