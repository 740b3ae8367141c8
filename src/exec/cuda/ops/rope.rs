//! Launchers of kernels/rope.cu: RoPE, the KV store, and (a step of the decode plan) both
//! ropes with the KV store in one launch.

use super::super::params::{KvStoreParams, RopeKvParams, RopeParams};
use super::super::record::Compiled;
use super::super::{err, kernels::Kernel, CudaExecutor};
use super::elementwise::blocks_of_256;
use crate::exec::{ActId, KvId, Op, RopeConsts, RopeMode};
use crate::quant::GgmlType;
use crate::Result;

/// Threads of a block rotating one head: a warp per 32 rotated pairs, at most 8 warps.
fn rope_threads(n_rot: usize) -> u32 {
    (n_rot / 2).div_ceil(32).clamp(1, 8) as u32 * 32
}

impl CudaExecutor {
    /// The angle constants of Rope op `op` and its frequency factors' pointer (0: none).
    fn rope_consts(&self, op: &Op) -> Result<(RopeConsts, u64)> {
        let Op::Rope { n_rot, base, freq_scale, freqs, ext, .. } = *op else {
            return Err(err("rope launch for another op"));
        };
        let ptr = match freqs {
            None => 0,
            Some(f) => {
                let w = self.weight(f)?;
                if w.dtype != GgmlType::F32 {
                    return Err(err(format!("RoPE frequency factors of type {} (F32 expected)", w.dtype)));
                }
                w.buf.ptr
            }
        };
        Ok((RopeConsts::new(n_rot, base, freq_scale, ext), ptr))
    }

    /// RoPE in place on the heads of x (Rope op `op`).
    pub(in super::super) fn rope(&self, c: &Compiled, op: &Op) -> Result<()> {
        let &Op::Rope { x, n_heads, head_dim, n_rot, mode, .. } = op else {
            return Err(err("rope launch for another op"));
        };
        let (k, freqs) = self.rope_consts(op)?;
        let p = RopeParams {
            x: c.act(x),
            pos: c.positions(),
            n_heads: n_heads as i32,
            head_dim: head_dim as i32,
            n_rot: n_rot as i32,
            theta_scale: k.theta_scale,
            freq_scale: k.freq_scale,
            ext_factor: k.ext_factor,
            corr_low: k.corr_low,
            corr_high: k.corr_high,
            mscale: k.mscale,
            freqs,
            neox: (mode == RopeMode::Neox) as i32,
        };
        self.launch(Kernel::Rope, ((c.g.rows(x) * n_heads) as u32, 1), rope_threads(n_rot), &p)
    }

    /// Store the rows of k and v in layer `layer` of cache `kv`, each at its token's position
    /// through its sequence's block table.
    pub(in super::super) fn kv_store(
        &self,
        c: &Compiled,
        kv: KvId,
        layer: usize,
        k: ActId,
        v: ActId,
    ) -> Result<()> {
        let l = self.kv(kv)?.layers.get(layer).ok_or_else(|| err("KV layer out of range"))?;
        if c.g.cols(k) != l.k_dim || c.g.cols(v) != l.v_dim {
            return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
        }
        if c.g.rows(k) != c.g.n_tokens || c.g.rows(v) != c.g.n_tokens {
            return Err(err(format!("KV store of layer {layer}: not a row per token")));
        }
        let tstride = c.table_stride()?;
        for (src, cache, dim) in [(k, l.k.ptr, l.k_dim), (v, l.v.ptr, l.v_dim)] {
            let n = c.g.rows(src) * dim;
            let p = KvStoreParams {
                src: c.act(src),
                cache,
                pos: c.positions(),
                seq: c.seq_of(),
                tables: c.tables(),
                n: n as i64,
                dim: dim as i32,
                tstride,
            };
            self.launch(Kernel::KvStore, (blocks_of_256(n), 1), 256, &p)?;
        }
        Ok(())
    }

    /// Rope ops `op` (queries) and `op + 1` (keys) and KV store `op + 2` of a one-token graph.
    pub(in super::super) fn rope_kv(&self, c: &Compiled, kv: KvId, op: usize) -> Result<()> {
        let g = &c.g;
        let (
            &Op::Rope { x: q, n_heads, head_dim, n_rot, mode, .. },
            &Op::Rope { x: k, n_heads: n_kv, .. },
            &Op::KvStore { layer, v, .. },
        ) = (&g.ops[op], &g.ops[op + 1], &g.ops[op + 2])
        else {
            return Err(err("decode plan: not rope, rope, KV store"));
        };
        let (rk, freqs) = self.rope_consts(&g.ops[op])?;
        let l = self.kv(kv)?.layers.get(layer).ok_or_else(|| err("KV layer out of range"))?;
        if g.cols(k) != l.k_dim || g.cols(v) != l.v_dim || n_kv * head_dim != l.k_dim {
            return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
        }
        let p = RopeKvParams {
            q: c.act(q),
            k: c.act(k),
            v: c.act(v),
            kc: l.k.ptr,
            vc: l.v.ptr,
            pos: c.positions(),
            seq: c.seq_of(),
            tables: c.tables(),
            n_heads: n_heads as i32,
            n_kv_heads: n_kv as i32,
            head_dim: head_dim as i32,
            n_rot: n_rot as i32,
            theta_scale: rk.theta_scale,
            freq_scale: rk.freq_scale,
            ext_factor: rk.ext_factor,
            corr_low: rk.corr_low,
            corr_high: rk.corr_high,
            mscale: rk.mscale,
            freqs,
            neox: (mode == RopeMode::Neox) as i32,
            k_dim: l.k_dim as i32,
            v_dim: l.v_dim as i32,
            tstride: c.table_stride()?,
        };
        let blocks = (n_heads + n_kv + 1) as u32;
        self.launch(Kernel::RopeKv, (blocks, g.rows(q) as u32), rope_threads(n_rot).max(128), &p)
    }
}
