//! The one memory estimator: what a model takes on its executor for a context size, from the
//! GGUF header alone (no weight byte read), so a caller can tell whether it fits before loading;
//! and the largest context that fits a budget ([`largest_context`]), the default context.
//!
//! Three parts, each counted the way the executors allocate them:
//! - **weights**: every tensor's bytes in its block format (weights stay quantized on the device);
//! - **KV cache**: per layer, a key row and a value row of f16 per context position, in whole
//!   blocks of `exec::KV_BLOCK` positions;
//! - **scratch**: the activation slots of the largest step (a prompt chunk of `n_batch` tokens,
//!   f32), plus what each executor keeps for attention ([`attention_scratch`]) and, on the CPU,
//!   its matrix products' buffers. No executor keeps a score per query row and context position
//!   any more (flash attention and split decoding), except CUDA for head sizes its flash
//!   kernels do not take.
//!
//! Buffers smaller than this (token ids, q8 copies of activations on the GPUs, staging for
//! uploads) are under 1% of the total and left out. So is CUDA's scratch for prefill products
//! through cuBLAS (`exec/cuda/ops/matmul_blas.rs`, prompt chunks of 128 tokens or more): a slice
//! of dequantized f16 weights of at most 64 MiB and the chunk's widest input in f16, about 93
//! MiB on an 8B model at 1,024-token chunks (1-2% of its total, up to 3% on a 1B).

use super::{build_graph, Hparams, Logits, WeightTable};
use crate::exec::{blocks_for, ExecutorKind, MemoryBudget, Op, KV_BLOCK};
use crate::gguf::TensorInfo;
use crate::{Error, Result};

/// The smallest context [`largest_context`] chooses: a few turns of a chat.
pub const MIN_CONTEXT: usize = 256;

/// Bytes a model takes on its executor, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// The weights, in their block formats.
    pub weights: u64,
    /// The KV cache of one session.
    pub kv: u64,
    /// Activations and attention scratch of the largest step.
    pub scratch: u64,
}

impl MemoryEstimate {
    /// The sum of the parts.
    pub fn total(&self) -> u64 {
        self.weights.saturating_add(self.kv).saturating_add(self.scratch)
    }

    /// From a model's header: hyperparameters, vocabulary size and tensor infos, for one session
    /// of `n_ctx` positions evaluated in prompt chunks of at most `n_batch` tokens (0: the
    /// executor's, [`ExecutorKind::prompt_chunk`]) on an executor of `kind` (`Auto`: the most
    /// any executor takes).
    pub fn new(
        hp: &Hparams,
        n_vocab: usize,
        tensors: &[TensorInfo],
        n_ctx: usize,
        n_batch: usize,
        kind: ExecutorKind,
    ) -> Result<MemoryEstimate> {
        let weights = tensors.iter().fold(0u64, |a, t| a.saturating_add(t.n_bytes()));
        let s = SessionMemory::new(hp, n_vocab, &WeightTable::from_infos(tensors), n_batch, kind)?;
        Ok(MemoryEstimate { weights, ..s.at(n_ctx) })
    }

    /// The bytes that `budget` must hold: the KV cache and scratch, and the weights where the
    /// budget covers them and they are not loaded yet (`loaded`).
    pub fn needs(&self, budget: &MemoryBudget, loaded: bool) -> u64 {
        let w = if budget.covers_weights && !loaded { self.weights } else { 0 };
        w.saturating_add(self.kv).saturating_add(self.scratch)
    }
}

/// What one session takes for any context: the parts that do not depend on it, computed once
/// (one graph build), so a search over contexts is cheap.
pub(crate) struct SessionMemory {
    /// KV bytes of one position, all layers.
    kv_row: u64,
    /// The widest layer's key or value row, bytes (one buffer per layer and part).
    kv_layer_row: u64,
    /// Scratch that does not grow with the context.
    fixed: u64,
    /// Scratch bytes per context position (CUDA's score rows for unusual head sizes).
    per_position: u64,
}

impl SessionMemory {
    pub(crate) fn new(
        hp: &Hparams,
        n_vocab: usize,
        table: &WeightTable,
        n_batch: usize,
        kind: ExecutorKind,
    ) -> Result<SessionMemory> {
        let kv_row = (hp.n_head_kv * (hp.head_dim + hp.v_head_dim)) as u64 * 2;
        let kv_layer_row = (hp.n_head_kv * hp.head_dim.max(hp.v_head_dim)) as u64 * 2;
        // 0: the executor's own chunk, as a session takes it.
        let n_batch = if n_batch == 0 { kind.prompt_chunk() } else { n_batch };
        let n_batch = n_batch.clamp(1, hp.n_ctx_train.max(1));
        let g = build_graph(hp, n_vocab, table, n_batch, 1, Logits::Last)?;
        let mut acts = 0u64;
        let mut largest = 0u64;
        for i in 0..g.acts.len() {
            let id = crate::exec::ActId(i as u32);
            let b = (g.rows(id) * g.cols(id)) as u64 * 4;
            acts = acts.saturating_add(b);
            largest = largest.max(b);
        }
        let (mut fixed, mut per_position) = (acts, 0u64);
        if kind == ExecutorKind::Cpu {
            // matmul.rs: the q8 copy of a product's input and the f32 partial outputs, each at
            // most the largest slot; and what the process holds beside the model's buffers.
            fixed = fixed.saturating_add(2 * largest).saturating_add(CPU_HOST_OVERHEAD);
        }
        let attn = g
            .ops
            .iter()
            .filter_map(|op| attention_scratch(op, n_batch, kind))
            .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
        fixed = fixed.saturating_add(attn.0);
        per_position = per_position.saturating_add(attn.1);
        Ok(SessionMemory {
            kv_row: kv_row.saturating_mul(hp.n_layer as u64),
            kv_layer_row,
            fixed,
            per_position,
        })
    }

    /// The KV cache and scratch at `n_ctx` positions (weights left at 0).
    pub(crate) fn at(&self, n_ctx: usize) -> MemoryEstimate {
        // The cache holds whole blocks.
        let positions = blocks_for(n_ctx).saturating_mul(KV_BLOCK) as u64;
        MemoryEstimate {
            weights: 0,
            kv: self.kv_row.saturating_mul(positions),
            scratch: self.fixed.saturating_add(self.per_position.saturating_mul(n_ctx as u64)),
        }
    }

    /// The largest buffer of the KV cache at `n_ctx` positions (one layer's keys or values).
    fn kv_layer(&self, n_ctx: usize) -> u64 {
        self.kv_layer_row.saturating_mul(blocks_for(n_ctx).saturating_mul(KV_BLOCK) as u64)
    }
}

/// What a CPU session's process holds beyond the weights, the KV cache and the scratch: the
/// load's stream buffers (chunks of 4 MiB in flight), the tokenizer's tables and the worker
/// threads. Measured at 13-14 MiB over the counted parts for SmolLM2, Gemma 3 270M and the 8b
/// shape alike (tests/memory_fit.rs), so a constant.
const CPU_HOST_OVERHEAD: u64 = 16 << 20;

/// Multiprocessors assumed for CUDA's flash split (an H100 SXM has 132): a prompt chunk whose
/// grid is smaller splits the keys so that each gets about a block (cuda/ops/attention.rs).
const CUDA_SMS: usize = 132;

/// What one attention op keeps on an executor for a step of `rows` query rows: (bytes, bytes
/// per context position); `None` for other ops. Mirrors the executors' plans:
/// - CPU: nothing that lasts (each (row, head) task's scores are a short-lived vector);
/// - WebGPU (ops/attention.rs): decode steps (at most 4 rows) split the keys into at most 128
///   parts whose partial outputs and (max, sum) pairs are kept; prompt chunks walk the keys in
///   tiles in workgroup memory;
/// - CUDA (ops/attention.rs): head sizes 64, 128 and 256 take the split (decode) and flash
///   (prompt) kernels, whose scratch is partial outputs of at most 64 / 16 chunks plus 4096
///   counters; other head sizes keep a score per query row, head and context position.
fn attention_scratch(op: &Op, rows: usize, kind: ExecutorKind) -> Option<(u64, u64)> {
    let Op::Attention { n_heads, n_kv_heads, head_dim, .. } = *op else { return None };
    let part = |rows: usize, chunks: usize| (rows * n_heads * chunks * (head_dim + 2)) as u64 * 4;
    let webgpu = (part(rows.min(4), 128), 0);
    let cuda = if matches!(head_dim, 64 | 128 | 256) && n_kv_heads > 0 {
        let group = (n_heads / n_kv_heads).max(1);
        let blocks = rows.div_ceil((64 / group.min(8)).max(1)) * n_kv_heads * group.div_ceil(8);
        let flash_split = CUDA_SMS.div_ceil(blocks.max(1)).clamp(1, 16);
        let flash = if flash_split > 1 { part(rows, flash_split) } else { 0 };
        (4 * 4096 + flash.max(part(rows.min(4), 64)), 0)
    } else {
        (0, (rows * n_heads) as u64 * 4)
    };
    Some(match kind {
        ExecutorKind::Cpu => (0, 0),
        ExecutorKind::WebGpu => webgpu,
        ExecutorKind::Cuda => cuda,
        ExecutorKind::Auto => (webgpu.0.max(cuda.0), cuda.1),
    })
}

/// The largest context, at most the model's own (`hp.n_ctx_train`) and a whole number of KV
/// blocks below it, whose KV cache and scratch fit `budget` (with the weights, where the budget
/// covers them and `loaded` is false) and whose KV layers fit its largest buffer. An error
/// naming the figures where not even [`MIN_CONTEXT`] (or the model's own, if smaller) fits.
pub fn largest_context(
    hp: &Hparams,
    n_vocab: usize,
    tensors: &[TensorInfo],
    n_batch: usize,
    kind: ExecutorKind,
    budget: &MemoryBudget,
    loaded: bool,
) -> Result<usize> {
    let weights = tensors.iter().fold(0u64, |a, t| a.saturating_add(t.n_bytes()));
    let mem = SessionMemory::new(hp, n_vocab, &WeightTable::from_infos(tensors), n_batch, kind)?;
    fit(hp, &mem, weights, budget, loaded)
}

/// [`largest_context`] once the parts are known.
pub(crate) fn fit(
    hp: &Hparams,
    mem: &SessionMemory,
    weights: u64,
    budget: &MemoryBudget,
    loaded: bool,
) -> Result<usize> {
    let top = hp.n_ctx_train.max(1);
    let ok = |n: usize| check(mem, weights, budget, loaded, n).is_ok();
    let smallest = MIN_CONTEXT.min(top);
    check(mem, weights, budget, loaded, smallest)?;
    if ok(top) {
        return Ok(top);
    }
    // Whole blocks: lo fits, hi does not (top is at most hi * KV_BLOCK and does not fit).
    let (mut lo, mut hi) = (smallest / KV_BLOCK, blocks_for(top));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid * KV_BLOCK) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo * KV_BLOCK).max(smallest))
}

/// Whether a context of `n_ctx` fits `budget`: an error naming the figures where it does not.
pub(crate) fn check(
    mem: &SessionMemory,
    weights: u64,
    budget: &MemoryBudget,
    loaded: bool,
    n_ctx: usize,
) -> Result<()> {
    let e = MemoryEstimate { weights, ..mem.at(n_ctx) };
    let need = e.needs(budget, loaded);
    if need > budget.bytes {
        let what = if budget.covers_weights && !loaded { "the model" } else { "its KV cache and scratch" };
        return Err(Error::InvalidArgument(format!(
            "a context of {n_ctx} tokens does not fit this machine: {what} need {:.1} MiB ({e}), \
             more than the {budget}",
            need as f64 / MIB
        )));
    }
    if let Some(max) = budget.max_buffer.filter(|&m| mem.kv_layer(n_ctx) > m) {
        return Err(Error::InvalidArgument(format!(
            "a context of {n_ctx} tokens does not fit this device: a KV cache layer would take \
             {:.1} MiB, more than its largest buffer ({:.1} MiB)",
            mem.kv_layer(n_ctx) as f64 / MIB,
            max as f64 / MIB
        )));
    }
    Ok(())
}

const MIB: f64 = (1u64 << 20) as f64;

impl std::fmt::Display for MemoryEstimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "{:.1} MiB = weights {:.1} MiB + KV cache {:.1} MiB + scratch {:.1} MiB",
            mb(self.total()),
            mb(self.weights),
            mb(self.kv),
            mb(self.scratch)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{MetaValue, Metadata};
    use crate::quant::GgmlType;

    /// The 8b llama shape (a 1000-token vocabulary), context 8192.
    fn shape_8b() -> (Hparams, Vec<TensorInfo>) {
        let mut md = Metadata::default();
        let set = |md: &mut Metadata, k: &str, v: u32| md.insert(k, MetaValue::U32(v));
        md.insert("general.architecture", MetaValue::Str("llama".into()));
        set(&mut md, "llama.context_length", 8192);
        set(&mut md, "llama.embedding_length", 4096);
        set(&mut md, "llama.block_count", 32);
        set(&mut md, "llama.feed_forward_length", 14336);
        set(&mut md, "llama.attention.head_count", 32);
        set(&mut md, "llama.attention.head_count_kv", 8);
        md.insert("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5));
        let hp = Hparams::from_metadata(&md).unwrap();
        let t = |name: &str, dims: &[u64], dtype| TensorInfo {
            name: name.into(),
            dims: dims.to_vec(),
            dtype,
            offset: 0,
        };
        let mut tensors = vec![
            t("token_embd.weight", &[4096, 1000], GgmlType::Q4_K),
            t("output_norm.weight", &[4096], GgmlType::F32),
        ];
        for l in 0..32 {
            let b = |s: &str| format!("blk.{l}.{s}.weight");
            tensors.push(t(&b("attn_norm"), &[4096], GgmlType::F32));
            tensors.push(t(&b("attn_q"), &[4096, 4096], GgmlType::Q4_K));
            tensors.push(t(&b("attn_k"), &[4096, 1024], GgmlType::Q4_K));
            tensors.push(t(&b("attn_v"), &[4096, 1024], GgmlType::Q6_K));
            tensors.push(t(&b("attn_output"), &[4096, 4096], GgmlType::Q4_K));
            tensors.push(t(&b("ffn_norm"), &[4096], GgmlType::F32));
            tensors.push(t(&b("ffn_gate"), &[4096, 14336], GgmlType::Q4_K));
            tensors.push(t(&b("ffn_up"), &[4096, 14336], GgmlType::Q4_K));
            tensors.push(t(&b("ffn_down"), &[14336, 4096], GgmlType::Q6_K));
        }
        (hp, tensors)
    }

    /// The 8b llama shape's KV cache: 32 layers × 8 heads × (128 + 128) × 2 bytes = 128 KiB a
    /// position, the figure the attention issue quotes; no executor's scratch grows with the
    /// context for heads of 128.
    #[test]
    fn kv_of_the_8b_shape_is_128_kib_a_position() {
        let (hp, tensors) = shape_8b();
        for kind in [ExecutorKind::Cpu, ExecutorKind::WebGpu, ExecutorKind::Cuda, ExecutorKind::Auto] {
            let e = MemoryEstimate::new(&hp, 1000, &tensors, 4096, 256, kind).unwrap();
            assert_eq!(e.kv, 4096 * 128 * 1024);
            assert_eq!(e.weights, tensors.iter().map(TensorInfo::n_bytes).sum::<u64>());
            // About 50 MiB of activations (256 rows of the f32 slots: 4096-wide ones, two
            // 14336-wide FFN ones, ...), and on the CPU the matmul buffers.
            assert!(e.scratch > 40 << 20 && e.scratch < 100 << 20, "{kind:?}: {e}");
            let doubled = MemoryEstimate::new(&hp, 1000, &tensors, 8192, 256, kind).unwrap();
            assert_eq!(doubled.kv, 2 * e.kv);
            assert_eq!(doubled.scratch, e.scratch, "{kind:?}");
        }
    }

    fn budget(bytes: u64) -> MemoryBudget {
        MemoryBudget::given(bytes, None)
    }

    #[test]
    fn the_largest_context_is_the_models_own_when_everything_fits() {
        let (hp, t) = shape_8b();
        let n = largest_context(&hp, 1000, &t, 256, ExecutorKind::Cpu, &budget(64 << 30), false).unwrap();
        assert_eq!(n, 8192);
    }

    #[test]
    fn the_largest_context_shrinks_with_the_budget_in_whole_blocks() {
        let (hp, t) = shape_8b();
        let kind = ExecutorKind::Cpu;
        let scratch = MemoryEstimate::new(&hp, 1000, &t, 64, 256, kind).unwrap().scratch;
        // Room for 1000 positions of 128 KiB: 960 (15 blocks).
        let b = budget(scratch + 1000 * (128 << 10));
        let n = largest_context(&hp, 1000, &t, 256, kind, &b, false).unwrap();
        assert_eq!(n, 960);
        let e = MemoryEstimate::new(&hp, 1000, &t, n, 256, kind).unwrap();
        assert!(e.needs(&b, false) <= b.bytes);
        let next = MemoryEstimate::new(&hp, 1000, &t, n + KV_BLOCK, 256, kind).unwrap();
        assert!(next.needs(&b, false) > b.bytes);
        // A budget that the weights share: they come off it first, until loaded.
        let shared = MemoryBudget { bytes: e.weights + b.bytes, covers_weights: true, ..b.clone() };
        assert_eq!(largest_context(&hp, 1000, &t, 256, kind, &shared, false).unwrap(), 960);
        assert_eq!(largest_context(&hp, 1000, &t, 256, kind, &shared, true).unwrap(), 8192);
        // The largest buffer: a layer's keys are 2 KiB a position.
        let small_buffers = MemoryBudget { max_buffer: Some(2 << 20), ..budget(64 << 30) };
        assert_eq!(largest_context(&hp, 1000, &t, 256, kind, &small_buffers, false).unwrap(), 1024);
    }

    #[test]
    fn a_budget_below_the_smallest_context_is_an_error_with_the_figures() {
        let (hp, t) = shape_8b();
        let e = largest_context(&hp, 1000, &t, 256, ExecutorKind::Cpu, &budget(10 << 20), false).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("256 tokens") && msg.contains("10.0 MiB") && msg.contains("KV cache"), "{msg}");
    }
}
