//! The WebGPU executor: wgpu natively (Vulkan; `WGPU_BACKEND` may pick another) and the
//! browser's WebGPU in wasm.
//!
//! Design decisions:
//! - Weights stay in their GGUF block format in storage buffers; kernels dequantize in
//!   registers. A tensor larger than the device's storage binding limit is split at row
//!   boundaries into parts, and the ops that read it dispatch once per part.
//! - Matrix products first quantize the activations (q8_1 or q8_K blocks, rounding as the CPU
//!   reference and llama.cpp do, plus per-block sums) and use integer dot products
//!   (`dot4I8Packed`: one DP4A on GPUs) inside blocks, so the GPU agrees with the CPU reference
//!   up to float summation order, not up to quantization noise. Quantizing is one small
//!   dispatch per distinct input (8 blocks or one K block per workgroup), shared by the
//!   products that read the same activations (Q, K, V; gate, up).
//! - Decode is bound by weight bandwidth, so the matrix-vector kernel (shaders/matvec.wgsl) is
//!   shaped for it. A weight row is cut into tasks of 16 weight bytes (32 values of Q4_K, Q5_K,
//!   Q6_K and the legacy formats, 16 of Q8_0, 64 of Q2_K/Q3_K, 4 or 8 floats); a workgroup of
//!   64 invocations owns up to 4 rows and invocation i takes tasks i, i + 64, ... of each, so
//!   a subgroup reads consecutive 16-byte pieces (whole cache lines) and each task's
//!   activations (q8 bytes, scale, sums) are loaded once for all the rows. Formats whose
//!   blocks are 16-byte aligned (Q4_K 144 B, Q5_K 176 B, floats) load `vec4<u32>`s directly;
//!   the others (Q8_0 34 B, Q6_K 210 B, ...) read four words at any offset (five aligned
//!   loads, funnel-shifted). The 64 partial sums per row are reduced through workgroup memory
//!   (two barriers) or, where the device has `Features::SUBGROUP` (natively only: wgpu never
//!   reports it in browsers, and naga rejects `enable subgroups;`), one `subgroupAdd` and one
//!   barrier. A workgroup takes one weight row when decoding and two in prefill (ops/matmul.rs
//!   `coop_rows`): on an H100 more workgroups in flight beat sharing activation loads between
//!   four rows (decode 12% faster).
//!   Per 16 bytes of Q4_K: one 16-byte weight load (plus the block header, a cache hit),
//!   32 activation bytes (shared by the rows), 8 DP4As and ~30 integer and 6 float operations:
//!   ~2.5 operations per weight byte, far below what an H100 issues per byte of HBM bandwidth.
//!   Prefill (several token rows) loops over the rows inside the workgroup, re-reading the
//!   weight rows from cache. On CPU-emulated adapters one invocation takes a whole row (no
//!   barriers, which are slow there).
//! - Measured on an H100 through Vulkan (synthetic Llama 3.1 8B Q4_K_M, decode): the step
//!   was bound by its ~700 dependent dispatches (each ~9 µs with a pipeline barrier), by
//!   wgpu's CPU cost of recording them (~2.4 ms per step, serialized with the GPU), by a
//!   64-invocation RMSNorm (50 µs) and by attention (50 µs a layer), not by weight bandwidth.
//!   Hence: ops fused into fewer dispatches (fuse.rs: 11 per Llama layer instead of 22), the
//!   next step recorded while the GPU runs the current one (steps differ only in the contents
//!   of the step buffer), and attention keeping its scores in workgroup memory (since replaced
//!   by the split and tiled kernels below).
//!   `WICK_WEBGPU_PROFILE=1` prints per-kernel GPU times (timestamp queries) and CPU times.
//! - Attention (ops/attention.rs) reads the f16 cache in four-value loads and keeps scores
//!   and sums in f32 with an online softmax. Steps of 1 to 4 rows (decode) split each row's
//!   keys across workgroups (attention_split.wgsl: a split of at least 64 keys, one KV head
//!   and up to 8 of its query heads per workgroup of 256, so K and V are read once per KV
//!   head; up to 128 splits fixed when the graph is compiled, each split's range computed
//!   from the row's own position at run time, from a multiple of 64 so that key tiles lie in
//!   one block, empty splits exiting; every invocation issues its loads of a tile's keys and
//!   values at once, into written-out registers, since a split is a tile or two and the
//!   kernel is bound by latency) and merge the splits in a second dispatch
//!   (attention_combine.wgsl: every split read at once, trees in workgroup memory). Longer
//!   steps use tiled flash attention (attention_tiled.wgsl: 32 or 16 (row, query head) pairs
//!   of one KV head and one sequence per workgroup, each sequence's pairs tiled on their own,
//!   key tiles of 64 or 32 staged through workgroup memory, sized from
//!   `max_compute_workgroup_storage_size`; causally masked tiles are skipped). Head sizes
//!   that are not a multiple of 4 keep attention.wgsl (a workgroup per row and head).
//!   Measured on the H100 through Vulkan: an array in a kernel that is indexed by anything
//!   the driver does not unroll to constants (a loop that holds barriers, a function-local
//!   array returned) lives in memory, not registers, and cost the tiled kernel 3.4x; the
//!   kernels write such loops out (template.rs `lines`): acc0, acc1, ..., s0, s1, ...
//! - Steps of several sequences over the blocked KV cache (exec/step.rs): every kernel that
//!   reads the step takes each row's token, position and sequence from the packed
//!   `StepLayout` (shaders/step.wgsl), and reads or writes cache rows through the row's
//!   sequence's block table, looked up once per key tile in attention (a tile of 64 or 32
//!   keys from a multiple of its size lies in one block of 64).
//! - Two precision paths: with `Features::SHADER_F16` (unless `WICK_WEBGPU_F16=0`) kernels
//!   read bulk f16 data through f16-typed bindings and hardware conversion: the f16 KV cache
//!   in attention, F16 weights, and the f16 block scales (the weight buffer is bound a second
//!   time as `array<vec4<f16>>`). Arithmetic stays f32 (products of f16 values are exact in
//!   f32; f16 sums would not meet the CPU tolerance). Without the feature (SwiftShader in
//!   browsers) f16 bits are converted by hand, exactly.
//! - `compile` checks the graph (`Graph::check`, as every executor does) and builds
//!   everything a step needs once: activation buffers, one uniform buffer holding every
//!   dispatch's parameters, pipelines (cached per kernel), bind groups. Bind
//!   groups that name a KV cache are made at the first step with that cache and kept.
//! - `run` writes the packed step (`StepLayout`: tokens, positions, sequences, block tables)
//!   into the plan's step buffer for the cache (one per (plan, cache): the tables' stride is
//!   the cache's block count; record.rs), submits the step's commands (recorded ahead during
//!   the previous step of the same graph, cache and readback, else now) in one submission,
//!   records the next step's, and reads back an argmax id per sequence (computed on the
//!   device) or the logits (LastLogits: each sequence's row). `run_greedy` also submits the
//!   step after, its token copied on the device from this step's argmax, before reading this
//!   one's back: greedy decoding keeps the GPU busy between steps.
//! - Activations are f32; the KV cache is f16, two per 32-bit word (read as `vec2<f16>` with
//!   `shader-f16`, by hand without).
//! - Layout: device.rs acquires the device; ops/ turns each launch unit of a graph (one op,
//!   or ops fused into one dispatch) into commands, one file per op family; record.rs makes
//!   a plan's buffers and bind groups and records steps; kernels.rs composes each `Kernel`'s
//!   WGSL from shaders/ with the template step (template.rs) and its typed parameters
//!   (params.rs).
//! - Environment: `WICK_WEBGPU_F16=0` forces the f32 path, `WICK_WEBGPU_SUBGROUPS=0` the
//!   workgroup-memory reduction; `WICK_WEBGPU_COOP=1` forces the cooperative matrix kernels
//!   and `0` the one-row-per-invocation ones, whatever the adapter type;
//!   `WICK_WEBGPU_FUSE=0` turns fusions off, `WICK_WEBGPU_AHEAD=0` recording ahead,
//!   `WICK_WEBGPU_CHAIN=0` chained greedy steps;
//!   `WICK_WEBGPU_PROFILE=1` profiles (natively; `span`: the GPU span of a step alone);
//!   `WICK_WEBGPU_SHADER_DUMP` / `WICK_WEBGPU_SHADER_DIR` write and replace kernel sources
//!   (kernels.rs, natively); `WICK_WEBGPU_SPLITS=N` caps the decode
//!   attention's splits and `WICK_WEBGPU_MV_ROWS=N` the weight rows of a matvec workgroup
//!   (to measure); `WICK_WEBGPU_TILED=N` runs prefill products in tiles from N token rows
//!   (`0`: never) and `WICK_WEBGPU_TILE=RTxCT` gives them all one tile shape; `WICK_WEBGPU_MAX_BUFFER=<bytes>` lowers
//!   the buffer and storage binding limits the executor assumes (for tests, as
//!   [`WebGpuExecutor::limit_buffer_size`]).
//! - GPU failures are errors, not crashes: every buffer (weight part, KV layer, graph buffer)
//!   is checked against `max_buffer_size` and `max_storage_buffer_binding_size` before wgpu is
//!   asked; natively, buffers and pipelines are created inside validation, out-of-memory and
//!   internal error scopes (device.rs `scoped`), so a refused allocation or a shader that
//!   fails to compile is `Error::Executor` from the call that made it; anything else wgpu
//!   reports (and everything in the browser, where scopes resolve asynchronously) goes to the
//!   uncaptured-error handler, not wgpu's default panic, and is returned by the next call that
//!   checks (compile, alloc_weight, finish_upload, run). A failed pipeline is not cached.

mod buffers;
mod device;
pub(crate) mod fuse;
mod kernels;
mod kv_io;
mod kv_shift;
mod ops;
mod params;
mod profile;
mod record;
mod template;

use buffers::{err, GpuKv, GpuWeight, KvLayer};
use device::{env_is, Gpu};
use kernels::{Pipelines, TileShape};
use ops::MatVecMode;
use record::{Plan, Tail};

/// Token rows from which products with quantized weights run in tiles by default.
pub const TILED_FROM: usize = 32;

use super::{
    blocks_for, with_masks, Executor, Graph, GraphId, HostWork, KvId, KvShift, KvSpec, LocalFuture, Readback,
    Rows, SeqStep, StepOutput, WeightId, KV_BLOCK,
};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A step started on the device before its token was read back (chained greedy decoding,
/// [`Executor::run_greedy`]): its token is the argmax of the step before it.
struct Chained {
    graph: u32,
    kv: u32,
    pos: usize,
    /// The blocks of its table that hold its positions.
    blocks: Vec<u32>,
    /// Its token: the step before's argmax, once read back.
    token: Option<u32>,
    /// The argmax readback buffer it copies into.
    slot: usize,
    index: wgpu::SubmissionIndex,
}

/// A submitted step: its plan, the argmax readback buffer it copies into, and the submission
/// that fills it (`None`: wait for all).
struct Submitted {
    gi: usize,
    slot: usize,
    index: Option<wgpu::SubmissionIndex>,
}

/// Queue this many bytes of weight writes before flushing them, bounding staging memory.
const FLUSH_BYTES: u64 = 64 << 20;

/// The WebGPU executor.
pub struct WebGpuExecutor {
    gpu: Gpu,
    weights: Vec<GpuWeight>,
    kvs: Vec<Option<GpuKv>>,
    /// Compiled graphs by [`GraphId`]; `None` once freed.
    plans: Vec<Option<Plan>>,
    pipes: Pipelines,
    dummy: wgpu::Buffer,
    unflushed: u64,
    /// The last flush of weight writes (natively: the next flush waits for it).
    #[cfg(not(target_arch = "wasm32"))]
    flushed: Option<wgpu::SubmissionIndex>,
    /// Matrix products with workgroups cooperating on a few weight rows (GPUs) rather than an
    /// invocation per row (CPU-emulated adapters).
    coop_matmul: bool,
    /// Reduce the cooperative matmul's partial sums with subgroup operations (if the device
    /// has them).
    subgroup_reduce: bool,
    /// Token rows from which cooperative products with quantized weights run in tiles.
    tiled_from: usize,
    /// The tile shape (RT, CT) of every tiled product (None: chosen per product).
    tile: Option<(u8, u8)>,
    /// A cap on the binding size for new weights (tests of the split path).
    binding_cap: Option<u64>,
    /// Fuse ops into fewer dispatches in graphs compiled from now on (fuse.rs).
    fuse: bool,
    /// Record each step's successor while the GPU runs it (`WICK_WEBGPU_AHEAD=0`: off).
    ahead: bool,
    /// Start a greedy step's successor before its token is read back ([`Executor::run_greedy`];
    /// `WICK_WEBGPU_CHAIN=0`: off; off when profiling, whose queries one step at a time read).
    chain: bool,
    /// The step the last greedy step started, until the next step says whether it was right.
    chained: Option<Chained>,
    /// Profiling (`WICK_WEBGPU_PROFILE=1`, natively): per-plan times.
    profile: Option<Vec<profile::PlanStats>>,
    /// In the browser, the error scopes the weight upload runs in, from the first
    /// `alloc_weight` to `finish_upload` (natively each allocation has its own, resolved at once).
    #[cfg(target_arch = "wasm32")]
    upload: Option<device::Scopes>,
}

impl WebGpuExecutor {
    /// Acquire a device: natively Vulkan unless `WGPU_BACKEND` names other backends, in wasm
    /// the browser's WebGPU. Software adapters (lavapipe, SwiftShader) are accepted.
    pub async fn new() -> Result<Self> {
        Self::acquire(true).await
    }

    /// Like [`new`](Self::new), but `allow_software: false` refuses CPU-emulated adapters
    /// (what `ExecutorKind::Auto` wants: the CPU executor is faster than lavapipe).
    pub async fn acquire(allow_software: bool) -> Result<Self> {
        let gpu = Gpu::acquire(allow_software).await?;
        let dummy = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("dummy"),
            size: 16,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        Ok(WebGpuExecutor {
            weights: Vec::new(),
            kvs: Vec::new(),
            plans: Vec::new(),
            pipes: Pipelines::new(gpu.f16),
            dummy,
            unflushed: 0,
            #[cfg(not(target_arch = "wasm32"))]
            flushed: None,
            binding_cap: None,
            // WICK_WEBGPU_COOP=1 (0) forces the cooperative (per-row) kernels, e.g. to test the
            // GPU kernels on lavapipe.
            coop_matmul: match std::env::var("WICK_WEBGPU_COOP").as_deref() {
                Ok("1") => true,
                Ok("0") => false,
                _ => !gpu.software,
            },
            subgroup_reduce: gpu.subgroups,
            tiled_from: match std::env::var("WICK_WEBGPU_TILED").ok().and_then(|v| v.parse::<usize>().ok()) {
                Some(0) => usize::MAX,
                Some(n) => n,
                None => TILED_FROM,
            },
            tile: std::env::var("WICK_WEBGPU_TILE").ok().and_then(|v| {
                let (rt, ct) = v.split_once('x')?;
                Some((rt.parse().ok()?, ct.parse().ok()?)).filter(|s| TileShape::ALL.contains(s))
            }),
            ahead: !env_is("WICK_WEBGPU_AHEAD", "0"),
            chain: !env_is("WICK_WEBGPU_CHAIN", "0") && !gpu.profiling,
            chained: None,
            fuse: fuse::enabled(),
            profile: gpu.profiling.then(Vec::new),
            #[cfg(target_arch = "wasm32")]
            upload: None,
            gpu,
        })
    }

    /// The adapter in use and the precision path, e.g.
    /// `llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, Cpu, f16, subgroups)`.
    pub fn adapter_name(&self) -> &str {
        &self.gpu.adapter
    }

    /// Split weights allocated from now on into parts of at most `bytes` (as if the device's
    /// binding limit were that small): lets tests exercise split tensors on any device.
    pub fn cap_binding_size(&mut self, bytes: u64) {
        self.binding_cap = Some(bytes);
    }

    /// Act as if the device's buffer and storage binding limits were at most `bytes` (they
    /// are only lowered): weights, KV caches and graph buffers beyond it are refused with an
    /// error, as on a device with smaller limits (weights are still split into parts that fit,
    /// so a weight fails only where one of its rows does not fit). `WICK_WEBGPU_MAX_BUFFER`
    /// does the same for every executor a process creates. For tests.
    pub fn limit_buffer_size(&mut self, bytes: u64) {
        let l = &mut self.gpu.limits;
        l.max_buffer_size = l.max_buffer_size.min(bytes);
        l.max_storage_buffer_binding_size = l.max_storage_buffer_binding_size.min(bytes);
    }

    /// Compile the WGSL compute shader `src` (entry point `entry`) on this device, as the
    /// executor compiles its kernels: an error if it does not parse or validate or the device
    /// refuses the pipeline. The executor stays usable either way.
    pub fn check_shader(&mut self, src: &str, entry: &str) -> Result<()> {
        kernels::build_pipeline(&self.gpu.device, "check_shader", src, entry)?;
        self.gpu.take_error()
    }

    /// The wgpu device, e.g. to share it or to provoke errors in tests. Errors it reports
    /// outside the executor's own calls are returned by the executor's next call that checks
    /// (compiling a graph, finishing an upload, a step).
    pub fn device(&self) -> &wgpu::Device {
        &self.gpu.device
    }

    /// Choose the matrix-product kernels of graphs compiled from now on: `true` for workgroups
    /// cooperating on a few weight rows (the default on GPUs), `false` for one invocation per
    /// row (the default on CPU-emulated adapters such as lavapipe).
    pub fn set_cooperative_matmul(&mut self, coop: bool) {
        self.coop_matmul = coop;
    }

    /// Fuse ops into fewer dispatches (the default unless `WICK_WEBGPU_FUSE=0`) in graphs
    /// compiled from now on, or run every op as its own dispatch.
    pub fn set_fusion(&mut self, on: bool) {
        self.fuse = on;
    }

    /// Whether the kernels use `shader-f16` (the adapter has it and `WICK_WEBGPU_F16` is not `0`).
    pub fn uses_f16(&self) -> bool {
        self.gpu.f16
    }

    /// Choose how the cooperative matrix products of graphs compiled from now on reduce their
    /// partial sums: with subgroup operations (`true`, the default where the device has them)
    /// or through workgroup memory only. Returns whether subgroup operations will be used.
    pub fn set_subgroup_reduce(&mut self, on: bool) -> bool {
        self.subgroup_reduce = on && self.gpu.subgroups;
        self.subgroup_reduce
    }

    /// Run the cooperative products with quantized weights of graphs compiled from now on in
    /// tiles (matmul_tiled.wgsl) from `rows` token rows on (`None`: never); the default is
    /// [`TILED_FROM`] (`WICK_WEBGPU_TILED=N` sets it, `0` turns tiles off).
    pub fn set_tiled_matmul(&mut self, rows: Option<usize>) {
        self.tiled_from = rows.unwrap_or(usize::MAX);
    }

    /// Give every tiled product of graphs compiled from now on tiles of `rt` × 16 token rows by
    /// `ct` × 16 weight rows (4x4, 8x4 or 4x8; `WICK_WEBGPU_TILE=RTxCT` does the same), or let
    /// each product choose (`None`, the default). For tests and measurements.
    pub fn set_tile_shape(&mut self, shape: Option<(u8, u8)>) -> Result<()> {
        if let Some((rt, ct)) = shape.filter(|s| !TileShape::ALL.contains(s)) {
            return Err(err(format!("no {rt}x{ct} tiles: 4x4, 8x4 or 4x8")));
        }
        self.tile = shape;
        Ok(())
    }

    fn matvec_mode(&self) -> MatVecMode {
        if self.coop_matmul {
            MatVecMode::Coop { subgroup: self.subgroup_reduce, tiled_from: self.tiled_from, tile: self.tile }
        } else {
            MatVecMode::Rows
        }
    }

    fn max_binding(&self) -> u64 {
        let device = self.gpu.max_binding();
        self.binding_cap.map_or(device, |c| c.min(device))
    }
}

impl Executor for WebGpuExecutor {
    fn name(&self) -> &'static str {
        "webgpu"
    }

    fn memory_budget(&self) -> Option<crate::exec::MemoryBudget> {
        Some(crate::exec::MemoryBudget::webgpu(None, self.max_binding()))
    }

    fn supports_type(&self, t: GgmlType) -> bool {
        kernels::SUPPORTED.contains(&t)
    }

    fn alloc_weight(&mut self, name: &str, dtype: GgmlType, dims: &[u64]) -> Result<WeightId> {
        if !self.supports_type(dtype) {
            return Err(Error::unsupported_type(name, dtype));
        }
        self.gpu.take_error()?;
        #[cfg(target_arch = "wasm32")]
        if self.upload.is_none() {
            self.upload = Some(device::Scopes::push(&self.gpu.device));
        }
        if dims.is_empty() || dims.len() > 4 {
            return Err(err(format!("tensor '{name}' has {} dimensions", dims.len())));
        }
        let w = GpuWeight::new(&self.gpu.device, name, dtype, dims, self.max_binding())?;
        self.weights.push(w);
        Ok(WeightId(self.weights.len() as u32 - 1))
    }

    fn write_weight(&mut self, id: WeightId, offset: u64, bytes: &[u8]) -> Result<()> {
        let w = self.weights.get(id.0 as usize).ok_or_else(|| err("unknown weight"))?;
        w.write(&self.gpu.queue, offset, bytes)?;
        self.unflushed += bytes.len() as u64;
        if self.unflushed >= FLUSH_BYTES {
            // Submitting flushes the queued writes; waiting frees their staging memory.
            // Natively the wait is for the flush before this one, so the copies of one flush
            // run while the next is staged (staging memory: two flushes).
            let index = self.gpu.queue.submit(std::iter::empty());
            #[cfg(not(target_arch = "wasm32"))]
            if let Some(last) = self.flushed.replace(index) {
                self.gpu.wait_for(last)?;
            }
            #[cfg(target_arch = "wasm32")]
            {
                let _ = index;
                self.gpu.wait()?;
            }
            self.unflushed = 0;
        }
        Ok(())
    }

    fn finish_upload(&mut self) -> LocalFuture<'_, Result<()>> {
        self.gpu.queue.submit(std::iter::empty());
        self.unflushed = 0;
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.flushed = None;
        }
        let r = self.gpu.wait().and_then(|_| self.gpu.take_error());
        // In the browser, what the upload's scopes caught: a weight's buffer refused (reported
        // by its own scope, naming it), then anything else (writes to it).
        #[cfg(target_arch = "wasm32")]
        let (settled, caught) =
            (self.gpu.settle(), self.upload.take().map(|s| s.pop("uploading the weights")));
        Box::pin(async move {
            #[cfg(target_arch = "wasm32")]
            {
                settled.await?;
                if let Some(c) = caught {
                    c.await?;
                }
            }
            r
        })
    }

    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        // A lost device fails here, before anything is made on it.
        self.gpu.take_error()?;
        if spec.k_dims.len() != spec.v_dims.len() {
            return Err(err("KV spec: key and value layer counts differ"));
        }
        let mut layers = Vec::with_capacity(spec.k_dims.len());
        for (&k_dim, &v_dim) in spec.k_dims.iter().zip(&spec.v_dims) {
            let make = |dim: usize| -> Result<wgpu::Buffer> {
                if !dim.is_multiple_of(2) {
                    return Err(err(format!("KV row width {dim} is odd")));
                }
                let size = (spec.n_positions() as u64)
                    .checked_mul(2 * dim as u64)
                    .ok_or_else(|| err("KV cache too large"))?;
                if size > self.max_binding() {
                    return Err(err(format!(
                        "a KV cache layer of {size} bytes ({} positions) exceeds the device's binding size \
                         ({} bytes); use a smaller context",
                        spec.n_positions(),
                        self.max_binding()
                    )));
                }
                let what =
                    format!("allocating a KV cache layer ({size} bytes, {} positions)", spec.n_positions());
                device::scoped(&self.gpu.device, &what, || {
                    self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("kv"),
                        size: size.max(4).div_ceil(4) * 4,
                        // Copies: the prompt cache reads and writes whole blocks (kv_io.rs).
                        usage: wgpu::BufferUsages::STORAGE
                            | wgpu::BufferUsages::COPY_SRC
                            | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                })
            };
            let (k, v) = (make(k_dim)?, make(v_dim)?);
            layers.push(KvLayer { k, v, k_dim, v_dim });
        }
        self.kvs.push(Some(GpuKv { n_blocks: spec.n_blocks, layers }));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }

    fn free_kv(&mut self, kv: KvId) {
        self.chained = None;
        if let Some(slot) = self.kvs.get_mut(kv.0 as usize) {
            *slot = None;
            for p in self.plans.iter_mut().flatten() {
                p.unbind_kv(kv.0);
            }
        }
    }

    fn compile(&mut self, graph: &Graph) -> Result<GraphId> {
        let plan = self.build_plan(graph)?;
        if let Some(stats) = &mut self.profile {
            stats.push(profile::PlanStats { tokens: graph.n_tokens, ..Default::default() });
        }
        self.plans.push(Some(plan));
        Ok(GraphId(self.plans.len() as u32 - 1))
    }

    fn free_graph(&mut self, graph: GraphId) {
        self.chained = None;
        // Its buffers are released when the last command buffer using them has run: wgpu keeps
        // them alive until then.
        if let Some(slot) = self.plans.get_mut(graph.0 as usize) {
            *slot = None;
        }
    }

    fn shift_kv(&mut self, kv: KvId, shift: &KvShift) -> Result<()> {
        // A started step read the keys before the shift: it is not the step the caller wants.
        self.chained = None;
        self.shift(kv, shift)
    }

    fn read_kv_blocks<'a>(
        &'a mut self,
        kv: KvId,
        blocks: &'a [u32],
        range: std::ops::Range<usize>,
    ) -> LocalFuture<'a, Result<Vec<u8>>> {
        Box::pin(self.read_kv(kv, blocks, range))
    }

    fn write_kv_blocks(&mut self, kv: KvId, blocks: &[u32], offset: usize, bytes: &[u8]) -> Result<()> {
        self.chained = None;
        self.write_kv(kv, blocks, offset, bytes)
    }

    fn run<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        self.step(graph, kv, seqs, readback, None, false)
    }

    fn run_greedy<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
    ) -> LocalFuture<'a, Result<StepOutput>> {
        self.step(graph, kv, seqs, Readback::Argmax, None, true)
    }

    fn run_with<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
        work: HostWork<'a>,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        self.step(graph, kv, seqs, readback, Some(work), false)
    }
}

impl WebGpuExecutor {
    /// [`Executor::run_with`], or [`Executor::run`] without `work`; `greedy`:
    /// [`Executor::run_greedy`].
    fn step<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
        work: Option<HostWork<'a>>,
        greedy: bool,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        let t0 = self.profile.as_ref().map(|_| std::time::Instant::now());
        // In the browser the step runs inside error scopes that are awaited with its results,
        // after those of the allocations before it (a KV cache, a graph's buffers): what they
        // cause fails this call, not the next one.
        #[cfg(target_arch = "wasm32")]
        let scopes = device::Scopes::push(&self.gpu.device);
        let submitted = self.submit(graph, kv, seqs, readback, work, greedy);
        #[cfg(target_arch = "wasm32")]
        let (caught, settled) = (scopes.pop("a step"), self.gpu.settle());
        let t1 = t0.map(|_| std::time::Instant::now());
        Box::pin(async move {
            let out = self.finish_step(submitted, seqs, readback, t0, t1).await;
            #[cfg(target_arch = "wasm32")]
            {
                let (settled, caught) = (settled.await, caught.await);
                // A lost device first; else the first cause: an allocation's, one reported out
                // of band, the step's own. (Each is taken, so none is left for the next call.)
                let reported = self.gpu.take_error();
                let lost = self.gpu.is_lost();
                if let Err(e) = if lost { reported } else { settled.and(reported).and(caught) } {
                    if !lost {
                        self.rebuild_plan(graph.0 as usize);
                    }
                    return Err(e);
                }
            }
            out
        })
    }
}

impl WebGpuExecutor {
    /// Compile `graph` into a plan: its pipelines (cached across plans) and buffers.
    fn build_plan(&mut self, graph: &Graph) -> Result<Plan> {
        let mode = self.matvec_mode();
        // Scoped as a whole too: in the browser a failed pipeline's bind groups are errors as
        // well, which must not reach the uncaptured-error handler after the step reported the
        // pipeline (the pipeline's own scope, inside this one, is reported first).
        let device = self.gpu.device.clone();
        let plan = device::scoped(&device, "compiling a graph", || {
            ops::compile(
                &self.gpu.device,
                &self.gpu.queue,
                &mut self.pipes,
                &self.weights,
                &self.dummy,
                &self.gpu.limits,
                mode,
                self.gpu.timestamps,
                self.fuse,
                graph,
            )
        })
        .and_then(|plan| plan)
        .and_then(|plan| self.gpu.take_error().map(|_| plan));
        if plan.is_err() {
            // A failed pipeline reported now (natively; in the browser by the next step):
            // build them all again.
            self.pipes = Pipelines::new(self.gpu.f16);
        }
        plan
    }

    /// In the browser, after a step that failed for what its scopes or allocations caught (a
    /// pipeline or buffer the browser refused, known only now): the pipelines are made again
    /// and the step's plan recompiled, so that the next step does not fail for the same
    /// invalid objects (and reports the cause again if it persists).
    #[cfg(target_arch = "wasm32")]
    fn rebuild_plan(&mut self, gi: usize) {
        self.pipes = Pipelines::new(self.gpu.f16);
        let Some(graph) = self.plans.get(gi).and_then(Option::as_ref).map(|p| p.graph.clone()) else {
            return;
        };
        if let Ok(plan) = self.build_plan(&graph) {
            self.plans[gi] = Some(plan);
        }
    }

    /// The second half of [`Executor::run`]: read the step's results back.
    async fn finish_step(
        &mut self,
        submitted: Result<Submitted>,
        seqs: &[SeqStep<'_>],
        readback: Readback,
        t0: Option<std::time::Instant>,
        t1: Option<std::time::Instant>,
    ) -> Result<StepOutput> {
        let Submitted { gi, slot, index } = submitted?;
        let plan = self.plans[gi].as_ref().ok_or_else(|| err("unknown graph"))?;
        let out = match readback {
            Readback::Argmax => {
                // One id per sequence of the graph (argmax.wgsl); those of the step's. Only
                // this step is waited for, not one it started.
                let bytes = 4 * seqs.len() as u64;
                let b = match self.gpu.read_after(&plan.argmax_read[slot], bytes, index).await {
                    Ok(b) => b,
                    Err(e) => {
                        self.chained = None;
                        return Err(e);
                    }
                };
                let tokens: Vec<u32> =
                    b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                // The step this one started runs on its argmax: now that token is known.
                if let Some(c) = self.chained.as_mut().filter(|c| c.token.is_none()) {
                    c.token = tokens.first().copied();
                }
                StepOutput { tokens, logits: Vec::new() }
            }
            Readback::LastLogits | Readback::AllLogits => {
                let b = self.gpu.read(&plan.logits_read, plan.logits_bytes).await?;
                let mut logits: Vec<f32> =
                    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                if readback == Readback::LastLogits {
                    // A row per sequence of the step: its last token's row where the logits
                    // have a row per token, else its own row (Rows::Last).
                    let g = &plan.graph;
                    let n_vocab = g.cols(g.logits);
                    logits = if g.acts[g.logits.0 as usize].rows == Rows::All {
                        let mut end = 0;
                        let mut rows = Vec::with_capacity(seqs.len() * n_vocab);
                        for s in seqs {
                            end += s.tokens.len();
                            rows.extend_from_slice(&logits[(end - 1) * n_vocab..end * n_vocab]);
                        }
                        rows
                    } else {
                        logits.truncate(seqs.len() * n_vocab);
                        logits
                    };
                }
                StepOutput { tokens: Vec::new(), logits }
            }
        };
        if let (Some(t0), Some(t1)) = (t0, t1) {
            self.record_profile(gi, t0, t1);
        }
        self.gpu.take_error()?;
        Ok(out)
    }
}

impl Drop for WebGpuExecutor {
    fn drop(&mut self) {
        #[cfg(target_arch = "wasm32")]
        drop(self.gpu.forget_deferred());
        if let Some(stats) = &self.profile {
            for (i, s) in stats.iter().enumerate() {
                eprint!("{}", s.summary(&format!("graph {i}")));
            }
        }
    }
}

impl WebGpuExecutor {
    /// Check the step, write its inputs, record and submit it; with `work`, the forward pass
    /// first, then the host's work while the GPU runs it, then the argmax with the masks the
    /// work returned (the readback of the logits is in the first submission). A step that the
    /// last greedy step started (the same graph, cache, position, block table and token) is
    /// not submitted again. With `greedy`, a one-token step of one sequence then starts its
    /// successor: the next position, its token taken from this step's argmax on the device.
    fn submit(
        &mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &[SeqStep],
        readback: Readback,
        work: Option<HostWork>,
        greedy: bool,
    ) -> Result<Submitted> {
        // An error reported since the last call (a lost device) fails the step before it runs.
        self.gpu.take_error()?;
        let started = self.chained.take().filter(|c| {
            let [s] = seqs else { return false };
            work.is_none()
                && readback == Readback::Argmax
                && (c.graph, c.kv, c.pos) == (graph.0, kv.0, s.pos)
                && c.token.is_some_and(|t| s.tokens == [t])
                && s.mask.is_none()
                // The blocks it reads and writes (the table may have grown since).
                && s.blocks.get(..c.blocks.len()) == Some(&c.blocks[..])
        });
        let gi = graph.0 as usize;
        let plan = self.plans.get_mut(gi).and_then(Option::as_mut).ok_or_else(|| err("unknown graph"))?;
        let cache =
            self.kvs.get(kv.0 as usize).and_then(|c| c.as_ref()).ok_or_else(|| err("unknown KV cache"))?;
        let chain = greedy
            && self.chain
            && work.is_none()
            && readback == Readback::Argmax
            && plan.graph.n_tokens == 1
            && match seqs {
                // The table covers the next position (else the caller's next step grows it).
                [s] => s.mask.is_none() && s.pos + 2 <= s.blocks.len().min(cache.n_blocks) * KV_BLOCK,
                _ => false,
            };
        let fed = |slot| Tail::Argmax { slot, fed: true };
        let (slot, index) = match started {
            Some(c) => (c.slot, Some(c.index)),
            None => {
                let tail = match (readback, work.is_some()) {
                    (Readback::Argmax, false) => Tail::Argmax { slot: 0, fed: false },
                    (Readback::Argmax, true) => Tail::Nothing,
                    _ => Tail::Logits,
                };
                // What the next submission most likely is: the started step, or one like this.
                let next = if chain { fed(1) } else { tail };
                let index = plan.submit(&self.gpu, kv.0, cache, seqs, tail, self.ahead.then_some(next))?;
                match work {
                    Some(work) => {
                        let masks = work()?;
                        plan.submit_rest(&self.gpu, kv.0, cache, &with_masks(seqs, &masks), readback)?;
                        (0, None)
                    }
                    None => (0, Some(index)),
                }
            }
        };
        if chain {
            let s = &seqs[0];
            let next = [SeqStep { tokens: &[0], pos: s.pos + 1, blocks: s.blocks, mask: None }];
            let index =
                plan.submit(&self.gpu, kv.0, cache, &next, fed(slot ^ 1), self.ahead.then_some(fed(slot)))?;
            self.chained = Some(Chained {
                graph: graph.0,
                kv: kv.0,
                pos: s.pos + 1,
                blocks: s.blocks[..blocks_for(s.pos + 2)].to_vec(),
                token: None,
                slot: slot ^ 1,
                index,
            });
        }
        Ok(Submitted { gi, slot, index })
    }

    /// Add a finished step's CPU times (`t0` start, `t1` submitted) and timestamps to the profile.
    fn record_profile(&mut self, gi: usize, t0: std::time::Instant, t1: std::time::Instant) {
        let now = std::time::Instant::now();
        let Some(plan) = self.plans[gi].as_ref() else { return };
        let ts = plan.queries.as_ref().and_then(|q| q.read(&self.gpu.device));
        let period = self.gpu.queue.get_timestamp_period() as f64;
        if let Some(s) = self.profile.as_mut().and_then(|p| p.get_mut(gi)) {
            s.steps += 1;
            s.record_ns += (t1 - t0).as_nanos() as f64;
            s.wait_ns += (now - t1).as_nanos() as f64;
            (s.submit_ns, s.ahead_ns) = plan.host_ns;
            if let Some(ts) = ts {
                s.add_timestamps(&ts, &plan.labels, period);
            }
        }
    }
}
