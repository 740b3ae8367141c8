//! The kernels: WGSL sources (one file per family under `shaders/`), composed into modules
//! and compiled into pipelines once per kernel, cached by [`Kernel`].

use std::collections::HashMap;

use crate::quant::GgmlType;

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
const MATVEC: &str = include_str!("shaders/matvec.wgsl");
const MATVEC_SUBGROUP: &str = include_str!("shaders/matvec_subgroup.wgsl");
const MATVEC_LEGACY: &str = include_str!("shaders/matvec_legacy.wgsl");
const MATVEC_KQUANT: &str = include_str!("shaders/matvec_kquant.wgsl");
const MATVEC_FLOAT: &str = include_str!("shaders/matvec_float.wgsl");
const MATVEC_GATED: &str = include_str!("shaders/matvec_gated.wgsl");
const MATVEC_MULTI: &str = include_str!("shaders/matvec_multi.wgsl");
const MATVEC_SEGMENT: &str = include_str!("shaders/matvec_segment.wgsl");
const RMS_NORM: &str = include_str!("shaders/rms_norm.wgsl");
const ROPE: &str = include_str!("shaders/rope.wgsl");
const ROPE_MATH: &str = include_str!("shaders/rope_math.wgsl");
const ROPE_KV: &str = include_str!("shaders/rope_kv.wgsl");
const KV_STORE: &str = include_str!("shaders/kv_store.wgsl");
const ATTENTION: &str = include_str!("shaders/attention.wgsl");
const GATED_ACT: &str = include_str!("shaders/gated_act.wgsl");
const ADD: &str = include_str!("shaders/add.wgsl");
const ARGMAX: &str = include_str!("shaders/argmax.wgsl");

/// Weight types the WebGPU executor runs (matrix products and embeddings).
pub const SUPPORTED: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// The activation format a quantized weight type's matrix product reads (quantize.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActQuant {
    /// 32-value blocks with d, s and Σq: for the legacy types.
    Q8_1,
    /// 256-value blocks with d and the sums of each 16 values: for the K-quants.
    Q8K,
}

impl ActQuant {
    /// For weights of type `t`; None for the float types.
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
            ActQuant::Q8_1 => 32,
            ActQuant::Q8K => 256,
        }
    }
    /// u32 words of a block's record (after all the quants).
    pub fn meta_words(self) -> usize {
        match self {
            ActQuant::Q8_1 => 4,
            ActQuant::Q8K => 20,
        }
    }
    /// Blocks one quantize workgroup covers.
    pub fn blocks_per_group(self) -> usize {
        match self {
            ActQuant::Q8_1 => 8,
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

/// One compute kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    Embed(GgmlType),
    Quantize(ActQuant),
    MatMul(GgmlType, MatVec),
    /// Gate and up products with SiLU (matvec_gated.wgsl; cooperative kernels only).
    MatMulGated(GgmlType, MatVec),
    /// Three products of one input (matvec_multi.wgsl): types and rows per workgroup of each,
    /// and whether to reduce with subgroup operations.
    MatMulMulti([GgmlType; 3], [u8; 3], bool),
    /// `true`: reading another slot than the one it writes.
    RmsNorm(bool),
    /// RMSNorm of whole rows into another slot, quantized too (norm_quant.wgsl).
    NormQuant(ActQuant),
    Rope,
    /// RoPE of queries and keys and the KV store in one dispatch (rope_kv.wgsl).
    RopeKv,
    KvStore,
    Attention,
    GatedSilu,
    GatedGelu,
    Add,
    Argmax,
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

/// matvec.wgsl specialized for type `t` and `mv`: the loops over a workgroup's rows are
/// written out (constant register indices, no local arrays).
/// With `gated`, also matvec_gated.wgsl and the second matrix's copies of the weight functions.
fn matvec_source(t: GgmlType, mv: MatVec, f16: bool, gated: bool) -> String {
    let (rows, subgroup) = match mv {
        MatVec::Rows => (1, false),
        MatVec::Coop { rows, subgroup } => (rows as usize, subgroup),
    };
    let lines = |f: &dyn Fn(usize) -> String| (0..rows).map(f).collect::<Vec<_>>().join("\n    ");
    let mut src = if gated { [MATVEC, MATVEC_GATED].concat() } else { MATVEC.to_string() };
    src = src
        .replace("UP_LINES", &lines(&|i| format!("acc_up[{i}] += dot_{}_2(o{i}, t, act);", type_fn(t))))
        .replace("GATED_STORES", &lines(&|i| format!("store_gated(r, j0 + {i}u, tot[{i}], tot_up[{i}]);")));
    src = src
        .replace("ROW_OFFSETS", &lines(&|i| format!("let o{i} = min(j0 + {i}u, last) * p.row_bytes;")))
        .replace("ACCUMULATE", &lines(&|i| format!("acc[{i}] += DOT(o{i}, t, act);")))
        .replace("STORES", &lines(&|i| format!("store(r, j0 + {i}u, tot[{i}]);")))
        .replace("ROWS", &format!("{rows}u"))
        .replace("ACT(", &format!("{}(", act_fn(t)))
        .replace("DOT(", &format!("dot_{}(", type_fn(t)));
    if subgroup {
        src = src
            .replace(
                "SG_ARGS",
                ", @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_id) sg_id: u32, \
                 @builtin(num_subgroups) n_sg: u32",
            )
            .replace("REDUCE", "reduce_sg(acc, lid, sg_lane, sg_id, n_sg)");
        src.push_str(MATVEC_SUBGROUP);
    } else {
        src = src.replace("SG_ARGS", "").replace("REDUCE", "reduce_wg(acc, lid)");
    }
    let fns = [MATVEC_LEGACY, MATVEC_KQUANT, MATVEC_FLOAT].concat();
    let mut out = [&weights(f16, MATVEC_WH_BINDING), &src, fns.as_str()].concat();
    if gated {
        out.push_str(&second_matrix(&[&weights(f16, MATVEC_WH2_BINDING), fns.as_str()].concat(), "2"));
    }
    out
}

/// matvec_multi.wgsl for matrices of types `types` with `rows` rows per workgroup.
fn matvec_multi_source(types: [GgmlType; 3], rows: [u8; 3], subgroup: bool, f16: bool) -> String {
    let mut out = matvec_source(types[0], MatVec::Coop { rows: rows[0], subgroup }, f16, false);
    let fns = [MATVEC_LEGACY, MATVEC_KQUANT, MATVEC_FLOAT].concat();
    out.push_str(&second_matrix(&[&weights(f16, MATVEC_WH2_BINDING), fns.as_str()].concat(), "2"));
    out.push_str(&second_matrix(&[&weights(f16, MATVEC_WH3_BINDING), fns.as_str()].concat(), "3"));
    let mut segments = String::new();
    for (s, (&t, &r)) in types.iter().zip(&rows).enumerate() {
        let sfx = if s == 0 { String::new() } else { format!("_{}", s + 1) };
        let (n, rb) = [("p.n", "p.row_bytes"), ("p.n_b", "p.rb_b"), ("p.n_c", "p.rb_c")][s];
        let lines = |f: &dyn Fn(usize) -> String| (0..r as usize).map(f).collect::<Vec<_>>().join("\n    ");
        segments.push_str(
            &MATVEC_SEGMENT
                .replace("SEG_N", n)
                .replace("ROW_OFFSETS", &lines(&|i| format!("let o{i} = min(j0 + {i}u, last) * {rb};")))
                .replace(
                    "ACCUMULATE",
                    &lines(&|i| format!("acc[{i}] += dot_{}{sfx}(o{i}, t, act);", type_fn(t))),
                )
                .replace("STORES", &lines(&|i| format!("store_{}(r, j0 + {i}u, tot[{i}]);", s + 1)))
                .replace("ROWS", &format!("{r}u"))
                .replace("ACT(", &format!("{}{sfx}(", act_fn(t)))
                .replace("seg_SEG", &format!("seg_{}", s + 1)),
        );
    }
    let (args, params, pass, reduce) = if subgroup {
        (
            ", @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_id) sg_id: u32, \
             @builtin(num_subgroups) n_sg: u32",
            ", sg_lane: u32, sg_id: u32, n_sg: u32",
            ", sg_lane, sg_id, n_sg",
            "reduce_sg(acc, lid, sg_lane, sg_id, n_sg)",
        )
    } else {
        ("", "", "", "reduce_wg(acc, lid)")
    };
    let segments = segments.replace("SG_PARAMS", params).replace("REDUCE", reduce);
    out.push_str(
        &MATVEC_MULTI.replace("SEGMENTS", &segments).replace("SG_ARGS", args).replace("SG_PASS", pass),
    );
    out
}

/// WGSL functions reading the weights `w` (and `wh`) rewritten to read `w2` (`wh2`) for
/// `suffix` "2": every function gets a `_2` suffix, module constants are dropped (the first
/// copy has them).
fn second_matrix(src: &str, suffix: &str) -> String {
    let body: String = src.lines().filter(|l| !l.starts_with("const ")).map(|l| format!("{l}\n")).collect();
    let mut fns = std::collections::HashSet::new();
    for piece in body.split("fn ").skip(1) {
        let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        fns.insert(name);
    }
    let mut out = String::with_capacity(body.len() + 1024);
    let mut ident = String::new();
    let mut prev = ' ';
    let flush = |ident: &mut String, out: &mut String, member: bool| {
        if !ident.is_empty() {
            out.push_str(ident);
            if !member {
                if fns.contains(ident.as_str()) {
                    out.push('_');
                    out.push_str(suffix);
                } else if ident == "w" || ident == "wh" {
                    out.push_str(suffix);
                }
            }
            ident.clear();
        }
    };
    let mut member = false;
    for c in body.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            if ident.is_empty() {
                member = prev == '.' || c.is_ascii_digit();
            }
            ident.push(c);
        } else {
            flush(&mut ident, &mut out, member);
            out.push(c);
        }
        prev = c;
    }
    flush(&mut ident, &mut out, member);
    out
}

/// The binding of the f16 view of the weights (with `shader-f16`) in matvec.wgsl, embed.wgsl.
const MATVEC_WH_BINDING: u32 = 5;
/// The f16 view of the second matrix of matvec_gated.wgsl.
const MATVEC_WH2_BINDING: u32 = 8;
/// The f16 view of the third matrix of matvec_multi.wgsl.
const MATVEC_WH3_BINDING: u32 = 11;
const EMBED_WH_BINDING: u32 = 4;

/// The weight access helpers: weights.wgsl and the f16 reads of one path.
fn weights(f16: bool, binding: u32) -> String {
    if f16 {
        [WEIGHTS, &WVIEW_F16.replace("WH_BINDING", &binding.to_string())].concat()
    } else {
        [WEIGHTS, WVIEW_F32].concat()
    }
}

impl Kernel {
    /// WGSL source and entry point; `f16`: for a device with `shader-f16`.
    fn source(self, f16: bool) -> (String, &'static str) {
        let (body, entry) = self.body(f16);
        // `enable f16;` must come first in a module.
        ([if f16 { HALF_F16 } else { HALF_F32 }, &body].concat(), entry)
    }

    fn body(self, f16: bool) -> (String, &'static str) {
        match self {
            Kernel::Embed(t) => (
                [
                    COMMON,
                    &weights(f16, EMBED_WH_BINDING),
                    DEQUANT,
                    &EMBED.replace("DEQ(", &format!("deq_{}(", type_fn(t))),
                ]
                .concat(),
                "main",
            ),
            Kernel::Quantize(q) => (
                [COMMON, QUANTIZE, QUANT_PIECE].concat(),
                if q == ActQuant::Q8_1 { "quant_q8_1" } else { "quant_q8_k" },
            ),
            Kernel::NormQuant(q) => (
                [COMMON, NORM_QUANT, QUANT_PIECE].concat(),
                if q == ActQuant::Q8_1 { "norm_q8_1" } else { "norm_q8_k" },
            ),
            Kernel::MatMul(t, mv) => (
                [COMMON, &matvec_source(t, mv, f16, false)].concat(),
                if mv == MatVec::Rows { "main_rows" } else { "main" },
            ),
            Kernel::MatMulGated(t, mv) => ([COMMON, &matvec_source(t, mv, f16, true)].concat(), "main_gated"),
            Kernel::MatMulMulti(types, rows, sg) => {
                ([COMMON, &matvec_multi_source(types, rows, sg, f16)].concat(), "main_multi")
            }
            Kernel::RmsNorm(from) => {
                let (decl, name) = if from {
                    ("@group(0) @binding(3) var<storage, read> src: array<f32>;", "src")
                } else {
                    ("", "x")
                };
                (
                    [COMMON, &RMS_NORM.replace("SRC_BINDING", decl).replace("SRC[", &format!("{name}["))]
                        .concat(),
                    "rms_norm",
                )
            }
            Kernel::Rope => ([COMMON, ROPE_MATH, ROPE].concat(), "rope"),
            Kernel::RopeKv => ([COMMON, ROPE_MATH, ROPE_KV].concat(), "rope_kv"),
            Kernel::KvStore => ([COMMON, KV_STORE].concat(), "kv_store"),
            Kernel::Attention => {
                let (elem, read) = if f16 { ("vec2<f16>", "vec2<f32>(") } else { ("u32", "half2(") };
                ([COMMON, &ATTENTION.replace("KV2", elem).replace("KVF(", read)].concat(), "attention")
            }
            Kernel::GatedSilu => ([COMMON, GATED_ACT].concat(), "gated_silu"),
            Kernel::GatedGelu => ([COMMON, GATED_ACT].concat(), "gated_gelu"),
            Kernel::Add => ([COMMON, ADD].concat(), "add"),
            Kernel::Argmax => ([COMMON, ARGMAX].concat(), "argmax"),
        }
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
    pub fn get(&mut self, device: &wgpu::Device, k: Kernel) -> wgpu::ComputePipeline {
        let f16 = self.f16;
        self.cache
            .entry(k)
            .or_insert_with(|| {
                let (src, entry) = k.source(f16);
                let label = format!("{k:?}");
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(&label),
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                });
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&label),
                    layout: None,
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The renamed copies of the weight functions are complete: every function of the first
    /// copy has a `_2` twin, and no module constant is declared twice.
    #[test]
    fn second_matrix_renames_every_function() {
        let src = [WEIGHTS, WVIEW_F32, MATVEC_LEGACY, MATVEC_KQUANT, MATVEC_FLOAT].concat();
        let copy = second_matrix(&src, "2");
        for piece in src.split("fn ").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            assert!(copy.contains(&format!("fn {name}_2(")), "{name} has no copy");
        }
        assert!(!copy.contains("const "));
        assert!(copy.contains("w2[") && !copy.contains(" w["));
    }

    /// Each segment of the three-product kernel calls its own matrix's functions.
    #[test]
    fn multi_segments_use_their_matrices() {
        let k = Kernel::MatMulMulti([GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K], [4, 1, 2], false);
        let (src, entry) = k.source(false);
        assert_eq!(entry, "main_multi");
        let seg = |i: usize| {
            let start = src.find(&format!("fn seg_{i}(")).unwrap_or(0);
            src[start..].split("\n}\n").next().unwrap_or("").to_string()
        };
        assert!(seg(1).contains("dot_q4_k(o3,") && seg(1).contains("store_1("));
        assert!(seg(2).contains("dot_q8_0_2(o0,") && !seg(2).contains("o1"));
        assert!(seg(3).contains("dot_q6_k_3(o1,") && seg(3).contains("p.rb_c"));
    }
}
