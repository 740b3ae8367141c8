//! The CPU executor: the reference every other executor is tested against, and the fallback
//! where no GPU is available. Weights stay in their GGUF block format in host memory; matrix
//! products quantize the activations the way llama.cpp's CPU backend does (q8 blocks) and use
//! the block formats' integer dot products, spread over threads natively.

mod kernels;
mod kv_io;
mod kv_shift;
mod matmul;
mod par;
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub(crate) mod web_pool;

/// Threads the CPU executor's parallel loops run on (natively rayon's pool; in the browser 1,
/// or the workers of the threaded build plus the model's own thread).
pub fn threads() -> usize {
    par::threads()
}

use half::f16;

use super::{
    Executor, GraphId, KvId, KvShift, KvSpec, LocalFuture, Op, Readback, SeqStep, StepOutput, WeightId,
};
use crate::exec::{check_step, Graph, RopeConsts, KV_BLOCK};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A weight tensor in host memory, raw GGUF bytes.
pub(crate) struct Weight {
    pub name: String,
    pub dtype: GgmlType,
    pub dims: Vec<u64>,
    pub data: Vec<u8>,
}

impl Weight {
    /// Row length (ggml dims[0]).
    pub fn k(&self) -> usize {
        self.dims[0] as usize
    }
    /// Number of rows (product of the other dims).
    pub fn n_rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }
}

/// One layer's cached keys and values, f16 like llama.cpp's default cache type.
struct KvLayer {
    k: Vec<f16>,
    v: Vec<f16>,
    k_dim: usize,
    v_dim: usize,
}

/// A pool of `n_blocks` blocks of [`KV_BLOCK`] rows per layer.
struct KvCache {
    n_blocks: usize,
    layers: Vec<KvLayer>,
}

/// `n` zeros, from the allocator's zeroed memory: large blocks come straight from the OS as
/// pages it zeroes when first touched, so a cache costs RAM only as its positions are written
/// (a fill loop would commit every page of a long default context at once).
fn zeroed_f16(n: usize) -> Result<Vec<f16>> {
    let oom = || CpuExecutor::err(format!("out of memory for the KV cache ({n} values)"));
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f16>(n).map_err(|_| oom())?;
    // SAFETY: the layout's size is not zero (n > 0 and f16 is 2 bytes); the pointer, when not
    // null, is an allocation of exactly `layout` from the global allocator, which `Vec` frees
    // with the same layout (capacity n of f16); all-zero bits are the f16 value 0.0.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut f16;
        if p.is_null() {
            return Err(oom());
        }
        Ok(Vec::from_raw_parts(p, n, n))
    }
}

/// The CPU executor.
#[derive(Default)]
pub struct CpuExecutor {
    weights: Vec<Weight>,
    kvs: Vec<Option<KvCache>>,
    /// Compiled graphs by [`GraphId`]; `None` once freed.
    graphs: Vec<Option<Graph>>,
}

impl CpuExecutor {
    /// A new, empty executor.
    pub fn new() -> Self {
        Self::default()
    }

    fn weight(&self, id: WeightId) -> &Weight {
        &self.weights[id.0 as usize]
    }

    fn err(message: impl Into<String>) -> Error {
        Error::Executor { executor: "cpu", message: message.into() }
    }

    /// Check a graph against the weights it names before it is accepted.
    fn validate(&self, g: &Graph) -> Result<()> {
        g.check(self.weights.len(), |w| {
            let wt = self.weight(w);
            (wt.k(), wt.n_rows())
        })
        .map_err(Self::err)
    }

    fn run_sync(
        &mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &[SeqStep],
        readback: Readback,
    ) -> Result<StepOutput> {
        let g = self
            .graphs
            .get(graph.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| Self::err("unknown graph"))?;
        let cache = self
            .kvs
            .get_mut(kv.0 as usize)
            .and_then(|c| c.as_mut())
            .ok_or_else(|| Self::err("unknown KV cache"))?;
        let n_vocab = g.embed_table().map_or(0, |t| self.weights[t.0 as usize].n_rows());
        check_step(g, "cpu", seqs, readback, cache.n_blocks, n_vocab)?;
        let tokens: Vec<u32> = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        // Each token's place: its position and its sequence's block table.
        let at: Vec<kernels::QueryAt> = seqs
            .iter()
            .flat_map(|s| (0..s.tokens.len()).map(|j| kernels::QueryAt { pos: s.pos + j, blocks: s.blocks }))
            .collect();
        let positions: Vec<usize> = at.iter().map(|a| a.pos).collect();
        // Each sequence's last token, then the step's last for rows past the step's sequences.
        let mut last_rows: Vec<usize> = seqs
            .iter()
            .scan(0, |end, s| {
                *end += s.tokens.len();
                Some(*end - 1)
            })
            .collect();
        last_rows.resize(g.n_seqs, tokens.len() - 1);
        let weights = &self.weights;
        let mut acts: Vec<Vec<f32>> = g.acts.iter().map(|_| Vec::new()).collect();
        for (i, _) in g.acts.iter().enumerate() {
            let a = super::ActId(i as u32);
            acts[i] = vec![0.0; g.rows(a) * g.cols(a)];
        }
        let mut scratch = matmul::Scratch::default();
        for (i, op) in g.ops.iter().enumerate() {
            match *op {
                Op::Embed { table, dst, scale } => {
                    kernels::embed(&weights[table.0 as usize], &tokens, &mut acts[dst.0 as usize], scale)?
                }
                Op::RmsNorm { x, weight, dst, group, eps } => {
                    let w = kernels::f32_weight(&weights[weight.0 as usize])?;
                    let src = take(&mut acts, x, dst);
                    kernels::rms_norm(src.as_deref(), &mut acts[dst.0 as usize], &w, group, eps);
                }
                Op::MatMul { w, x, dst, bias } => {
                    let rows = g.rows(x);
                    // The op before read the same input and wrote elsewhere: its converted
                    // activations still describe x.
                    let same_input = i.checked_sub(1).is_some_and(
                        |p| matches!(g.ops[p], Op::MatMul { x: px, dst: pd, .. } if px == x && pd != x),
                    );
                    let (xs, out) = pair(&mut acts, x, dst);
                    matmul::matmul(&weights[w.0 as usize], xs, rows, out, &mut scratch, same_input)?;
                    if let Some(b) = bias {
                        let b = kernels::f32_weight(&weights[b.0 as usize])?;
                        for row in out.chunks_mut(b.len()) {
                            row.iter_mut().zip(&b).for_each(|(o, b)| *o += b);
                        }
                    }
                }
                Op::Rope { x, n_heads, head_dim, n_rot, base, freq_scale, mode, freqs, ext } => {
                    let freqs = freqs.map(|f| kernels::f32_weight(&weights[f.0 as usize])).transpose()?;
                    let k = RopeConsts::new(n_rot, base, freq_scale, ext);
                    let x = &mut acts[x.0 as usize];
                    kernels::rope(x, &positions, n_heads, head_dim, n_rot, &k, freqs.as_deref(), mode)
                }
                Op::KvStore { layer, k, v } => {
                    let l = cache.layers.get_mut(layer).ok_or_else(|| Self::err("KV layer out of range"))?;
                    let (kd, vd) = (l.k_dim, l.v_dim);
                    if g.cols(k) != kd || g.cols(v) != vd {
                        return Err(Self::err(format!(
                            "KV store of layer {layer}: rows do not match the cache"
                        )));
                    }
                    for (row, a) in acts[k.0 as usize].chunks(kd).zip(&at) {
                        let o = crate::exec::kv_row(a.blocks, a.pos) * kd;
                        kernels::f32_to_f16(row, &mut l.k[o..o + kd]);
                    }
                    for (row, a) in acts[v.0 as usize].chunks(vd).zip(&at) {
                        let o = crate::exec::kv_row(a.blocks, a.pos) * vd;
                        kernels::f32_to_f16(row, &mut l.v[o..o + vd]);
                    }
                }
                Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } => {
                    let l = cache.layers.get(layer).ok_or_else(|| Self::err("KV layer out of range"))?;
                    let (qs, out) = pair(&mut acts, q, dst);
                    kernels::attention(
                        qs,
                        out,
                        &kernels::KvView { k: &l.k, v: &l.v, k_dim: l.k_dim, v_dim: l.v_dim },
                        &at,
                        kernels::AttnShape { n_heads, n_kv_heads, head_dim, scale, window, softcap },
                    );
                }
                Op::GatedAct { gate, up, act } => {
                    let (us, gs) = pair(&mut acts, up, gate);
                    kernels::gated_act(gs, us, act);
                }
                Op::Add { a, b, dst } => {
                    let mut out = std::mem::take(&mut acts[dst.0 as usize]);
                    if a == dst {
                        out.iter_mut().zip(&acts[b.0 as usize]).for_each(|(o, b)| *o += b);
                    } else if b == dst {
                        out.iter_mut().zip(&acts[a.0 as usize]).for_each(|(o, a)| *o += a);
                    } else {
                        let (xa, xb) = (&acts[a.0 as usize], &acts[b.0 as usize]);
                        out.iter_mut().zip(xa.iter().zip(xb)).for_each(|(o, (a, b))| *o = a + b);
                    }
                    acts[dst.0 as usize] = out;
                }
                Op::TakeLast { x, dst } => {
                    let cols = g.cols(x);
                    let (src, out) = pair(&mut acts, x, dst);
                    for (o, &r) in out.chunks_mut(cols).zip(&last_rows) {
                        o.copy_from_slice(&src[r * cols..(r + 1) * cols]);
                    }
                }
            }
        }
        let logits = std::mem::take(&mut acts[g.logits.0 as usize]);
        let n_vocab = g.cols(g.logits);
        // The sequences' last rows: the logits slot has a row per sequence of the graph
        // (`Rows::Last`) or per token.
        let rows: Vec<&[f32]> = if g.acts[g.logits.0 as usize].rows == super::Rows::All {
            last_rows[..seqs.len()].iter().map(|&r| &logits[r * n_vocab..(r + 1) * n_vocab]).collect()
        } else {
            logits.chunks(n_vocab).take(seqs.len()).collect()
        };
        Ok(match readback {
            Readback::Argmax => {
                let pick = |(r, s): (&&[f32], &SeqStep)| match s.mask {
                    Some(m) => kernels::argmax_masked(r, m),
                    None => kernels::argmax(r),
                };
                StepOutput { tokens: rows.iter().zip(seqs).map(pick).collect(), logits: Vec::new() }
            }
            Readback::LastLogits => StepOutput { tokens: Vec::new(), logits: rows.concat() },
            Readback::AllLogits => StepOutput { tokens: Vec::new(), logits },
        })
    }
}

/// A copy of slot `x` when it differs from `dst`; None when the op runs in place.
fn take(acts: &mut [Vec<f32>], x: super::ActId, dst: super::ActId) -> Option<Vec<f32>> {
    (x != dst).then(|| acts[x.0 as usize].clone())
}

/// Borrow slot `a` immutably and slot `b` mutably (they must differ).
fn pair(acts: &mut [Vec<f32>], a: super::ActId, b: super::ActId) -> (&[f32], &mut [f32]) {
    let (a, b) = (a.0 as usize, b.0 as usize);
    if a < b {
        let (lo, hi) = acts.split_at_mut(b);
        (&lo[a], &mut hi[0])
    } else {
        let (lo, hi) = acts.split_at_mut(a);
        (&hi[0], &mut lo[b])
    }
}

impl Executor for CpuExecutor {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn supports_type(&self, t: GgmlType) -> bool {
        GgmlType::WEIGHT_TYPES.contains(&t)
    }

    fn alloc_weight(&mut self, name: &str, dtype: GgmlType, dims: &[u64]) -> Result<WeightId> {
        if !self.supports_type(dtype) {
            return Err(Error::unsupported_type(name, dtype));
        }
        if dims.is_empty() || dims.len() > 4 {
            return Err(Self::err(format!("tensor '{name}' has {} dimensions", dims.len())));
        }
        let rows: u64 = dims[1..].iter().product();
        let bytes =
            dtype.row_bytes(dims[0])?.checked_mul(rows).ok_or_else(|| Self::err("tensor too large"))?;
        let bytes = usize::try_from(bytes).map_err(|_| Self::err("tensor too large for this platform"))?;
        let mut data = Vec::new();
        data.try_reserve_exact(bytes)
            .map_err(|_| Self::err(format!("out of memory allocating {bytes} bytes for '{name}'")))?;
        data.resize(bytes, 0);
        self.weights.push(Weight { name: name.into(), dtype, dims: dims.to_vec(), data });
        Ok(WeightId(self.weights.len() as u32 - 1))
    }

    fn write_weight(&mut self, id: WeightId, offset: u64, bytes: &[u8]) -> Result<()> {
        let w = self.weights.get_mut(id.0 as usize).ok_or_else(|| Self::err("unknown weight"))?;
        let start = usize::try_from(offset).map_err(|_| Self::err("offset out of range"))?;
        let end = start.checked_add(bytes.len()).filter(|&e| e <= w.data.len());
        let end = end.ok_or_else(|| Self::err(format!("write past the end of '{}'", w.name)))?;
        w.data[start..end].copy_from_slice(bytes);
        Ok(())
    }

    fn memory_budget(&self) -> Option<super::MemoryBudget> {
        super::budget::host()
    }

    fn measure_bandwidth(&mut self) -> LocalFuture<'_, Result<Option<f64>>> {
        Box::pin(async { Ok(Some(par::copy_bandwidth())) })
    }

    fn finish_upload(&mut self) -> LocalFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        if spec.k_dims.len() != spec.v_dims.len() {
            return Err(Self::err("KV spec: key and value layer counts differ"));
        }
        let mut layers = Vec::with_capacity(spec.k_dims.len());
        let n_rows = spec.n_blocks.checked_mul(KV_BLOCK).ok_or_else(|| Self::err("KV cache too large"))?;
        for (&k_dim, &v_dim) in spec.k_dims.iter().zip(&spec.v_dims) {
            let kn = n_rows.checked_mul(k_dim).ok_or_else(|| Self::err("KV cache too large"))?;
            let vn = n_rows.checked_mul(v_dim).ok_or_else(|| Self::err("KV cache too large"))?;
            let (k, v) = (zeroed_f16(kn)?, zeroed_f16(vn)?);
            layers.push(KvLayer { k, v, k_dim, v_dim });
        }
        self.kvs.push(Some(KvCache { n_blocks: spec.n_blocks, layers }));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }

    fn free_kv(&mut self, kv: KvId) {
        if let Some(slot) = self.kvs.get_mut(kv.0 as usize) {
            *slot = None;
        }
    }

    fn compile(&mut self, graph: &Graph) -> Result<GraphId> {
        self.validate(graph)?;
        self.graphs.push(Some(graph.clone()));
        Ok(GraphId(self.graphs.len() as u32 - 1))
    }

    fn free_graph(&mut self, graph: GraphId) {
        if let Some(slot) = self.graphs.get_mut(graph.0 as usize) {
            *slot = None;
        }
    }

    fn shift_kv(&mut self, kv: KvId, shift: &KvShift) -> Result<()> {
        let mut cache = self
            .kvs
            .get_mut(kv.0 as usize)
            .and_then(Option::take)
            .ok_or_else(|| Self::err("unknown KV cache"))?;
        let r = self.shift_cache(&mut cache, shift);
        self.kvs[kv.0 as usize] = Some(cache);
        r
    }

    fn read_kv_blocks<'a>(
        &'a mut self,
        kv: KvId,
        blocks: &'a [u32],
        range: std::ops::Range<usize>,
    ) -> LocalFuture<'a, Result<Vec<u8>>> {
        let out = self.read_blocks(kv, blocks, range);
        Box::pin(async move { out })
    }

    fn write_kv_blocks(&mut self, kv: KvId, blocks: &[u32], offset: usize, bytes: &[u8]) -> Result<()> {
        self.write_blocks(kv, blocks, offset, bytes)
    }

    fn run<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        let out = par::run_in_pool(|| self.run_sync(graph, kv, seqs, readback));
        Box::pin(async move { out })
    }
}
