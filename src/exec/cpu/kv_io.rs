//! Reading and writing whole KV blocks on the CPU (the layout of [`kv_io_pieces`]).

use half::f16;

use super::{CpuExecutor, KvCache};
use std::ops::Range;

use crate::exec::{kv_io_pieces, KvId, KvPiece, KV_ELEM_BYTES};
use crate::Result;

impl KvCache {
    fn pieces(&self, blocks: &[u32], range: Range<usize>) -> Result<Vec<KvPiece>> {
        let k_dims: Vec<usize> = self.layers.iter().map(|l| l.k_dim).collect();
        let v_dims: Vec<usize> = self.layers.iter().map(|l| l.v_dim).collect();
        kv_io_pieces("cpu", self.n_blocks, &k_dims, &v_dims, blocks, range)
    }
}

impl CpuExecutor {
    fn cache(&self, kv: KvId) -> Result<&KvCache> {
        self.kvs.get(kv.0 as usize).and_then(Option::as_ref).ok_or_else(|| Self::err("unknown KV cache"))
    }

    /// [`crate::exec::Executor::read_kv_blocks`].
    pub(super) fn read_blocks(&self, kv: KvId, blocks: &[u32], range: Range<usize>) -> Result<Vec<u8>> {
        let cache = self.cache(kv)?;
        let pieces = cache.pieces(blocks, range.clone())?;
        let mut out = vec![0u8; range.len()];
        for p in pieces {
            let l = &cache.layers[p.layer];
            let pool = if p.values { &l.v } else { &l.k };
            let src = &pool[p.device / KV_ELEM_BYTES..(p.device + p.len) / KV_ELEM_BYTES];
            for (d, x) in out[p.host..p.host + p.len].chunks_exact_mut(KV_ELEM_BYTES).zip(src) {
                d.copy_from_slice(&x.to_le_bytes());
            }
        }
        Ok(out)
    }

    /// [`crate::exec::Executor::write_kv_blocks`].
    pub(super) fn write_blocks(
        &mut self,
        kv: KvId,
        blocks: &[u32],
        offset: usize,
        bytes: &[u8],
    ) -> Result<()> {
        let pieces = self.cache(kv)?.pieces(blocks, offset..offset.saturating_add(bytes.len()))?;
        let cache = self.kvs[kv.0 as usize].as_mut().ok_or_else(|| Self::err("unknown KV cache"))?;
        for p in pieces {
            let l = &mut cache.layers[p.layer];
            let pool = if p.values { &mut l.v } else { &mut l.k };
            let dst = &mut pool[p.device / KV_ELEM_BYTES..(p.device + p.len) / KV_ELEM_BYTES];
            for (d, s) in dst.iter_mut().zip(bytes[p.host..p.host + p.len].chunks_exact(KV_ELEM_BYTES)) {
                *d = f16::from_le_bytes([s[0], s[1]]);
            }
        }
        Ok(())
    }
}
