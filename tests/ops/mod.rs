//! The op suite: every op of `wick::exec::Op`, every readback and every pattern the GPU
//! executors fuse, described once as data ([`Row`]s of small graphs, in `cases.rs` and
//! `fused.rs`) and run on any executor given, against the plain scalar reference of
//! `reference.rs`, on fresh random inputs. The runners (tests/ops_cpu.rs, ops_webgpu.rs,
//! ops_cuda.rs, web_ops.rs) are lists of rows.
//!
//! Inputs enter a graph through `Embed` from F32 tables (an exact copy on every executor);
//! the op under test writes the output slot, read back each step. Shapes cross the tile and
//! block boundaries of the GPU kernels: token rows 1 (decode), 2, 3, 7, 16, 17, 33, 64, 80
//! (prefill tiles are 16, 32 and 64 rows); k of 256 and 544 (k-quants 256 and 512); weight
//! row counts that are no multiple of a workgroup's; KV depths from one key to past 2048.
//!
//! Each run draws a new base seed (printed with every failure); `WICK_OPS_SEED=<seed>`
//! replays one.
//!
//! # Tolerances
//!
//! Error = max |got − ref| / max |ref| over the output (an argmax must pick a value within the
//! logits tolerance of the reference's largest). The reference makes the conversions that
//! define the result (q8 activations, f16 cache, f16 rounding before products with f16), so
//! what is left is the order of float sums, transcendental functions and, in fused kernels,
//! a q8 value that rounds the other way:
//!
//! | op | types | tolerance | why |
//! |---|---|---|---|
//! | Embed, Add, TakeLast, logits readback | all | 1e-6 | copies and one f32 operation per value |
//! | RmsNorm | F32 weight | 1e-5 | f64 sum of squares; only the reduction order differs |
//! | MatMul | F32, F16, BF16 | 1e-5 | same (f16/bf16-rounded) inputs; f32 sums of k products in another order (seen: 5e-7) |
//! | MatMul | every quantized type | 1e-5 | same q8 activations and integer block sums; per-block float scales summed in another order (seen: 4e-7); one q8 value rounded the other way would cost ~1e-3 |
//! | MatMul on CUDA, 256 tokens or more | every quantized type | 1e-3 | the same q8 activations, but each d·q and each dequantized weight rounded to f16 (2^-12 of the value at most) for cuBLAS's f16 tensor cores |
//! | Rope | normal, neox | 1e-4 | cos/sin of angles up to ~2000 rad: an f32 angle's ulp is 1e-4 |
//! | Rope, long context | frequency factors, YaRN | 1e-3 | positions ~1e5: the angle is defined in f32 (every executor computes the same f32 value for the fastest pairs; factors other than 1 and powers of two are tested at positions near 1000, where WGSL's division, 2.5 ulp, costs 3e-4), but YaRN's mix of two angles may be contracted into a fused multiply-add by a GPU compiler, and an ulp of an angle of ~700 rad (the mixed pairs) is 6e-5 |
//! | Attention | f16 cache | 2e-3 | exp and the f16 rounding of each probability can land an f16 ulp apart |
//! | KV shift, then attention | f16 cache | 2e-3 | the shifted keys are rotated in f32 (executors) or f64 (reference) and rounded to f16 again: a key value may land an f16 ulp apart, then as attention |
//! | GatedAct | silu | 1e-5 | one exp per value |
//! | GatedAct | gelu | 2e-3 | executors evaluate GELU through ggml's f16 table (f16 input and output) |
//! | fused patterns | mixed | 2e-3 | a fused RMSNorm feeds the q8 conversion values an ulp apart: a q8 value may round the other way |
//! | MatMul and anything else with a quantized weight, on WebGPU | quantized | 2e-3 | WGSL's division is accurate to 2.5 ulp, not correctly rounded: on a real GPU (an H100 through Vulkan) an activation that close to a q8 rounding boundary quantizes one step away from the reference, moving an output by up to ~1e-3 of the largest (seen: 3e-4 to 7e-4 on the H100; 5e-7 on lavapipe, whose division is exact). CUDA and the CPU divide exactly: 1e-5 |
//! | a whole layer | mixed | 1e-2 | five q8 conversions in a chain, each of which may round one value the other way (one such flip before the down projection moves an output by ~2e-3 of the largest) |
#![allow(dead_code)]

pub mod cases;
pub mod fused;
pub mod masked;
pub mod reference;
pub mod sequences;

use wick::exec::{
    blocks_for, identity_blocks, Executor, Graph, GraphId, KvShift, KvSpec, Op, Readback, SeqStep,
    StepOutput, WeightId,
};
use wick::quant::GgmlType;

use crate::support::tensors::{f32_bytes, random_bytes};
use crate::support::Rng;
use reference::Reference;

/// The tolerances of the table above.
pub mod tol {
    /// Embed, Add, TakeLast and the logits readbacks.
    pub const COPY: f32 = 1e-6;
    /// RMSNorm.
    pub const NORM: f32 = 1e-5;
    /// Matrix products with F32, F16 or BF16 weights.
    pub const MATMUL_FLOAT: f32 = 1e-5;
    /// Matrix products with quantized weights.
    pub const MATMUL_QUANT: f32 = 1e-5;
    /// Matrix products with quantized weights that CUDA dequantizes to f16 for cuBLAS (from
    /// 256 tokens): the q8 activations and the weights each rounded to f16 (see the table).
    pub const MATMUL_DEQ: f32 = 1e-3;
    /// RoPE.
    pub const ROPE: f32 = 1e-4;
    /// RoPE with frequency factors or YaRN at positions near 1e5.
    pub const ROPE_LONG: f32 = 1e-3;
    /// Attention over the f16 cache.
    pub const ATTENTION: f32 = 2e-3;
    /// SiLU-gated product.
    pub const SILU: f32 = 1e-5;
    /// GELU-gated product.
    pub const GELU: f32 = 2e-3;
    /// Fused patterns.
    pub const FUSED: f32 = 2e-3;
    /// A whole layer (at the size of its output; with a large residual, [`FUSED`]).
    pub const LAYER: f32 = 1e-2;
    /// Anything with a quantized weight, on WebGPU: WGSL's q8 conversion may round one value
    /// the other way (see the table).
    pub const WGSL_Q8: f32 = 2e-3;

    /// The matrix product tolerance for weights of type `t`.
    pub fn matmul(t: wick::quant::GgmlType) -> f32 {
        if t.is_quantized() {
            MATMUL_QUANT
        } else {
            MATMUL_FLOAT
        }
    }
}

/// Token rows that cross the GPU executors' tiles (decode is 1 row; prefill tiles 16/32/64).
pub const ROWS: [usize; 9] = [1, 2, 3, 7, 16, 17, 33, 64, 80];

/// Rows of the F32 input tables (token ids are drawn below it).
pub const VOCAB: usize = 97;

/// What a step must give.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The readback, within the row's tolerance of the reference's.
    Close(Readback),
    /// An error, as the reference gives.
    Error,
}

/// One sequence of a step: tokens at a position, through a block table (empty: the cache's
/// blocks in order).
pub struct StepSeq {
    tokens: Vec<u32>,
    pos: usize,
    blocks: Vec<u32>,
    /// A token mask for the argmax readback ([`SeqStep::mask`]).
    mask: Option<Vec<u32>>,
}

/// One step of a case: a graph run on the tokens of one or more sequences.
pub struct Step {
    graph: usize,
    seqs: Vec<StepSeq>,
    expect: Expect,
    /// Not a graph step but a shift of the cache's keys ([`Case::shift`]).
    shift: Option<KvShift>,
    /// Not a graph step but a copy of blocks through the host ([`Case::copy_blocks`]).
    copy: Option<(Vec<u32>, Vec<u32>)>,
}

impl Step {
    /// The step as an executor takes it; `n_blocks`: the cache's (for the default table).
    fn seqs<'a>(&'a self, identity: &'a [u32]) -> Vec<SeqStep<'a>> {
        self.seqs
            .iter()
            .map(|s| SeqStep {
                tokens: &s.tokens,
                pos: s.pos,
                blocks: if s.blocks.is_empty() { identity } else { &s.blocks },
                mask: s.mask.as_deref(),
            })
            .collect()
    }
    fn describe(&self) -> String {
        if let Some(sh) = &self.shift {
            return format!("shift of blocks {:?} by {}", sh.blocks, sh.delta);
        }
        if let Some((from, to)) = &self.copy {
            return format!("copy of blocks {from:?} to {to:?}");
        }
        let parts: Vec<String> =
            self.seqs.iter().map(|s| format!("pos {}, {} rows", s.pos, s.tokens.len())).collect();
        parts.join("; ")
    }
}

/// A case built from a row's description and a seed: weights, a cache, graphs and steps.
pub struct Case {
    rng: Rng,
    weights: Vec<(GgmlType, Vec<u64>, Vec<u8>)>,
    kv: KvSpec,
    graphs: Vec<Graph>,
    steps: Vec<Step>,
}

impl Case {
    fn new(seed: u64) -> Case {
        let kv = KvSpec { n_blocks: blocks_for(256), k_dims: vec![], v_dims: vec![] };
        Case { rng: Rng::new(seed), weights: Vec::new(), kv, graphs: Vec::new(), steps: Vec::new() }
    }

    /// A random weight of `n` rows of `k` values of type `t` (1-D when `n` is 1).
    pub fn weight(&mut self, t: GgmlType, k: usize, n: usize) -> WeightId {
        let bytes = random_bytes(t, k * n, &mut self.rng);
        let dims = if n == 1 { vec![k as u64] } else { vec![k as u64, n as u64] };
        self.weights.push((t, dims, bytes));
        WeightId(self.weights.len() as u32 - 1)
    }

    /// A weight of model-like size: values uniform with variance 1/k, quantized to `t` by
    /// wick's quantizer, so that a product keeps its input's magnitude. (Random block bytes
    /// give weights up to ±2.8, and a layer of them attention scores in the hundreds: its
    /// softmax then turns a last-bit difference into a different key.)
    pub fn model_weight(&mut self, t: GgmlType, k: usize, n: usize) -> WeightId {
        let v = self.rng.vec(k * n, (3.0 / k as f32).sqrt());
        let mut bytes = Vec::new();
        wick::quant::quantize_weights(t, &v, &mut bytes).unwrap();
        self.weights.push((t, vec![k as u64, n as u64], bytes));
        WeightId(self.weights.len() as u32 - 1)
    }

    /// A 1-D F32 weight holding `values`.
    pub fn values(&mut self, values: &[f32]) -> WeightId {
        self.weights.push((GgmlType::F32, vec![values.len() as u64], f32_bytes(values)));
        WeightId(self.weights.len() as u32 - 1)
    }

    /// An F32 input table: [`VOCAB`] rows of `cols` values in [-scale, scale).
    pub fn table(&mut self, cols: usize, scale: f32) -> WeightId {
        let v = self.rng.vec(cols * VOCAB, scale);
        self.weights.push((GgmlType::F32, vec![cols as u64, VOCAB as u64], f32_bytes(&v)));
        WeightId(self.weights.len() as u32 - 1)
    }

    /// The KV cache: `n_ctx` positions (whole blocks), one layer per (key, value) width.
    pub fn kv(&mut self, n_ctx: usize, layers: &[usize]) {
        self.kv = KvSpec { n_blocks: blocks_for(n_ctx), k_dims: layers.to_vec(), v_dims: layers.to_vec() };
    }

    /// Add a graph; its index for [`Case::step`].
    pub fn graph(&mut self, g: Graph) -> usize {
        self.graphs.push(g);
        self.graphs.len() - 1
    }

    /// A step of graph `graph` on random tokens of several sequences, each `(pos, n_tokens,
    /// block table)`.
    pub fn step_seqs(&mut self, graph: usize, seqs: &[(usize, usize, Vec<u32>)], expect: Expect) {
        let seqs = seqs
            .iter()
            .map(|(pos, n, blocks)| StepSeq {
                tokens: (0..*n).map(|_| self.rng.below(VOCAB as u64) as u32).collect(),
                pos: *pos,
                blocks: blocks.clone(),
                mask: None,
            })
            .collect();
        self.steps.push(Step { graph, seqs, expect, shift: None, copy: None });
    }

    /// A step of graph `graph` at `pos` on random tokens below `vocab`.
    pub fn step_with(&mut self, graph: usize, pos: usize, vocab: usize, expect: Expect) {
        let n = self.graphs[graph].n_tokens;
        let tokens = (0..n).map(|_| self.rng.below(vocab as u64) as u32).collect();
        self.steps.push(Step {
            graph,
            seqs: vec![StepSeq { tokens, pos, blocks: Vec::new(), mask: None }],
            expect,
            shift: None,
            copy: None,
        });
    }

    /// A step of graph `graph` at `pos` on the given tokens, compared on every row.
    pub fn step_tokens(&mut self, graph: usize, pos: usize, tokens: &[u32]) {
        let expect = Expect::Close(Readback::AllLogits);
        self.steps.push(Step {
            graph,
            seqs: vec![StepSeq { tokens: tokens.to_vec(), pos, blocks: Vec::new(), mask: None }],
            expect,
            shift: None,
            copy: None,
        });
    }

    /// Give the sequences of the last step these token masks (in order) and read back their
    /// argmax: each token must be the host's greedy pick (`wick::sampling::argmax` of the
    /// executor's own logits with the ids a mask leaves out set to -inf, as
    /// `wick::constrain::Guide::mask` sets them).
    pub fn masks(&mut self, masks: Vec<Option<Vec<u32>>>) {
        let step = self.steps.last_mut().expect("a step to mask");
        assert_eq!(step.seqs.len(), masks.len(), "a mask (or None) per sequence");
        step.expect = Expect::Close(Readback::Argmax);
        for (s, m) in step.seqs.iter_mut().zip(masks) {
            s.mask = m;
        }
    }

    /// Shift the cache's keys ([`Executor::shift_kv`]) between two steps; the frequency
    /// factors' weight ids are the case's.
    pub fn shift(&mut self, shift: KvShift) {
        self.steps.push(Step {
            graph: 0,
            seqs: Vec::new(),
            expect: Expect::Error,
            shift: Some(shift),
            copy: None,
        });
    }

    /// Read blocks `from` of the cache ([`Executor::read_kv_blocks`], compared with the
    /// reference's bytes) and write the reference's bytes into blocks `to`
    /// ([`Executor::write_kv_blocks`]), between two steps: a prompt cache saved on the CPU
    /// and restored on the executor.
    pub fn copy_blocks(&mut self, from: Vec<u32>, to: Vec<u32>) {
        self.steps.push(Step {
            graph: 0,
            seqs: Vec::new(),
            expect: Expect::Error,
            shift: None,
            copy: Some((from, to)),
        });
    }

    /// A step of graph `graph` at `pos` on random input rows, compared on every row.
    pub fn step(&mut self, graph: usize, pos: usize) {
        self.step_with(graph, pos, VOCAB, Expect::Close(Readback::AllLogits));
    }
}

/// A graph of `rows` tokens whose inputs are embedded from `inputs` (table, width): one slot
/// each, handed to `f`, which pushes the ops under test and returns the output slot.
pub fn graph(
    rows: usize,
    inputs: &[(WeightId, usize)],
    f: impl FnOnce(&mut Graph, &[wick::exec::ActId]) -> wick::exec::ActId,
) -> Graph {
    let mut g = Graph::new(rows);
    let slots: Vec<_> = inputs
        .iter()
        .map(|&(table, cols)| {
            let s = g.act(wick::exec::Rows::All, cols);
            g.push(Op::Embed { table, dst: s, scale: 1.0 });
            s
        })
        .collect();
    g.logits = f(&mut g, &slots);
    g
}

/// One row of the suite: a name, its tolerance, the weight types it needs, and how to build
/// its case from a seed.
pub struct Row {
    /// Unique within the suite; printed with each result.
    pub name: String,
    /// Max |got − ref| / max |ref|.
    pub tol: f32,
    /// Weight types the executor must support (the row is skipped otherwise).
    pub types: Vec<GgmlType>,
    build: Box<dyn Fn(&mut Case)>,
}

/// A row (see [`Row`]).
pub fn row(name: String, tol: f32, types: &[GgmlType], build: impl Fn(&mut Case) + 'static) -> Row {
    Row { name, tol, types: types.to_vec(), build: Box::new(build) }
}

/// Row `r`'s tolerance on executor `executor`: the table's, except where the executor's
/// arithmetic is looser than the reference's by its language's rules (see the table).
pub fn tolerance(executor: &str, r: &Row) -> f32 {
    let quantized = r.types.iter().any(|t| t.is_quantized());
    if executor == "webgpu" && quantized {
        r.tol.max(tol::WGSL_Q8)
    } else {
        r.tol
    }
}

/// The base seed of this run: `WICK_OPS_SEED`, else from the clock.
pub fn base_seed() -> u64 {
    if let Some(s) = std::env::var("WICK_OPS_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    #[cfg(target_arch = "wasm32")]
    return js_sys::Date::now() as u64;
    #[cfg(not(target_arch = "wasm32"))]
    return std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
}

/// A row's seed: the base seed mixed with the row's name (so rows draw different inputs).
fn row_seed(base: u64, name: &str) -> u64 {
    name.bytes().fold(base, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3))
}

/// Print a line where the test runner shows it (stderr natively, the console in a browser).
pub fn say(line: &str) {
    #[cfg(target_arch = "wasm32")]
    wasm_bindgen_test::console_log!("{line}");
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{line}");
}

/// Load a case's weights into `e` in bounded chunks (as the loader sends them); their ids.
async fn load(e: &mut dyn Executor, c: &Case) -> Vec<WeightId> {
    let mut ids = Vec::new();
    for (i, (t, dims, bytes)) in c.weights.iter().enumerate() {
        let id = e.alloc_weight(&format!("w{i}"), *t, dims).unwrap();
        for (j, chunk) in bytes.chunks(4096).enumerate() {
            e.write_weight(id, (j * 4096) as u64, chunk).unwrap();
        }
        ids.push(id);
    }
    e.finish_upload().await.unwrap();
    ids
}

/// `g` with its weight ids replaced by the executor's (`ids[local]`).
fn remap(g: &Graph, ids: &[WeightId]) -> Graph {
    let m = |w: WeightId| ids[w.0 as usize];
    let mut g = g.clone();
    for op in &mut g.ops {
        match op {
            Op::Embed { table, .. } => *table = m(*table),
            Op::RmsNorm { weight, .. } => *weight = m(*weight),
            Op::MatMul { w, bias, .. } => {
                *w = m(*w);
                *bias = bias.map(m);
            }
            Op::Rope { freqs, .. } => *freqs = freqs.map(m),
            _ => {}
        }
    }
    g
}

/// `s` with the frequency factors' weight ids replaced by the executor's.
fn remap_shift(s: &KvShift, ids: &[WeightId]) -> KvShift {
    let mut s = s.clone();
    for r in s.layers.iter_mut().flatten() {
        r.freqs = r.freqs.map(|w| ids[w.0 as usize]);
    }
    s
}

/// The f16 values of KV block bytes ([`wick::exec::kv_io_pieces`]'s layout).
fn f16_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
}

/// Max |got − want| / max |want|, and where.
fn error(want: &[f32], got: &[f32]) -> (f32, usize) {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let (mut worst, mut at) = (0f32, 0);
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        let e = (a - b).abs();
        if e > worst || e.is_nan() {
            worst = if e.is_nan() { f32::INFINITY } else { e };
            at = i;
        }
    }
    (worst / scale, at)
}

/// Run one row on `e`, checking every step against the reference; the worst error.
async fn check_row(e: &mut dyn Executor, r: &Row, seed: u64, base: u64) -> f32 {
    let mut c = Case::new(seed);
    (r.build)(&mut c);
    let replay = format!("(replay: WICK_OPS_SEED={base})");
    let tol = tolerance(e.name(), r);
    let mut refx = Reference::new();
    let ref_ids = load(&mut refx, &c).await;
    let ids = load(e, &c).await;
    let kv = e.alloc_kv(&c.kv).unwrap();
    let ref_kv = refx.alloc_kv(&c.kv).unwrap();
    let graphs: Vec<GraphId> = c.graphs.iter().map(|g| e.compile(&remap(g, &ids)).unwrap()).collect();
    let ref_graphs: Vec<GraphId> =
        c.graphs.iter().map(|g| refx.compile(&remap(g, &ref_ids)).unwrap()).collect();
    let mut worst = 0f32;
    let identity = identity_blocks(c.kv.n_blocks);
    for (i, s) in c.steps.iter().enumerate() {
        let what = format!("{} step {i} ({})", r.name, s.describe());
        if let Some(sh) = &s.shift {
            refx.shift_kv(ref_kv, &remap_shift(sh, &ref_ids)).unwrap();
            e.shift_kv(kv, &remap_shift(sh, &ids)).unwrap_or_else(|err| panic!("{what}: {err}"));
            continue;
        }
        if let Some((from, to)) = &s.copy {
            // In two reads and three writes, cut off the copies' boundaries (4-byte aligned).
            let total = wick::exec::kv_io_bytes(&c.kv.k_dims, &c.kv.v_dims, from.len());
            let cut = (total / 3) & !3;
            let want = refx.read_kv_blocks(ref_kv, from, 0..total).await.unwrap();
            let mut got =
                e.read_kv_blocks(kv, from, 0..cut).await.unwrap_or_else(|err| panic!("{what}: {err}"));
            got.extend(
                e.read_kv_blocks(kv, from, cut..total).await.unwrap_or_else(|err| panic!("{what}: {err}")),
            );
            assert_eq!(got.len(), want.len(), "{what}: sizes differ");
            let (err, at) = error(&f16_values(&want), &f16_values(&got));
            assert!(err <= tol, "{what}: read error {err:.2e} > {tol:.0e} at value {at} {replay}");
            worst = worst.max(err);
            refx.write_kv_blocks(ref_kv, to, 0, &want).unwrap();
            for (a, b) in [(0, cut), (cut, 2 * cut), (2 * cut, total)] {
                e.write_kv_blocks(kv, to, a, &want[a..b]).unwrap_or_else(|err| panic!("{what}: {err}"));
            }
            continue;
        }
        let seqs = s.seqs(&identity);
        let rb = match s.expect {
            Expect::Close(rb) => rb,
            Expect::Error => {
                let got = e.run(graphs[s.graph], kv, &seqs, Readback::Argmax).await;
                let want = refx.run(ref_graphs[s.graph], ref_kv, &seqs, Readback::Argmax).await;
                assert!(want.is_err(), "{what}: the reference accepts the step");
                assert!(got.is_err(), "{what}: {} accepts a step that is an error {replay}", e.name());
                continue;
            }
        };
        let ref_rb = if rb == Readback::Argmax { Readback::LastLogits } else { rb };
        // The logits readbacks take no token masks.
        let unmasked: Vec<SeqStep> = seqs.iter().map(|s| SeqStep { mask: None, ..*s }).collect();
        let want = refx.run(ref_graphs[s.graph], ref_kv, &unmasked, ref_rb).await.unwrap();
        // Every other masked step gives its masks through `run_with`'s host work (done while
        // the device runs the forward pass) rather than with the sequences.
        let got = if seqs.iter().any(|s| s.mask.is_some()) && i % 2 == 1 {
            let masks: Vec<Option<Vec<u32>>> = seqs.iter().map(|s| s.mask.map(<[u32]>::to_vec)).collect();
            let mut calls = 0;
            let mut work = || {
                calls += 1;
                Ok(masks.clone())
            };
            let got = e.run_with(graphs[s.graph], kv, &unmasked, rb, &mut work).await;
            assert_eq!(calls, 1, "{what}: run_with calls its work once");
            got
        } else {
            e.run(graphs[s.graph], kv, &seqs, rb).await
        };
        let got: StepOutput = got.unwrap_or_else(|err| panic!("{what}: {err}"));
        let logits = if rb == Readback::Argmax {
            // The device's argmax is the argmax of its own logits (rerunning the step writes
            // the same cache rows), and a largest reference value within tolerance; under a
            // token mask, exactly the host's greedy pick from its own logits.
            let own = e.run(graphs[s.graph], kv, &unmasked, Readback::LastLogits).await.unwrap().logits;
            assert_eq!(got.tokens.len(), seqs.len(), "{what}: an argmax readback gives a token per sequence");
            let n_vocab = own.len() / seqs.len();
            for (j, &t) in got.tokens.iter().enumerate() {
                let (own, want) = (&own[j * n_vocab..][..n_vocab], &want.logits[j * n_vocab..][..n_vocab]);
                if let Some(m) = seqs[j].mask {
                    let (own, want) = (masked::apply(own, m), masked::apply(want, m));
                    let host = wick::sampling::argmax(&own);
                    assert_eq!(
                        t, host,
                        "{what}: sequence {j}: masked argmax {t} on the device, {host} on the host {replay}"
                    );
                    let scale = want.iter().filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
                    let best = want[reference::argmax(&want) as usize];
                    assert!(
                        want[t as usize] >= best - tol * scale,
                        "{what}: sequence {j}: masked argmax {t} ({}) is not the largest allowed ({best}) {replay}",
                        want[t as usize]
                    );
                    continue;
                }
                assert_eq!(
                    t,
                    reference::argmax(own),
                    "{what}: argmax on the device differs from its logits {replay}"
                );
                let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                let best = want[reference::argmax(want) as usize];
                assert!(
                    want[t as usize] >= best - tol * scale,
                    "{what}: argmax {t} ({}) is not the largest ({best}) {replay}",
                    want[t as usize]
                );
            }
            own
        } else {
            got.logits
        };
        assert_eq!(logits.len(), want.logits.len(), "{what}: output sizes differ");
        let (err, at) = error(&want.logits, &logits);
        assert!(
            err <= tol,
            "{what}: error {err:.2e} > {:.0e} at {at}: want {} got {} {replay}",
            tol,
            want.logits[at],
            logits[at]
        );
        worst = worst.max(err);
    }
    worst
}

/// Every step's read-back values of row `r` built from `seed` on `e` (for diagnostics that
/// print executors side by side).
pub async fn outputs(e: &mut dyn Executor, r: &Row, seed: u64) -> Vec<Vec<f32>> {
    let mut c = Case::new(seed);
    (r.build)(&mut c);
    let ids = load(e, &c).await;
    let kv = e.alloc_kv(&c.kv).unwrap();
    let graphs: Vec<GraphId> = c.graphs.iter().map(|g| e.compile(&remap(g, &ids)).unwrap()).collect();
    let mut out = Vec::new();
    let identity = identity_blocks(c.kv.n_blocks);
    for s in &c.steps {
        if let Some(sh) = &s.shift {
            e.shift_kv(kv, &remap_shift(sh, &ids)).unwrap();
            continue;
        }
        if let Some((from, to)) = &s.copy {
            let total = wick::exec::kv_io_bytes(&c.kv.k_dims, &c.kv.v_dims, from.len());
            let bytes = e.read_kv_blocks(kv, from, 0..total).await.unwrap();
            out.push(f16_values(&bytes));
            e.write_kv_blocks(kv, to, 0, &bytes).unwrap();
            continue;
        }
        let rb = match s.expect {
            Expect::Close(Readback::Argmax) | Expect::Error => Readback::LastLogits,
            Expect::Close(rb) => rb,
        };
        out.push(
            e.run(graphs[s.graph], kv, &s.seqs(&identity), rb).await.map(|o| o.logits).unwrap_or_default(),
        );
    }
    out
}

/// Run `rows` on the executor `make` gives (None: skipped, with the reason already said);
/// prints each row's error and the count of rows run.
pub async fn run_rows(runner: &str, family: &str, exec: Option<Box<dyn Executor>>, rows: Vec<Row>) {
    let Some(mut e) = exec else { return };
    let base = base_seed();
    let (mut ran, mut skipped) = (0, 0);
    for r in &rows {
        if !r.types.iter().all(|&t| e.supports_type(t)) {
            skipped += 1;
            continue;
        }
        let err = check_row(e.as_mut(), r, row_seed(base, &r.name), base).await;
        say(&format!("{runner} {}: max error {err:.2e} (tolerance {:.0e})", r.name, tolerance(e.name(), r)));
        ran += 1;
    }
    say(&format!(
        "{runner} {family}: {ran} rows passed, {skipped} skipped (types not supported), seed {base}"
    ));
}

/// The errors every executor must give (and stay usable after): a token id outside the
/// vocabulary, a step past the cache, a step with the wrong token count, a graph whose matrix
/// product does not fit its weight.
pub async fn errors_are_errors(exec: Option<Box<dyn Executor>>) {
    let Some(mut e) = exec else { return };
    let mut c = Case::new(base_seed());
    let t = c.table(8, 1.0);
    let w = c.weight(GgmlType::F32, 8, 5);
    let ids = load(e.as_mut(), &c).await;
    let g = remap(&graph(1, &[(t, 8)], |_, s| s[0]), &ids);
    let id = e.compile(&g).unwrap();
    let kv = e.alloc_kv(&KvSpec { n_blocks: 1, k_dims: vec![2], v_dims: vec![2] }).unwrap();
    let name = e.name();
    let one = |tokens: &'static [u32], pos: usize, blocks: &'static [u32]| {
        [SeqStep { tokens, pos, blocks, mask: None }]
    };
    let masked = |mask: &'static [u32]| [SeqStep { tokens: &[1], pos: 0, blocks: &[0], mask: Some(mask) }];
    assert!(
        e.run(id, kv, &masked(&[1, 1]), Readback::Argmax).await.is_err(),
        "{name}: a token mask of two words for 8 logits"
    );
    assert!(
        e.run(id, kv, &masked(&[1]), Readback::LastLogits).await.is_err(),
        "{name}: a token mask with the logits readback"
    );
    assert_eq!(
        e.run(id, kv, &masked(&[1 << 5]), Readback::Argmax).await.map(|o| o.tokens).ok(),
        Some(vec![5]),
        "{name}: a token mask allowing one id"
    );
    // The same through run_with's host work: its masks are checked as a step's, its error
    // fails the step, and the executor stays usable.
    let work_mask =
        |m: Vec<u32>| move || -> wick::Result<Vec<Option<Vec<u32>>>> { Ok(vec![Some(m.clone())]) };
    let step = one(&[1], 0, &[0]);
    assert!(
        e.run_with(id, kv, &step, Readback::Argmax, &mut work_mask(vec![1, 1])).await.is_err(),
        "{name}: run_with: a token mask of two words for 8 logits"
    );
    assert!(
        e.run_with(id, kv, &step, Readback::LastLogits, &mut work_mask(vec![1])).await.is_err(),
        "{name}: run_with: a token mask with the logits readback"
    );
    let mut fails =
        || -> wick::Result<Vec<Option<Vec<u32>>>> { Err(wick::Error::Grammar("no token".into())) };
    assert!(
        matches!(e.run_with(id, kv, &step, Readback::Argmax, &mut fails).await, Err(wick::Error::Grammar(_))),
        "{name}: run_with: the work's error fails the step"
    );
    assert_eq!(
        e.run_with(id, kv, &step, Readback::Argmax, &mut work_mask(vec![1 << 6]))
            .await
            .map(|o| o.tokens)
            .ok(),
        Some(vec![6]),
        "{name}: run_with: a token mask allowing one id"
    );
    let mut none = || -> wick::Result<Vec<Option<Vec<u32>>>> { Ok(Vec::new()) };
    assert_eq!(
        e.run_with(id, kv, &step, Readback::LastLogits, &mut none).await.map(|o| o.logits.len()).ok(),
        Some(8),
        "{name}: run_with with the logits readback and no masks"
    );
    assert!(
        e.run(id, kv, &one(&[VOCAB as u32], 0, &[0]), Readback::Argmax).await.is_err(),
        "{name}: token past the vocabulary"
    );
    assert!(
        e.run(id, kv, &one(&[1], 64, &[0]), Readback::Argmax).await.is_err(),
        "{name}: step past the cache"
    );
    assert!(
        e.run(id, kv, &one(&[1], 0, &[1]), Readback::Argmax).await.is_err(),
        "{name}: block past the cache"
    );
    assert!(
        e.run(id, kv, &one(&[1, 2], 0, &[0]), Readback::Argmax).await.is_err(),
        "{name}: two tokens for a one-token graph"
    );
    assert!(
        e.run(id, kv, &one(&[1], 0, &[0]), Readback::Argmax).await.is_ok(),
        "{name}: a good step after errors"
    );
    let bad = remap(
        &graph(1, &[(t, 8)], |g, s| {
            let dst = g.act(wick::exec::Rows::All, 6);
            g.push(Op::MatMul { w, x: s[0], dst, bias: None });
            dst
        }),
        &ids,
    );
    assert!(e.compile(&bad).is_err(), "{name}: a matmul of 5 rows into 6 columns compiles");
}

/// One `#[test]` per row family (natively): `name => executor, family(),`. The executor
/// expression gives an `Option<Box<dyn Executor>>` (None skips, after saying why). A
/// `row_count` test prints how many rows the runner lists (before skipping unsupported types).
#[macro_export]
macro_rules! op_rows {
    ($runner:literal; $($name:ident => $exec:expr, $rows:expr;)*) => {
        $(
            #[test]
            fn $name() {
                $crate::support::block_on($crate::ops::run_rows($runner, stringify!($name), $exec, $rows));
            }
        )*
        #[test]
        fn row_count() {
            let n = 0 $(+ $rows.len())*;
            $crate::ops::say(&format!("{}: {n} rows in {} families", $runner, [$(stringify!($name)),*].len()));
        }
    };
}

/// One `#[wasm_bindgen_test]` per row family, in the browser: `name => executor, family(),`
/// where the executor expression is a future of `Option<Box<dyn Executor>>`.
#[macro_export]
macro_rules! browser_op_rows {
    ($runner:literal; $($name:ident => $exec:expr, $rows:expr;)*) => {$(
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            $crate::ops::run_rows($runner, stringify!($name), $exec.await, $rows).await;
        }
    )*};
}
