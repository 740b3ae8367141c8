//! The CUDA executor (feature `cuda`): the same [`Executor`] contract as the CPU reference, on
//! an NVIDIA GPU through cudarc.
//!
//! Design decisions:
//! - cudarc loads the driver and NVRTC at run time: a build needs no CUDA toolkit, and a
//!   machine without them gets [`Error::Executor`] from [`CudaExecutor::new`], never a panic
//!   (cudarc panics on a missing library, so its presence is checked first).
//! - Kernels are CUDA C (`kernels/`, one family per file) compiled by NVRTC for the device's
//!   own architecture and cached on disk (`module.rs`).
//! - Weights stay in their GGUF block format in device memory; matrix products convert the
//!   activations to the weight type's q8 partner exactly as the CPU does and take integer
//!   (dp4a) dot products, so both executors compute the same integers per block.
//! - One stream, no per-buffer event tracking: every op is ordered on it. Buffers are raw
//!   device pointers inside the executor; nothing device-side escapes it.
//! - Activation slots, the q8 scratch and the token buffer are allocated once per compiled
//!   graph; a step uploads only its position and token ids (one copy) and reads back a token
//!   id or logits. Kernels read the position from device memory, so a one-token step is
//!   captured once as a CUDA graph (per KV cache) and replayed: one launch per token.
//!   `WICK_CUDA_GRAPHS=0` turns the capture off.
//!
//! Not yet (first version): weights are read in their GGUF layout with 2-byte loads (no
//! repacking for 16-byte loads); prefill products use the int8 tensor cores (`prefill.rs`) on
//! sm_80+ for the eight quantized block types only (float weights, older GPUs and fewer than
//! 16 rows: dp4a over 8 token rows); attention keeps a score scratch of n_ctx floats per (row,
//! head) instead of a flash kernel, and its many-row kernel uses no tensor cores; no fusion (RMSNorm, q8 conversion and RoPE are separate launches); Q2_K, Q3_K and
//! BF16 weights are refused (`supports_type`); one device (ordinal 0).

mod fuse;
mod layout;
mod module;
mod prefill;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};

use super::{
    ActId, Executor, Gate, Graph, GraphId, KvId, KvSpec, LocalFuture, Op, Readback, RopeMode, StepOutput,
    WeightId,
};
use crate::quant::{self, GgmlType};
use crate::{Error, Result};
use fuse::{ActQuant, Step};

pub use module::{compile as compile_kernels, source as kernel_source};

/// An error of this executor.
pub(crate) fn err(message: impl Into<String>) -> Error {
    Error::Executor { executor: "cuda", message: message.into() }
}

fn drv(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| err(format!("{what}: {e}"))
}

/// Weight types the kernels can read (matrix products and per-element reads).
const TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Outputs per block of the decode matrix kernels (`MMV_WARPS` in kernels/matvec.cuh).
const MMV_WARPS: usize = 4;

/// A device buffer and its raw address (kernel arguments take the address).
struct Buf<T> {
    _mem: CudaSlice<T>,
    ptr: u64,
}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> Buf<T> {
    fn zeros(stream: &Arc<CudaStream>, n: usize) -> Result<Self> {
        let mem = stream.alloc_zeros::<T>(n.max(1)).map_err(drv("device allocation"))?;
        let ptr = mem.device_ptr(stream).0;
        Ok(Buf { _mem: mem, ptr })
    }
}

struct Weight {
    name: String,
    dtype: GgmlType,
    dims: Vec<u64>,
    /// Bytes of the tensor in the file.
    bytes: usize,
    /// The device buffer: the file's bytes, or for block types the split layout of `layout`.
    buf: Buf<u8>,
    /// Splits the blocks of a quantized tensor as they are uploaded (file order).
    repack: Option<layout::Repacker>,
}

impl Weight {
    fn k(&self) -> usize {
        self.dims[0] as usize
    }
    fn n_rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }
    fn blocks(&self) -> u64 {
        (self.k() * self.n_rows() / self.dtype.block_size()) as u64
    }
}

struct KvLayer {
    k: Buf<u16>,
    v: Buf<u16>,
    k_dim: usize,
    v_dim: usize,
}

struct Kv {
    n_ctx: usize,
    layers: Vec<KvLayer>,
}

/// A compiled graph: the graph and its device buffers.
struct Compiled {
    g: Graph,
    acts: Vec<Buf<f32>>,
    /// Activations converted for the matrix products (largest need of the graph).
    qact: Buf<u8>,
    /// Owns the step's inputs on the device: [first position, token ids...] (at `io_ptr`).
    _io: CudaSlice<u32>,
    io_ptr: u64,
    /// Page-locked copies of the step's inputs and of the fused argmax: a captured step
    /// starts by copying `io_host` to `io` and ends by copying `best` to `best_host`, so a
    /// token costs one graph launch and one wait, no separate copies.
    _io_host: cudarc::driver::PinnedHostSlice<u32>,
    _best_host: cudarc::driver::PinnedHostSlice<u64>,
    /// Their addresses, taken once: cudarc's accessors wait on an event, which a stream
    /// being captured does not allow.
    io_host: *mut u32,
    io_len: usize,
    best_host: *mut u64,
    argmax: CudaSlice<u32>,
    argmax_ptr: u64,
    /// The argmax the logits' decode kernel keeps (see `argmax_update` in matvec.cuh).
    _best: CudaSlice<u64>,
    best_ptr: u64,
    /// The captured step, valid for one KV cache and one attention scratch buffer.
    captured: Option<(KvId, u64, CudaGraph)>,
    /// One-token graphs: the fused launches (`fuse.rs`); empty: op by op.
    plan: Vec<Step>,
}

/// Bytes of each of the two pinned staging buffers of the upload.
const STAGE_BYTES: usize = 8 << 20;

/// The upload's double buffer: weight bytes are copied into page-locked host memory and sent
/// with asynchronous copies, so the next chunk is read (and repacked) while the last one
/// travels; a buffer is reused once its copy's event has completed. Dropped when the upload
/// finishes (page-locked memory is scarce).
struct Staging {
    bufs: [cudarc::driver::PinnedHostSlice<u8>; 2],
    done: [Option<cudarc::driver::CudaEvent>; 2],
    next: usize,
}

/// Kernels written for programmatic dependent launch (they call `pdl_wait` before touching
/// anything an earlier kernel writes).
fn pdl_aware(name: &str) -> bool {
    matches!(name, "rms_norm_q8s" | "quantize_q8s" | "quantize_q8ks" | "rope_kv" | "attention" | "embed")
        || name.starts_with("mmv_")
        || name.starts_with("mmv2_")
        || name.starts_with("mmv3_")
}

/// A kernel argument.
enum Arg {
    P(u64),
    I(i32),
    L(i64),
    F(f32),
}

/// The CUDA executor.
pub struct CudaExecutor {
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    fns: HashMap<&'static str, CudaFunction>,
    weights: Vec<Weight>,
    kvs: Vec<Option<Kv>>,
    graphs: Vec<Compiled>,
    /// Attention scores scratch, grown on demand.
    scores: Option<(Buf<f32>, usize)>,
    device: String,
    /// `WICK_CUDA_DEBUG` set: print every matmul's input and its first converted block.
    debug: bool,
    /// Capture one-token steps as CUDA graphs (unless `WICK_CUDA_GRAPHS=0` or debugging).
    use_graphs: bool,
    /// Fuse one-token steps (unless `WICK_CUDA_FUSE=0`).
    use_fusion: bool,
    /// Prefill products on the tensor cores (`prefill.rs`).
    mmq: bool,
    /// The upload's pinned buffers, while an upload runs.
    staging: Option<Staging>,
    /// Launch the decode kernels with programmatic dependent launch (sm_90 and later, unless
    /// `WICK_CUDA_PDL=0`).
    pdl: bool,
    /// `WICK_CUDA_OCC`: force the `_o` decode kernels on or off (see `mmv_variant`).
    occ: Option<bool>,
}

impl CudaExecutor {
    /// Open device 0 and load the kernels. Errors (never panics) when the driver, NVRTC or a
    /// device is missing.
    pub fn new() -> Result<Self> {
        // SAFETY: these only try to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(err("no CUDA driver library (libcuda) found on this machine"));
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(err("no NVRTC library (libnvrtc) found: install the CUDA runtime compiler"));
        }
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
        let fns = module::load(&ctx)?;
        let device = ctx.name().unwrap_or_else(|_| "unknown".into());
        let occ = match std::env::var("WICK_CUDA_OCC").as_deref() {
            Ok("0") => Some(false),
            Ok("1") => Some(true),
            _ => None,
        };
        let mmq = prefill::enabled(ctx.compute_capability().unwrap_or((0, 0)));
        let pdl = ctx.compute_capability().is_ok_and(|c| c.0 >= 9)
            && std::env::var("WICK_CUDA_PDL").as_deref() != Ok("0");
        Ok(CudaExecutor {
            _ctx: ctx,
            stream,
            fns,
            weights: Vec::new(),
            kvs: Vec::new(),
            graphs: Vec::new(),
            scores: None,
            device,
            debug: std::env::var_os("WICK_CUDA_DEBUG").is_some(),
            use_graphs: std::env::var("WICK_CUDA_GRAPHS").as_deref() != Ok("0")
                && std::env::var_os("WICK_CUDA_DEBUG").is_none(),
            use_fusion: std::env::var("WICK_CUDA_FUSE").as_deref() != Ok("0"),
            mmq,
            staging: None,
            pdl,
            occ,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.device
    }

    /// The decode kernel to launch for `name` on rows of `k` values: the `_o` variant (at
    /// most 80 registers, six blocks a SM) for short rows of 4- and 5-bit types, where a
    /// warp has few loads to issue and more resident warps hide the memory latency better;
    /// the unrestricted one for long rows, where a warp's own unrolled loads keep the memory
    /// busy, and for Q8_0. Measured on the H100 (tg128): 1b Q4_K_M 999 -> 1172 tok/s, Q4_0
    /// 1285 -> 1330, but Q8_0 1162 -> 1015 and 8b Q4_K_M 276 -> 233 with `_o`.
    /// `WICK_CUDA_OCC=0` never, `=1` always.
    fn mmv_variant(&self, name: &str, k: usize) -> String {
        let short = match self.occ {
            Some(o) => o,
            None => k <= 2048 && !name.contains("q8_0"),
        };
        let alt = format!("{name}_o");
        if short && self.fns.contains_key(alt.as_str()) {
            alt
        } else {
            name.to_string()
        }
    }

    fn launch(&self, name: &str, grid: (u32, u32), block: u32, args: &[Arg]) -> Result<()> {
        let f = self.fns.get(name).ok_or_else(|| err(format!("no kernel '{name}'")))?;
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::P(p) => b.arg(p),
                Arg::I(i) => b.arg(i),
                Arg::L(l) => b.arg(l),
                Arg::F(x) => b.arg(x),
            };
        }
        if self.pdl && pdl_aware(name) {
            return self.launch_pdl(name, f, grid, block, args);
        }
        let cfg =
            LaunchConfig { grid_dim: (grid.0, grid.1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: every kernel's argument list is built to its C signature in `record`;
        // buffer sizes are checked in `compile` and `run`.
        unsafe { b.launch(cfg) }.map_err(drv(name))?;
        Ok(())
    }

    /// Launch with programmatic stream serialization: the kernel's blocks may start while the
    /// previous kernel runs (they wait for it in `pdl_wait`, common.cuh).
    fn launch_pdl(
        &self,
        name: &str,
        f: &CudaFunction,
        grid: (u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<()> {
        use cudarc::driver::sys;
        // Each argument in 8 bytes; the driver reads the first 4 of an int or a float.
        let mut vals: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::P(p) => p,
                Arg::I(i) => i as u32 as u64,
                Arg::L(l) => l as u64,
                Arg::F(x) => x.to_bits() as u64,
            })
            .collect();
        let mut params: Vec<*mut std::ffi::c_void> =
            vals.iter_mut().map(|v| v as *mut u64 as *mut std::ffi::c_void).collect();
        // SAFETY: an all-zero attribute is valid plain data; its id and value are set below.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: 1,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as in `launch`: the argument list matches the kernel's C signature; `params`
        // points into `vals`, both alive for the call (the driver copies the values).
        unsafe { sys::cuLaunchKernelEx(&cfg, f.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(drv(name))
    }

    /// Copy `bytes` to device address `dst` through the pinned double buffer (asynchronous:
    /// `finish_upload` waits for the last copies).
    fn upload(&mut self, dst: u64, bytes: &[u8]) -> Result<()> {
        if self.staging.is_none() {
            let ctx = self.stream.context();
            // SAFETY: page-locked host buffers; every byte is written before it is copied.
            let alloc =
                || unsafe { ctx.alloc_pinned::<u8>(STAGE_BYTES) }.map_err(drv("allocating pinned memory"));
            self.staging = Some(Staging { bufs: [alloc()?, alloc()?], done: [None, None], next: 0 });
        }
        let st = self.staging.as_mut().ok_or_else(|| err("no staging buffer"))?;
        for (n, piece) in bytes.chunks(STAGE_BYTES).enumerate() {
            let i = st.next;
            st.next ^= 1;
            if let Some(e) = st.done[i].take() {
                e.synchronize().map_err(drv("waiting for an upload"))?;
            }
            let host = st.bufs[i].as_mut_slice().map_err(drv("staging"))?;
            host[..piece.len()].copy_from_slice(piece);
            let at = dst + (n * STAGE_BYTES) as u64;
            // SAFETY: `at` lies in a device buffer of this executor with room for the piece
            // (checked by the caller); the host bytes stay untouched until `done[i]` completes.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(at, &host[..piece.len()], self.stream.cu_stream())
            }
            .map_err(drv("uploading weights"))?;
            st.done[i] = Some(self.stream.record_event(None).map_err(drv("recording an upload"))?);
        }
        Ok(())
    }

    /// A product's optional bias as kernel arguments: its address and type id (0, 0: none).
    fn bias_arg(&self, bias: Option<WeightId>) -> Result<(u64, i32)> {
        match bias {
            Some(b) => {
                let b = self.weight(b)?;
                Ok((b.buf.ptr, b.dtype.id() as i32))
            }
            None => Ok((0, 0)),
        }
    }

    fn weight(&self, id: WeightId) -> Result<&Weight> {
        self.weights.get(id.0 as usize).ok_or_else(|| err("unknown weight"))
    }

    /// Bytes the matmul of `w` needs for its converted activations, `rows` rows.
    fn qact_bytes(w: &Weight, rows: usize) -> Result<usize> {
        let vt = quant::vec_dot_type(w.dtype);
        let per_row = match vt {
            GgmlType::F16 | GgmlType::F32 => 4 * w.k() as u64,
            _ => vt.row_bytes(w.k() as u64)?,
        };
        // The decode kernels' split layout: k bytes, then up to two floats per 32 values.
        let split = w.k().div_ceil(16) * 16 + w.k() / 4;
        Ok((per_row as usize * rows).max(split).max(prefill::qact_bytes(w.k(), rows)))
    }

    /// The q8 format of `w`'s decode kernel (`mmv_*`), None for float weights.
    fn act_quant(&self, w: WeightId) -> Option<ActQuant> {
        let t = self.weights.get(w.0 as usize)?.dtype;
        layout::split(t)?;
        Some(match quant::vec_dot_type(t) {
            GgmlType::Q8_1 => ActQuant::Q8_1,
            GgmlType::Q8_K => ActQuant::Q8K,
            _ => ActQuant::Q8_0,
        })
    }

    /// Enqueue a whole step: the copy of its inputs, the decode plan if there is one (else
    /// op by op), and the copy of the fused argmax.
    fn record_all(&self, c: &Compiled, kv: KvId) -> Result<()> {
        // SAFETY: io_host points to io_len page-locked u32 owned by `c`.
        let io = unsafe { std::slice::from_raw_parts(c.io_host, c.io_len) };
        // SAFETY: io_ptr is the device buffer `io`, as long as `io_host`.
        unsafe { cudarc::driver::result::memcpy_htod_async(c.io_ptr, io, self.stream.cu_stream()) }
            .map_err(drv("uploading token ids"))?;
        if c.plan.is_empty() {
            if c.g.n_tokens > 1 && prefill::profiling() {
                return self.record_profiled(c, kv);
            }
            return c.g.ops.iter().try_for_each(|op| self.record(c, kv, op));
        }
        let argmax = c.plan.iter().any(|s| matches!(s, Step::MatVec { argmax: true, .. }));
        if argmax {
            // Zeroed before the first kernel, not between two (which would cut the chain of
            // programmatic launches).
            // SAFETY: best_ptr is the 8-byte buffer `best` of this compiled graph.
            unsafe { cudarc::driver::result::memset_d8_async(c.best_ptr, 0, 8, self.stream.cu_stream()) }
                .map_err(drv("zeroing the argmax"))?;
        }
        c.plan.iter().try_for_each(|s| self.record_step(c, kv, s))?;
        if argmax {
            let ptr = c.best_host;
            // SAFETY: best_host is page-locked memory of one u64 owned by `c`; the host reads
            // it only after synchronizing the stream.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr, 1) };
            unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, c.best_ptr, self.stream.cu_stream()) }
                .map_err(drv("reading the argmax"))?;
        }
        Ok(())
    }

    /// Enqueue one step of a decode plan.
    fn record_step(&self, c: &Compiled, kv: KvId, step: &Step) -> Result<()> {
        let g = &c.g;
        let act = |a: ActId| c.acts[a.0 as usize].ptr;
        // The split q8 scratch: k bytes of quants, then the block scales from a 16-byte boundary.
        let scales = |k: usize| c.qact.ptr + k.div_ceil(16) as u64 * 16;
        match *step {
            Step::Op(i) => self.record(c, kv, &g.ops[i]),
            Step::NormQuant { op, kind } => {
                let Op::RmsNorm { x, weight, dst, eps, .. } = g.ops[op] else {
                    return Err(err("decode plan: not a norm"));
                };
                let w = self.weight(weight)?;
                let k = g.cols(x);
                let args = [
                    Arg::P(act(x)),
                    Arg::P(act(dst)),
                    Arg::P(w.buf.ptr),
                    Arg::I(w.dtype.id() as i32),
                    Arg::I(k as i32),
                    Arg::F(eps),
                    Arg::P(c.qact.ptr),
                    Arg::P(scales(k)),
                    Arg::I(kind as i32),
                ];
                self.launch("rms_norm_q8s", (k.div_ceil(256) as u32, 1), 256, &args)
            }
            Step::Quant { x, kind } => {
                let k = g.cols(x);
                let (qs, ds) = (c.qact.ptr, scales(k));
                match kind {
                    ActQuant::Q8K => {
                        let args = [Arg::P(act(x)), Arg::P(qs), Arg::P(ds)];
                        self.launch("quantize_q8ks", ((k / 256) as u32, 1), 256, &args)
                    }
                    _ => {
                        let args =
                            [Arg::P(act(x)), Arg::P(qs), Arg::P(ds), Arg::I((kind == ActQuant::Q8_1) as i32)];
                        self.launch("quantize_q8s", ((k / 32) as u32, 1), 32, &args)
                    }
                }
            }
            Step::MatVec3 { w, bias, dst } => {
                let ws = [self.weight(w[0])?, self.weight(w[1])?, self.weight(w[2])?];
                let k = ws[0].k();
                let mut args: Vec<Arg> = ws.iter().map(|w| Arg::P(w.buf.ptr)).collect();
                args.extend(dst.iter().map(|&d| Arg::P(act(d))));
                let mut types = Vec::new();
                for b in bias {
                    let (p, t) = self.bias_arg(b)?;
                    args.push(Arg::P(p));
                    types.push(Arg::I(t));
                }
                args.extend(types);
                args.extend(ws.iter().map(|w| Arg::I(w.n_rows() as i32)));
                args.extend([Arg::P(c.qact.ptr), Arg::P(scales(k)), Arg::I(k as i32)]);
                let rows: usize = ws.iter().map(|w| w.n_rows()).sum();
                let grid = (rows.div_ceil(MMV_WARPS) as u32, 1);
                if ws.iter().any(|w| w.dtype != ws[0].dtype) {
                    args.extend(ws.iter().map(|w| Arg::I(w.dtype.id() as i32)));
                    return self.launch(&self.mmv_variant("mmv3_kmix", k), grid, 128, &args);
                }
                let name = ws[0].dtype.name().to_ascii_lowercase();
                self.launch(&self.mmv_variant(&format!("mmv3_{name}"), k), grid, 128, &args)
            }
            Step::RopeKv { op } => {
                let (
                    Op::Rope { x: q, n_heads, head_dim, n_rot, base, freq_scale, mode },
                    Op::Rope { x: k, n_heads: n_kv, .. },
                    Op::KvStore { layer, v, .. },
                ) = (&g.ops[op], &g.ops[op + 1], &g.ops[op + 2])
                else {
                    return Err(err("decode plan: not rope, rope, KV store"));
                };
                let cache = self.kvs[kv.0 as usize].as_ref().ok_or_else(|| err("unknown KV cache"))?;
                let l = cache.layers.get(*layer).ok_or_else(|| err("KV layer out of range"))?;
                if g.cols(*k) != l.k_dim || g.cols(*v) != l.v_dim || n_kv * head_dim != l.k_dim {
                    return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
                }
                let args = [
                    Arg::P(act(*q)),
                    Arg::P(act(*k)),
                    Arg::P(act(*v)),
                    Arg::P(l.k.ptr),
                    Arg::P(l.v.ptr),
                    Arg::P(c.io_ptr),
                    Arg::I(*n_heads as i32),
                    Arg::I(*n_kv as i32),
                    Arg::I(*head_dim as i32),
                    Arg::I(*n_rot as i32),
                    Arg::F(base.powf(-2.0 / *n_rot as f32)),
                    Arg::F(*freq_scale),
                    Arg::I((*mode == RopeMode::Neox) as i32),
                    Arg::I(l.k_dim as i32),
                    Arg::I(l.v_dim as i32),
                ];
                let threads = (n_rot / 2).div_ceil(32).clamp(1, 8) as u32 * 32;
                self.launch("rope_kv", ((n_heads + n_kv + 1) as u32, 1), threads.max(128), &args)
            }
            Step::MatVec { w, gate, bias, add, dst, argmax } => {
                let wt = self.weight(w)?;
                let (k, n) = (wt.k(), wt.n_rows());
                let name = wt.dtype.name().to_ascii_lowercase();
                let (qs, ds) = (c.qact.ptr, scales(k));
                match gate {
                    Some((up, a)) => {
                        let ut = self.weight(up)?;
                        let args = [
                            Arg::P(wt.buf.ptr),
                            Arg::P(ut.buf.ptr),
                            Arg::P(qs),
                            Arg::P(ds),
                            Arg::P(act(dst)),
                            Arg::I((a == Gate::Gelu) as i32),
                            Arg::I(k as i32),
                            Arg::I(n as i32),
                        ];
                        let f = self.mmv_variant(&format!("mmv2_{name}"), k);
                        self.launch(&f, (n.div_ceil(MMV_WARPS) as u32, 1), 128, &args)
                    }
                    None => {
                        let (bp, bt) = self.bias_arg(bias)?;
                        let args = [
                            Arg::P(wt.buf.ptr),
                            Arg::P(qs),
                            Arg::P(ds),
                            Arg::P(act(dst)),
                            Arg::P(bp),
                            Arg::I(bt),
                            Arg::P(add.map_or(0, act)),
                            Arg::I(k as i32),
                            Arg::I(n as i32),
                            Arg::P(if argmax { c.best_ptr } else { 0 }),
                        ];
                        let f = self.mmv_variant(&format!("mmv_{name}"), k);
                        self.launch(&f, (n.div_ceil(MMV_WARPS) as u32, 1), 128, &args)
                    }
                }
            }
        }
    }

    fn validate(&self, g: &Graph) -> Result<()> {
        g.check(self.weights.len(), |w| {
            let wt = &self.weights[w.0 as usize];
            (wt.k(), wt.n_rows())
        })
        .map_err(err)?;
        for op in &g.ops {
            match op {
                Op::MatMul { w, .. } => {
                    let wt = self.weight(*w)?;
                    if wt.k() % wt.dtype.block_size() != 0 {
                        return Err(err(format!("'{}': row length {} is not whole blocks", wt.name, wt.k())));
                    }
                }
                // The attention kernel keeps the query head in 512 floats of shared memory.
                Op::Attention { head_dim, n_heads, n_kv_heads, .. }
                    if *head_dim > 512 || *n_kv_heads == 0 || n_heads % n_kv_heads != 0 =>
                {
                    return Err(err(format!("attention op {op:?} is not supported")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn run_sync(
        &mut self,
        graph: GraphId,
        kv: KvId,
        tokens: &[u32],
        pos: usize,
        readback: Readback,
    ) -> Result<StepOutput> {
        let gi = graph.0 as usize;
        let c = self.graphs.get(gi).ok_or_else(|| err("unknown graph"))?;
        let cache =
            self.kvs.get(kv.0 as usize).and_then(|c| c.as_ref()).ok_or_else(|| err("unknown KV cache"))?;
        let n_ctx = cache.n_ctx;
        c.g.check_step("cuda", tokens, pos, n_ctx)?;
        if let Some(Op::Embed { table, .. }) = c.g.ops.first() {
            let n_vocab = self.weight(*table)?.n_rows();
            if let Some(&t) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(Error::InvalidArgument(format!("token id {t} is outside the vocabulary")));
            }
        }
        // Attention scratch: n_ctx scores per (row, head).
        let need =
            c.g.ops
                .iter()
                .map(|op| match op {
                    Op::Attention { n_heads, .. } => n_heads * c.g.n_tokens * n_ctx,
                    _ => 0,
                })
                .max()
                .unwrap_or(0);
        if self.scores.as_ref().is_none_or(|(_, n)| *n < need) {
            self.scores = Some((Buf::zeros(&self.stream, need)?, need));
        }
        let pos_i32 = i32::try_from(pos).map_err(|_| err("position out of range"))?;
        let io: Vec<u32> = std::iter::once(pos_i32 as u32).chain(tokens.iter().copied()).collect();
        let scores = self.scores.as_ref().map_or(0, |s| s.0.ptr);
        let c = &mut self.graphs[gi];
        if io.len() > c.io_len {
            return Err(err("more tokens than the graph was compiled for"));
        }
        // SAFETY: io_host points to io_len page-locked u32 owned by `c`; the stream is idle
        // (every step ends with a synchronization), so no copy reads them now.
        let host = unsafe { std::slice::from_raw_parts_mut(c.io_host, c.io_len) };
        host[..io.len()].copy_from_slice(&io);
        if self.use_graphs && c.g.n_tokens == 1 {
            let fresh = matches!(&c.captured, Some((k, s, _)) if *k == kv && *s == scores);
            if !fresh {
                c.captured = None;
                let graph = self.capture(gi, kv)?;
                self.graphs[gi].captured = Some((kv, scores, graph));
            }
            let c = &self.graphs[gi];
            let graph = c.captured.as_ref().map(|x| &x.2).ok_or_else(|| err("no captured graph"))?;
            graph.launch().map_err(drv("graph launch"))?;
        } else {
            self.record_all(&self.graphs[gi], kv)?;
        }
        let c = &self.graphs[gi];
        let g = &c.g;
        let n_vocab = g.cols(g.logits);
        let rows = g.rows(g.logits);
        let logits = c.acts[g.logits.0 as usize].ptr;
        let last = logits + 4 * ((rows - 1) * n_vocab) as u64;
        let fused_argmax = c.plan.iter().any(|s| matches!(s, Step::MatVec { argmax: true, .. }));
        let out = match readback {
            Readback::Argmax if fused_argmax => {
                self.stream.synchronize().map_err(drv("reading the token back"))?;
                // SAFETY: page-locked u64 owned by `c`, written by the copy the stream finished.
                let best = unsafe { c.best_host.read_volatile() };
                // No key (all logits NaN): token 0, as the argmax kernel answers.
                let token = if best == 0 { 0 } else { u32::MAX - best as u32 };
                StepOutput { token: Some(token), logits: Vec::new() }
            }
            Readback::Argmax => {
                self.launch(
                    "argmax",
                    (1, 1),
                    1024,
                    &[Arg::P(last), Arg::I(n_vocab as i32), Arg::P(c.argmax_ptr)],
                )?;
                let t = self.stream.clone_dtoh(&c.argmax).map_err(drv("reading the token back"))?;
                StepOutput { token: Some(t[0]), logits: Vec::new() }
            }
            Readback::LastLogits | Readback::AllLogits => {
                let all = self
                    .stream
                    .clone_dtoh(&c.acts[g.logits.0 as usize]._mem)
                    .map_err(drv("reading logits"))?;
                let mut all = all[..rows * n_vocab].to_vec();
                if readback == Readback::LastLogits {
                    all.drain(..(rows - 1) * n_vocab);
                }
                StepOutput { token: None, logits: all }
            }
        };
        Ok(out)
    }

    /// Capture the ops of graph `gi` on cache `kv` as a CUDA graph.
    fn capture(&self, gi: usize, kv: KvId) -> Result<CudaGraph> {
        let c = &self.graphs[gi];
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(drv("starting a graph capture"))?;
        let recorded = self.record_all(c, kv);
        // End the capture whatever happened, so the stream is usable again.
        let graph =
            self.stream.end_capture(CUgraphInstantiate_flags(0)).map_err(drv("ending a graph capture"));
        recorded?;
        graph?.ok_or_else(|| err("the graph capture came back empty"))
    }

    /// Enqueue one op on the stream.
    fn record(&self, c: &Compiled, kv: KvId, op: &Op) -> Result<()> {
        let g = &c.g;
        let pos = c.io_ptr;
        let tokens = c.io_ptr + 4;
        let act = |a: ActId| c.acts[a.0 as usize].ptr;
        let ceil = |n: usize, d: usize| n.div_ceil(d).max(1) as u32;
        let cache = self.kvs[kv.0 as usize].as_ref().ok_or_else(|| err("unknown KV cache"))?;
        match *op {
            Op::Embed { table, dst, scale } => {
                let t = self.weight(table)?;
                let args = [
                    Arg::P(t.buf.ptr),
                    Arg::I(t.dtype.id() as i32),
                    Arg::L(t.n_rows() as i64),
                    Arg::P(tokens),
                    Arg::P(act(dst)),
                    Arg::I(g.cols(dst) as i32),
                    Arg::F(scale),
                ];
                self.launch("embed", (g.rows(dst) as u32, ceil(g.cols(dst), 256)), 256, &args)
            }
            Op::RmsNorm { x, weight, dst, group, eps } => {
                let w = self.weight(weight)?;
                let groups = g.rows(x) * g.cols(x) / group;
                let args = [
                    Arg::P(act(x)),
                    Arg::P(act(dst)),
                    Arg::P(w.buf.ptr),
                    Arg::I(w.dtype.id() as i32),
                    Arg::I(group as i32),
                    Arg::F(eps),
                ];
                self.launch("rms_norm", (groups as u32, 1), 128, &args)
            }
            Op::MatMul { w, x, dst, bias } => {
                if self.matmul_mmq(c, op, w, x, dst, bias)? {
                    return Ok(());
                }
                let wt = self.weight(w)?;
                let (k, n, rows) = (wt.k(), wt.n_rows(), g.rows(x));
                let vt = quant::vec_dot_type(wt.dtype);
                let a = match vt {
                    GgmlType::Q8_0 | GgmlType::Q8_1 => {
                        let sum = (vt == GgmlType::Q8_1) as i32;
                        let args = [Arg::P(act(x)), Arg::P(c.qact.ptr), Arg::I(k as i32), Arg::I(sum)];
                        self.launch("quantize_q8_0", ((k / 32) as u32, rows as u32), 32, &args)?;
                        c.qact.ptr
                    }
                    GgmlType::Q8_K => {
                        let args = [Arg::P(act(x)), Arg::P(c.qact.ptr), Arg::I(k as i32)];
                        self.launch("quantize_q8_k", ((k / 256) as u32, rows as u32), 256, &args)?;
                        c.qact.ptr
                    }
                    GgmlType::F16 => {
                        let n = (rows * k) as i64;
                        let args = [Arg::P(act(x)), Arg::P(c.qact.ptr), Arg::L(n)];
                        self.launch("round_f16", (ceil(rows * k, 256), 1), 256, &args)?;
                        c.qact.ptr
                    }
                    _ => act(x),
                };
                if self.debug {
                    self.stream.synchronize().map_err(drv("debug"))?;
                    let q = self.stream.clone_dtoh(&c.qact._mem).map_err(drv("debug"))?;
                    let xs = self.stream.clone_dtoh(&c.acts[x.0 as usize]._mem).map_err(drv("debug"))?;
                    eprintln!(
                        "debug {}: x {:?}\n  qact {:?}",
                        wt.name,
                        &xs[..k.min(32)],
                        &q[..q.len().min(36)]
                    );
                }
                let kernel = match wt.dtype {
                    GgmlType::Q4_0 => "matvec_q4_0",
                    GgmlType::Q4_1 => "matvec_q4_1",
                    GgmlType::Q5_0 => "matvec_q5_0",
                    GgmlType::Q5_1 => "matvec_q5_1",
                    GgmlType::Q8_0 => "matvec_q8_0",
                    GgmlType::Q4_K => "matvec_q4_k",
                    GgmlType::Q5_K => "matvec_q5_k",
                    GgmlType::Q6_K => "matvec_q6_k",
                    GgmlType::F16 => "matvec_f16",
                    GgmlType::F32 => "matvec_f32",
                    other => return Err(err(format!("no matrix kernel for {other}"))),
                };
                let (bp, bt) = self.bias_arg(bias)?;
                let args = [
                    Arg::P(wt.buf.ptr),
                    Arg::P(a),
                    Arg::P(act(dst)),
                    Arg::P(bp),
                    Arg::I(bt),
                    Arg::I(k as i32),
                    Arg::I(n as i32),
                    Arg::I(rows as i32),
                ];
                // Prefill: each warp takes 8 token rows, so a weight block is read once per 8.
                if rows >= 4 {
                    self.launch(&format!("{kernel}_r8"), (ceil(n, 4), ceil(rows, 8)), 128, &args)
                } else {
                    self.launch(kernel, (ceil(n, 4), rows as u32), 128, &args)
                }
            }
            Op::Rope { x, n_heads, head_dim, n_rot, base, freq_scale, mode } => {
                let theta_scale = base.powf(-2.0 / n_rot as f32);
                let args = [
                    Arg::P(act(x)),
                    Arg::P(pos),
                    Arg::I(n_heads as i32),
                    Arg::I(head_dim as i32),
                    Arg::I(n_rot as i32),
                    Arg::F(theta_scale),
                    Arg::F(freq_scale),
                    Arg::I((mode == RopeMode::Neox) as i32),
                ];
                let threads = (n_rot / 2).div_ceil(32).clamp(1, 8) as u32 * 32;
                self.launch("rope", ((g.rows(x) * n_heads) as u32, 1), threads, &args)
            }
            Op::KvStore { layer, k, v } => {
                let l = cache.layers.get(layer).ok_or_else(|| err("KV layer out of range"))?;
                if g.cols(k) != l.k_dim || g.cols(v) != l.v_dim {
                    return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
                }
                for (src, dst, dim) in [(k, l.k.ptr, l.k_dim), (v, l.v.ptr, l.v_dim)] {
                    let n = g.rows(src) * dim;
                    let args =
                        [Arg::P(act(src)), Arg::P(dst), Arg::P(pos), Arg::I(dim as i32), Arg::L(n as i64)];
                    self.launch("kv_store", (ceil(n, 256), 1), 256, &args)?;
                }
                Ok(())
            }
            Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } => {
                let l = cache.layers.get(layer).ok_or_else(|| err("KV layer out of range"))?;
                let scores = self.scores.as_ref().ok_or_else(|| err("no attention scratch"))?.0.ptr;
                let args = [
                    Arg::P(act(q)),
                    Arg::P(act(dst)),
                    Arg::P(l.k.ptr),
                    Arg::P(l.v.ptr),
                    Arg::P(scores),
                    Arg::P(pos),
                    Arg::I(cache.n_ctx as i32),
                    Arg::I(n_heads as i32),
                    Arg::I(n_kv_heads as i32),
                    Arg::I(head_dim as i32),
                    Arg::I(l.k_dim as i32),
                    Arg::I(l.v_dim as i32),
                    Arg::F(scale),
                    Arg::I(window.map_or(0, |w| w.min(i32::MAX as usize) as i32)),
                    Arg::F(softcap.unwrap_or(0.0)),
                ];
                if g.rows(q) > 1 && head_dim <= prefill::ATTENTION_ROWS_MAX_DIM {
                    return self.attention_rows(&args, g.rows(q), n_heads, head_dim);
                }
                self.launch("attention", ((g.rows(q) * n_heads) as u32, 1), 128, &args)
            }
            Op::GatedAct { gate, up, act: a } => {
                let n = g.rows(gate) * g.cols(gate);
                let args =
                    [Arg::P(act(gate)), Arg::P(act(up)), Arg::I((a == Gate::Gelu) as i32), Arg::L(n as i64)];
                self.launch("gated_act", (ceil(n, 256), 1), 256, &args)
            }
            Op::Add { a, b, dst } => {
                let n = g.rows(dst) * g.cols(dst);
                let args = [Arg::P(act(a)), Arg::P(act(b)), Arg::P(act(dst)), Arg::L(n as i64)];
                self.launch("add", (ceil(n, 256), 1), 256, &args)
            }
            Op::TakeLast { x, dst } => {
                let cols = g.cols(x);
                let src = act(x) + 4 * ((g.rows(x) - 1) * cols) as u64;
                let args = [Arg::P(src), Arg::P(act(dst)), Arg::L(cols as i64)];
                self.launch("copy", (ceil(cols, 256), 1), 256, &args)
            }
        }
    }
}

impl Executor for CudaExecutor {
    fn measure_bandwidth(&mut self) -> LocalFuture<'_, Result<Option<f64>>> {
        // A 1 GiB device-to-device copy, best of five, counting bytes read plus bytes written.
        let measure = || -> Result<f64> {
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
        };
        let r = measure().map(Some);
        Box::pin(async move { r })
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn supports_type(&self, t: GgmlType) -> bool {
        TYPES.contains(&t)
    }

    fn alloc_weight(&mut self, name: &str, dtype: GgmlType, dims: &[u64]) -> Result<WeightId> {
        if !self.supports_type(dtype) {
            return Err(Error::UnsupportedType {
                tensor: name.into(),
                type_id: dtype.id(),
                type_name: dtype.name().into(),
            });
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
        let repack = split.map(layout::Repacker::new);
        self.weights.push(Weight { name: name.into(), dtype, dims: dims.to_vec(), bytes, buf, repack });
        Ok(WeightId(self.weights.len() as u32 - 1))
    }

    fn write_weight(&mut self, id: WeightId, offset: u64, bytes: &[u8]) -> Result<()> {
        let w = self.weights.get_mut(id.0 as usize).ok_or_else(|| err("unknown weight"))?;
        let start = usize::try_from(offset).map_err(|_| err("offset out of range"))?;
        let end = start.checked_add(bytes.len()).filter(|&e| e <= w.bytes);
        end.ok_or_else(|| err(format!("write past the end of '{}'", w.name)))?;
        let blocks = w.blocks();
        let base = w.buf.ptr;
        let Some(repack) = w.repack.as_mut() else {
            return self.upload(base + offset, bytes);
        };
        if offset != repack.received() {
            return Err(err(format!(
                "'{}': quantized weights must be uploaded in order (got byte {offset}, expected {})",
                w.name,
                repack.received()
            )));
        }
        let p = repack.push(bytes, blocks);
        self.upload(base + p.quant_at, &p.quants)?;
        self.upload(base + p.header_at, &p.header)
    }

    fn finish_upload(&mut self) -> LocalFuture<'_, Result<()>> {
        let r = self.stream.synchronize().map_err(drv("finishing the upload"));
        self.staging = None;
        Box::pin(async move { r })
    }

    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        if spec.k_dims.len() != spec.v_dims.len() {
            return Err(err("KV spec: key and value layer counts differ"));
        }
        let mut layers = Vec::with_capacity(spec.k_dims.len());
        for (&k_dim, &v_dim) in spec.k_dims.iter().zip(&spec.v_dims) {
            let kn = spec.n_ctx.checked_mul(k_dim).ok_or_else(|| err("KV cache too large"))?;
            let vn = spec.n_ctx.checked_mul(v_dim).ok_or_else(|| err("KV cache too large"))?;
            layers.push(KvLayer {
                k: Buf::zeros(&self.stream, kn)?,
                v: Buf::zeros(&self.stream, vn)?,
                k_dim,
                v_dim,
            });
        }
        self.kvs.push(Some(Kv { n_ctx: spec.n_ctx, layers }));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }

    fn free_kv(&mut self, kv: KvId) {
        if let Some(slot) = self.kvs.get_mut(kv.0 as usize) {
            *slot = None;
        }
    }

    fn compile(&mut self, graph: &Graph) -> Result<GraphId> {
        self.validate(graph)?;
        let mut acts = Vec::with_capacity(graph.acts.len());
        for i in 0..graph.acts.len() {
            let a = ActId(i as u32);
            acts.push(Buf::zeros(&self.stream, graph.rows(a) * graph.cols(a))?);
        }
        let mut qbytes = 0;
        for op in &graph.ops {
            if let Op::MatMul { w, x, .. } = op {
                qbytes = qbytes.max(Self::qact_bytes(self.weight(*w)?, graph.rows(*x))?);
            }
        }
        let qact = Buf::zeros(&self.stream, qbytes)?;
        let io = self.stream.alloc_zeros::<u32>(graph.n_tokens + 1).map_err(drv("device allocation"))?;
        let io_ptr = io.device_ptr(&self.stream).0;
        let argmax = self.stream.alloc_zeros::<u32>(1).map_err(drv("device allocation"))?;
        let argmax_ptr = argmax.device_ptr(&self.stream).0;
        let ctx = self.stream.context();
        // SAFETY: page-locked host memory, written before it is read.
        let io_host = unsafe { ctx.alloc_pinned_with_flags::<u32>(graph.n_tokens + 1, 0) }
            .map_err(drv("allocating pinned memory"))?;
        let mut best_host =
            unsafe { ctx.alloc_pinned_with_flags::<u64>(1, 0) }.map_err(drv("allocating pinned memory"))?;
        let mut io_host = io_host;
        let io_host_ptr = io_host.as_mut_ptr().map_err(drv("pinned memory"))?;
        let best_host_ptr = best_host.as_mut_ptr().map_err(drv("pinned memory"))?;
        // SAFETY: fresh page-locked buffers of these lengths, not yet used by any copy.
        unsafe {
            std::ptr::write_bytes(io_host_ptr, 0, graph.n_tokens + 1);
            best_host_ptr.write(0);
        }
        let best = self.stream.alloc_zeros::<u64>(1).map_err(drv("device allocation"))?;
        let best_ptr = best.device_ptr(&self.stream).0;
        let plan = if graph.n_tokens == 1 && self.use_fusion {
            let dtype = |w: WeightId| self.weights.get(w.0 as usize).map(|w| w.dtype);
            // Q, K and V may mix K-quant types (mmv3_kmix).
            let kquant =
                |t: Option<GgmlType>| matches!(t, Some(GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K));
            fuse::plan(
                graph,
                |w| self.act_quant(w),
                |a, b| dtype(a) == dtype(b) || (kquant(dtype(a)) && kquant(dtype(b))),
            )
        } else {
            Vec::new()
        };
        self.graphs.push(Compiled {
            plan,
            g: graph.clone(),
            acts,
            qact,
            _io: io,
            io_ptr,
            argmax,
            argmax_ptr,
            _best: best,
            best_ptr,
            io_host: io_host_ptr,
            io_len: graph.n_tokens + 1,
            best_host: best_host_ptr,
            _io_host: io_host,
            _best_host: best_host,
            captured: None,
        });
        Ok(GraphId(self.graphs.len() as u32 - 1))
    }

    fn run<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        tokens: &'a [u32],
        pos: usize,
        readback: Readback,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        let out = self.run_sync(graph, kv, tokens, pos, readback);
        Box::pin(async move { out })
    }
}
