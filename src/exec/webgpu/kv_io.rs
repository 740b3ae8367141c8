//! Reading and writing whole KV blocks on WebGPU (the layout of [`kv_io_pieces`]): buffer
//! copies into mapped staging buffers of bounded size, and queue writes.

use std::ops::Range;

use super::buffers::err;
use super::{device, WebGpuExecutor};
use crate::exec::{kv_io_pieces, KvId, KvPiece};
use crate::Result;

/// Largest staging buffer of a read (well under every adapter's buffer size limit).
const STAGE: usize = 32 << 20;

impl WebGpuExecutor {
    /// The copies of bytes `range` of a block read or write, none over [`STAGE`].
    fn kv_io(&self, kv: KvId, blocks: &[u32], range: Range<usize>) -> Result<Vec<KvPiece>> {
        let cache =
            self.kvs.get(kv.0 as usize).and_then(|c| c.as_ref()).ok_or_else(|| err("unknown KV cache"))?;
        let k_dims: Vec<usize> = cache.layers.iter().map(|l| l.k_dim).collect();
        let v_dims: Vec<usize> = cache.layers.iter().map(|l| l.v_dim).collect();
        let mut out = Vec::new();
        if !range.start.is_multiple_of(4) || !range.end.is_multiple_of(4) {
            return Err(err(format!("KV bytes {range:?}: WebGPU copies whole 4-byte words")));
        }
        for p in kv_io_pieces("webgpu", cache.n_blocks, &k_dims, &v_dims, blocks, range)? {
            // Blocks of even-width rows cut at multiples of 4: 4-byte aligned, as copies need.
            let mut at = 0;
            while at < p.len {
                let len = (p.len - at).min(STAGE);
                out.push(KvPiece { device: p.device + at, host: p.host + at, len, ..p });
                at += len;
            }
        }
        Ok(out)
    }

    fn kv_buffer(&self, kv: KvId, p: &KvPiece) -> Result<&wgpu::Buffer> {
        let cache =
            self.kvs.get(kv.0 as usize).and_then(|c| c.as_ref()).ok_or_else(|| err("unknown KV cache"))?;
        let l = &cache.layers[p.layer];
        Ok(if p.values { &l.v } else { &l.k })
    }

    /// [`crate::exec::Executor::read_kv_blocks`]: staged in groups of copies up to [`STAGE`].
    pub(super) async fn read_kv(&mut self, kv: KvId, blocks: &[u32], range: Range<usize>) -> Result<Vec<u8>> {
        self.gpu.take_error()?;
        let mut out = Vec::with_capacity(range.len());
        let pieces = self.kv_io(kv, blocks, range)?;
        let device = &self.gpu.device;
        let mut rest = &pieces[..];
        while !rest.is_empty() {
            let mut n = 0;
            let mut size = 0;
            while n < rest.len() && size + rest[n].len <= STAGE {
                size += rest[n].len;
                n += 1;
            }
            let stage = device::scoped(device, "a KV read's staging buffer", || {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("kv read"),
                    size: size as u64,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })?;
            let mut enc =
                device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kv read") });
            let mut at = 0u64;
            for p in &rest[..n] {
                enc.copy_buffer_to_buffer(self.kv_buffer(kv, p)?, p.device as u64, &stage, at, p.len as u64);
                at += p.len as u64;
            }
            self.gpu.queue.submit([enc.finish()]);
            out.extend_from_slice(&self.gpu.read(&stage, size as u64).await?);
            rest = &rest[n..];
        }
        #[cfg(target_arch = "wasm32")]
        self.gpu.settle().await?;
        self.gpu.take_error()?;
        Ok(out)
    }

    /// [`crate::exec::Executor::write_kv_blocks`]: queue writes, ordered before the next step.
    pub(super) fn write_kv(&mut self, kv: KvId, blocks: &[u32], offset: usize, bytes: &[u8]) -> Result<()> {
        self.gpu.take_error()?;
        for p in self.kv_io(kv, blocks, offset..offset.saturating_add(bytes.len()))? {
            let buf = self.kv_buffer(kv, &p)?;
            self.gpu.queue.write_buffer(buf, p.device as u64, &bytes[p.host..p.host + p.len]);
        }
        self.gpu.take_error()
    }
}
