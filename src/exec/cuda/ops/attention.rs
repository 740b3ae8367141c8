//! Launchers of kernels/attention.cu (one query row a block) and kernels/attention_rows.cu
//! (many query rows a block, for prefill).

use super::super::kernels::{HeadDims, Kernel};
use super::super::params::AttentionParams;
use super::super::record::Compiled;
use super::super::{err, CudaExecutor};
use crate::exec::{KvId, Op};
use crate::Result;

/// Largest head dimension of `attention_rows_*` (attention_rows.cu).
const ATTENTION_ROWS_MAX_DIM: usize = 256;
/// Query rows a block of `attention_rows` (`ATR_Q`).
const ATTENTION_ROWS_Q: usize = 16;

impl CudaExecutor {
    /// Causal attention of the query rows of attention op `op` over cache `kv`.
    pub(in super::super) fn attention(&self, c: &Compiled, kv: KvId, op: &Op) -> Result<()> {
        let Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } = *op
        else {
            return Err(err("not an attention op"));
        };
        let cache = self.kv(kv)?;
        let l = cache.layers.get(layer).ok_or_else(|| err("KV layer out of range"))?;
        let scores = self.scores.as_ref().ok_or_else(|| err("no attention scratch"))?.0.ptr;
        let rows = c.g.rows(q);
        let p = AttentionParams {
            q: c.act(q),
            dst: c.act(dst),
            kc: l.k.ptr,
            vc: l.v.ptr,
            scores,
            posp: c.pos(),
            n_ctx: cache.n_ctx as i32,
            n_heads: n_heads as i32,
            n_kv_heads: n_kv_heads as i32,
            head_dim: head_dim as i32,
            k_dim: l.k_dim as i32,
            v_dim: l.v_dim as i32,
            scale,
            window: window.map_or(0, |w| w.min(i32::MAX as usize) as i32),
            softcap: softcap.unwrap_or(0.0),
            n_rows: i32::try_from(rows).map_err(|_| err("too many rows"))?,
        };
        if rows > 1 && head_dim <= ATTENTION_ROWS_MAX_DIM {
            // Each key and value row read once per ATTENTION_ROWS_Q queries.
            let grid = (rows.div_ceil(ATTENTION_ROWS_Q) as u32, n_heads as u32);
            return self.launch(Kernel::AttentionRows(HeadDims::fitting(head_dim)), grid, 128, &p);
        }
        self.launch(Kernel::Attention, ((rows * n_heads) as u32, 1), 128, &p)
    }
}
