//! The plain scalar reference every executor is checked against: a graph interpreter written
//! as straightforward loops, kept apart from the CPU executor's fast kernels (which may be
//! rewritten for speed) and from the GPU kernels.
//!
//! It is an [`Executor`] like the others, so one case runs the same way on both sides. Sums
//! are in f64; where a result is *defined* by a conversion (not by an accident of summation
//! order) the reference makes the same conversion, written out here:
//! - Matrix products convert each activation row to the weight type's dot-product partner
//!   first, as llama.cpp and every wick executor do: Q8_0 blocks of 32 for Q4_0/Q5_0/Q8_0
//!   weights, Q8_1 (Q8_0 plus an f16 block sum) for Q4_1/Q5_1, Q8_K blocks of 256 for the
//!   k-quants, f16 or bf16 rounding for F16/BF16 weights, none for F32. Weights are
//!   dequantized with `wick::quant::dequantize` (checked bit for bit against the `gguf`
//!   Python package).
//! - The KV cache holds f16 (llama.cpp's default cache type), so `KvStore` rounds to f16.
//!   Position p of a sequence lives in row `blocks[p / KV_BLOCK] · KV_BLOCK + p % KV_BLOCK`.
//! - RMSNorm follows ggml's definition: squares in f32, summed in f64, mean and scale in f32.
//! - RoPE angles follow ggml's definition: `pos · base^(−2i/n_rot)` by repeated f32
//!   multiplication of the per-pair factor, divided by the pair's frequency factor, then
//!   YaRN's mix of that angle and the one times `freq_scale`, all in f32 (the cos and sin
//!   are then taken in f64, times the magnitude scale).
//!
//! - A KV shift ([`Executor::shift_kv`]) rotates each moved key from the position it was
//!   stored at directly to its new one, in f64: the angles `p · base^(−2i/n_rot) / factor ·
//!   freq_scale` of the old and the new position, computed in f64 (no YaRN), then rounds to
//!   f16 again. (The executors rotate by the angle of the delta, in f32.)
//! - Attention's two products are products with the f16 cache, converted as matrix products
//!   are: the query rounded to f16 before K·Q, the probabilities rounded to f16 before P·V.
//!
//! Everything else (scores, softmax, the gated activations) is computed in f64 from the
//! stored inputs; executors that round on the way (GELU through an f16 table, say) are within
//! the tolerances of `ops/mod.rs`.

use half::{bf16, f16};
use wick::exec::{
    check_step, kv_io_pieces, ActId, Executor, Gate, Graph, GraphId, KvId, KvShift, KvSpec, LocalFuture, Op,
    Readback, RopeMode, Rows, SeqStep, StepOutput, WeightId, KV_BLOCK,
};
use wick::quant::GgmlType;
use wick::{Error, Result};

/// A weight: its type, ggml dims and raw bytes.
struct Tensor {
    dtype: GgmlType,
    dims: Vec<u64>,
    bytes: Vec<u8>,
}

impl Tensor {
    /// Row length (ggml dims[0]) and row count.
    fn shape(&self) -> (usize, usize) {
        (self.dims[0] as usize, self.dims[1..].iter().product::<u64>() as usize)
    }
    /// Row `r`, dequantized.
    fn row(&self, r: usize) -> Vec<f32> {
        let (k, _) = self.shape();
        let rb = self.dtype.row_bytes(k as u64).unwrap() as usize;
        let mut out = vec![0f32; k];
        wick::quant::dequantize(self.dtype, &self.bytes[r * rb..(r + 1) * rb], &mut out).unwrap();
        out
    }
    /// Every value, dequantized.
    fn values(&self) -> Vec<f32> {
        (0..self.shape().1).flat_map(|r| self.row(r)).collect()
    }
}

/// One layer of the cache: n_blocks · KV_BLOCK rows of keys and of values, as stored (f16,
/// kept as f32).
struct Layer {
    k: Vec<f32>,
    v: Vec<f32>,
    k_dim: usize,
    v_dim: usize,
    /// The position each row's key is rotated for (where it was stored, then shifted).
    pos: Vec<i64>,
}

/// Where a token stands: its position and its sequence's block table.
struct At {
    pos: usize,
    blocks: Vec<u32>,
}

impl At {
    /// The cache row of position `p` of this token's sequence.
    fn row(&self, p: usize) -> usize {
        self.blocks[p / KV_BLOCK] as usize * KV_BLOCK + p % KV_BLOCK
    }
}

/// The reference executor.
#[derive(Default)]
pub struct Reference {
    weights: Vec<Tensor>,
    kvs: Vec<(usize, Vec<Layer>)>,
    graphs: Vec<Graph>,
}

impl Reference {
    /// A new, empty reference.
    pub fn new() -> Reference {
        Reference::default()
    }

    fn step(&mut self, graph: GraphId, kv: KvId, seqs: &[SeqStep], rb: Readback) -> Result<StepOutput> {
        let g = self.graphs[graph.0 as usize].clone();
        let (n_blocks, _) = &self.kvs[kv.0 as usize];
        let n_vocab = g.embed_table().map_or(0, |t| self.weights[t.0 as usize].shape().1);
        check_step(&g, "reference", seqs, rb, *n_blocks, n_vocab)?;
        let tokens: Vec<u32> = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let at: Vec<At> = seqs
            .iter()
            .flat_map(|s| (0..s.tokens.len()).map(|j| At { pos: s.pos + j, blocks: s.blocks.to_vec() }))
            .collect();
        // Each sequence's last token; rows past the step's sequences repeat the step's last.
        let mut last: Vec<usize> = Vec::new();
        let mut end = 0;
        for s in seqs {
            end += s.tokens.len();
            last.push(end - 1);
        }
        last.resize(g.n_seqs, end - 1);
        let mut acts: Vec<Vec<f32>> = (0..g.acts.len())
            .map(|i| vec![0f32; g.rows(ActId(i as u32)) * g.cols(ActId(i as u32))])
            .collect();
        for op in &g.ops {
            self.op(&g, op, &mut acts, kv, &tokens, &at, &last)?;
        }
        let logits = std::mem::take(&mut acts[g.logits.0 as usize]);
        let n_vocab = g.cols(g.logits);
        let rows: Vec<Vec<f32>> = match g.acts[g.logits.0 as usize].rows {
            Rows::All => {
                last[..seqs.len()].iter().map(|&r| logits[r * n_vocab..][..n_vocab].to_vec()).collect()
            }
            Rows::Last => logits.chunks(n_vocab).take(seqs.len()).map(<[f32]>::to_vec).collect(),
        };
        Ok(match rb {
            Readback::Argmax => {
                let pick = |(r, s): (&Vec<f32>, &SeqStep)| match s.mask {
                    Some(m) => argmax(&super::masked::apply(r, m)),
                    None => argmax(r),
                };
                StepOutput { tokens: rows.iter().zip(seqs).map(pick).collect(), logits: Vec::new() }
            }
            Readback::LastLogits => StepOutput { tokens: Vec::new(), logits: rows.concat() },
            Readback::AllLogits => StepOutput { tokens: Vec::new(), logits },
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn op(
        &mut self,
        g: &Graph,
        op: &Op,
        acts: &mut [Vec<f32>],
        kv: KvId,
        tokens: &[u32],
        at: &[At],
        last: &[usize],
    ) -> Result<()> {
        let w = |id: WeightId| &self.weights[id.0 as usize];
        match *op {
            Op::Embed { table, dst, scale } => {
                let (k, n) = w(table).shape();
                let mut out = Vec::with_capacity(tokens.len() * k);
                for &t in tokens {
                    if t as usize >= n {
                        return Err(Error::InvalidArgument(format!(
                            "token id {t} is outside the vocabulary"
                        )));
                    }
                    out.extend(w(table).row(t as usize).iter().map(|v| v * scale));
                }
                acts[dst.0 as usize] = out;
            }
            Op::RmsNorm { x, weight, dst, group, eps } => {
                let wv = w(weight).values();
                let mut out = acts[x.0 as usize].clone();
                for chunk in out.chunks_mut(group) {
                    let sum: f64 = chunk.iter().map(|&v| (v * v) as f64).sum();
                    let mean = (sum / group as f64) as f32;
                    let scale = 1.0 / (mean + eps).sqrt();
                    for (v, w) in chunk.iter_mut().zip(&wv) {
                        *v = (*v * scale) * w;
                    }
                }
                acts[dst.0 as usize] = out;
            }
            Op::MatMul { w: wid, x, dst, bias } => {
                let bias = bias.map(|b| w(b).values());
                acts[dst.0 as usize] = matmul(w(wid), &acts[x.0 as usize], g.rows(x), bias.as_deref());
            }
            Op::Rope { x, n_heads, head_dim, n_rot, base, freq_scale, mode, freqs, ext } => {
                let factors = freqs.map(|f| w(f).values());
                let theta_scale = base.powf(-2.0 / n_rot as f32);
                // YaRN's ramp: the (fractional) pair index whose wavelength fits `turns` times in
                // the original context; pairs below `low` keep their angle, above `high` are
                // interpolated, and between the two the angle is a linear mix.
                let pair_of = |turns: f32| {
                    let ctx = ext.n_ctx_orig as f32;
                    n_rot as f32 * (ctx / (turns * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
                };
                let low = pair_of(ext.beta_fast).floor().max(0.0);
                let high = pair_of(ext.beta_slow).ceil().min(n_rot as f32 - 1.0);
                let mut mscale = ext.attn_factor as f64;
                if ext.ext_factor != 0.0 {
                    mscale *= (1.0 + 0.1 * (1.0 / freq_scale).ln()) as f64;
                }
                for (r, row) in acts[x.0 as usize].chunks_mut(n_heads * head_dim).enumerate() {
                    let mut theta = at[r].pos as f32;
                    for i in 0..n_rot / 2 {
                        let extrap = match &factors {
                            Some(f) => theta / f[i],
                            None => theta,
                        };
                        let interp = freq_scale * extrap;
                        let mut angle = interp;
                        if ext.ext_factor != 0.0 {
                            let y = (i as f32 - low) / (high - low).max(0.001);
                            let ramp = 1.0 - y.clamp(0.0, 1.0);
                            let mix = ramp * ext.ext_factor;
                            angle = interp * (1.0 - mix) + extrap * mix;
                        }
                        let angle = angle as f64;
                        let (cos, sin) = (angle.cos() * mscale, angle.sin() * mscale);
                        let (a, b) = match mode {
                            RopeMode::Normal => (2 * i, 2 * i + 1),
                            RopeMode::Neox => (i, i + n_rot / 2),
                        };
                        for head in row.chunks_mut(head_dim) {
                            let (x0, x1) = (head[a] as f64, head[b] as f64);
                            head[a] = (x0 * cos - x1 * sin) as f32;
                            head[b] = (x0 * sin + x1 * cos) as f32;
                        }
                        theta *= theta_scale;
                    }
                }
            }
            Op::KvStore { layer, k, v } => {
                let l = &mut self.kvs[kv.0 as usize].1[layer];
                let round = |x: &f32| f16::from_f32(*x).to_f32();
                let (kd, vd) = (l.k_dim, l.v_dim);
                assert_eq!((g.cols(k), g.cols(v)), (kd, vd), "KV store rows do not match the cache");
                for (r, a) in at.iter().enumerate() {
                    let row = a.row(a.pos);
                    let (ks, vs) = (&acts[k.0 as usize][r * kd..][..kd], &acts[v.0 as usize][r * vd..][..vd]);
                    l.k[row * kd..][..kd].iter_mut().zip(ks).for_each(|(d, s)| *d = round(s));
                    l.pos[row] = a.pos as i64;
                    l.v[row * vd..][..vd].iter_mut().zip(vs).for_each(|(d, s)| *d = round(s));
                }
            }
            Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } => {
                let l = &self.kvs[kv.0 as usize].1[layer];
                let hd = head_dim;
                let mut out = vec![0f32; g.rows(q) * n_heads * hd];
                for (r, qrow) in acts[q.0 as usize].chunks(n_heads * hd).enumerate() {
                    let p = at[r].pos;
                    let start = window.map_or(0, |w| (p + 1).saturating_sub(w));
                    for h in 0..n_heads {
                        let kvh = h / (n_heads / n_kv_heads);
                        // K·Q is a product with f16 keys: the query is converted to f16 first.
                        let qh: Vec<f32> =
                            qrow[h * hd..(h + 1) * hd].iter().map(|&v| f16::from_f32(v).to_f32()).collect();
                        let scores: Vec<f64> = (start..=p)
                            .map(|j| {
                                let kr = &l.k[at[r].row(j) * l.k_dim + kvh * hd..][..hd];
                                let d: f64 = qh.iter().zip(kr).map(|(a, b)| *a as f64 * *b as f64).sum();
                                let s = d * scale as f64;
                                softcap.map_or(s, |c| (s / c as f64).tanh() * c as f64)
                            })
                            .collect();
                        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                        let sum: f64 = e.iter().sum();
                        // P·V is a product with f16 values: the probabilities are converted to f16.
                        let probs: Vec<f64> = e.iter().map(|e| f16::from_f64(e / sum).to_f64()).collect();
                        for (i, o) in out[r * n_heads * hd + h * hd..][..hd].iter_mut().enumerate() {
                            let acc: f64 = (start..=p)
                                .zip(&probs)
                                .map(|(j, p)| p * l.v[at[r].row(j) * l.v_dim + kvh * hd + i] as f64)
                                .sum();
                            *o = acc as f32;
                        }
                    }
                }
                acts[dst.0 as usize] = out;
            }
            Op::GatedAct { gate, up, act } => {
                let up = acts[up.0 as usize].clone();
                for (g, u) in acts[gate.0 as usize].iter_mut().zip(&up) {
                    let x = *g as f64;
                    let a = match act {
                        Gate::Silu => x / (1.0 + (-x).exp()),
                        Gate::Gelu => {
                            let c = (2.0 / std::f64::consts::PI).sqrt();
                            0.5 * x * (1.0 + (c * x * (1.0 + 0.044715 * x * x)).tanh())
                        }
                    };
                    *g = (a * *u as f64) as f32;
                }
            }
            Op::Add { a, b, dst } => {
                let sum: Vec<f32> =
                    acts[a.0 as usize].iter().zip(&acts[b.0 as usize]).map(|(a, b)| a + b).collect();
                acts[dst.0 as usize] = sum;
            }
            Op::TakeLast { x, dst } => {
                let (src, cols) = (&acts[x.0 as usize], g.cols(x));
                acts[dst.0 as usize] = last.iter().flat_map(|&r| src[r * cols..][..cols].to_vec()).collect();
            }
        }
        Ok(())
    }
}

/// An activation row as the dot product sees it: the converted values and, for Q8_1, the
/// block sums `s = d · Σq` rounded to f16 (used against the weights' per-block minimum).
struct ActRow {
    values: Vec<f32>,
    block_sums: Vec<f32>,
}

/// Convert a row to the partner format of weights of type `t` and back to f32.
fn activation(t: GgmlType, x: &[f32]) -> ActRow {
    use GgmlType::*;
    let mut row = ActRow { values: Vec::with_capacity(x.len()), block_sums: Vec::new() };
    match t {
        F32 => row.values.extend_from_slice(x),
        F16 => row.values.extend(x.iter().map(|&v| f16::from_f32(v).to_f32())),
        BF16 => row.values.extend(x.iter().map(|&v| bf16::from_f32(v).to_f32())),
        // Q8_0 / Q8_1 (llama.cpp's x86 quantize_row_q8_0/q8_1): d = amax/127 stored as f16,
        // q = round-half-even(v · 127/amax).
        Q4_0 | Q5_0 | Q8_0 | Q4_1 | Q5_1 => {
            for b in x.chunks(32) {
                let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                let q: Vec<i32> = b.iter().map(|&v| (v * id).round_ties_even() as i32).collect();
                let dh = f16::from_f32(d).to_f32();
                row.values.extend(q.iter().map(|&q| dh * q as f32));
                let sum: i32 = q.iter().sum();
                row.block_sums.push(f16::from_f32(sum as f32 * d).to_f32());
            }
        }
        // Q8_K (quantize_row_q8_K_ref): the signed extreme maps to −127, d = 1/iscale in f32.
        _ => {
            for b in x.chunks(256) {
                let (mut amax, mut max) = (0f32, 0f32);
                for &v in b {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                if amax == 0.0 {
                    row.values.extend(std::iter::repeat_n(0.0, b.len()));
                    continue;
                }
                let iscale = -127.0 / max;
                let d = 1.0 / iscale;
                row.values
                    .extend(b.iter().map(|&v| d * ((iscale * v).round_ties_even() as i32).min(127) as f32));
            }
        }
    }
    row
}

/// out (rows × n) = x (rows × k) · Wᵀ (+ bias), each activation row first converted to the
/// weight type's partner, the sums in f64.
fn matmul(w: &Tensor, x: &[f32], rows: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let (k, n) = w.shape();
    let wv = w.values();
    // Q4_1 and Q5_1 blocks hold w = d·q + m: their dot product takes the m part from Q8_1's
    // f16 block sum (m · s), not from the activations themselves.
    let with_min = matches!(w.dtype, GgmlType::Q4_1 | GgmlType::Q5_1);
    let mins: Vec<f32> = if with_min {
        w.bytes.chunks(w.dtype.type_size()).map(|b| f16::from_le_bytes([b[2], b[3]]).to_f32()).collect()
    } else {
        Vec::new()
    };
    let mut out = vec![0f32; rows * n];
    for r in 0..rows {
        let a = activation(w.dtype, &x[r * k..(r + 1) * k]);
        for j in 0..n {
            let wr = &wv[j * k..(j + 1) * k];
            let mut acc = 0f64;
            if with_min {
                for (bi, (wb, ab)) in wr.chunks(32).zip(a.values.chunks(32)).enumerate() {
                    let m = mins[j * k / 32 + bi] as f64;
                    acc += wb.iter().zip(ab).map(|(w, a)| (*w as f64 - m) * *a as f64).sum::<f64>();
                    acc += m * a.block_sums[bi] as f64;
                }
            } else {
                acc = wr.iter().zip(&a.values).map(|(w, a)| *w as f64 * *a as f64).sum();
            }
            out[r * n + j] = acc as f32 + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

/// Index of the largest value (the first on ties).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

impl Executor for Reference {
    fn name(&self) -> &'static str {
        "reference"
    }
    fn supports_type(&self, t: GgmlType) -> bool {
        GgmlType::WEIGHT_TYPES.contains(&t)
    }
    fn alloc_weight(&mut self, _name: &str, dtype: GgmlType, dims: &[u64]) -> Result<WeightId> {
        let rows: u64 = dims[1..].iter().product();
        let bytes = vec![0u8; (dtype.row_bytes(dims[0])? * rows) as usize];
        self.weights.push(Tensor { dtype, dims: dims.to_vec(), bytes });
        Ok(WeightId(self.weights.len() as u32 - 1))
    }
    fn write_weight(&mut self, id: WeightId, offset: u64, bytes: &[u8]) -> Result<()> {
        let o = offset as usize;
        self.weights[id.0 as usize].bytes[o..o + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
    fn finish_upload(&mut self) -> LocalFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        let layers = spec
            .k_dims
            .iter()
            .zip(&spec.v_dims)
            .map(|(&k_dim, &v_dim)| Layer {
                k: vec![0.0; spec.n_blocks * KV_BLOCK * k_dim],
                v: vec![0.0; spec.n_blocks * KV_BLOCK * v_dim],
                k_dim,
                v_dim,
                pos: vec![0; spec.n_blocks * KV_BLOCK],
            })
            .collect();
        self.kvs.push((spec.n_blocks, layers));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }
    fn free_kv(&mut self, kv: KvId) {
        self.kvs[kv.0 as usize].1.clear();
    }
    fn compile(&mut self, graph: &Graph) -> Result<GraphId> {
        graph
            .check(self.weights.len(), |w| self.weights[w.0 as usize].shape())
            .map_err(|message| Error::Executor { executor: "reference", message })?;
        self.graphs.push(graph.clone());
        Ok(GraphId(self.graphs.len() as u32 - 1))
    }
    fn free_graph(&mut self, _graph: GraphId) {
        // Graphs are a few kilobytes of op descriptions: the reference keeps them all.
    }
    fn read_kv_blocks<'a>(
        &'a mut self,
        kv: KvId,
        blocks: &'a [u32],
        range: std::ops::Range<usize>,
    ) -> LocalFuture<'a, Result<Vec<u8>>> {
        let (n_blocks, layers) = &self.kvs[kv.0 as usize];
        let (k_dims, v_dims): (Vec<usize>, Vec<usize>) = layers.iter().map(|l| (l.k_dim, l.v_dim)).unzip();
        let out = kv_io_pieces("reference", *n_blocks, &k_dims, &v_dims, blocks, range).map(|pieces| {
            let mut out = Vec::new();
            for p in pieces {
                let l = &layers[p.layer];
                let pool = if p.values { &l.v } else { &l.k };
                out.extend(
                    pool[p.device / 2..(p.device + p.len) / 2]
                        .iter()
                        .flat_map(|&x| f16::from_f32(x).to_le_bytes()),
                );
            }
            out
        });
        Box::pin(async move { out })
    }
    /// Rows written keep the positions the reference noted for them (a shift after a write
    /// is not modelled).
    fn write_kv_blocks(&mut self, kv: KvId, blocks: &[u32], offset: usize, bytes: &[u8]) -> Result<()> {
        let (n_blocks, layers) = &mut self.kvs[kv.0 as usize];
        let (k_dims, v_dims): (Vec<usize>, Vec<usize>) = layers.iter().map(|l| (l.k_dim, l.v_dim)).unzip();
        for p in kv_io_pieces("reference", *n_blocks, &k_dims, &v_dims, blocks, offset..offset + bytes.len())?
        {
            let l = &mut layers[p.layer];
            let pool = if p.values { &mut l.v } else { &mut l.k };
            for (d, c) in pool[p.device / 2..(p.device + p.len) / 2]
                .iter_mut()
                .zip(bytes[p.host..p.host + p.len].chunks_exact(2))
            {
                *d = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        Ok(())
    }
    fn shift_kv(&mut self, kv: KvId, shift: &KvShift) -> Result<()> {
        let (n_blocks, layers) = &mut self.kvs[kv.0 as usize];
        let k_dims: Vec<usize> = layers.iter().map(|l| l.k_dim).collect();
        shift.check("reference", *n_blocks, &k_dims)?;
        for (l, rope) in layers.iter_mut().zip(&shift.layers) {
            let Some(r) = rope else { continue };
            assert_eq!(r.ext.ext_factor, 0.0, "the reference shifts without YaRN");
            let factors = r.freqs.map(|f| self.weights[f.0 as usize].values());
            let angle = |p: i64, i: usize| {
                let f = factors.as_ref().map_or(1.0, |f| f[i] as f64);
                p as f64 * (r.base as f64).powf(-2.0 * i as f64 / r.n_rot as f64) / f * r.freq_scale as f64
            };
            for row in shift.rows() {
                let (from, to) = (l.pos[row], l.pos[row] + shift.delta as i64);
                for head in l.k[row * l.k_dim..][..l.k_dim].chunks_mut(r.head_dim) {
                    for i in 0..r.n_rot / 2 {
                        let (a, b) = match r.mode {
                            RopeMode::Normal => (2 * i, 2 * i + 1),
                            RopeMode::Neox => (i, i + r.n_rot / 2),
                        };
                        // Back to the unrotated key, then to the new position.
                        let (c0, s0) = (angle(from, i).cos(), angle(from, i).sin());
                        let (x0, x1) = (head[a] as f64, head[b] as f64);
                        let (u0, u1) = (x0 * c0 + x1 * s0, -x0 * s0 + x1 * c0);
                        let (c1, s1) = (angle(to, i).cos(), angle(to, i).sin());
                        head[a] = f16::from_f64(u0 * c1 - u1 * s1).to_f32();
                        head[b] = f16::from_f64(u0 * s1 + u1 * c1).to_f32();
                    }
                }
                l.pos[row] = to;
            }
        }
        Ok(())
    }
    fn run<'a>(
        &'a mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &'a [SeqStep<'a>],
        readback: Readback,
    ) -> LocalFuture<'a, Result<StepOutput>> {
        let out = self.step(graph, kv, seqs, readback);
        Box::pin(async move { out })
    }
}
