//! The forward pass as data: a list of ops over activation slots and device-resident weights.
//!
//! A model builds one [`Graph`] per batch shape (the decode step has one token, a prefill many)
//! and hands it to the executor once ([`super::Executor::compile`]); every later step only passes
//! token ids and a position. That is what lets WebGPU record a step as one command buffer and
//! CUDA capture it as one graph.

use super::WeightId;

/// An activation slot of a graph: a row-major f32 matrix of `rows × cols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ActId(pub u32);

/// How many rows an activation has: one per token of the step, or one per sequence (its last
/// token's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// One row per token of the step.
    All,
    /// One row per sequence the graph takes ([`Graph::n_seqs`]): each sequence's last token.
    Last,
}

/// Shape of an activation slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActDesc {
    /// Row count.
    pub rows: Rows,
    /// Row length.
    pub cols: usize,
}

/// How RoPE pairs up the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs (x[2i], x[2i+1]): llama.
    Normal,
    /// Halves (x[i], x[i + n_rot/2]): qwen2, qwen3, gemma3 (GPT-NeoX style).
    Neox,
}

/// How RoPE stretches its angles beyond `freq_scale` (llama.cpp's `ggml_rope_ext` arguments):
/// YaRN's ramp between interpolated and extrapolated angles, and the magnitude scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeExt {
    /// Weight of the extrapolated angle in YaRN's ramp (0: plain interpolation, no YaRN).
    pub ext_factor: f32,
    /// Scale of cos and sin (YaRN's magnitude correction is applied on top where
    /// `ext_factor` is not 0).
    pub attn_factor: f32,
    /// YaRN: rotations at the original context above which a pair keeps its angle.
    pub beta_fast: f32,
    /// YaRN: rotations at the original context below which a pair is interpolated.
    pub beta_slow: f32,
    /// YaRN: the context length the model was trained at before the extension.
    pub n_ctx_orig: usize,
}

impl Default for RopeExt {
    /// No YaRN, unit magnitude.
    fn default() -> Self {
        RopeExt { ext_factor: 0.0, attn_factor: 1.0, beta_fast: 32.0, beta_slow: 1.0, n_ctx_orig: 0 }
    }
}

/// The per-op constants of a RoPE kernel, computed once on the host so that every executor
/// uses the same values. For pair i at position p, with `f_i` the frequency factor (1 without
/// `rope_freqs`):
///
/// ```text
/// extrap = (p · theta_scaleⁱ) / f_i      (the power by repeated f32 multiplication)
/// interp = freq_scale · extrap
/// mix    = ext_factor · (1 − clamp((i − corr_low) / max(0.001, corr_high − corr_low), 0, 1))
/// angle  = interp · (1 − mix) + extrap · mix        (just `interp` where ext_factor is 0)
/// (cos, sin) = (cos angle · mscale, sin angle · mscale)
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConsts {
    /// base^(−2/n_rot).
    pub theta_scale: f32,
    /// 1 / linear (or YaRN) scaling factor.
    pub freq_scale: f32,
    /// YaRN's ramp weight (0: none).
    pub ext_factor: f32,
    /// First pair of YaRN's ramp.
    pub corr_low: f32,
    /// Last pair of YaRN's ramp.
    pub corr_high: f32,
    /// Scale of cos and sin.
    pub mscale: f32,
}

impl RopeConsts {
    /// The constants of a rotation of `n_rot` dimensions.
    pub fn new(n_rot: usize, base: f32, freq_scale: f32, ext: RopeExt) -> RopeConsts {
        // The pair whose wavelength fits `rotations` times in the original context, as a
        // (fractional) dimension index: n_rot · ln(n_ctx_orig / (2π · rotations)) / (2 ln base).
        let corr_dim = |rotations: f32| {
            n_rot as f32 * (ext.n_ctx_orig as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let corr_low = corr_dim(ext.beta_fast).floor().max(0.0);
        let corr_high = corr_dim(ext.beta_slow).ceil().min(n_rot as f32 - 1.0);
        let mut mscale = ext.attn_factor;
        if ext.ext_factor != 0.0 {
            mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
        }
        RopeConsts {
            theta_scale: base.powf(-2.0 / n_rot as f32),
            freq_scale,
            ext_factor: ext.ext_factor,
            corr_low,
            corr_high,
            mscale,
        }
    }

    /// (cos, sin) of pair `i` whose extrapolated angle (position times the pair's frequency,
    /// divided by its factor) is `extrap`.
    pub fn cos_sin(&self, i: usize, extrap: f32) -> (f32, f32) {
        let interp = self.freq_scale * extrap;
        let mut angle = interp;
        if self.ext_factor != 0.0 {
            let y = (i as f32 - self.corr_low) / (self.corr_high - self.corr_low).max(0.001);
            let mix = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor;
            angle = interp * (1.0 - mix) + extrap * mix;
        }
        (angle.cos() * self.mscale, angle.sin() * self.mscale)
    }
}

/// Gated activation of the feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// silu(gate) * up.
    Silu,
    /// gelu(gate) * up, tanh approximation.
    Gelu,
}

/// One operation of the forward pass. `dst` slots are written, others read.
/// Ops may read and write the same slot only where noted ("in place").
/// (Field meanings are given in each variant's description.)
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// dst[i] = table[token_i] * scale; table is (n_embd, n_vocab) in ggml order.
    Embed { table: WeightId, dst: ActId, scale: f32 },
    /// Root-mean-square norm over every `group` consecutive elements of each row of `x`,
    /// times `weight` (length `group`). `group` is the row length, or the head size for
    /// per-head (QK) norms. In place allowed.
    RmsNorm { x: ActId, weight: WeightId, dst: ActId, group: usize, eps: f32 },
    /// dst = x · Wᵀ (+ bias): W is (k, n) in ggml order, x is (rows, k), dst is (rows, n).
    MatMul { w: WeightId, x: ActId, dst: ActId, bias: Option<WeightId> },
    /// Rotary position embedding on every head of `x` in place (each token's position in its
    /// sequence, from the step).
    /// `freqs`: the file's frequency factors (`rope_freqs.weight`, F32, n_rot/2 values), each
    /// pair's angle divided by its factor; `ext`: YaRN and the magnitude scale (see
    /// [`RopeConsts`] for the whole definition).
    Rope {
        x: ActId,
        n_heads: usize,
        head_dim: usize,
        n_rot: usize,
        base: f32,
        freq_scale: f32,
        mode: RopeMode,
        freqs: Option<WeightId>,
        ext: RopeExt,
    },
    /// Store the step's k and v rows in layer `layer` of the KV cache, each at its token's
    /// position in its sequence's blocks.
    KvStore { layer: usize, k: ActId, v: ActId },
    /// Causal attention of the step's queries over the cached keys and values of `layer`
    /// (which already hold this step's rows): the query of a token at position p of sequence
    /// s sees s's keys at positions ≤ p. q is (rows, n_heads·head_dim), dst likewise.
    /// `window`: sliding-window size (a query at p sees keys at positions > p − window).
    Attention {
        layer: usize,
        q: ActId,
        dst: ActId,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        scale: f32,
        window: Option<usize>,
        softcap: Option<f32>,
    },
    /// gate = act(gate) * up, elementwise, in place on `gate`.
    GatedAct { gate: ActId, up: ActId, act: Gate },
    /// dst = a + b, elementwise. In place allowed.
    Add { a: ActId, b: ActId, dst: ActId },
    /// dst (one row per sequence of the graph) = each sequence's last row of x.
    TakeLast { x: ActId, dst: ActId },
}

/// A whole forward pass for a step of `n_tokens` tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// Tokens per step this graph is built for.
    pub n_tokens: usize,
    /// Most sequences a step of this graph carries (the rows of [`Rows::Last`] slots); at most
    /// `n_tokens`.
    pub n_seqs: usize,
    /// Activation slots, indexed by [`ActId`].
    pub acts: Vec<ActDesc>,
    /// Ops in execution order.
    pub ops: Vec<Op>,
    /// The slot holding the logits (cols = vocabulary size).
    pub logits: ActId,
}

impl Graph {
    /// An empty graph for `n_tokens` tokens of one sequence; `logits` is set by the builder.
    pub fn new(n_tokens: usize) -> Self {
        Graph::with_seqs(n_tokens, 1)
    }
    /// An empty graph for `n_tokens` tokens of up to `n_seqs` sequences.
    pub fn with_seqs(n_tokens: usize, n_seqs: usize) -> Self {
        Graph {
            n_tokens,
            n_seqs: n_seqs.clamp(1, n_tokens.max(1)),
            acts: Vec::new(),
            ops: Vec::new(),
            logits: ActId(0),
        }
    }
    /// Add an activation slot.
    pub fn act(&mut self, rows: Rows, cols: usize) -> ActId {
        self.acts.push(ActDesc { rows, cols });
        ActId(self.acts.len() as u32 - 1)
    }
    /// Append an op.
    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }
    /// Rows of a slot for this graph.
    pub fn rows(&self, a: ActId) -> usize {
        match self.acts[a.0 as usize].rows {
            Rows::All => self.n_tokens,
            Rows::Last => self.n_seqs,
        }
    }
    /// Columns of a slot.
    pub fn cols(&self, a: ActId) -> usize {
        self.acts[a.0 as usize].cols
    }
}

impl Op {
    /// The weights this op reads.
    pub fn weights(&self) -> Vec<WeightId> {
        match self {
            Op::Embed { table, .. } => vec![*table],
            Op::RmsNorm { weight, .. } => vec![*weight],
            Op::MatMul { w, bias, .. } => std::iter::once(*w).chain(*bias).collect(),
            Op::Rope { freqs, .. } => freqs.iter().copied().collect(),
            _ => Vec::new(),
        }
    }

    /// The activation slots this op reads or writes.
    pub fn slots(&self) -> Vec<ActId> {
        match *self {
            Op::Embed { dst, .. } => vec![dst],
            Op::RmsNorm { x, dst, .. } | Op::MatMul { x, dst, .. } | Op::TakeLast { x, dst } => vec![x, dst],
            Op::Rope { x, .. } => vec![x],
            Op::KvStore { k, v, .. } => vec![k, v],
            Op::Attention { q, dst, .. } => vec![q, dst],
            Op::GatedAct { gate, up, .. } => vec![gate, up],
            Op::Add { a, b, dst } => vec![a, b, dst],
        }
    }

    /// The slots this op reads and the slots it writes.
    pub fn reads_writes(&self) -> (Vec<ActId>, Vec<ActId>) {
        match *self {
            Op::Embed { dst, .. } => (vec![], vec![dst]),
            Op::RmsNorm { x, dst, .. } | Op::MatMul { x, dst, .. } | Op::TakeLast { x, dst } => {
                (vec![x], vec![dst])
            }
            Op::Rope { x, .. } => (vec![x], vec![x]),
            Op::KvStore { k, v, .. } => (vec![k, v], vec![]),
            Op::Attention { q, dst, .. } => (vec![q], vec![dst]),
            Op::GatedAct { gate, up, .. } => (vec![gate, up], vec![gate]),
            Op::Add { a, b, dst } => (vec![a, b], vec![dst]),
        }
    }

    /// Whether the op reads and writes one slot where it cannot run in place.
    fn aliases(&self) -> bool {
        match *self {
            Op::MatMul { x, dst, .. } | Op::TakeLast { x, dst } => x == dst,
            Op::Attention { q, dst, .. } => q == dst,
            Op::GatedAct { gate, up, .. } => gate == up,
            _ => false,
        }
    }
}

impl Graph {
    /// Whether slot `a` is dead after op `i`: no later op reads it before one overwrites it,
    /// and it is not the logits. (A step's ops run once: a slot read by no later op is dead.)
    /// The executors' fusion planners ask this before dropping an intermediate result.
    pub fn dead_after(&self, i: usize, a: ActId) -> bool {
        if a == self.logits {
            return false;
        }
        for op in &self.ops[i + 1..] {
            let (r, w) = op.reads_writes();
            if r.contains(&a) {
                return false;
            }
            if w.contains(&a) {
                return true;
            }
        }
        true
    }

    /// The embedding table the step's token ids index (the first `Embed` op's), if any.
    pub fn embed_table(&self) -> Option<WeightId> {
        self.ops.iter().find_map(|op| match op {
            Op::Embed { table, .. } => Some(*table),
            _ => None,
        })
    }

    /// The checks every executor makes before accepting a graph: each op names one of the
    /// `n_weights` weights and existing slots, no op aliases slots it cannot run in place on,
    /// norm groups divide their rows, and every matrix product fits its weight, whose
    /// (row length, rows) `shape` gives.
    pub fn check(&self, n_weights: usize, shape: impl Fn(WeightId) -> (usize, usize)) -> Result<(), String> {
        if self.n_seqs == 0 || self.n_seqs > self.n_tokens {
            return Err(format!("a graph of {} tokens cannot take {} sequences", self.n_tokens, self.n_seqs));
        }
        for op in &self.ops {
            let weights_ok = op.weights().iter().all(|w| (w.0 as usize) < n_weights);
            let slots_ok = op.slots().iter().all(|a| (a.0 as usize) < self.acts.len());
            if !weights_ok || !slots_ok {
                return Err(format!("graph op {op:?} names an unknown weight or slot"));
            }
            if op.aliases() {
                return Err(format!("graph op {op:?} reads and writes the same slot"));
            }
            if let Op::RmsNorm { x, dst, group, .. } = *op {
                if group == 0 || !self.cols(x).is_multiple_of(group) || self.cols(x) != self.cols(dst) {
                    return Err(format!("rms norm op {op:?} does not fit its slots"));
                }
            }
            if let Op::Rope { n_rot, freqs: Some(w), .. } = *op {
                if shape(w) != (n_rot / 2, 1) {
                    return Err(format!("rope op {op:?}: the frequency factors are not n_rot/2 values"));
                }
            }
            if let Op::MatMul { w, x, dst, .. } = *op {
                let (k, n) = shape(w);
                if k != self.cols(x) || n != self.cols(dst) || self.rows(x) != self.rows(dst) {
                    return Err(format!(
                        "matmul with weight {} ({k} x {n}) does not fit {}x{} -> {}x{}",
                        w.0,
                        self.rows(x),
                        self.cols(x),
                        self.rows(dst),
                        self.cols(dst)
                    ));
                }
            }
        }
        Ok(())
    }
}
