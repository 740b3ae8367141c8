//! The kernels: WGSL sources (one file per family under `shaders/`), composed into one module
//! per [`Kernel`] by the template step (template.rs) with the kernel's parameter struct
//! (params.rs), and compiled into pipelines once per kernel.

use std::collections::HashMap;

use super::buffers::err;
use super::device::scoped;
use super::params::{self, Params};
use super::template::{lines, suffixed, Template};
use crate::quant::GgmlType;
use crate::Result;

const HALF_F16: &str = include_str!("shaders/half_f16.wgsl");
const HALF_F32: &str = include_str!("shaders/half_f32.wgsl");
const COMMON: &str = include_str!("shaders/common.wgsl");
const WEIGHTS: &str = include_str!("shaders/weights.wgsl");
const WVIEW_F16: &str = include_str!("shaders/wview_f16.wgsl");
const WVIEW_F32: &str = include_str!("shaders/wview_f32.wgsl");
const DEQUANT: &str = include_str!("shaders/dequant.wgsl");
const EMBED: &str = include_str!("shaders/embed.wgsl");
const QUANTIZE: &str = include_str!("shaders/quantize.wgsl");
const QUANT_PIECE: &str = include_str!("shaders/quant_piece.wgsl");
const NORM_QUANT: &str = include_str!("shaders/norm_quant.wgsl");
const PRODUCTS: &str = include_str!("shaders/products.wgsl");
const MATVEC: &str = include_str!("shaders/matvec.wgsl");
const MATVEC_SUBGROUP: &str = include_str!("shaders/matvec_subgroup.wgsl");
const MATVEC_LEGACY: &str = include_str!("shaders/matvec_legacy.wgsl");
const MATVEC_KQUANT: &str = include_str!("shaders/matvec_kquant.wgsl");
const MATVEC_FLOAT: &str = include_str!("shaders/matvec_float.wgsl");
const MATVEC_GATED: &str = include_str!("shaders/matvec_gated.wgsl");
const MATVEC_MULTI: &str = include_str!("shaders/matvec_multi.wgsl");
const MATVEC_SEGMENT: &str = include_str!("shaders/matvec_segment.wgsl");
const MATMUL_TILED: &str = include_str!("shaders/matmul_tiled.wgsl");
const MATMUL_TILED_PIECES: &str = include_str!("shaders/matmul_tiled_pieces.wgsl");
const MATMUL_TILED_FLOAT: &str = include_str!("shaders/matmul_tiled_float.wgsl");
const MATMUL_TILE_STORE: &str = include_str!("shaders/matmul_tile_store.wgsl");
const RMS_NORM: &str = include_str!("shaders/rms_norm.wgsl");
const ROPE: &str = include_str!("shaders/rope.wgsl");
const ROPE_MATH: &str = include_str!("shaders/rope_math.wgsl");
const ROPE_PAIR: &str = include_str!("shaders/rope_pair.wgsl");
const ROPE_TABLE: &str = include_str!("shaders/rope_table.wgsl");
const ROPE_KV: &str = include_str!("shaders/rope_kv.wgsl");
const KV_STORE: &str = include_str!("shaders/kv_store.wgsl");
const KV_SHIFT: &str = include_str!("shaders/kv_shift.wgsl");
const ATTENTION: &str = include_str!("shaders/attention.wgsl");
const ATTENTION_KEYS: &str = include_str!("shaders/attention_keys.wgsl");
const ATTENTION_SPLIT: &str = include_str!("shaders/attention_split.wgsl");
const ATTENTION_COMBINE: &str = include_str!("shaders/attention_combine.wgsl");
const ATTENTION_TILED: &str = include_str!("shaders/attention_tiled.wgsl");
const GATED_ACT: &str = include_str!("shaders/gated_act.wgsl");
const ADD: &str = include_str!("shaders/add.wgsl");
const ARGMAX: &str = include_str!("shaders/argmax.wgsl");
const STEP: &str = include_str!("shaders/step.wgsl");
const TAKE_LAST: &str = include_str!("shaders/take_last.wgsl");

/// Weight types the WebGPU executor runs (matrix products and embeddings): every weight type.
pub const SUPPORTED: [GgmlType; 13] = GgmlType::WEIGHT_TYPES;

/// The activation format a quantized weight type's matrix product reads (quantize.wgsl): the
/// shared [`ActQuant`] of the fusion planner; WebGPU uses its `Q8_1` (32-value blocks with d, s
/// and Σq: the legacy types) and `Q8K` (256-value blocks with d and the sums of each 16
/// values: the K-quants).
pub use crate::exec::fuse::ActQuant;

// The WebGPU executor's view of the shared enum (inherent methods may live in any module of
// the crate): its kernels have no plain q8_0 activation format, so `Q8_0` reads as `Q8_1`.
impl ActQuant {
    /// For weights of type `t` on WebGPU; None for the float types.
    pub fn for_type(t: GgmlType) -> Option<ActQuant> {
        match t {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => None,
            GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => {
                Some(ActQuant::Q8K)
            }
            _ => Some(ActQuant::Q8_1),
        }
    }
    /// Values per block.
    pub fn block(self) -> usize {
        match self {
            ActQuant::Q8_0 | ActQuant::Q8_1 => 32,
            ActQuant::Q8K => 256,
        }
    }
    /// u32 words of a block's record (after all the quants).
    pub fn meta_words(self) -> usize {
        match self {
            ActQuant::Q8_0 | ActQuant::Q8_1 => 4,
            ActQuant::Q8K => 20,
        }
    }
    /// Blocks one quantize workgroup covers.
    pub fn blocks_per_group(self) -> usize {
        match self {
            ActQuant::Q8_0 | ActQuant::Q8_1 => 8,
            ActQuant::Q8K => 1,
        }
    }
}

/// Values of a weight row of type `t` one matvec task covers (matvec.wgsl): 16 weight
/// bytes of quants for most types. A row of `k` values has `k / task_values(t)` tasks.
pub fn task_values(t: GgmlType) -> usize {
    match t {
        GgmlType::F32 => 4,
        GgmlType::F16 | GgmlType::BF16 => 8,
        GgmlType::Q8_0 => 16,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => 32,
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 32,
        _ => 64,
    }
}

/// How a matrix product is spread over invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatVec {
    /// One invocation per weight row (CPU-emulated adapters).
    Rows,
    /// 64 invocations cooperate on `rows` (1 to 4) weight rows, reducing through workgroup
    /// memory or, with `subgroup`, subgroup operations (GPUs).
    Coop { rows: u8, subgroup: bool },
}

/// One compute kernel: a WGSL module and its entry point (see [`Kernel::source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Embedding rows of a table of this type (embed.wgsl).
    Embed(GgmlType),
    /// Quantize activations for matrix products (quantize.wgsl).
    Quantize(ActQuant),
    /// Matrix product with weights of this type (matvec.wgsl).
    MatMul(GgmlType, MatVec),
    /// Gate and up products with SiLU (matvec_gated.wgsl; cooperative kernels only).
    MatMulGated(GgmlType, MatVec),
    /// Prefill product in tiles with quantized weights of this type (matmul_tiled.wgsl).
    MatMulTiled(GgmlType, TileShape),
    /// Three products of one input (matvec_multi.wgsl): types and rows per workgroup of each,
    /// and whether to reduce with subgroup operations.
    MatMulMulti([GgmlType; 3], [u8; 3], bool),
    /// RMSNorm (rms_norm.wgsl); `true`: reading another slot than the one it writes.
    RmsNorm(bool),
    /// RMSNorm of whole rows into another slot, quantized too (norm_quant.wgsl).
    NormQuant(ActQuant),
    /// RoPE in place (rope.wgsl).
    Rope,
    /// The sines and cosines of a step's RoPE angles (rope_table.wgsl).
    RopeTable,
    /// RoPE of queries and keys and the KV store in one dispatch (rope_kv.wgsl).
    RopeKv,
    /// Rows into the f16 KV cache (kv_store.wgsl).
    KvStore,
    /// Keys of a few cache blocks rotated to other positions (kv_shift.wgsl).
    KvShift,
    /// Attention over the KV cache, one workgroup per row and head (attention.wgsl): head
    /// sizes the other attention kernels do not take (not a multiple of 4).
    Attention,
    /// Decode attention, one split of the keys per workgroup for `heads` query heads of a KV
    /// head of `dims` dimensions (attention_split.wgsl).
    AttentionSplit { heads: u8, dims: u16 },
    /// The merge of the splits (attention_combine.wgsl) for heads of `dims` dimensions.
    AttentionCombine { dims: u16 },
    /// Prefill attention in tiles (attention_tiled.wgsl): see [`Tiles`].
    AttentionTiled(Tiles),
    /// silu(gate) · up in place (gated_act.wgsl).
    GatedSilu,
    /// gelu(gate) · up in place (gated_act.wgsl).
    GatedGelu,
    /// Elementwise sum in place (add.wgsl).
    Add,
    /// The argmax's first pass: the largest logit of each chunk of each sequence's row (argmax.wgsl).
    Argmax,
    /// The argmax's second pass, over the first's chunks (argmax.wgsl).
    ArgmaxFinal,
    /// Each sequence's last row (take_last.wgsl).
    TakeLast,
}

/// The tiles of attention_tiled.wgsl: `pairs` (row, query head) pairs per workgroup (32 or
/// 16), `keys` per key tile (32 or 64), and the head's dimension chunks (`chunks` of 128 /
/// (pairs / 4) dimensions: 4 per invocation of a row of the 64-invocation grid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tiles {
    pub pairs: u8,
    pub keys: u8,
    pub chunks: u8,
}

impl Tiles {
    /// Invocations of the grid's rows (each scores 4 pairs) and columns.
    fn grid(self) -> (usize, usize) {
        let ti = self.pairs as usize / 4;
        (ti, 64 / ti)
    }

    /// Dimensions per chunk.
    pub fn chunk_dims(self) -> usize {
        4 * self.grid().1
    }

    /// Bytes of workgroup memory the kernel declares.
    pub fn workgroup_bytes(self) -> usize {
        let (m, c, d) = (self.pairs as usize, self.keys as usize, self.chunk_dims());
        4 * (m * d + c * d + m * c + 3 * m)
    }
}

/// Bytes of workgroup memory attention_split.wgsl declares for `heads` query heads of
/// `head_dim` dimensions.
pub fn split_workgroup_bytes(heads: usize, head_dim: usize) -> usize {
    4 * (heads * head_dim + split_red(heads) + heads * 64 + heads)
}

/// attention_split.wgsl's `red`: the partial scores of a tile (heads × 64 keys × 4 parts), and
/// at the end a four-value output per invocation (256 of them).
fn split_red(heads: usize) -> usize {
    (heads * 256).max(1024)
}

/// The cache read as four f16 (attention_keys.wgsl): the binding's element and its conversion.
fn kv4(f16: bool) -> (&'static str, &'static str) {
    if f16 {
        ("vec4<f16>", "vec4<f32>(x)")
    } else {
        ("vec2<u32>", "vec4<f32>(half2(x.x), half2(x.y))")
    }
}

/// An attention kernel's source: the shared part (attention_keys.wgsl) and `tpl`, composed.
fn attention_source(f16: bool, tpl: Template) -> Result<String, String> {
    let (elem, read) = kv4(f16);
    let keys = Template::new(ATTENTION_KEYS).set("KV4", elem).set("KV4F", read).render()?;
    let body = tpl.set("PARAMS", params::AttentionParams::WGSL).set("KV4", elem).render()?;
    Ok([COMMON, &body, &keys, STEP].concat())
}

/// The WGSL name of a weight type's functions (dequant.wgsl, matvec_*.wgsl).
fn type_fn(t: GgmlType) -> &'static str {
    match t {
        GgmlType::F32 => "f32",
        GgmlType::F16 => "f16",
        GgmlType::BF16 => "bf16",
        GgmlType::Q4_0 => "q4_0",
        GgmlType::Q4_1 => "q4_1",
        GgmlType::Q5_0 => "q5_0",
        GgmlType::Q5_1 => "q5_1",
        GgmlType::Q8_0 => "q8_0",
        GgmlType::Q2_K => "q2_k",
        GgmlType::Q3_K => "q3_k",
        GgmlType::Q4_K => "q4_k",
        GgmlType::Q5_K => "q5_k",
        GgmlType::Q6_K => "q6_k",
        _ => unreachable!("kernel for unsupported type {t}"),
    }
}

/// The activation loader of a weight type's matvec tasks.
fn act_fn(t: GgmlType) -> &'static str {
    match t {
        GgmlType::F32 => "act_f32",
        GgmlType::F16 => "act_f16",
        GgmlType::BF16 => "act_bf16",
        GgmlType::Q8_0 => "act_q8_0",
        GgmlType::Q4_K | GgmlType::Q5_K => "act_q4_k",
        GgmlType::Q6_K => "act_q6_k",
        GgmlType::Q2_K | GgmlType::Q3_K => "act_q2_k",
        _ => "act_q8_1",
    }
}

/// The subgroup builtins added to an entry point's arguments (with subgroup reduction).
const SG_ARGS: &str = ", @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_id) sg_id: u32, \
                       @builtin(num_subgroups) n_sg: u32";

/// The partial-sum reduction of the cooperative kernels (matvec.wgsl, matvec_subgroup.wgsl).
fn reduce(subgroup: bool) -> &'static str {
    if subgroup {
        "reduce_sg(acc, lid, sg_lane, sg_id, n_sg)"
    } else {
        "reduce_wg(acc, lid)"
    }
}

/// matvec.wgsl specialized for type `t` and `mv`: the loops over a workgroup's rows are
/// written out (constant register indices, no local arrays).
/// With `gated`, also matvec_gated.wgsl and the second matrix's copies of the weight functions.
fn matvec_source(t: GgmlType, mv: MatVec, f16: bool, gated: bool) -> Result<String, String> {
    let (rows, subgroup) = match mv {
        MatVec::Rows => (1, false),
        MatVec::Coop { rows, subgroup } => (rows as usize, subgroup),
    };
    let src = if gated { [MATVEC, MATVEC_GATED].concat() } else { MATVEC.to_string() };
    let mut tpl = Template::new(&src)
        .set("ROW_OFFSETS", lines(rows, |i| format!("let o{i} = min(j0 + {i}u, last) * p.row_bytes;")))
        .set("ACCUMULATE", lines(rows, |i| format!("acc[{i}] += dot_{}(o{i}, t, act);", type_fn(t))))
        .set("STORES", lines(rows, |i| format!("store(r, j0 + {i}u, tot[{i}]);")))
        .set("ROWS", format!("{rows}u"))
        .set("ACT", act_fn(t))
        .set("DOT", format!("dot_{}", type_fn(t)))
        .set("SG_ARGS", if subgroup { SG_ARGS } else { "" })
        .set("REDUCE", reduce(subgroup));
    if gated {
        tpl = tpl
            .set("UP_LINES", lines(rows, |i| format!("acc_up[{i}] += dot_{}_2(o{i}, t, act);", type_fn(t))))
            .set(
                "GATED_STORES",
                lines(rows, |i| format!("store_gated(r, j0 + {i}u, tot[{i}], tot_up[{i}]);")),
            );
    }
    let mut src = tpl.render()?;
    if subgroup {
        src.push_str(MATVEC_SUBGROUP);
    }
    let fns = [MATVEC_LEGACY, MATVEC_KQUANT, MATVEC_FLOAT].concat();
    let mut out = [&products()?, &weights(f16, MATVEC_WH_BINDING)?, &src, fns.as_str()].concat();
    if gated {
        out.push_str(&suffixed(&[&weights(f16, MATVEC_WH2_BINDING)?, fns.as_str()].concat(), "2"));
    }
    Ok(out)
}

/// matvec_multi.wgsl for matrices of types `types` with `rows` rows per workgroup.
fn matvec_multi_source(
    types: [GgmlType; 3],
    rows: [u8; 3],
    subgroup: bool,
    f16: bool,
) -> Result<String, String> {
    let mut out = matvec_source(types[0], MatVec::Coop { rows: rows[0], subgroup }, f16, false)?;
    let fns = [MATVEC_LEGACY, MATVEC_KQUANT, MATVEC_FLOAT].concat();
    out.push_str(&suffixed(&[&weights(f16, MATVEC_WH2_BINDING)?, fns.as_str()].concat(), "2"));
    out.push_str(&suffixed(&[&weights(f16, MATVEC_WH3_BINDING)?, fns.as_str()].concat(), "3"));
    let mut segments = String::new();
    for (s, (&t, &r)) in types.iter().zip(&rows).enumerate() {
        let sfx = if s == 0 { String::new() } else { format!("_{}", s + 1) };
        let (n, rb) = [("p.n", "p.row_bytes"), ("p.n_b", "p.rb_b"), ("p.n_c", "p.rb_c")][s];
        let r = r as usize;
        segments.push_str(
            &Template::new(MATVEC_SEGMENT)
                .set("SEG", (s + 1).to_string())
                .set("SEG_N", n)
                .set("ROW_OFFSETS", lines(r, |i| format!("let o{i} = min(j0 + {i}u, last) * {rb};")))
                .set(
                    "ACCUMULATE",
                    lines(r, |i| format!("acc[{i}] += dot_{}{sfx}(o{i}, t, act);", type_fn(t))),
                )
                .set("STORES", lines(r, |i| format!("store_{}(r, j0 + {i}u, tot[{i}]);", s + 1)))
                .set("ROWS", format!("{r}u"))
                .set("ACT", format!("{}{sfx}", act_fn(t)))
                .set("SG_PARAMS", if subgroup { ", sg_lane: u32, sg_id: u32, n_sg: u32" } else { "" })
                .set("REDUCE", reduce(subgroup))
                .render()?,
        );
    }
    out.push_str(
        &Template::new(MATVEC_MULTI)
            .set("SEGMENTS", segments)
            .set("SG_ARGS", if subgroup { SG_ARGS } else { "" })
            .set("SG_PASS", if subgroup { ", sg_lane, sg_id, n_sg" } else { "" })
            .render()?,
    );
    Ok(out)
}

/// Whether weights of type `t` have a tiled product (matmul_tiled.wgsl): the quantized types.
pub fn tiled_type(t: GgmlType) -> bool {
    ActQuant::for_type(t).is_some() || float_type(t)
}

/// Float weights, which matmul_tiled_float.wgsl multiplies (the others: matmul_tiled.wgsl).
pub fn float_type(t: GgmlType) -> bool {
    matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// The outputs per invocation of matmul_tiled.wgsl: `rt` token rows × `ct` weight rows (4 or
/// 8 each), so a workgroup's tile is 16 `rt` × 16 `ct`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TileShape {
    pub rt: u8,
    pub ct: u8,
    /// 16-value pieces per stage along k: 2 or 4.
    pub sp: u8,
}

impl TileShape {
    /// The shapes the kernel is built for.
    pub const ALL: [(u8, u8); 3] = [(4, 4), (8, 4), (4, 8)];

    /// Bytes of workgroup memory the kernel declares for weights of type `t`: the stage's
    /// pieces (16 bytes) and its groups' floats (8 bytes).
    pub fn workgroup_bytes(self, t: GgmlType) -> usize {
        let (bm, bn, sp) = (16 * self.rt as usize, 16 * self.ct as usize, self.sp as usize);
        if float_type(t) {
            // 16 f32 values of every row and token (`sp` does not apply).
            return 64 * (bm + bn);
        }
        (16 * sp + 8 * sp / tile_format(t).0) * (bm + bn)
    }
}

/// How matmul_tiled.wgsl reads weights of type `t`: 16-value pieces per scale group, the
/// activations' piece loader, and whether the format has mins.
fn tile_format(t: GgmlType) -> (usize, &'static str, bool) {
    match t {
        GgmlType::Q6_K | GgmlType::Q3_K => (1, "xp_q8_k", false),
        GgmlType::Q2_K => (1, "xp_q8_k", true),
        GgmlType::Q4_K | GgmlType::Q5_K => (2, "xp_q8_k", true),
        GgmlType::Q4_1 | GgmlType::Q5_1 => (2, "xp_q8_1", true),
        _ => (2, "xp_q8_1", false),
    }
}

/// matmul_tiled.wgsl for weights of type `t` in tiles of shape `ts`: its piece functions, and
/// each invocation's outputs written out (constant register names, no local arrays).
fn tiled_source(t: GgmlType, ts: TileShape, f16: bool) -> Result<String, String> {
    if float_type(t) {
        return tiled_float_source(t, ts);
    }
    let (gp, xpiece, min) = tile_format(t);
    let (rt, ct, sp) = (ts.rt as usize, ts.ct as usize, ts.sp as usize);
    let (bm, bn, ng) = (16 * rt, 16 * ct, sp / gp);
    let each = |f: &dyn Fn(usize, usize) -> String| lines(rt * ct, |i| f(i / ct, i % ct));
    // Per scale group: its weight pieces and scales in registers, then per token its pieces,
    // scale and products.
    let group = |g: usize| {
        let mut out = lines(ct * gp, |i| {
            let (c, h) = (i / gp, i % gp);
            format!("let w{c}_{h} = wq[{}u + tx];", (g * gp + h) * bn + 16 * c)
        });
        out += "\n        ";
        out += &lines(ct, |c| format!("let ws{c} = wsc[{}u + tx];", g * bn + 16 * c));
        out += "\n        ";
        out += &lines(rt, |r| {
            let xs = (0..gp)
                .map(|h| format!("let x{h} = xq[{}u + ty];", (g * gp + h) * bm + 16 * r))
                .collect::<Vec<_>>()
                .join(" ");
            let prods = (0..ct)
                .map(|c| {
                    let dots =
                        (0..gp).map(|h| format!("dot16(w{c}_{h}, x{h})")).collect::<Vec<_>>().join(" + ");
                    let m = if min { format!(" + ws{c}.y * xs.y") } else { String::new() };
                    format!("acc{r}_{c} += xs.x * (ws{c}.x * i2f({dots})){m};")
                })
                .collect::<Vec<_>>()
                .join(" ");
            format!("{{ {xs} let xs = xsc[{}u + ty]; {prods} }}", g * bm + 16 * r)
        });
        format!("{{\n        {out}\n        }}")
    };
    let compute = (0..ng).map(group).collect::<Vec<_>>().join("\n        ");
    let loaders =
        stage_loads("load_w", "j0, v0", sp * bn) + "\n        " + &stage_loads("load_x", "i0, v0", sp * bm);
    let body = Template::new(MATMUL_TILED)
        .set("GP", gp.to_string())
        .set("BM", bm.to_string())
        .set("BN", bn.to_string())
        .set("SP", sp.to_string())
        .set("WQ", (sp * bn).to_string())
        .set("XQ", (sp * bm).to_string())
        .set("WS", (ng * bn).to_string())
        .set("XS", (ng * bm).to_string())
        .set("LOADERS", loaders)
        .set("WPIECE", format!("wp_{}", type_fn(t)))
        .set("XPIECE", xpiece)
        .set("ACC_DECLS", each(&|r, c| format!("var acc{r}_{c} = 0.0;")))
        .set("COMPUTE", compute)
        .set(
            "STORES",
            each(&|r, c| format!("store(i0 + ty + {}u, j0 + tx + {}u, acc{r}_{c});", 16 * r, 16 * c)),
        )
        .render()?;
    Ok([
        &products()?,
        &weights(f16, MATVEC_WH_BINDING)?,
        body.as_str(),
        MATMUL_TILE_STORE,
        MATMUL_TILED_PIECES,
    ]
    .concat())
}

/// A tiled kernel's loads of one stage, written out for a workgroup of 256: `f(e, args)` for
/// the stage's elements e = lid, lid + 256, ... below `n` (the last guarded where `n` is no
/// multiple of 256).
fn stage_loads(f: &str, args: &str, n: usize) -> String {
    lines(n.div_ceil(256), |i| {
        let e = format!("lid + {}u", 256 * i);
        let call = format!("{f}({e}, {args});");
        if 256 * (i + 1) <= n {
            call
        } else {
            format!("if ({e} < {n}u) {{ {call} }}")
        }
    })
}

/// matmul_tiled_float.wgsl for float weights of type `t` in tiles of shape `ts` (`ts.sp` does
/// not apply: stages of 16 values): its load of four weights, and each invocation's outputs
/// written out.
fn tiled_float_source(t: GgmlType, ts: TileShape) -> Result<String, String> {
    let (rt, ct) = (ts.rt as usize, ts.ct as usize);
    let (bm, bn) = (16 * rt, 16 * ct);
    let each = |f: &dyn Fn(usize, usize) -> String| lines(rt * ct, |i| f(i / ct, i % ct));
    // Rows are 16-byte (F32) or 8-byte (F16, BF16: 32 bytes a 16-value stage) aligned.
    let wload = match t {
        GgmlType::F32 => "return bitcast<vec4<f32>>(w[(row * p.row_bytes) / 16u + q]);",
        GgmlType::F16 => {
            "let i = (row * p.row_bytes) / 4u + 2u * q;\n    \
             return vec4<f32>(unpack2x16float(ww(i)), unpack2x16float(ww(i + 1u)));"
        }
        _ => {
            "let i = (row * p.row_bytes) / 4u + 2u * q;\n    \
             let lo = ww(i);\n    let hi = ww(i + 1u);\n    \
             return bitcast<vec4<f32>>(vec4<u32>(lo << 16u, lo & 0xffff0000u, hi << 16u, hi & 0xffff0000u));"
        }
    };
    let xround = match t {
        GgmlType::F32 => "return v;",
        GgmlType::F16 => "return vec4<f32>(f16_round(v.x), f16_round(v.y), f16_round(v.z), f16_round(v.w));",
        _ => "return vec4<f32>(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w));",
    };
    let compute = [
        lines(rt, |r| format!("let x{r} = xt[v * BM + ty + {}u];", 16 * r)),
        lines(ct, |c| format!("let w{c} = wt[v * BN + tx + {}u];", 16 * c)),
        each(&|r, c| format!("acc{r}_{c} += x{r} * w{c};")),
    ]
    .join("\n            ");
    let loaders =
        stage_loads("load_w", "j0, q0", 4 * bn) + "\n        " + &stage_loads("load_x", "i0, q0", 4 * bm);
    let body = Template::new(MATMUL_TILED_FLOAT)
        .set("BM", bm.to_string())
        .set("BN", bn.to_string())
        .set("WT", (16 * bn).to_string())
        .set("XT", (16 * bm).to_string())
        .set("WLOAD", wload.to_string())
        .set("XROUND", xround.to_string())
        .set("LOADERS", loaders)
        .set("ACC_DECLS", each(&|r, c| format!("var acc{r}_{c} = 0.0;")))
        .set("COMPUTE", compute)
        .set(
            "STORES",
            each(&|r, c| format!("store(i0 + ty + {}u, j0 + tx + {}u, acc{r}_{c});", 16 * r, 16 * c)),
        )
        .render()?;
    Ok([&products()?, &weights(false, MATVEC_WH_BINDING)?, body.as_str(), MATMUL_TILE_STORE].concat())
}

/// What every matrix-product kernel starts with (products.wgsl).
fn products() -> Result<String, String> {
    with_params::<params::MatVecParams>(PRODUCTS)
}

/// The binding of the f16 view of the weights (with `shader-f16`) in matvec.wgsl.
const MATVEC_WH_BINDING: u32 = 5;
/// The f16 view of the second matrix of matvec_gated.wgsl.
const MATVEC_WH2_BINDING: u32 = 8;
/// The f16 view of the third matrix of matvec_multi.wgsl.
const MATVEC_WH3_BINDING: u32 = 11;
/// The f16 view of the table in embed.wgsl.
const EMBED_WH_BINDING: u32 = 4;

/// The weight access helpers: weights.wgsl and the f16 reads of one path.
fn weights(f16: bool, binding: u32) -> Result<String, String> {
    Ok(if f16 {
        [WEIGHTS, &Template::new(WVIEW_F16).set("WH_BINDING", binding.to_string()).render()?].concat()
    } else {
        [WEIGHTS, WVIEW_F32].concat()
    })
}

/// `src` with its parameter struct `P` and nothing else to fill in.
fn with_params<P: Params>(src: &str) -> Result<String, String> {
    Template::new(src).set("PARAMS", P::WGSL).render()
}

impl Kernel {
    /// WGSL source and entry point; `f16`: for a device with `shader-f16`. An error means a
    /// source and its composition disagree (a bug; the unit tests compose every kernel).
    pub fn source(self, f16: bool) -> Result<(String, &'static str)> {
        let (body, entry) = self.body(f16).map_err(|e| err(format!("composing kernel {self:?}: {e}")))?;
        // `enable f16;` must come first in a module.
        Ok(([if f16 { HALF_F16 } else { HALF_F32 }, &body].concat(), entry))
    }

    fn body(self, f16: bool) -> Result<(String, &'static str), String> {
        use params::*;
        Ok(match self {
            Kernel::Embed(t) => (
                [
                    COMMON,
                    &weights(f16, EMBED_WH_BINDING)?,
                    DEQUANT,
                    &Template::new(EMBED)
                        .set("PARAMS", EmbedParams::WGSL)
                        .set("DEQ", format!("deq_{}", type_fn(t)))
                        .render()?,
                ]
                .concat(),
                "main",
            ),
            Kernel::Quantize(q) => (
                [COMMON, &with_params::<QuantizeParams>(QUANTIZE)?, QUANT_PIECE].concat(),
                if q == ActQuant::Q8K { "quant_q8_k" } else { "quant_q8_1" },
            ),
            Kernel::NormQuant(q) => (
                [COMMON, &with_params::<NormQuantParams>(NORM_QUANT)?, QUANT_PIECE].concat(),
                if q == ActQuant::Q8K { "norm_q8_k" } else { "norm_q8_1" },
            ),
            Kernel::MatMul(t, mv) => (
                [COMMON, &matvec_source(t, mv, f16, false)?].concat(),
                if mv == MatVec::Rows { "main_rows" } else { "main" },
            ),
            Kernel::MatMulTiled(t, ts) => ([COMMON, &tiled_source(t, ts, f16)?].concat(), "main"),
            Kernel::MatMulGated(t, mv) => {
                ([COMMON, &matvec_source(t, mv, f16, true)?].concat(), "main_gated")
            }
            Kernel::MatMulMulti(types, rows, sg) => {
                ([COMMON, &matvec_multi_source(types, rows, sg, f16)?].concat(), "main_multi")
            }
            Kernel::RmsNorm(from) => {
                let src = Template::new(RMS_NORM)
                    .set("PARAMS", RmsNormParams::WGSL)
                    .flag("FROM", from)
                    .set("SRC", if from { "src" } else { "x" })
                    .render()?;
                ([COMMON, &src].concat(), "rms_norm")
            }
            Kernel::Rope => {
                ([COMMON, ROPE_MATH, ROPE_PAIR, &with_params::<RopeParams>(ROPE)?, STEP].concat(), "rope")
            }
            Kernel::RopeTable => {
                ([COMMON, ROPE_MATH, &with_params::<RopeParams>(ROPE_TABLE)?, STEP].concat(), "rope_table")
            }
            Kernel::RopeKv => {
                ([COMMON, ROPE_PAIR, &with_params::<RopeKvParams>(ROPE_KV)?, STEP].concat(), "rope_kv")
            }
            Kernel::KvStore => {
                ([COMMON, &with_params::<KvStoreParams>(KV_STORE)?, STEP].concat(), "kv_store")
            }
            Kernel::KvShift => {
                ([COMMON, ROPE_MATH, &with_params::<KvShiftParams>(KV_SHIFT)?].concat(), "kv_shift")
            }
            Kernel::Attention => {
                // The cache's element (two f16) and its conversion to vec2<f32>.
                let (elem, read) = if f16 { ("vec2<f16>", "vec2<f32>") } else { ("u32", "half2") };
                let src = Template::new(ATTENTION)
                    .set("PARAMS", AttentionParams::WGSL)
                    .set("KV2", elem)
                    .set("KVF", read)
                    .render()?;
                ([COMMON, &src, STEP].concat(), "attention")
            }
            Kernel::AttentionSplit { heads, dims } => {
                let (h, d4) = (heads as usize, dims as usize / 4);
                // The loops over attention_split.wgsl's registers, written out: P = 4
                // invocations a key, kpt pieces each; VG groups of D4 invocations in the
                // values, vpt keys each.
                let kpt = d4.div_ceil(4);
                let vg = 256 / d4;
                let vpt = 64usize.div_ceil(vg);
                let loads = lines(kpt, |i| format!("let k{i} = kc[kr0 + min(kp + {i}u * P, D4 - 1u)];"))
                    + "\n        "
                    + &lines(vpt, |i| format!("let v{i} = vc[vr0 + min(vk + {i}u * VG, cnt - 1u) * vrow];"));
                // Every head's variables, written out (d0, acc0, d1, acc1, ...).
                let heads = |f: &dyn Fn(usize) -> String| (0..h).map(f).collect::<Vec<_>>().join(" ");
                let dots = lines(kpt, |i| {
                    format!(
                        "{{ let c = kp + {i}u * P; let k = select(vec4<f32>(0.0), kv4(k{i}), c < D4); \
                         let qi = min(c, D4 - 1u); {} }}",
                        heads(&|x| format!("d{x} += dot(k, qs[{x}u * D4 + qi]);"))
                    )
                });
                let accumulate = lines(vpt, |i| {
                    format!(
                        "{{ let j = vk + {i}u * VG; if (j < cnt) {{ let v = kv4(v{i}); {} }} }}",
                        heads(&|x| format!("acc{x} += pe[{x}u * T + j] * v;"))
                    )
                });
                let tpl = Template::new(ATTENTION_SPLIT)
                    .set("HB", h.to_string())
                    .set("D4", d4.to_string())
                    .set("QS", (h * d4).to_string())
                    .set("RED", split_red(h).to_string())
                    .set("HBT", (64 * h).to_string())
                    .set("LOADS", loads)
                    .set("DOTS", dots)
                    .set("ACCUMULATE", accumulate)
                    .set("DECLS", lines(h, |i| format!("var d{i} = 0.0;\n    var acc{i} = vec4<f32>(0.0);")))
                    .set("ZERO", heads(&|x| format!("d{x} = 0.0;")))
                    .set("PARTIALS", lines(h, |x| format!("red[({x}u * T + kk) * P + kp] = d{x};")))
                    .set("RESCALE", heads(&|x| format!("acc{x} *= alpha[{x}];")))
                    .set("OUTPUTS", lines(h, |i| format!("output_head({i}u, acc{i}, lid, nh, o, d, whole);")))
                    .set(
                        "OUT_SUM",
                        lines(vg, |g| {
                            format!(
                                "let i{g} = 4u * ({g}u * D4 + lid); \
                                 let s{g} = vec4<f32>(red[i{g}], red[i{g} + 1u], red[i{g} + 2u], red[i{g} + 3u]);"
                            )
                        }) + "\n        "
                            + &lines(vg, |g| format!("sum += s{g};")),
                    );
                (attention_source(f16, tpl)?, "attention_split")
            }
            Kernel::AttentionCombine { dims } => {
                let (elem, read) = kv4(f16);
                let keys = Template::new(ATTENTION_KEYS).set("KV4", elem).set("KV4F", read).render()?;
                // SPG splits per group of D4 invocations (attention_combine.wgsl), written out.
                let spg = 128usize.div_ceil(256 / (dims as usize / 4));
                let loads = lines(spg, |i| {
                    format!(
                        "var o{i} = vec4<f32>(0.0); if (g < VG && g + {i}u * VG < used) {{ \
                         let a = outs + (base + g + {i}u * VG) * p.head_dim + 4u * dq; \
                         o{i} = vec4<f32>(part[a], part[a + 1u], part[a + 2u], part[a + 3u]); }}"
                    )
                });
                let sums = lines(spg, |i| {
                    format!("if (g < VG && g + {i}u * VG < used) {{ sum += w[g + {i}u * VG] * o{i}; }}")
                });
                let body = Template::new(ATTENTION_COMBINE)
                    .set("PARAMS", AttentionParams::WGSL)
                    .set("D4", (dims / 4).to_string())
                    .set("LOADS", loads)
                    .set("SUMS", sums)
                    .render()?;
                ([COMMON, &body, &keys, STEP].concat(), "attention_combine")
            }
            Kernel::AttentionTiled(t) => {
                let (ti, tj) = t.grid();
                let (m, c, d, n) = (t.pairs as usize, t.keys as usize, t.chunk_dims(), t.chunks as usize);
                // Keys scored per invocation.
                let kj = c / tj;
                let tpl = Template::new(ATTENTION_TILED)
                    .set("BM", m.to_string())
                    .set("BC", c.to_string())
                    .set("NCH", n.to_string())
                    .set("TI", ti.to_string())
                    .set("TJ", tj.to_string())
                    .set("DC", d.to_string())
                    .set("KJ", kj.to_string())
                    .set("QS", (m * d / 4).to_string())
                    .set("KS", (c * d / 4).to_string())
                    .set("PS4", (m * c / 4).to_string())
                    .set("S_DECLS", lines(kj, |k| format!("    var s{k} = vec4<f32>(0.0);")))
                    .set(
                        "QK",
                        lines(kj, |k| {
                            format!("            s{k} += qv * ks[dd * (BC / 4u) + (tj * KJ + {k}u) / 4u][(tj * KJ + {k}u) % 4u];")
                        }),
                    )
                    .set(
                        "PUT_SCORES",
                        lines(kj, |k| format!("    put_scores(tj * KJ + {k}u, s{k}, k0, m0, m_end, pos0, r0, ti);")),
                    )
                    .set("ACC_DECLS", lines(n, |c| format!("var acc{c}: array<vec4<f32>, 4>;")))
                    .set(
                        "PV_CHUNKS",
                        lines(n, |c| format!("    acc{c} = pv_chunk({c}u, acc{c}, k0, key_hi, pb, kb, lid);")),
                    )
                    .set("STORES", lines(n, |c| format!("store_chunk({c}u, acc{c}, m0, m_end, o, lid);")));
                (attention_source(f16, tpl)?, "attention_tiled")
            }
            Kernel::GatedSilu => ([COMMON, &with_params::<CountParams>(GATED_ACT)?].concat(), "gated_silu"),
            Kernel::GatedGelu => ([COMMON, &with_params::<CountParams>(GATED_ACT)?].concat(), "gated_gelu"),
            Kernel::Add => ([COMMON, &with_params::<CountParams>(ADD)?].concat(), "add"),
            Kernel::Argmax => ([COMMON, &with_params::<ArgmaxParams>(ARGMAX)?, STEP].concat(), "argmax_part"),
            Kernel::ArgmaxFinal => {
                ([COMMON, &with_params::<ArgmaxParams>(ARGMAX)?, STEP].concat(), "argmax_final")
            }
            Kernel::TakeLast => {
                ([COMMON, &with_params::<TakeLastParams>(TAKE_LAST)?, STEP].concat(), "take_last")
            }
        })
    }
}

/// Pipelines built so far.
pub struct Pipelines {
    cache: HashMap<Kernel, wgpu::ComputePipeline>,
    /// Read f16 values with `shader-f16` (half_f16.wgsl) rather than by hand (half_f32.wgsl).
    f16: bool,
}

impl Pipelines {
    /// An empty cache; `f16`: the device has `shader-f16` enabled and the kernels may use it.
    pub fn new(f16: bool) -> Pipelines {
        Pipelines { cache: HashMap::new(), f16 }
    }

    /// Whether the kernels are built for `shader-f16` (they then bind weights a second time).
    pub fn f16(&self) -> bool {
        self.f16
    }

    /// The pipeline of `k`, built on first use (its bind group layout is derived from the shader).
    pub fn get(&mut self, device: &wgpu::Device, k: Kernel) -> Result<wgpu::ComputePipeline> {
        if let Some(p) = self.cache.get(&k) {
            return Ok(p.clone());
        }
        let (src, entry) = k.source(self.f16)?;
        #[cfg(not(target_arch = "wasm32"))]
        let src = experiment::source(k, src);
        // A pipeline that failed is not cached: the next graph tries again.
        let pipe = build_pipeline(device, &format!("{k:?}"), &src, entry)?;
        self.cache.insert(k, pipe.clone());
        Ok(pipe)
    }
}

/// Kernel experiments without a rebuild (natively): `WICK_WEBGPU_SHADER_DUMP=DIR` writes each
/// kernel's composed source as it is built to `DIR/<kernel>.wgsl` (the kernel's name with its
/// parameters, e.g. `AttentionSplit_heads_4_dims_128.wgsl`); `WICK_WEBGPU_SHADER_DIR=DIR`
/// builds a kernel from `DIR/<kernel>.wgsl` instead of its own source where that file exists.
#[cfg(not(target_arch = "wasm32"))]
mod experiment {
    use super::Kernel;

    /// The file name of `k`'s source: its debug form's words joined by `_`.
    fn file(k: Kernel) -> String {
        let name = format!("{k:?}");
        let words: Vec<&str> =
            name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
        words.join("_") + ".wgsl"
    }

    /// `src`, or the experiment's replacement; dumped when asked.
    pub fn source(k: Kernel, src: String) -> String {
        let dir = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
        if let Some(d) = dir("WICK_WEBGPU_SHADER_DUMP") {
            let _ = std::fs::create_dir_all(&d).and_then(|()| std::fs::write(d.join(file(k)), &src));
        }
        match dir("WICK_WEBGPU_SHADER_DIR").and_then(|d| std::fs::read_to_string(d.join(file(k))).ok()) {
            Some(text) => {
                eprintln!("wick: {} from WICK_WEBGPU_SHADER_DIR", file(k));
                text
            }
            None => src,
        }
    }

    #[test]
    fn file_names_carry_the_parameters() {
        assert_eq!(
            file(Kernel::AttentionSplit { heads: 4, dims: 128 }),
            "AttentionSplit_heads_4_dims_128.wgsl"
        );
        assert_eq!(file(Kernel::Add), "Add.wgsl");
    }
}

/// Compile WGSL `src` into a compute pipeline with entry point `entry`. A shader that does not
/// parse or validate, or a pipeline the device refuses, is an error naming `label` (natively at
/// once; in the browser through the uncaptured-error handler, at the next check).
pub fn build_pipeline(
    device: &wgpu::Device,
    label: &str,
    src: &str,
    entry: &str,
) -> Result<wgpu::ComputePipeline> {
    scoped(device, &format!("compiling kernel {label}"), || {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        })
    })
}

#[cfg(test)]
mod tests;
