//! The launchers, one file per op family, each beside the kernels of the same name in
//! `kernels/`: they turn an op (or a fused step of the decode plan) into parameter structs and
//! launches. This file says which fusions they implement, for the shared planner.

pub(super) mod attention;
mod elementwise;
mod kv_shift;
mod matmul;
mod matmul_blas;
mod matmul_mmq;
mod norm;
mod rope;
mod sampling;

pub(super) use matmul::qact_bytes;
pub(super) use matmul_blas::{preload_blas, Blas};
pub(super) use matmul_mmq::enabled as mmq_enabled;

use crate::exec::fuse::{ActQuant, Capabilities, Epilogue, GateUp, NormQuant, RopeKv, Triple};
use crate::exec::{Op, WeightId};
use crate::quant::GgmlType;

/// The fusions of the decode plan that these launchers implement (`exec/fuse.rs`), given the
/// q8 format of each weight's decode kernel (`quant`) and the weights' types (`dtype`):
/// - RMSNorm of whole rows with the conversion for the first product that reads it, even
///   a few ops later (`rms_norm_q8s`: any row length for q8_0/q8_1, whole 256s for q8_K);
/// - one q8 scratch, so a conversion serves every later product of the same input;
/// - a product with a residual add as its epilogue, the product's own slot not written
///   (`mmv_*` with `add`), and the logits' product keeping their argmax;
/// - gate and up (either order, SiLU or GELU) with their activation, the up slot not written
///   (`mmv2_*`, both weights of one type);
/// - three products of one input, biases allowed, one type or mixed K-quants (`mmv3_*`);
/// - RoPE of queries and keys with the KV store, the rotated keys also written to their slot
///   (`rope_kv`).
///
/// Products of float weights have no decode kernel: they stay plain ops.
pub(super) fn fusions<'a>(
    quant: impl Fn(WeightId) -> Option<ActQuant> + Copy + 'a,
    dtype: impl Fn(WeightId) -> Option<GgmlType> + Copy + 'a,
    rows: usize,
) -> Capabilities<'a> {
    let kquant = |t: Option<GgmlType>| matches!(t, Some(GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K));
    let product = move |op: &Op| match *op {
        Op::MatMul { w, .. } => quant(w),
        _ => None,
    };
    Capabilities {
        quant: Box::new(product),
        float_products: false,
        shared_conversion: true,
        // Never in place: each block of rms_norm_q8s sums the whole row before writing its own
        // 256 values, so in place a block could overwrite values another has yet to read (the
        // plan once fused the logits' in-place norm this way; the builders now give it a slot).
        norm_quant: Some(NormQuant { later_product: true, any_length: true, in_place: false }),
        epilogue: Some(Epilogue::Sum),
        // One u64 of argmax a step: the logits of one sequence.
        argmax: rows == 1,
        gate_up: Some(GateUp {
            writes_up: false,
            either_order: true,
            // mmv2_T reads both matrices as type T. (The planner before the shared one paired
            // them by q8 format only, which would misread an up matrix of another K-quant.)
            pair: Box::new(move |g: &Op, u: &Op, _| match (g, u) {
                (&Op::MatMul { w: wg, .. }, &Op::MatMul { w: wu, .. }) => {
                    product(g).is_some() && dtype(wg) == dtype(wu)
                }
                _ => false,
            }),
        }),
        triple: Some(Triple {
            bias: true,
            // Q, K and V may mix K-quant types (mmv3_kmix, one row only).
            same: Box::new(move |ops: &[Op]| {
                let ws: Vec<WeightId> = ops
                    .iter()
                    .filter_map(|op| match *op {
                        Op::MatMul { w, .. } => Some(w),
                        _ => None,
                    })
                    .collect();
                let same = |a: WeightId, b: WeightId| {
                    dtype(a) == dtype(b) || (rows == 1 && kquant(dtype(a)) && kquant(dtype(b)))
                };
                ws.len() == 3 && product(&ops[0]).is_some() && same(ws[0], ws[1]) && same(ws[0], ws[2])
            }),
        }),
        rope_kv: Some(RopeKv { writes_keys: true, even_values: false }),
    }
}

#[cfg(test)]
mod tests;
