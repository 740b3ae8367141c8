//! Device memory: weights split into binding-sized parts, the f16 KV cache, and readback.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::quant::GgmlType;
use crate::{Error, Result};

pub(super) fn err(message: impl Into<String>) -> Error {
    Error::Executor { executor: "webgpu", message: message.into() }
}

/// Queue a copy of `bytes` to `buffer` at `offset` (through wgpu's staging memory).
/// Natively a large piece is copied into the staging memory on rayon's threads: one thread
/// copied ~8 GB/s, most of an 8b model's upload on an H200 machine.
fn write_buffer(queue: &wgpu::Queue, buffer: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
    #[cfg(not(target_arch = "wasm32"))]
    if bytes.len() >= PARALLEL_COPY {
        use rayon::prelude::*;
        let size = wgpu::BufferSize::new(bytes.len() as u64);
        // None: an invalid write, which the plain call below reports as it always did.
        if let Some(mut view) = size.and_then(|size| queue.write_buffer_with(buffer, offset, size)) {
            let mut dst = view.slice(..);
            if dst.len() == bytes.len() {
                let at = StagingPtr(dst.as_raw_element_ptr().as_ptr());
                bytes.par_chunks(PARALLEL_COPY).enumerate().for_each(|(i, piece)| {
                    // SAFETY: the view maps `bytes.len()` writable bytes (checked above) for as
                    // long as it lives, past this loop; the pieces are disjoint.
                    unsafe {
                        std::ptr::copy_nonoverlapping(piece.as_ptr(), at.at(i * PARALLEL_COPY), piece.len())
                    }
                });
                return;
            }
        }
    }
    queue.write_buffer(buffer, offset, bytes);
}

/// Pieces of a write copied on threads of their own (natively).
#[cfg(not(target_arch = "wasm32"))]
const PARALLEL_COPY: usize = 1 << 20;

/// The staging memory of a write, shared by the threads that fill disjoint pieces of it.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy)]
struct StagingPtr(*mut u8);
// SAFETY: the threads write disjoint ranges of the mapping (`write_buffer`).
#[cfg(not(target_arch = "wasm32"))]
unsafe impl Send for StagingPtr {}
#[cfg(not(target_arch = "wasm32"))]
unsafe impl Sync for StagingPtr {}

#[cfg(not(target_arch = "wasm32"))]
impl StagingPtr {
    /// The address of byte `i` (a method, so that closures capture the whole wrapper).
    fn at(self, i: usize) -> *mut u8 {
        self.0.wrapping_add(i)
    }
}

/// A weight tensor: raw GGUF bytes in one or more storage buffers ("parts"), each holding
/// whole rows (a multiple of 4 rows, so that every part starts 4-byte aligned).
pub struct GpuWeight {
    pub name: String,
    pub dtype: GgmlType,
    pub dims: Vec<u64>,
    /// Bytes of one row (dims[0] elements).
    pub row_bytes: u64,
    pub n_rows: u64,
    /// Rows in every part but the last.
    pub rows_per_part: u64,
    pub parts: Vec<wgpu::Buffer>,
}

impl GpuWeight {
    /// Create the buffers of a `dims` tensor of `dtype`, parts no larger than `max_binding`.
    pub fn new(
        device: &wgpu::Device,
        name: &str,
        dtype: GgmlType,
        dims: &[u64],
        max_binding: u64,
    ) -> Result<GpuWeight> {
        let n_rows: u64 = dims[1..].iter().product();
        let row_bytes = dtype.row_bytes(dims[0])?;
        // 16 bytes of slack: kernels read 16 bytes at unaligned offsets as five words.
        let fit = (max_binding.saturating_sub(32) / row_bytes.max(1)) & !3;
        if fit == 0 {
            return Err(err(format!(
                "a row of '{name}' ({row_bytes} bytes) exceeds the device's binding size ({max_binding})"
            )));
        }
        let rows_per_part = fit.min(n_rows.max(1));
        let mut parts = Vec::new();
        let mut start = 0;
        while start < n_rows.max(1) {
            let rows = rows_per_part.min(n_rows.max(1) - start);
            // A multiple of 16: kernels bind weights as arrays of 16-byte vectors.
            let size = (rows * row_bytes).div_ceil(16) * 16 + 16;
            let what = format!("allocating weight '{name}' ({size} bytes)");
            parts.push(super::device::scoped(device, &what, || {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(name),
                    size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })?);
            start += rows;
        }
        Ok(GpuWeight {
            name: name.into(),
            dtype,
            dims: dims.to_vec(),
            row_bytes,
            n_rows,
            rows_per_part,
            parts,
        })
    }

    /// Row length in elements.
    pub fn k(&self) -> usize {
        self.dims[0] as usize
    }

    /// Total bytes.
    pub fn bytes(&self) -> u64 {
        self.row_bytes * self.n_rows
    }

    /// First row and row count of part `p`.
    pub fn part_rows(&self, p: usize) -> (u64, u64) {
        let start = p as u64 * self.rows_per_part;
        (start, self.rows_per_part.min(self.n_rows - start))
    }

    /// Queue a copy of `bytes` to byte `offset`, split across parts. Offsets must be multiples
    /// of 4; a length that is not (a tensor's last chunk) is padded with zeros.
    pub fn write(&self, queue: &wgpu::Queue, offset: u64, bytes: &[u8]) -> Result<()> {
        let end = offset.checked_add(bytes.len() as u64).filter(|&e| e <= self.bytes());
        if end.is_none() {
            return Err(err(format!("write past the end of '{}'", self.name)));
        }
        if !offset.is_multiple_of(4) {
            return Err(err(format!("write to '{}' at unaligned offset {offset}", self.name)));
        }
        let part_bytes = self.rows_per_part * self.row_bytes;
        let (mut off, mut rest) = (offset, bytes);
        while !rest.is_empty() {
            let p = (off / part_bytes) as usize;
            let in_part = off % part_bytes;
            let n = rest.len().min((part_bytes - in_part) as usize);
            let piece = &rest[..n];
            if n % 4 == 0 {
                write_buffer(queue, &self.parts[p], in_part, piece);
            } else {
                let mut padded = piece.to_vec();
                padded.resize(n.div_ceil(4) * 4, 0);
                queue.write_buffer(&self.parts[p], in_part, &padded);
            }
            off += n as u64;
            rest = &rest[n..];
        }
        Ok(())
    }
}

/// One layer of the KV cache: f16 keys and values, two per u32.
pub struct KvLayer {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub k_dim: usize,
    pub v_dim: usize,
}

/// A KV cache: `n_blocks` blocks of `KV_BLOCK` positions per layer.
pub struct GpuKv {
    pub n_blocks: usize,
    pub layers: Vec<KvLayer>,
}

struct Shared<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// The receiving end of a one-shot channel (wgpu's callbacks must be `Send`, hence the mutex).
pub struct Receiver<T>(Arc<Mutex<Shared<T>>>);

impl<T> Future for Receiver<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A one-shot channel: the sender is a closure to hand to wgpu.
pub fn oneshot<T: Send + 'static>() -> (impl FnOnce(T) + Send + 'static, Receiver<T>) {
    let shared = Arc::new(Mutex::new(Shared { value: None, waker: None }));
    let tx = shared.clone();
    let send = move |v: T| {
        let mut s = tx.lock().unwrap_or_else(|e| e.into_inner());
        s.value = Some(v);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    };
    (send, Receiver(shared))
}

/// Read `size` bytes of a MAP_READ buffer after the work that fills it was submitted: natively
/// waiting for submission `until` (`None`: all of them; work submitted after it may still run).
pub async fn read(
    device: &wgpu::Device,
    buf: &wgpu::Buffer,
    size: u64,
    until: Option<wgpu::SubmissionIndex>,
) -> Result<Vec<u8>> {
    let slice = buf.slice(..size);
    let (send, done) = oneshot();
    slice.map_async(wgpu::MapMode::Read, send);
    // Natively, callbacks run inside poll; in the browser, poll does nothing and the
    // event loop resolves the map while we await.
    #[cfg(not(target_arch = "wasm32"))]
    device
        .poll(wgpu::PollType::Wait { submission_index: until, timeout: None })
        .map_err(|e| err(format!("device lost: {e}")))?;
    #[cfg(target_arch = "wasm32")]
    let _ = (device, until);
    done.await.map_err(|e| err(format!("reading results back failed: {e}")))?;
    let data = slice.get_mapped_range().map_err(|e| err(format!("mapping results failed: {e}")))?.to_vec();
    buf.unmap();
    Ok(data)
}
