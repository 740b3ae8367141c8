//! Executors: where the forward pass runs. The CPU executor is the reference; WebGPU and CUDA
//! implement the same [`Executor`] trait.
//!
//! Design decisions:
//! - Weights and the KV cache live on the executor behind opaque handles ([`WeightId`],
//!   [`KvId`]); callers never hold device memory.
//! - Weights arrive as raw GGUF bytes in bounded chunks ([`Executor::write_weight`]) and stay
//!   in their block format.
//! - A forward pass is a whole [`Graph`], compiled once per shape; a step passes only token ids,
//!   their sequences' positions and block tables ([`SeqStep`]) and reads back only token ids or
//!   logits.
//! - The KV cache is a pool of blocks of [`KV_BLOCK`] positions; each sequence of a step names
//!   its blocks, so sequences can share a prefix and blocks can be saved or moved.

mod budget;
pub mod cpu;
// The fusion planner of the GPU executors (only CUDA plans with it so far: WebGPU's port is
// pending, hence unused in a WebGPU-only build).
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
pub mod cuda;
// One planner for both GPU executors; a build with one of them leaves the other's fusions unused.
#[cfg(any(feature = "cuda", feature = "webgpu"))]
#[cfg_attr(not(all(feature = "cuda", feature = "webgpu")), allow(dead_code))]
pub(crate) mod fuse;
mod graph;
mod kv_io;
mod kv_shift;
mod step;
#[cfg(feature = "webgpu")]
pub mod webgpu;

use std::future::Future;
use std::pin::Pin;

pub use budget::{after_margin, margin, MemoryBudget, WEBGPU_DEFAULT_BUDGET};
pub use graph::{ActDesc, ActId, Gate, Graph, Op, RopeConsts, RopeExt, RopeMode, Rows};
pub use kv_io::{kv_io_bytes, kv_io_pieces, KvPiece, KV_ELEM_BYTES};
pub use kv_shift::{rope_pair, KvRope, KvShift};
pub use step::{
    blocks_for, check_step, identity_blocks, kv_row, mask_allows, mask_words, with_masks, SeqStep,
    StepLayout, KV_BLOCK,
};

use crate::quant::GgmlType;
use crate::Result;

/// A boxed future that need not be `Send` (the browser is single-threaded).
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Host work done while the device runs a step's forward pass ([`Executor::run_with`]): called
/// once per step, it returns the token mask of each sequence of the step, in order, for the
/// device's argmax ([`SeqStep::mask`]; `None` or a missing entry: the sequence's own). A
/// constraint's next mask is the usual work: it depends on the token before this step, so
/// this is the only time it can overlap.
pub type HostWork<'a> = &'a mut dyn FnMut() -> Result<Vec<Option<Vec<u32>>>>;

/// Handle to a weight tensor held by an executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WeightId(pub u32);

/// Handle to a KV cache held by an executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KvId(pub u32);

/// Handle to a compiled graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphId(pub u32);

/// Shape of a KV cache: its blocks, and per layer the width of a key row and of a value row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvSpec {
    /// Blocks of [`KV_BLOCK`] positions it holds.
    pub n_blocks: usize,
    /// Per layer: n_kv_heads · head_dim of the keys.
    pub k_dims: Vec<usize>,
    /// Per layer: n_kv_heads · head_dim of the values.
    pub v_dims: Vec<usize>,
}

impl KvSpec {
    /// Positions it holds.
    pub fn n_positions(&self) -> usize {
        self.n_blocks.saturating_mul(KV_BLOCK)
    }
}

/// What a step reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readback {
    /// The argmax of each sequence's last token's logits, computed on the device: the first
    /// of the largest values (NaN never wins), among the ids the sequence's token mask allows
    /// where it has one ([`SeqStep::mask`]; the others count as -inf, as the host's masking
    /// sets them).
    Argmax,
    /// Each sequence's last token's logits.
    LastLogits,
    /// Every token's logits (graph must be built with all rows of logits).
    AllLogits,
}

/// What a step returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutput {
    /// The argmax token of each sequence, for [`Readback::Argmax`].
    pub tokens: Vec<u32>,
    /// Logits, row-major, for the logits readbacks: one row per sequence
    /// ([`Readback::LastLogits`]) or per token ([`Readback::AllLogits`]).
    pub logits: Vec<f32>,
}

impl StepOutput {
    /// The last sequence's argmax token (the only one of a one-sequence step).
    pub fn token(&self) -> Option<u32> {
        self.tokens.last().copied()
    }
}

/// A backend that holds weights and KV caches and runs compiled graphs.
pub trait Executor {
    /// Short name ("cpu", "webgpu", "cuda").
    fn name(&self) -> &'static str;
    /// Whether weights of this type can be loaded.
    fn supports_type(&self, t: GgmlType) -> bool;
    /// Reserve a weight tensor of `dims` (ggml order) and type `dtype`.
    fn alloc_weight(&mut self, name: &str, dtype: GgmlType, dims: &[u64]) -> Result<WeightId>;
    /// Copy `bytes` into the weight at byte `offset` (raw GGUF block bytes).
    fn write_weight(&mut self, id: WeightId, offset: u64, bytes: &[u8]) -> Result<()>;
    /// Wait until every write has reached the device.
    fn finish_upload(&mut self) -> LocalFuture<'_, Result<()>>;
    /// Allocate a KV cache (a pool of blocks; contents undefined until written).
    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId>;
    /// Free a KV cache.
    fn free_kv(&mut self, kv: KvId);
    /// What memory this executor can give a model now ([`MemoryBudget`]): free device memory
    /// or RAM less a margin, or (WebGPU) a budget for KV caches and scratch; `None` where
    /// unknown. The default context is fitted to it.
    fn memory_budget(&self) -> Option<MemoryBudget> {
        None
    }
    /// Prepare a graph for repeated execution.
    fn compile(&mut self, graph: &Graph) -> Result<GraphId>;
    /// Release a compiled graph and everything kept for it (activation buffers, recorded
    /// commands, captured CUDA graphs). Its id is not valid afterwards.
    fn free_graph(&mut self, graph: GraphId);
    /// Measured memory bandwidth in bytes/s (bytes read plus bytes written by a large copy on
    /// the device), for the decode floor that `wick bench` prints; `None` when not measured.
    fn measure_bandwidth(&mut self) -> LocalFuture<'_, Result<Option<f64>>> {
        Box::pin(async { Ok(None) })
    }
    /// Move the cached keys of `shift.blocks` by `shift.delta` positions in every layer (a
    /// rotation of each RoPE pair, [`KvShift`]); values stay. Ordered after the steps already
    /// run and before the next. An error leaves those blocks undefined (the caller evaluates
    /// their tokens again).
    fn shift_kv(&mut self, kv: KvId, shift: &KvShift) -> Result<()> {
        let _ = (kv, shift);
        Err(crate::Error::Executor {
            executor: self.name(),
            message: "this executor cannot shift the KV cache".into(),
        })
    }
    /// Read bytes `range` of the keys and values of `blocks` (every layer) in the
    /// executor-independent layout of [`kv_io_pieces`], ordered after the steps already run.
    fn read_kv_blocks<'a>(
        &'a mut self,
        kv: KvId,
        blocks: &'a [u32],
        range: std::ops::Range<usize>,
    ) -> LocalFuture<'a, Result<Vec<u8>>> {
        let _ = (kv, blocks, range);
        let name = self.name();
        Box::pin(async move {
            Err(crate::Error::Executor {
                executor: name,
                message: "this executor cannot read KV blocks".into(),
            })
        })
    }
    /// Write `bytes` at byte `offset` of the layout of [`kv_io_pieces`] for `blocks` (as
    /// [`Executor::read_kv_blocks`] returns it), ordered before the next step. An error leaves
    /// those blocks undefined.
    fn write_kv_blocks(&mut self, kv: KvId, blocks: &[u32], offset: usize, bytes: &[u8]) -> Result<()> {
        let _ = (kv, blocks, offset, bytes);
        Err(crate::Error::Executor {
            executor: self.name(),
            message: "this executor cannot write KV blocks".into(),
        })
    }
    /// Run a compiled graph on the tokens of `seqs` (the graph's n_tokens in all, at most its
    /// n_seqs sequences, checked by [`check_step`]) with cache `kv`, and read back what is asked.
    fn run<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
    ) -> LocalFuture<'a, Result<StepOutput>>;

    /// A step of greedy decoding: [`Executor::run`] of one sequence with [`Readback::Argmax`],
    /// where the caller's next step will most likely be the token read back, at the next
    /// position, with the same graph, cache and block table. An executor may start that next
    /// step on the device (its token taken from this step's argmax there) before this step's
    /// token is read back, so that the device does not wait for the host between steps. A next
    /// call that is not that step runs as usual: the started step wrote only the cache rows of
    /// the next position, past the sequence's tokens (so nothing is lost), and anything that
    /// changes the cache (shifts, block writes) or frees the graph or cache forgets it. The
    /// default runs the step alone.
    fn run_greedy<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
    ) -> LocalFuture<'a, Result<StepOutput>> {
        self.run(graph, kv, seqs, Readback::Argmax)
    }

    /// [`Executor::run`], with `work` done on the host while the device runs the forward
    /// pass, and the token masks it returns applied by the argmax readback. An executor that
    /// cannot split a step in two (this default) does the work first. An error of `work` fails
    /// the step (the cache rows it wrote are past the sequences' tokens, so nothing is lost).
    fn run_with<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
        work: HostWork<'a>,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        Box::pin(async move {
            let masks = work()?;
            let seqs = with_masks(seqs, &masks);
            self.run(graph, kv, &seqs, readback).await
        })
    }
}

/// Which executor to run a model on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecutorKind {
    /// The best available: a GPU executor when one is usable, else the CPU.
    #[default]
    Auto,
    /// The CPU reference executor.
    Cpu,
    /// WebGPU (wgpu natively, the browser's WebGPU in wasm).
    WebGpu,
    /// CUDA (native builds with the `cuda` feature).
    Cuda,
}

impl ExecutorKind {
    /// Prompt tokens evaluated in one step when the caller does not say
    /// ([`crate::SessionOptions::n_batch`] 0), as llama.cpp's ubatch: the chunk that makes
    /// prefill fast without more scratch memory than it gains from. CUDA: 1024 (its
    /// tensor-core products and attention want many tokens a step: an 8b pp2048 on an H200
    /// ran at 6,781 / 8,614 / 8,994 / 9,293 tok/s in chunks of 256 / 512 / 1024 / 2048, and
    /// 2048 would double the ~0.2 GB of scratch that 1024 takes); the CPU: 256 (its prefill
    /// runs at the same speed per token from 64 to 512); WebGPU: 512 (its tiled products fill
    /// the GPU better with more tokens: the 8b through Vulkan on an H200 ran pp512 at 1,788 /
    /// 2,320 tok/s in chunks of 256 / 512, pp2048 at 1,826 / 1,902 in chunks of 512 / 1024).
    /// `Auto` (an estimate made before the executor is known): the largest.
    pub fn prompt_chunk(self) -> usize {
        match self {
            ExecutorKind::Cuda | ExecutorKind::Auto => 1024,
            ExecutorKind::WebGpu => 512,
            ExecutorKind::Cpu => 256,
        }
    }
}

impl std::str::FromStr for ExecutorKind {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => ExecutorKind::Auto,
            "cpu" => ExecutorKind::Cpu,
            "webgpu" => ExecutorKind::WebGpu,
            "cuda" => ExecutorKind::Cuda,
            other => {
                return Err(crate::Error::InvalidArgument(format!(
                    "unknown executor '{other}' (choose auto, cpu, webgpu or cuda)"
                )))
            }
        })
    }
}

/// Create an executor of the given kind.
pub async fn create(kind: ExecutorKind) -> Result<Box<dyn Executor>> {
    match kind {
        // Auto: CUDA when this build has it and it works here, then a hardware WebGPU
        // adapter, else the CPU. A software adapter (lavapipe, SwiftShader, a browser's
        // fallback adapter) is slower than the CPU executor, natively and in the browser too,
        // where the CPU executor runs one wasm thread: SmolLM2 in headless Chromium on 2
        // cores, 2026-11-25, pp64 / tg32 9.8 / 7.5 tok/s on the CPU against 3.3 / 2.5 on
        // SwiftShader (issue 20).
        ExecutorKind::Auto => {
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            if let Ok(e) = cuda::CudaExecutor::new() {
                return Ok(Box::new(e));
            }
            #[cfg(feature = "webgpu")]
            match webgpu::WebGpuExecutor::acquire(false).await {
                Ok(e) => return Ok(Box::new(e)),
                Err(_e) => {
                    #[cfg(target_arch = "wasm32")]
                    browser_warning(&format!("{_e}; running on the CPU executor"));
                }
            }
            #[cfg(all(target_arch = "wasm32", not(feature = "webgpu")))]
            browser_warning("this build has no WebGPU executor; running on the CPU executor (much slower)");
            Ok(Box::new(cpu::CpuExecutor::new()))
        }
        ExecutorKind::Cpu => Ok(Box::new(cpu::CpuExecutor::new())),
        #[cfg(feature = "webgpu")]
        ExecutorKind::WebGpu => Ok(Box::new(webgpu::WebGpuExecutor::new().await?)),
        #[cfg(not(feature = "webgpu"))]
        ExecutorKind::WebGpu => Err(crate::Error::NotCompiledWith("the WebGPU executor")),
        #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
        ExecutorKind::Cuda => Ok(Box::new(cuda::CudaExecutor::new()?)),
        #[cfg(not(all(feature = "cuda", not(target_arch = "wasm32"))))]
        ExecutorKind::Cuda => Err(crate::Error::NotCompiledWith("the CUDA executor")),
    }
}

/// In the browser, say on the console why `Auto` fell back to the CPU: a page that is suddenly
/// ten times slower deserves a reason a developer can find.
#[cfg(target_arch = "wasm32")]
fn browser_warning(msg: &str) {
    web_sys::console::warn_1(&format!("wick: {msg}").into());
}
