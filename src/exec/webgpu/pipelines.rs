//! The kernels: WGSL sources (one file per family under `shaders/`), composed into modules
//! and compiled into pipelines once per kernel, cached by [`Kernel`].

use std::collections::HashMap;

use crate::quant::GgmlType;

const COMMON: &str = include_str!("shaders/common.wgsl");
const WEIGHTS: &str = include_str!("shaders/weights.wgsl");
const DEQUANT: &str = include_str!("shaders/dequant.wgsl");
const EMBED: &str = include_str!("shaders/embed.wgsl");
const QUANTIZE: &str = include_str!("shaders/quantize.wgsl");
const MATMUL_QUANT: &str = include_str!("shaders/matmul_quant.wgsl");
const MATMUL_LEGACY: &str = include_str!("shaders/matmul_legacy.wgsl");
const MATMUL_KQUANT: &str = include_str!("shaders/matmul_kquant.wgsl");
const MATMUL_FLOAT: &str = include_str!("shaders/matmul_float.wgsl");
const RMS_NORM: &str = include_str!("shaders/rms_norm.wgsl");
const ROPE: &str = include_str!("shaders/rope.wgsl");
const KV_STORE: &str = include_str!("shaders/kv_store.wgsl");
const ATTENTION: &str = include_str!("shaders/attention.wgsl");
const GATED_ACT: &str = include_str!("shaders/gated_act.wgsl");
const ADD: &str = include_str!("shaders/add.wgsl");
const ARGMAX: &str = include_str!("shaders/argmax.wgsl");

/// Weight types the WebGPU executor runs (matrix products and embeddings).
pub const SUPPORTED: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// The activation format a quantized weight type's matrix product reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActQuant {
    /// 32-value blocks, d and s (quantize.wgsl `quant_q8_1`): for the legacy types.
    Q8_1,
    /// 256-value blocks (quantize.wgsl `quant_q8_k`): for the K-quants.
    Q8K,
}

impl ActQuant {
    /// For weights of type `t`; None for the float types.
    pub fn for_type(t: GgmlType) -> Option<ActQuant> {
        match t {
            GgmlType::F32 | GgmlType::F16 => None,
            GgmlType::Q4_K | GgmlType::Q6_K => Some(ActQuant::Q8K),
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
    /// u32 words per block.
    pub fn words(self) -> usize {
        match self {
            ActQuant::Q8_1 => 10,
            ActQuant::Q8K => 65,
        }
    }
}

/// One compute kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    Embed(GgmlType),
    Quantize(ActQuant),
    /// A matrix product with weights of a type; `true`: one workgroup cooperates on each
    /// weight row (GPUs), `false`: one invocation per row (CPU-emulated adapters).
    MatMul(GgmlType, bool),
    RmsNorm,
    Rope,
    KvStore,
    Attention,
    GatedSilu,
    GatedGelu,
    Add,
    Argmax,
}

fn type_fn(t: GgmlType) -> &'static str {
    match t {
        GgmlType::F32 => "f32",
        GgmlType::F16 => "f16",
        GgmlType::Q4_0 => "q4_0",
        GgmlType::Q4_1 => "q4_1",
        GgmlType::Q5_0 => "q5_0",
        GgmlType::Q5_1 => "q5_1",
        GgmlType::Q8_0 => "q8_0",
        GgmlType::Q4_K => "q4_k",
        GgmlType::Q6_K => "q6_k",
        _ => unreachable!("kernel for unsupported type {t}"),
    }
}

impl Kernel {
    /// WGSL source and entry point.
    fn source(self) -> (String, &'static str) {
        match self {
            Kernel::Embed(t) => (
                [COMMON, WEIGHTS, DEQUANT, &EMBED.replace("DEQ(", &format!("deq_{}(", type_fn(t)))].concat(),
                "main",
            ),
            Kernel::Quantize(q) => {
                ([COMMON, QUANTIZE].concat(), if q == ActQuant::Q8_1 { "quant_q8_1" } else { "quant_q8_k" })
            }
            Kernel::MatMul(t @ (GgmlType::F32 | GgmlType::F16), coop) => {
                let (wv, xv) = if t == GgmlType::F32 { ("w_f32(", "(") } else { ("w_f16(", "f16_round(") };
                (
                    [COMMON, &MATMUL_FLOAT.replace("WV(", wv).replace("XV(", xv)].concat(),
                    if coop { "main" } else { "main_rows" },
                )
            }
            Kernel::MatMul(t, coop) => (
                [
                    COMMON,
                    WEIGHTS,
                    MATMUL_LEGACY,
                    MATMUL_KQUANT,
                    &MATMUL_QUANT.replace("DOT(", &format!("dot_{}(", type_fn(t))),
                ]
                .concat(),
                if coop { "main" } else { "main_rows" },
            ),
            Kernel::RmsNorm => ([COMMON, RMS_NORM].concat(), "rms_norm"),
            Kernel::Rope => ([COMMON, ROPE].concat(), "rope"),
            Kernel::KvStore => ([COMMON, KV_STORE].concat(), "kv_store"),
            Kernel::Attention => ([COMMON, ATTENTION].concat(), "attention"),
            Kernel::GatedSilu => ([COMMON, GATED_ACT].concat(), "gated_silu"),
            Kernel::GatedGelu => ([COMMON, GATED_ACT].concat(), "gated_gelu"),
            Kernel::Add => ([COMMON, ADD].concat(), "add"),
            Kernel::Argmax => ([COMMON, ARGMAX].concat(), "argmax"),
        }
    }
}

/// Pipelines built so far.
#[derive(Default)]
pub struct Pipelines {
    cache: HashMap<Kernel, wgpu::ComputePipeline>,
}

impl Pipelines {
    /// The pipeline of `k`, built on first use (its bind group layout is derived from the shader).
    pub fn get(&mut self, device: &wgpu::Device, k: Kernel) -> wgpu::ComputePipeline {
        self.cache
            .entry(k)
            .or_insert_with(|| {
                let (src, entry) = k.source();
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
