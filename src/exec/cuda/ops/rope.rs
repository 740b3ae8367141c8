//! Launchers of kernels/rope.cu: RoPE, the KV store, and (a step of the decode plan) both
//! ropes with the KV store in one launch.

use super::super::params::{KvStoreParams, RopeKvParams, RopeParams};
use super::super::record::Compiled;
use super::super::{err, kernels::Kernel, CudaExecutor};
use super::elementwise::blocks_of_256;
use crate::exec::{ActId, KvId, Op, RopeMode};
use crate::Result;

/// Threads of a block rotating one head: a warp per 32 rotated pairs, at most 8 warps.
fn rope_threads(n_rot: usize) -> u32 {
    (n_rot / 2).div_ceil(32).clamp(1, 8) as u32 * 32
}

impl CudaExecutor {
    /// RoPE in place on the heads of x.
    #[allow(clippy::too_many_arguments)]
    pub(in super::super) fn rope(
        &self,
        c: &Compiled,
        x: ActId,
        n_heads: usize,
        head_dim: usize,
        n_rot: usize,
        base: f32,
        freq_scale: f32,
        mode: RopeMode,
    ) -> Result<()> {
        let p = RopeParams {
            x: c.act(x),
            posp: c.pos(),
            n_heads: n_heads as i32,
            head_dim: head_dim as i32,
            n_rot: n_rot as i32,
            theta_scale: base.powf(-2.0 / n_rot as f32),
            freq_scale,
            neox: (mode == RopeMode::Neox) as i32,
        };
        self.launch(Kernel::Rope, ((c.g.rows(x) * n_heads) as u32, 1), rope_threads(n_rot), &p)
    }

    /// Append the rows of k and v to layer `layer` of cache `kv` at the step's positions.
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
        for (src, cache, dim) in [(k, l.k.ptr, l.k_dim), (v, l.v.ptr, l.v_dim)] {
            let n = c.g.rows(src) * dim;
            let p = KvStoreParams { src: c.act(src), cache, posp: c.pos(), n: n as i64, dim: dim as i32 };
            self.launch(Kernel::KvStore, (blocks_of_256(n), 1), 256, &p)?;
        }
        Ok(())
    }

    /// Rope ops `op` (queries) and `op + 1` (keys) and KV store `op + 2` of a one-token graph.
    pub(in super::super) fn rope_kv(&self, c: &Compiled, kv: KvId, op: usize) -> Result<()> {
        let g = &c.g;
        let (
            &Op::Rope { x: q, n_heads, head_dim, n_rot, base, freq_scale, mode },
            &Op::Rope { x: k, n_heads: n_kv, .. },
            &Op::KvStore { layer, v, .. },
        ) = (&g.ops[op], &g.ops[op + 1], &g.ops[op + 2])
        else {
            return Err(err("decode plan: not rope, rope, KV store"));
        };
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
            posp: c.pos(),
            n_heads: n_heads as i32,
            n_kv_heads: n_kv as i32,
            head_dim: head_dim as i32,
            n_rot: n_rot as i32,
            theta_scale: base.powf(-2.0 / n_rot as f32),
            freq_scale,
            neox: (mode == RopeMode::Neox) as i32,
            k_dim: l.k_dim as i32,
            v_dim: l.v_dim as i32,
        };
        let blocks = (n_heads + n_kv + 1) as u32;
        self.launch(Kernel::RopeKv, (blocks, 1), rope_threads(n_rot).max(128), &p)
    }
}
