//! Context shift on the CPU: rotate the f16 keys of a few blocks by the angle of a position
//! delta (see [`KvShift`]), in f32, rounding back to f16.

use half::f16;

use super::{kernels, CpuExecutor, KvCache};
use crate::exec::{rope_pair, KvShift};
use crate::fma::mul_add;
use crate::Result;

impl CpuExecutor {
    /// [`crate::exec::Executor::shift_kv`] on cache `cache`.
    pub(super) fn shift_cache(&self, cache: &mut KvCache, shift: &KvShift) -> Result<()> {
        let k_dims: Vec<usize> = cache.layers.iter().map(|l| l.k_dim).collect();
        shift.check("cpu", cache.n_blocks, &k_dims)?;
        for (layer, rope) in cache.layers.iter_mut().zip(&shift.layers) {
            let Some(rope) = rope else { continue };
            let freqs = rope.freqs.map(|f| kernels::f32_weight(self.weight(f))).transpose()?;
            let cs = shift.cos_sin(rope, freqs.as_deref());
            for row in shift.rows() {
                let keys = &mut layer.k[row * layer.k_dim..(row + 1) * layer.k_dim];
                for head in keys.chunks_mut(rope.head_dim) {
                    for (i, &(cos, sin)) in cs.iter().enumerate() {
                        let (a, b) = rope_pair(rope.mode, rope.n_rot, i);
                        let (x0, x1) = (head[a].to_f32(), head[b].to_f32());
                        // The forward pass's operations (kernels::rope).
                        head[a] = f16::from_f32(mul_add(x0, cos, -(x1 * sin)));
                        head[b] = f16::from_f32(mul_add(x0, sin, x1 * cos));
                    }
                }
            }
        }
        Ok(())
    }
}
