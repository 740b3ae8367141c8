//! Context shift on WebGPU (kv_shift.wgsl): each layer's moved keys rotated by the angle of the
//! delta, one dispatch per layer, all in one submission ordered before the next step's.
//!
//! A shift is rare (once per half a context), so its small buffers (the block list, a uniform
//! per layer) and bind groups are made per call rather than kept.

use super::buffers::err;
use super::kernels::Kernel;
use super::params::{KvShiftParams, Params};
use super::{device, WebGpuExecutor};
use crate::exec::{KvId, KvShift, RopeMode, KV_BLOCK};
use crate::quant::GgmlType;
use crate::Result;

impl WebGpuExecutor {
    /// [`crate::exec::Executor::shift_kv`].
    pub(super) fn shift(&mut self, kv: KvId, shift: &KvShift) -> Result<()> {
        self.gpu.take_error()?;
        let cache =
            self.kvs.get(kv.0 as usize).and_then(|c| c.as_ref()).ok_or_else(|| err("unknown KV cache"))?;
        let k_dims: Vec<usize> = cache.layers.iter().map(|l| l.k_dim).collect();
        shift.check("webgpu", cache.n_blocks, &k_dims)?;
        if shift.blocks.is_empty() || shift.delta == 0 {
            return Ok(());
        }
        let device = &self.gpu.device;
        let pipe = self.pipes.get(device, Kernel::KvShift)?;
        let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let buffer = |label: &str, bytes: &[u8], usage: wgpu::BufferUsages| -> Result<wgpu::Buffer> {
            let b = device::scoped(device, label, || {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size: (bytes.len() as u64).max(16).div_ceil(16) * 16,
                    usage: usage | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })?;
            self.gpu.queue.write_buffer(&b, 0, bytes);
            Ok(b)
        };
        let blocks = buffer("kv_shift blocks", &words(&shift.blocks), wgpu::BufferUsages::STORAGE)?;
        let n_rows = shift.blocks.len() * KV_BLOCK;
        let mut enc =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kv_shift") });
        for (layer, rope) in cache.layers.iter().zip(&shift.layers) {
            let Some(rope) = rope else { continue };
            if rope.n_rot % 4 != 0 {
                return Err(err(format!(
                    "KV shift: {} rotated dimensions (a multiple of 4 expected)",
                    rope.n_rot
                )));
            }
            let freqs = match rope.freqs {
                None => &self.dummy,
                Some(f) => {
                    let w = self.weights.get(f.0 as usize).ok_or_else(|| err("unknown weight"))?;
                    if w.dtype != GgmlType::F32 || w.parts.len() != 1 {
                        return Err(err(format!(
                            "RoPE frequency factors '{}' of type {} (F32 expected)",
                            w.name, w.dtype
                        )));
                    }
                    &w.parts[0]
                }
            };
            let k = rope.consts();
            let p = KvShiftParams {
                n_heads: rope.n_heads as u32,
                head_dim: rope.head_dim as u32,
                n_rot: rope.n_rot as u32,
                k_dim: layer.k_dim as u32,
                n_rows: n_rows as u32,
                delta: shift.delta as f32,
                theta_scale: k.theta_scale,
                freq_scale: k.freq_scale,
                ext_factor: k.ext_factor,
                corr_low: k.corr_low,
                corr_high: k.corr_high,
                mscale: k.mscale,
                has_freqs: rope.freqs.is_some() as u32,
                neox: (rope.mode == RopeMode::Neox) as u32,
            };
            let uniform = buffer("kv_shift params", &words(&p.words()), wgpu::BufferUsages::UNIFORM)?;
            let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("kv_shift"),
                layout: &pipe.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: blocks.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: layer.k.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: freqs.as_entire_binding() },
                ],
            });
            let groups = (n_rows * rope.n_heads * rope.n_rot / 4).div_ceil(64) as u32;
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("kv_shift"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipe);
            pass.set_bind_group(0, &bind, &[]);
            // wg_index (common.wgsl): x up to 32768, then y.
            pass.dispatch_workgroups(groups.min(32768), groups.div_ceil(32768), 1);
        }
        self.gpu.queue.submit([enc.finish()]);
        self.gpu.take_error()
    }
}
