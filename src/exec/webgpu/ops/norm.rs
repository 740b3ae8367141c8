//! RMSNorm, alone or fused with the quantization the next matrix product reads.

use super::{check, groups, Builder};
use crate::exec::webgpu::kernels::{ActQuant, Kernel};
use crate::exec::webgpu::params::{NormQuantParams, RmsNormParams};
use crate::exec::webgpu::record::Res;
use crate::exec::Op;
use crate::quant::GgmlType;
use crate::Result;

/// The fields of RMSNorm op `i`, after the checks the graph's own check leaves to executors:
/// an F32 or F16 weight of length `group`, and as many values written as read.
fn checked(
    b: &Builder,
    i: usize,
) -> Result<(crate::exec::ActId, crate::exec::WeightId, crate::exec::ActId, usize, f32)> {
    let op = &b.g.ops[i];
    let Op::RmsNorm { x, weight, dst, group, eps } = *op else { unreachable!("norm launch for {op:?}") };
    let w = b.weight(weight);
    check(
        matches!(w.dtype, GgmlType::F32 | GgmlType::F16)
            && w.bytes() / w.dtype.type_size() as u64 == group as u64
            && b.n(x) == b.n(dst),
        || format!("RMSNorm weight '{}' ({:?} {}) does not fit {op:?}", w.name, w.dims, w.dtype),
    )?;
    Ok((x, weight, dst, group, eps))
}

/// `Op::RmsNorm` (rms_norm.wgsl): one workgroup per group, in place or from another slot.
pub fn rms_norm(b: &mut Builder, i: usize) -> Result<()> {
    let (x, weight, dst, group, eps) = checked(b, i)?;
    let n_groups = b.n(dst) / group;
    let p = RmsNormParams {
        group: group as u32,
        n_groups: n_groups as u32,
        eps,
        w_f16: (b.weight(weight).dtype == GgmlType::F16) as u32,
    };
    let bufs = if x != dst {
        vec![Res::Weight(weight.0 as usize, 0), Res::Act(dst), Res::Act(x)]
    } else {
        vec![Res::Weight(weight.0 as usize, 0), Res::Act(dst)]
    };
    b.run(format!("rms_norm {group}x{n_groups}"), Kernel::RmsNorm(x != dst), &p, bufs, groups(n_groups));
    b.wrote(dst);
    Ok(())
}

/// `Op::RmsNorm` of whole rows into another slot and the q8 quantization of the result that
/// the next op (a matrix product) reads, in one dispatch (norm_quant.wgsl; fuse.rs).
pub fn norm_quant(b: &mut Builder, i: usize) -> Result<()> {
    let (x, weight, dst, group, eps) = checked(b, i)?;
    let q = match b.g.ops.get(i + 1) {
        Some(&Op::MatMul { w, .. }) => ActQuant::for_type(b.weight(w).dtype),
        _ => None,
    };
    let Some(q) = q else {
        // fuse.rs chose the fusion only before a quantized product: this does not happen.
        return rms_norm(b, i);
    };
    let n_groups = b.n(dst) / group;
    let vals = b.n(dst);
    let meta_words = vals / 4;
    b.quant_bytes(q, 4 * (meta_words + vals / q.block() * q.meta_words()) as u64);
    let p = NormQuantParams {
        group: group as u32,
        n_pieces: (vals / 256) as u32,
        eps,
        w_f16: (b.weight(weight).dtype == GgmlType::F16) as u32,
        recs: meta_words as u32,
    };
    let bufs = vec![Res::Weight(weight.0 as usize, 0), Res::Act(dst), Res::Act(x), Res::Quant(q)];
    let label = format!("norm_quant {q:?} {group}x{n_groups}");
    b.run(label, Kernel::NormQuant(q), &p, bufs, groups(vals / 256));
    b.wrote(dst);
    b.quantized(q, dst);
    Ok(())
}
