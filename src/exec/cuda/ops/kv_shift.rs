//! Launcher of kernels/kv_shift.cu: a context shift's rotation of cached keys, one launch per
//! layer on the executor's stream (ordered before the next step).

use super::super::params::KvShiftParams;
use super::super::{drv, err, kernels::Kernel, CudaExecutor};
use crate::exec::{KvId, KvShift, RopeMode, KV_BLOCK};
use crate::quant::GgmlType;
use crate::Result;

impl CudaExecutor {
    /// [`crate::exec::Executor::shift_kv`].
    pub(in super::super) fn shift(&mut self, kv: KvId, shift: &KvShift) -> Result<()> {
        let cache = self.kv(kv)?;
        let k_dims: Vec<usize> = cache.layers.iter().map(|l| l.k_dim).collect();
        shift.check("cuda", cache.n_blocks, &k_dims)?;
        if shift.blocks.is_empty() || shift.delta == 0 {
            return Ok(());
        }
        // The block list: a shift is rare (once per half a context), a small upload each time.
        let blocks = self.stream.clone_htod(&shift.blocks).map_err(drv("uploading a KV shift"))?;
        let blocks_ptr = {
            use cudarc::driver::DevicePtr;
            blocks.device_ptr(&self.stream).0
        };
        let n_rows = shift.blocks.len() * KV_BLOCK;
        for (layer, rope) in cache.layers.iter().zip(&shift.layers) {
            let Some(rope) = rope else { continue };
            let freqs = match rope.freqs {
                None => 0,
                Some(f) => {
                    let w = self.weight(f)?;
                    if w.dtype != GgmlType::F32 {
                        return Err(err(format!(
                            "RoPE frequency factors of type {} (F32 expected)",
                            w.dtype
                        )));
                    }
                    w.buf.ptr
                }
            };
            let k = rope.consts();
            let p = KvShiftParams {
                kc: layer.k.ptr,
                blocks: blocks_ptr,
                freqs,
                n_heads: rope.n_heads as i32,
                head_dim: rope.head_dim as i32,
                n_rot: rope.n_rot as i32,
                k_dim: layer.k_dim as i32,
                delta: shift.delta,
                theta_scale: k.theta_scale,
                freq_scale: k.freq_scale,
                ext_factor: k.ext_factor,
                corr_low: k.corr_low,
                corr_high: k.corr_high,
                mscale: k.mscale,
                neox: (rope.mode == RopeMode::Neox) as i32,
            };
            let threads = (rope.n_rot / 2).div_ceil(32).clamp(1, 8) as u32 * 32;
            self.launch(Kernel::KvShift, ((n_rows * rope.n_heads) as u32, 1), threads, &p)?;
        }
        // The block list is freed when `blocks` drops; cudarc orders the free after the
        // launches on this stream.
        Ok(())
    }
}
