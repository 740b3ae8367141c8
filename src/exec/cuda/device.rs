//! The device and its memory: the context and the one stream, device buffers ([`Buf`]), the
//! weights (allocated in their device layout and uploaded through a pinned double buffer),
//! and the KV caches.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use rayon::prelude::*;

use super::{drv, err, kernels, layout, nvrtc, ops, CudaExecutor};
use crate::exec::{kv_io_pieces, KvId, KvPiece, KvSpec, WeightId};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// Weight types the kernels can read (matrix products and per-element reads).
pub(super) const TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// A device buffer and its raw address (kernel parameters take the address).
pub(super) struct Buf<T> {
    pub(super) mem: CudaSlice<T>,
    pub(super) ptr: u64,
}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> Buf<T> {
    /// `n` zeroed values (at least one: a zero-sized allocation has no address).
    pub(super) fn zeros(stream: &Arc<CudaStream>, n: usize) -> Result<Self> {
        let mem = stream.alloc_zeros::<T>(n.max(1)).map_err(drv("device allocation"))?;
        let ptr = mem.device_ptr(stream).0;
        Ok(Buf { mem, ptr })
    }
}

/// A weight tensor on the device.
pub(super) struct Weight {
    pub(super) name: String,
    pub(super) dtype: GgmlType,
    pub(super) dims: Vec<u64>,
    /// Bytes of the tensor in the file.
    pub(super) bytes: usize,
    /// The device buffer: the file's bytes, or for block types the split layout of `layout`.
    pub(super) buf: Buf<u8>,
    /// Splits the blocks of a quantized tensor as they are uploaded (file order).
    pub(super) repack: Option<layout::Repacker>,
}

impl Weight {
    /// Values a row.
    pub(super) fn k(&self) -> usize {
        self.dims[0] as usize
    }
    /// Rows (all dimensions after the first).
    pub(super) fn n_rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }
    fn blocks(&self) -> u64 {
        (self.k() * self.n_rows() / self.dtype.block_size()) as u64
    }
}

/// One layer's keys and values, f16, n_ctx rows of k_dim and v_dim.
pub(super) struct KvLayer {
    pub(super) k: Buf<u16>,
    pub(super) v: Buf<u16>,
    pub(super) k_dim: usize,
    pub(super) v_dim: usize,
}

/// A KV cache.
pub(super) struct Kv {
    pub(super) n_ctx: usize,
    /// Blocks of `KV_BLOCK` positions (n_ctx = n_blocks · KV_BLOCK).
    pub(super) n_blocks: usize,
    pub(super) layers: Vec<KvLayer>,
}

/// What the weights tell of the attention before a graph does (`hint_attention`).
#[derive(Default)]
pub(super) struct AttnHint {
    head_dim: Option<usize>,
    q_rows: Option<usize>,
    k_rows: Option<usize>,
    /// The kernels have been asked for.
    asked: bool,
}

/// Bytes of each of the two pinned staging buffers of the upload.
const STAGE_BYTES: usize = 8 << 20;

/// The upload's double buffer: weight bytes are copied (or split) into page-locked host memory
/// and sent with asynchronous copies, so the next chunk is read (and repacked) while the last
/// one travels; a buffer is reused once its copy's event has completed. Dropped when the
/// upload finishes (page-locked memory is scarce).
pub(super) struct Staging {
    bufs: [cudarc::driver::PinnedHostSlice<u8>; 2],
    done: [Option<cudarc::driver::CudaEvent>; 2],
    next: usize,
}

impl Staging {
    fn new(stream: &Arc<CudaStream>) -> Result<Staging> {
        let ctx = stream.context();
        // SAFETY: page-locked host buffers; every byte is written before it is copied.
        let alloc =
            || unsafe { ctx.alloc_pinned::<u8>(STAGE_BYTES) }.map_err(drv("allocating pinned memory"));
        Ok(Staging { bufs: [alloc()?, alloc()?], done: [None, None], next: 0 })
    }

    /// The next buffer, once its last copy is done, to fill and [`Staging::send`].
    fn take(&mut self) -> Result<&mut [u8]> {
        let i = self.next;
        if let Some(e) = self.done[i].take() {
            e.synchronize().map_err(drv("waiting for an upload"))?;
        }
        self.bufs[i].as_mut_slice().map_err(drv("staging"))
    }

    /// Send byte ranges of the buffer [`Staging::take`] gave to device addresses, and move on
    /// to the other buffer.
    fn send(&mut self, stream: &Arc<CudaStream>, copies: &[(u64, std::ops::Range<usize>)]) -> Result<()> {
        let i = self.next;
        self.next ^= 1;
        let host = self.bufs[i].as_slice().map_err(drv("staging"))?;
        for (at, r) in copies {
            let bytes = host.get(r.clone()).ok_or_else(|| err("staging range out of bounds"))?;
            if bytes.is_empty() {
                continue;
            }
            // SAFETY: `at` lies in a device buffer of this executor with room for the bytes
            // (checked by the caller); the host bytes stay untouched until `done[i]` completes.
            unsafe { cudarc::driver::result::memcpy_htod_async(*at, bytes, stream.cu_stream()) }
                .map_err(drv("uploading weights"))?;
        }
        self.done[i] = Some(stream.record_event(None).map_err(drv("recording an upload"))?);
        Ok(())
    }
}

impl CudaExecutor {
    /// Open device 0 and load the kernels. Errors (never panics) when the driver, NVRTC or a
    /// device is missing.
    pub fn new() -> Result<Self> {
        kernels::trace(|| "opening the CUDA executor".into());
        // SAFETY: these only try to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(err("no CUDA driver library (libcuda) found on this machine"));
        }
        // The NVRTC this driver runs code from (nvrtc.rs), or an error naming what was sought.
        nvrtc::get().map_err(err)?;
        let n = CudaContext::device_count().map_err(drv("counting CUDA devices"))?;
        if n < 1 {
            return Err(err("the CUDA driver reports no device"));
        }
        let ctx = CudaContext::new(0).map_err(drv("opening CUDA device 0"))?;
        // SAFETY: called before any buffer or stream exists; the executor orders all work on
        // one stream, so cudarc's per-buffer events are not needed.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own: the legacy default stream cannot be captured into a graph.
        let stream = ctx.new_stream().map_err(drv("creating a CUDA stream"))?;
        let kernels = kernels::Kernels::new(&ctx)?;
        kernels.prefetch([
            kernels::Module::Sampling,
            kernels::Module::Elementwise,
            kernels::Module::Norm,
            kernels::Module::Rope,
            kernels::Module::Quantize,
        ]);
        // The smallest module, loaded now: an NVRTC that cannot compile for this device, or a
        // driver that loads neither its cubin nor its PTX, fails here (where `Auto` can still
        // choose another executor) rather than at the first step.
        kernels.get(kernels::Kernel::Argmax)?;
        kernels::trace(|| "CUDA executor open".into());
        let device = ctx.name().unwrap_or_else(|_| "unknown".into());
        let occ = match std::env::var("WICK_CUDA_OCC").as_deref() {
            Ok("0") => Some(false),
            Ok("1") => Some(true),
            _ => None,
        };
        let mmq = ops::mmq_enabled(ctx.compute_capability().unwrap_or((0, 0)));
        // cuBLAS takes the prefill products of many tokens (ops/matmul_blas.rs): its libraries
        // (hundreds of MB) are mapped on a thread now, while the weights load, rather than
        // before the first such product.
        ops::preload_blas();
        let flash = ctx.compute_capability().is_ok_and(|c| c.0 >= 8)
            && std::env::var("WICK_CUDA_FLASH").as_deref() != Ok("0");
        let n_sm = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(1, |n| n.max(1) as usize);
        let profile = std::env::var("WICK_CUDA_PROFILE").as_deref() == Ok("1");
        let pdl = ctx.compute_capability().is_ok_and(|c| c.0 >= 9)
            && std::env::var("WICK_CUDA_PDL").as_deref() != Ok("0");
        Ok(CudaExecutor {
            _ctx: ctx,
            blas: std::cell::OnceCell::new(),
            stream,
            kernels,
            capturing: std::cell::Cell::new(false),
            missing: std::cell::RefCell::new(Vec::new()),
            attn_hint: AttnHint::default(),
            weights: Vec::new(),
            kvs: Vec::new(),
            graphs: Vec::new(),
            scores: None,
            n_sm,
            split_attention: std::env::var("WICK_CUDA_SPLIT").as_deref() != Ok("0"),
            decode_mma: flash && std::env::var("WICK_CUDA_DECODE_MMA").as_deref() != Ok("0"),
            device,
            debug: std::env::var_os("WICK_CUDA_DEBUG").is_some(),
            use_graphs: std::env::var("WICK_CUDA_GRAPHS").as_deref() != Ok("0")
                && std::env::var_os("WICK_CUDA_DEBUG").is_none()
                && !profile,
            graph_max_tokens: env_usize("WICK_CUDA_GRAPH_MAX_TOKENS").unwrap_or(64),
            mmvn_max_rows: env_usize("WICK_CUDA_MMVN_MAX_ROWS").unwrap_or(15),
            mmvn_rows: env_usize("WICK_CUDA_MMVN_ROWS").unwrap_or(8).clamp(1, 8),
            use_fusion: std::env::var("WICK_CUDA_FUSE").as_deref() != Ok("0") && !profile,
            profile,
            mmq,
            mmq_small: std::env::var("WICK_CUDA_MMQS").as_deref() != Ok("0"),
            mmqs_from: env_usize("WICK_CUDA_MMQS_FROM").unwrap_or(7).max(2),
            mmq_split: std::env::var("WICK_CUDA_MMQ_SPLIT").as_deref() != Ok("0"),
            mmq_fill: env_usize("WICK_CUDA_MMQ_FILL").unwrap_or(2).clamp(1, 16),
            mmq_large: env_usize("WICK_CUDA_MMQ_LARGE").unwrap_or(150),
            deq_min_rows: env_usize("WICK_CUDA_DEQ_ROWS").unwrap_or(128),
            flash,
            flash_split: std::env::var("WICK_CUDA_FLASH_SPLIT").ok().and_then(|v| v.parse().ok()),
            split_per_sm: std::env::var("WICK_CUDA_SPLIT_PER_SM")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(2),
            staging: None,
            pdl,
            occ,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.device
    }

    /// The weight `id`.
    pub(super) fn weight(&self, id: WeightId) -> Result<&Weight> {
        self.weights.get(id.0 as usize).ok_or_else(|| err("unknown weight"))
    }

    /// Reserve a weight of `dims` and type `dtype` in its device layout.
    pub(super) fn alloc_weight_buf(&mut self, name: &str, dtype: GgmlType, dims: &[u64]) -> Result<WeightId> {
        if !TYPES.contains(&dtype) {
            return Err(Error::unsupported_type(name, dtype));
        }
        if dims.is_empty() || dims.len() > 4 {
            return Err(err(format!("tensor '{name}' has {} dimensions", dims.len())));
        }
        let rows: u64 = dims[1..].iter().product();
        let bytes = dtype.row_bytes(dims[0])?.checked_mul(rows).ok_or_else(|| err("tensor too large"))?;
        let bytes = usize::try_from(bytes).map_err(|_| err("tensor too large for this platform"))?;
        let split = layout::split(dtype);
        let device = match &split {
            Some(s) => layout::device_bytes(s, (bytes / s.block) as u64) as usize,
            None => bytes,
        };
        let buf = Buf::zeros(&self.stream, device)
            .map_err(|e| err(format!("allocating {device} bytes for '{name}' on the device: {e}")))?;
        if self.weights.is_empty() {
            kernels::trace(|| "allocating the weights".into());
        }
        if rows > 1 {
            self.prefetch_products(dtype);
        }
        self.hint_attention(name, dims);
        let repack = split.map(layout::Repacker::new);
        self.weights.push(Weight { name: name.into(), dtype, dims: dims.to_vec(), bytes, buf, repack });
        Ok(WeightId(self.weights.len() as u32 - 1))
    }

    /// Ask for the kernels of products with a matrix of type `t` (compiled while the weights
    /// stream in): the first matrix of each type asks for its type's modules, and matrices of
    /// two K-quant types for the mixed Q/K/V decode kernel.
    fn prefetch_products(&self, t: GgmlType) {
        let matrices = || self.weights.iter().filter(|w| w.n_rows() > 1);
        if matrices().any(|w| w.dtype == t) {
            return;
        }
        self.kernels.prefetch(kernels::Module::for_weights(t, self.mmq));
        let k_quant = |t: GgmlType| matches!(t, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
        if k_quant(t) && matrices().any(|w| k_quant(w.dtype)) {
            self.kernels.prefetch([kernels::Module::Mmv3Kmix]);
        }
    }

    /// Ask for the attention kernels as soon as the weights tell the head size and the query
    /// heads a KV head (else the first graph asks: `compile_graph`), so that they compile
    /// while the weights stream in: the head size is the length of `attn_q_norm` or
    /// `attn_k_norm` (Qwen3, Gemma 3), else twice that of `rope_freqs` (Llama 3); the group is
    /// the ratio of the first layer's Q and K rows. A wrong guess costs a compile, no more.
    fn hint_attention(&mut self, name: &str, dims: &[u64]) {
        let h = &mut self.attn_hint;
        if h.asked {
            return;
        }
        let dim = |i: usize| dims.get(i).map(|&d| d as usize);
        match name {
            "blk.0.attn_q_norm.weight" | "blk.0.attn_k_norm.weight" => h.head_dim = dim(0),
            "rope_freqs.weight" => h.head_dim = h.head_dim.or(dim(0).map(|d| 2 * d)),
            "blk.0.attn_q.weight" => h.q_rows = dim(1),
            "blk.0.attn_k.weight" => h.k_rows = dim(1),
            _ => return,
        }
        if let (Some(hd), Some(q), Some(k)) = (h.head_dim, h.q_rows, h.k_rows) {
            if hd > 0 && k > 0 && q % k == 0 {
                h.asked = true;
                kernels::trace(|| format!("the weights say heads of {hd}, {} a KV head", q / k));
                self.kernels.prefetch(kernels::Module::for_attention(hd, q / k, self.flash, self.decode_mma));
            }
        }
    }

    /// Upload `bytes` of the file's tensor at byte `offset` (split as they arrive for block
    /// types, which must come in order, straight into the pinned staging buffer).
    pub(super) fn write_weight_bytes(&mut self, id: WeightId, offset: u64, bytes: &[u8]) -> Result<()> {
        let w = self.weights.get_mut(id.0 as usize).ok_or_else(|| err("unknown weight"))?;
        let start = usize::try_from(offset).map_err(|_| err("offset out of range"))?;
        let end = start.checked_add(bytes.len()).filter(|&e| e <= w.bytes);
        end.ok_or_else(|| err(format!("write past the end of '{}'", w.name)))?;
        let blocks = w.blocks();
        let base = w.buf.ptr;
        if self.staging.is_none() {
            self.staging = Some(Staging::new(&self.stream)?);
        }
        let st = self.staging.as_mut().ok_or_else(|| err("no staging buffer"))?;
        let Some(repack) = w.repack.as_mut() else {
            for (n, piece) in bytes.chunks(STAGE_BYTES).enumerate() {
                let host = st.take()?;
                // On rayon's threads: one thread copied 8 GB/s here, a third of the upload.
                host[..piece.len()]
                    .par_chunks_mut(1 << 20)
                    .zip(piece.par_chunks(1 << 20))
                    .for_each(|(to, from)| to.copy_from_slice(from));
                let at = base + offset + (n * STAGE_BYTES) as u64;
                st.send(&self.stream, &[(at, 0..piece.len())])?;
            }
            return Ok(());
        };
        if offset != repack.received() {
            return Err(err(format!(
                "'{}': quantized weights must be uploaded in order (got byte {offset}, expected {})",
                w.name,
                repack.received()
            )));
        }
        // Pieces whose blocks, with the one carried from the last piece, fit a staging buffer.
        for piece in bytes.chunks(STAGE_BYTES - repack.block()) {
            let host = st.take()?;
            let p = repack.push_into(piece, blocks, host).ok_or_else(|| err("staging buffer too small"))?;
            let (q, h) = (0..p.quants, p.quants..p.quants + p.header);
            st.send(&self.stream, &[(base + p.quant_at, q), (base + p.header_at, h)])?;
        }
        Ok(())
    }

    /// Wait for the upload's last copies and drop the staging buffers.
    pub(super) fn finish_weights(&mut self) -> Result<()> {
        let r = self.stream.synchronize().map_err(drv("finishing the upload"));
        self.staging = None;
        kernels::trace(|| format!("{} weights uploaded", self.weights.len()));
        r
    }

    /// Allocate a zeroed f16 KV cache of `spec`.
    pub(super) fn alloc_kv_bufs(&mut self, spec: &KvSpec) -> Result<KvId> {
        if spec.k_dims.len() != spec.v_dims.len() {
            return Err(err("KV spec: key and value layer counts differ"));
        }
        let mut layers = Vec::with_capacity(spec.k_dims.len());
        for (&k_dim, &v_dim) in spec.k_dims.iter().zip(&spec.v_dims) {
            let kn = spec.n_positions().checked_mul(k_dim).ok_or_else(|| err("KV cache too large"))?;
            let vn = spec.n_positions().checked_mul(v_dim).ok_or_else(|| err("KV cache too large"))?;
            layers.push(KvLayer {
                k: Buf::zeros(&self.stream, kn)?,
                v: Buf::zeros(&self.stream, vn)?,
                k_dim,
                v_dim,
            });
        }
        self.kvs.push(Some(Kv { n_ctx: spec.n_positions(), n_blocks: spec.n_blocks, layers }));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }

    /// The KV cache `kv`.
    pub(super) fn kv(&self, kv: KvId) -> Result<&Kv> {
        self.kvs.get(kv.0 as usize).and_then(|c| c.as_ref()).ok_or_else(|| err("unknown KV cache"))
    }

    /// The copies of bytes `range` of a KV block read or write, with each piece's device
    /// address.
    fn kv_io(&self, kv: KvId, blocks: &[u32], range: std::ops::Range<usize>) -> Result<Vec<(u64, KvPiece)>> {
        let cache = self.kv(kv)?;
        let k_dims: Vec<usize> = cache.layers.iter().map(|l| l.k_dim).collect();
        let v_dims: Vec<usize> = cache.layers.iter().map(|l| l.v_dim).collect();
        let pieces = kv_io_pieces("cuda", cache.n_blocks, &k_dims, &v_dims, blocks, range)?;
        Ok(pieces
            .into_iter()
            .map(|p| {
                let l = &cache.layers[p.layer];
                ((if p.values { l.v.ptr } else { l.k.ptr }) + p.device as u64, p)
            })
            .collect())
    }

    /// [`crate::exec::Executor::read_kv_blocks`]: after the steps queued on the stream.
    pub(super) fn read_kv(&self, kv: KvId, blocks: &[u32], range: std::ops::Range<usize>) -> Result<Vec<u8>> {
        let mut out = vec![0u8; range.len()];
        let pieces = self.kv_io(kv, blocks, range)?;
        for (at, p) in pieces {
            // SAFETY: `at .. at + len` lies in a KV pool of this executor (kv_io_pieces checked
            // the blocks); the host slice is `len` bytes, read after the synchronize below.
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(
                    &mut out[p.host..p.host + p.len],
                    at,
                    self.stream.cu_stream(),
                )
            }
            .map_err(drv("reading KV blocks"))?;
        }
        self.stream.synchronize().map_err(drv("reading KV blocks"))?;
        Ok(out)
    }

    /// [`crate::exec::Executor::write_kv_blocks`]: before the next step on the stream.
    pub(super) fn write_kv(&self, kv: KvId, blocks: &[u32], offset: usize, bytes: &[u8]) -> Result<()> {
        for (at, p) in self.kv_io(kv, blocks, offset..offset.saturating_add(bytes.len()))? {
            // SAFETY: as in read_kv; the host bytes outlive the copy (synchronized below).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    at,
                    &bytes[p.host..p.host + p.len],
                    self.stream.cu_stream(),
                )
            }
            .map_err(drv("writing KV blocks"))?;
        }
        self.stream.synchronize().map_err(drv("writing KV blocks"))
    }

    /// Device memory bandwidth: a 1 GiB device-to-device copy, best of five, counting bytes
    /// read plus bytes written.
    pub(super) fn bandwidth(&self) -> Result<f64> {
        const N: usize = 1 << 30;
        let src = self.stream.alloc_zeros::<u8>(N).map_err(drv("device allocation"))?;
        let mut dst = self.stream.alloc_zeros::<u8>(N).map_err(drv("device allocation"))?;
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            self.stream.synchronize().map_err(drv("synchronizing"))?;
            let t = std::time::Instant::now();
            self.stream.memcpy_dtod(&src, &mut dst).map_err(drv("device copy"))?;
            self.stream.synchronize().map_err(drv("synchronizing"))?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(2.0 * N as f64 / best.max(1e-9))
    }
}

/// A numeric knob from the environment (unset or not a number: `None`).
fn env_usize(var: &str) -> Option<usize> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}
