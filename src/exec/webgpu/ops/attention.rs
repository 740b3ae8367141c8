//! Attention of the step's queries over the KV cache.

use super::{check, groups, Builder};
use crate::exec::webgpu::kernels::Kernel;
use crate::exec::webgpu::params::AttentionParams;
use crate::exec::webgpu::record::KvUse;
use crate::exec::Op;
use crate::Result;

/// `Op::Attention` (attention.wgsl): one workgroup per query row and head.
pub fn attention(b: &mut Builder, i: usize) -> Result<()> {
    let op = &b.g.ops[i];
    let Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } = *op else {
        unreachable!("attention launch for {op:?}")
    };
    let g = b.g;
    check(
        head_dim <= 256
            && head_dim % 2 == 0
            && n_kv_heads > 0
            && n_heads % n_kv_heads == 0
            && g.cols(q) == n_heads * head_dim
            && g.cols(dst) == n_heads * head_dim
            && g.rows(q) == g.rows(dst),
        || format!("{op:?}: unsupported shape (head_dim at most 256)"),
    )?;
    let rows = g.rows(q);
    let kv_dim = n_kv_heads * head_dim;
    let p = AttentionParams {
        n_heads: n_heads as u32,
        group: (n_heads / n_kv_heads) as u32,
        head_dim: head_dim as u32,
        rows: rows as u32,
        k_dim: kv_dim as u32,
        v_dim: kv_dim as u32,
        window: window.unwrap_or(0) as u32,
        q_width: (n_heads * head_dim) as u32,
        scale,
        softcap: softcap.unwrap_or(0.0),
    };
    let what = KvUse::Attend { q, dst, layer, k_dim: kv_dim };
    b.kv("attention", Kernel::Attention, &p, what, groups(rows * n_heads));
    b.wrote(dst);
    Ok(())
}
