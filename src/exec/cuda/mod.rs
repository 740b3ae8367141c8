//! The CUDA executor (feature `cuda`): the same [`Executor`] contract as the CPU reference, on
//! an NVIDIA GPU through cudarc.
//!
//! Design decisions:
//! - The driver (through cudarc) and NVRTC are loaded at run time: a build needs no CUDA
//!   toolkit, and a machine without them gets [`Error::Executor`] from [`CudaExecutor::new`],
//!   never a panic (cudarc panics on a missing library, so its presence is checked first).
//!   wick opens NVRTC itself (`nvrtc.rs`): the newest one whose code the installed driver
//!   loads, so a CUDA 12 driver gets NVRTC 12 when NVRTC 13 is installed beside it.
//! - Kernels are CUDA C in `kernels/`, one op family per file, compiled by NVRTC for the
//!   device's own architecture in small modules (a weight type's products, a head size's
//!   attention), only those the model needs, on worker threads while the weights load, and
//!   cached on disk (`kernels.rs`).
//!   They are named by the [`kernels::Kernel`] enum, never by strings at call sites, and each
//!   takes one `#[repr(C)]` parameter struct by value, declared once in `params.rs`, whose C
//!   twin is generated with layout `static_assert`s that NVRTC checks.
//! - Files by responsibility: `device.rs` (context, stream, buffers, weights, KV memory),
//!   `kernels.rs` (the enum, compilation, loading), `params.rs`, `record.rs` (compiling a
//!   graph, recording a step, CUDA graph capture and replay), and `ops/` with one launcher
//!   file per op family beside the kernel file of the same name.
//! - Weights stay in their GGUF block format in device memory, split into quants and headers
//!   for 16-byte loads (`layout.rs`); matrix products convert the activations to the weight
//!   type's q8 partner exactly as the CPU does and take integer (dp4a or int8 tensor-core) dot
//!   products, so both executors compute the same integers per block.
//! - One stream, no per-buffer event tracking: every op is ordered on it. Buffers are raw
//!   device pointers inside the executor; nothing device-side escapes it.
//! - Activation slots, the q8 scratch and the input buffer are allocated once per compiled
//!   graph (the inputs grown to the largest KV cache's block tables); a step uploads only its
//!   packed inputs (`StepLayout`: token ids, each token's position and sequence, the
//!   sequences' extents and block tables; one copy) and reads back a token id per sequence or
//!   logits. Kernels read positions and block tables from device memory (a KV row through its
//!   sequence's table, `kv_row` in common.cuh), so a one-token step is captured once as a
//!   CUDA graph (per KV cache) and replayed: one launch per token. Kernels whose blocks take
//!   several query rows take rows of one sequence only (`seq_tile` in common.cuh).
//!   `WICK_CUDA_GRAPHS=0` turns the capture off.
//! - One-token steps are fused by the planner shared with WebGPU (`exec/fuse.rs`; RMSNorm
//!   with the q8 conversion, one conversion for Q, K and V, Q/K/V in one launch, gate and up
//!   with their activation, a product with its residual add and the logits' argmax, RoPE with
//!   the KV store; `WICK_CUDA_FUSE=0` turns it off), and the decode kernels are launched with
//!   programmatic dependent launch on sm_90 and later (`WICK_CUDA_PDL=0` turns it off).
//!
//! - Prefill products of 128 tokens or more go through cuBLAS's f16 GEMM where the library
//!   loads (`ops/matmul_blas.rs`): f16/bf16 weights as they are, the eight quantized block
//!   types dequantized to f16 a slice at a time, with the activations as their q8 values.
//!   Otherwise the int8 tensor cores (`ops/matmul_mmq.rs`, sm_80 and later, from 16 rows, and
//!   from 7 for Q4_K and Q6_K), and dp4a over 8 token rows on older GPUs.
//!
//! Not yet: Q2_K, Q3_K and the IQ types are refused (`supports_type`); one device (ordinal 0).

mod device;
mod kernels;
mod layout;
mod nvrtc;
mod ops;
mod params;
mod record;

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

use super::{
    Executor, Graph, GraphId, HostWork, KvId, KvShift, KvSpec, LocalFuture, Readback, SeqStep, StepOutput,
    WeightId,
};
use crate::quant::GgmlType;
use crate::{Error, Result};
use device::{Buf, Kv, Staging, Weight};
use kernels::Kernel;
use record::Compiled;

pub(crate) use kernels::trace;
pub use kernels::{
    compile as compile_kernels, compile_cubin, compile_module, source as kernel_source, Family, Module,
};

/// The NVRTC library wick compiles its kernels with (the newest one the driver runs code
/// from; `WICK_NVRTC` names another): its name and version, or why there is none.
pub fn nvrtc_library() -> Result<(String, (i32, i32))> {
    nvrtc::get().map(|n| (n.name.clone(), n.version)).map_err(err)
}

/// An error of this executor.
pub(crate) fn err(message: impl Into<String>) -> Error {
    Error::Executor { executor: "cuda", message: message.into() }
}

/// A driver error, prefixed with what was being done.
fn drv(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| err(format!("{what}: {e}"))
}

/// The CUDA executor.
pub struct CudaExecutor {
    /// cuBLAS for prefill products of f16 and bf16 weights (`ops/matmul_blas.rs`), when the
    /// library is there: opened by the first such product, so other models never load it.
    /// First, so it is dropped before the stream and the context.
    blas: std::cell::OnceCell<Option<ops::Blas>>,
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The kernels, compiled and loaded on first use (or asked for ahead: `Kernels::prefetch`).
    kernels: kernels::Kernels,
    /// Set while a step is captured as a CUDA graph: a launch of a kernel not loaded yet is
    /// then skipped and noted in `missing` (nothing is compiled or loaded during a capture),
    /// and the capture is made again once they are loaded.
    capturing: std::cell::Cell<bool>,
    missing: std::cell::RefCell<Vec<Kernel>>,
    /// The head size and group the weights tell, for asking for the attention kernels early.
    attn_hint: device::AttnHint,
    weights: Vec<Weight>,
    kvs: Vec<Option<Kv>>,
    /// Compiled graphs by [`GraphId`]; `None` once freed.
    graphs: Vec<Option<Compiled>>,
    /// Attention scratch, grown on demand: the split kernel's counters
    /// (`ops::attention::SPLIT_COUNTERS` slots), then scores or the split kernel's partials.
    scores: Option<(Buf<f32>, usize)>,
    /// Streaming multiprocessors (the split attention kernel sizes its grid by them).
    n_sm: usize,
    /// `WICK_CUDA_PROFILE=1`: steps run op by op, unfused and without CUDA graphs, with a
    /// synchronization around each op, and the time per kind of op is printed to stderr (a
    /// diagnostic: host-timed, so each op also counts its launch, a few microseconds).
    profile: bool,
    /// Decode attention over chunks of the keys (`attention_split.cu`; off with
    /// `WICK_CUDA_SPLIT=0`).
    split_attention: bool,
    /// The split decode attention on the tensor cores for heads of 64 and 128
    /// (`attention_decode.cu`): sm_80 and later, unless `WICK_CUDA_DECODE_MMA=0`.
    decode_mma: bool,
    device: String,
    /// `WICK_CUDA_DEBUG` set: print every matmul's input and its first converted block.
    debug: bool,
    /// Capture steps of up to `graph_max_tokens` tokens as CUDA graphs (unless
    /// `WICK_CUDA_GRAPHS=0` or debugging).
    use_graphs: bool,
    /// The most tokens of a step that is captured as a CUDA graph: one-token decode steps and
    /// the decode steps of several sequences (64; `WICK_CUDA_GRAPH_MAX_TOKENS`). Prefill
    /// chunks are launched op by op: their launches are few against their work.
    graph_max_tokens: usize,
    /// The most rows a product takes through the `mmvn_T` kernels (15; from 16 the tensor-core
    /// kernels take them; `WICK_CUDA_MMVN_MAX_ROWS`, 0 or 1: never), fewer for the types with
    /// a `mmqs_T` kernel (`mmqs_from`, [`CudaExecutor::mmvn_limit`]). Steps of up to the limit
    /// of all their products' types get a decode plan.
    mmvn_max_rows: usize,
    /// Activation rows of one `mmvn_T` launch (8, at most 8: `MMVN_ROWS` in
    /// kernels/matmul.cuh; both follow `WICK_CUDA_MMVN_ROWS`, a tuning knob).
    mmvn_rows: usize,
    /// Fuse decode steps: one token, or a few sequences' (unless `WICK_CUDA_FUSE=0`).
    use_fusion: bool,
    /// Prefill products on the tensor cores (`ops/matmul_mmq.rs`).
    mmq: bool,
    /// Products of up to 32 tokens through the `mmqs_T` kernels where the type has one (unless
    /// `WICK_CUDA_MMQS=0`).
    mmq_small: bool,
    /// The fewest rows a product of a type with a `mmqs_T` kernel takes through it rather
    /// than `mmvn_T` (7; `WICK_CUDA_MMQS_FROM`, a tuning knob). Decode of the 8b Q4_K_M on an
    /// H100, tok/s, `mmvn` against `mmqs`: x6 1,071 / 957, x7 1,090 / 1,114, x8 1,142 / 1,273;
    /// from 9 rows `mmvn` reads the weights twice (x12 1,118 / 1,747).
    mmqs_from: usize,
    /// Split small tensor-core products along k (unless `WICK_CUDA_MMQ_SPLIT=0`).
    mmq_split: bool,
    /// Blocks a multiprocessor that a split tensor-core product aims for (2, twice that for
    /// a few rows: `ops/matmul_mmq.rs`; `WICK_CUDA_MMQ_FILL`, a tuning knob).
    mmq_fill: usize,
    /// The 128 × 128 tiles (`mmq_T_l`, [`kernels::MMQ_LARGE_TYPES`]) from this many tiles a
    /// hundred multiprocessors (150; `WICK_CUDA_MMQ_LARGE`, a tuning knob: 0 always, a large
    /// value never). 8b on an H200, pp512 / pp1024 / pp2048 tok/s, from 150 against never:
    /// Q8_0 8,624 / 9,979 / 9,834 against 8,707 / 9,567 / 9,456; Q4_0 7,880 / 8,662 / 8,550
    /// against 8,094 / 8,556 / 8,468; from 50 as from 150 but Q4_0 pp512 7,056.
    mmq_large: usize,
    /// Prefill products of quantized weights over at least this many tokens go through cuBLAS
    /// on weights dequantized to f16 (`ops/matmul_blas.rs`) instead of the int8 tensor cores
    /// (128; `WICK_CUDA_DEQ_ROWS`, a large value: never). On an H200, 8b Q4_K_M pp128 / pp192
    /// / pp512 / pp2048 ran 6,384 / 8,529 / 16,864 / 21,428 tok/s against 5,883 / 5,583 /
    /// 8,299 / 8,568 on the int8 tiles.
    deq_min_rows: usize,
    /// Prefill attention on the tensor cores (`ops/attention.rs`): sm_80 and later, unless
    /// `WICK_CUDA_FLASH=0`.
    flash: bool,
    /// Chunks of the keys for the flash kernel instead of its own choice (`WICK_CUDA_FLASH_SPLIT`,
    /// an experiment knob).
    flash_split: Option<usize>,
    /// Blocks a multiprocessor the split decode kernel aims at (2; `WICK_CUDA_SPLIT_PER_SM`,
    /// an experiment knob).
    split_per_sm: usize,
    /// The upload's pinned buffers, while an upload runs.
    staging: Option<Staging>,
    /// Launch the decode kernels with programmatic dependent launch (sm_90 and later, unless
    /// `WICK_CUDA_PDL=0`).
    pdl: bool,
    /// `WICK_CUDA_OCC`: force the `_o` decode kernels on or off (see `Kernel::decode_variant`).
    occ: Option<bool>,
}

impl Executor for CudaExecutor {
    fn memory_budget(&self) -> Option<crate::exec::MemoryBudget> {
        // Free device memory (cuMemGetInfo) less the margin (the context, cuBLAS, graphs).
        let (free, _total) = self._ctx.mem_get_info().ok()?;
        Some(crate::exec::MemoryBudget::free_memory(free as u64, "free CUDA device memory"))
    }

    fn measure_bandwidth(&mut self) -> LocalFuture<'_, Result<Option<f64>>> {
        let r = self.bandwidth().map(Some);
        Box::pin(async move { r })
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn supports_type(&self, t: GgmlType) -> bool {
        device::TYPES.contains(&t)
    }

    fn alloc_weight(&mut self, name: &str, dtype: GgmlType, dims: &[u64]) -> Result<WeightId> {
        self.alloc_weight_buf(name, dtype, dims)
    }

    fn write_weight(&mut self, id: WeightId, offset: u64, bytes: &[u8]) -> Result<()> {
        self.write_weight_bytes(id, offset, bytes)
    }

    fn finish_upload(&mut self) -> LocalFuture<'_, Result<()>> {
        let r = self.finish_weights();
        Box::pin(async move { r })
    }

    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        self.alloc_kv_bufs(spec)
    }

    fn free_kv(&mut self, kv: KvId) {
        if let Some(slot) = self.kvs.get_mut(kv.0 as usize) {
            *slot = None;
        }
    }

    fn compile(&mut self, graph: &Graph) -> Result<GraphId> {
        self.compile_graph(graph)
    }

    fn free_graph(&mut self, graph: GraphId) {
        self.free_graph_bufs(graph)
    }

    fn shift_kv(&mut self, kv: KvId, shift: &KvShift) -> Result<()> {
        self.shift(kv, shift)
    }

    fn read_kv_blocks<'a>(
        &'a mut self,
        kv: KvId,
        blocks: &'a [u32],
        range: std::ops::Range<usize>,
    ) -> LocalFuture<'a, Result<Vec<u8>>> {
        let out = self.read_kv(kv, blocks, range);
        Box::pin(async move { out })
    }

    fn write_kv_blocks(&mut self, kv: KvId, blocks: &[u32], offset: usize, bytes: &[u8]) -> Result<()> {
        self.write_kv(kv, blocks, offset, bytes)
    }

    fn run<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        let out = self.run_sync(graph, kv, seqs, readback, None);
        Box::pin(async move { out })
    }

    fn run_with<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
        work: HostWork<'a>,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        let out = self.run_sync(graph, kv, seqs, readback, Some(work));
        Box::pin(async move { out })
    }
}
