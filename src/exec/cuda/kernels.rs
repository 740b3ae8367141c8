//! The kernels: every entry point named by [`Kernel`], each living in one NVRTC [`Module`]: a
//! few kernels of one op family ([`Family`]: the products of one weight type, the attention
//! of one head size, ...). A module's source is common.cuh, the macro that selects its entry
//! points, the generated parameter header of its family (params.rs) and the family's files
//! from `kernels/`, compiled by NVRTC to the device's own machine code (a cubin for sm_XY, so
//! the driver has nothing to compile at load) and cached on disk keyed by a hash of that
//! source, the options, the architecture and NVRTC's version (`$WICK_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/wick`, else `~/.cache/wick`). Changing one family's kernels recompiles
//! only its modules.
//!
//! Only the modules a model can launch are compiled: the executor asks for the common ones
//! when it starts, for each weight type's products when a matrix of that type is allocated
//! (before its bytes stream in) and for the attention of a head size when a graph has it
//! ([`Kernels::prefetch`]); worker threads, a core each, compile them in that order while the
//! weights load, and a launch waits only for its own kernel's module (compiling it on its own
//! thread if no worker has started it). Where the driver refuses the cubin (older than the
//! NVRTC that made it), the module is compiled to PTX instead and the driver compiles that
//! (`WICK_CUDA_CUBIN=0` always does).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use super::{err, nvrtc, params};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// An op family: the kernel files its modules are compiled from and the parameter structs
/// they take (params.rs). Each of its modules compiles the family's files with one
/// `MOD_<name>` macro defined, which selects the module's own entry points (the `#ifdef`s
/// around the instantiations in `kernels/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Embedding rows, gated activations, addition, copy (elementwise.cu).
    Elementwise,
    /// RMSNorm, alone or fused with the q8 conversion (norm.cu).
    Norm,
    /// RoPE, RoPE with the KV store, and the KV store (rope.cu, kv_shift.cu).
    Rope,
    /// Attention: one query row, many, decode split along the keys, prefill on the tensor
    /// cores (attention*.cu).
    Attention,
    /// The argmax of the logits (sampling.cu).
    Sampling,
    /// The q8 conversion of activations and the dp4a matrix products, decode and prefill
    /// (matmul_*.cu).
    Matmul,
    /// The tensor-core prefill products (mmq.cu, mmq_small.cu).
    Mmq,
}

impl Family {
    /// The family's files, in order (after common.cuh, the module's selection and the
    /// parameter header).
    fn files(self) -> &'static [(&'static str, &'static str)] {
        const Q8: (&str, &str) = ("q8.cuh", include_str!("kernels/q8.cuh"));
        const MATMUL: (&str, &str) = ("matmul.cuh", include_str!("kernels/matmul.cuh"));
        match self {
            Family::Elementwise => &[("elementwise.cu", include_str!("kernels/elementwise.cu"))],
            Family::Norm => &[Q8, ("norm.cu", include_str!("kernels/norm.cu"))],
            Family::Rope => &[
                ("rope.cu", include_str!("kernels/rope.cu")),
                ("kv_shift.cu", include_str!("kernels/kv_shift.cu")),
            ],
            Family::Attention => &[
                ("attention.cu", include_str!("kernels/attention.cu")),
                ("attention_rows.cu", include_str!("kernels/attention_rows.cu")),
                ("attention_split.cu", include_str!("kernels/attention_split.cu")),
                ("attention_flash.cu", include_str!("kernels/attention_flash.cu")),
                ("attention_decode.cu", include_str!("kernels/attention_decode.cu")),
            ],
            Family::Sampling => &[("sampling.cu", include_str!("kernels/sampling.cu"))],
            Family::Matmul => &[
                Q8,
                ("matmul_quantize.cu", include_str!("kernels/matmul_quantize.cu")),
                MATMUL,
                ("matmul_legacy.cu", include_str!("kernels/matmul_legacy.cu")),
                ("matmul_k.cu", include_str!("kernels/matmul_k.cu")),
                ("matmul_float.cu", include_str!("kernels/matmul_float.cu")),
                ("matmul_blas.cu", include_str!("kernels/matmul_blas.cu")),
            ],
            // The 16-byte load and bit helpers of matmul.cuh.
            Family::Mmq => &[
                MATMUL,
                ("mmq.cu", include_str!("kernels/mmq.cu")),
                ("mmq_small.cu", include_str!("kernels/mmq_small.cu")),
            ],
        }
    }
}

/// One NVRTC program: a few kernels of one [`Family`], small enough that no module bounds a
/// cold start alone, and split so that a model compiles only what it can launch: the
/// products of the weight types it holds, the attention of its head size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    /// `embed`, `gated_act`, `add`, `copy`.
    Elementwise,
    /// `rms_norm`, `rms_norm_q8s`.
    Norm,
    /// `rope`, `rope_kv`, `kv_store`, `kv_shift`.
    Rope,
    /// `argmax`.
    Sampling,
    /// The activations' q8 and f16 conversions and cuBLAS's helpers (matmul_quantize.cu,
    /// matmul_blas.cu).
    Quantize,
    /// `attention`: one query row a block, any head size.
    Attention,
    /// `attention_rows_D`.
    AttentionRows(HeadDims),
    /// `attention_split_D_G`: heads of D values, G query heads a block (a model launches one).
    AttentionSplit(HeadDims, u8),
    /// `attention_flash_D`.
    AttentionFlash(HeadDims),
    /// `attention_decode_D_G` (heads of 64 and 128), as `AttentionSplit`.
    AttentionDecode(HeadDims, u8),
    /// `matvec_T`, `matvec_T_r8`.
    MatVec(MatVecType),
    /// `mmv_T`, `mmv2_T`, `mmv3_T` and their `_o` builds.
    Mmv(Block),
    /// `mmvn_T`, `mmvn2_T` or `mmvn3_T` by form.
    MmvRows(Block, MmvForm),
    /// `mmv3_kmix`, `mmv3_kmix_o`.
    Mmv3Kmix,
    /// `mmq_T`, `mmq_T_n32` and `mmqs_T` where the type has one.
    Mmq(Block),
    /// `mmq_reduce`.
    MmqReduce,
}

impl Module {
    /// Every module, each once (those of [`Kernel::all`], in its order).
    pub fn all() -> Vec<Module> {
        let mut v: Vec<Module> = Vec::new();
        for k in Kernel::all() {
            if !v.contains(&k.module()) {
                v.push(k.module());
            }
        }
        v
    }

    /// The family whose files and parameter structs the module compiles.
    pub fn family(self) -> Family {
        match self {
            Module::Elementwise => Family::Elementwise,
            Module::Norm => Family::Norm,
            Module::Rope => Family::Rope,
            Module::Sampling => Family::Sampling,
            Module::Attention
            | Module::AttentionRows(_)
            | Module::AttentionSplit(..)
            | Module::AttentionFlash(_)
            | Module::AttentionDecode(..) => Family::Attention,
            Module::Quantize
            | Module::MatVec(_)
            | Module::Mmv(_)
            | Module::MmvRows(..)
            | Module::Mmv3Kmix => Family::Matmul,
            Module::Mmq(_) | Module::MmqReduce => Family::Mmq,
        }
    }

    /// Lowercase name, for the cache file, the selecting macro (`MOD_<name>`) and error
    /// messages.
    pub fn name(self) -> String {
        let fixed = match self {
            Module::Elementwise => "elementwise",
            Module::Norm => "norm",
            Module::Rope => "rope",
            Module::Sampling => "sampling",
            Module::Quantize => "quantize",
            Module::Attention => "attention",
            Module::AttentionRows(d) => return format!("attention_rows_{}", d.size()),
            Module::AttentionSplit(d, g) => return format!("attention_split_{}_{g}", d.size()),
            Module::AttentionFlash(d) => return format!("attention_flash_{}", d.size()),
            Module::AttentionDecode(d, g) => return format!("attention_decode_{}_{g}", d.size()),
            Module::MatVec(t) => return format!("matvec_{}", t.suffix()),
            Module::Mmv(t) => return format!("mmv_{}", t.suffix()),
            Module::MmvRows(t, form) => return format!("{}_{}", form.mmvn(), t.suffix()),
            Module::Mmv3Kmix => "mmv3_kmix",
            Module::Mmq(t) => return format!("mmq_{}", t.suffix()),
            Module::MmqReduce => "mmq_reduce",
        };
        fixed.to_string()
    }

    /// The macros that select the module's entry points from its family's files: `MOD_<name>`
    /// (the `#ifdef`s around the instantiations), for `mmvn` kernels the type's and the form.
    fn defines(self) -> String {
        match self {
            Module::MmvRows(t, form) => {
                format!("#define MOD_mmvn_{} 1\n#define MMVN_FORM {}\n", t.suffix(), form.number())
            }
            _ => format!("#define MOD_{} 1\n", self.name()),
        }
    }

    /// The modules whose products a matrix of type `t` can take in a prompt and one-token
    /// decode steps (prefill, with `mmq` on the tensor cores, and decode), most needed first;
    /// none for types without kernels. Not the `mmvn` kernels of steps of 2 to 15 rows
    /// ([`Module::for_few_rows`]): the slowest to compile, asked for by the graphs that take
    /// them.
    pub(crate) fn for_weights(t: GgmlType, mmq: bool) -> Vec<Module> {
        match (Block::of(t), MatVecType::of(t)) {
            (Some(b), _) => {
                let mut v = if mmq { vec![Module::Mmq(b), Module::MmqReduce] } else { Vec::new() };
                v.extend([Module::MatVec(MatVecType::Block(b)), Module::Mmv(b)]);
                v
            }
            (None, Some(f)) => vec![Module::MatVec(f)],
            (None, None) => Vec::new(),
        }
    }

    /// The `mmvn` modules of type `t` (products of a few rows: decode steps of several
    /// sequences, short prompts), none for types without them.
    pub(crate) fn for_few_rows(t: GgmlType) -> Vec<Module> {
        Block::of(t).map_or(Vec::new(), |b| MmvForm::ALL.map(|form| Module::MmvRows(b, form)).to_vec())
    }

    /// The attention modules an op with heads of `head_dim` values, `group` query heads a KV
    /// head, can launch: prefill on the tensor cores with `flash`, else the many-row kernel;
    /// decode split along the keys (on the tensor cores with `decode_mma`), built for the
    /// group; the one-row kernel for other head sizes.
    pub(crate) fn for_attention(head_dim: usize, group: usize, flash: bool, decode_mma: bool) -> Vec<Module> {
        let dims = match head_dim {
            64 => HeadDims::D64,
            128 => HeadDims::D128,
            256 => HeadDims::D256,
            _ => return vec![Module::Attention, Module::AttentionRows(HeadDims::fitting(head_dim))],
        };
        let prefill = if flash { Module::AttentionFlash(dims) } else { Module::AttentionRows(dims) };
        let heads = dims.split_group(group);
        let decode = if decode_mma && dims != HeadDims::D256 {
            Module::AttentionDecode(dims, heads)
        } else {
            Module::AttentionSplit(dims, heads)
        };
        vec![prefill, decode]
    }
}

/// The eight block types of the quantized kernels (decode, prefill and tensor-core products).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Block {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl Block {
    const ALL: [Block; 8] =
        [Block::Q4_0, Block::Q4_1, Block::Q5_0, Block::Q5_1, Block::Q8_0, Block::Q4K, Block::Q5K, Block::Q6K];

    /// The kernels' block type for weights of type `t`, if they have one.
    pub(crate) fn of(t: GgmlType) -> Option<Block> {
        Some(match t {
            GgmlType::Q4_0 => Block::Q4_0,
            GgmlType::Q4_1 => Block::Q4_1,
            GgmlType::Q5_0 => Block::Q5_0,
            GgmlType::Q5_1 => Block::Q5_1,
            GgmlType::Q8_0 => Block::Q8_0,
            GgmlType::Q4_K => Block::Q4K,
            GgmlType::Q5_K => Block::Q5K,
            GgmlType::Q6_K => Block::Q6K,
            _ => return None,
        })
    }

    /// The suffix of the entry points (`mmv_q4_k`).
    fn suffix(self) -> &'static str {
        match self {
            Block::Q4_0 => "q4_0",
            Block::Q4_1 => "q4_1",
            Block::Q5_0 => "q5_0",
            Block::Q5_1 => "q5_1",
            Block::Q8_0 => "q8_0",
            Block::Q4K => "q4_k",
            Block::Q5K => "q5_k",
            Block::Q6K => "q6_k",
        }
    }
}

/// Weights of the dp4a prefill products (`matvec_*`): a block type or a float type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatVecType {
    Block(Block),
    F16,
    BF16,
    F32,
}

impl MatVecType {
    /// The kernels' type for weights of type `t`, if they have one.
    pub(crate) fn of(t: GgmlType) -> Option<MatVecType> {
        match t {
            GgmlType::F16 => Some(MatVecType::F16),
            GgmlType::BF16 => Some(MatVecType::BF16),
            GgmlType::F32 => Some(MatVecType::F32),
            _ => Block::of(t).map(MatVecType::Block),
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            MatVecType::Block(b) => b.suffix(),
            MatVecType::F16 => "f16",
            MatVecType::BF16 => "bf16",
            MatVecType::F32 => "f32",
        }
    }
}

/// The decode products (matmul.cuh): one matrix (`mmv_`), gate and up with their activation
/// (`mmv2_`), or three matrices of one input (`mmv3_`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MmvForm {
    One,
    Gated,
    Three,
}

impl MmvForm {
    const ALL: [MmvForm; 3] = [MmvForm::One, MmvForm::Gated, MmvForm::Three];

    /// Its number: 1, 2 (gated), 3 (three matrices); the names of its entry points carry it
    /// from 2 (`mmv2_`, `mmvn3_`).
    fn number(self) -> usize {
        match self {
            MmvForm::One => 1,
            MmvForm::Gated => 2,
            MmvForm::Three => 3,
        }
    }

    /// `mmvn` and the number from 2 on: the prefix of its `mmvn` entry points.
    fn mmvn(self) -> String {
        match self {
            MmvForm::One => "mmvn".into(),
            f => format!("mmvn{}", f.number()),
        }
    }
}

/// The head size a many-row attention entry point is unrolled for (`attention_rows_64`,
/// `_128`, `_256`): heads of up to that many values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeadDims {
    D64,
    D128,
    D256,
}

impl HeadDims {
    /// The smallest entry point for heads of `head_dim` values (at most 256).
    pub(crate) fn fitting(head_dim: usize) -> HeadDims {
        match head_dim {
            ..=64 => HeadDims::D64,
            65..=128 => HeadDims::D128,
            _ => HeadDims::D256,
        }
    }

    /// The head size itself.
    pub(crate) fn size(self) -> usize {
        match self {
            HeadDims::D64 => 64,
            HeadDims::D128 => 128,
            HeadDims::D256 => 256,
        }
    }

    /// The head group of the `attention_split_*` (and `attention_decode_*`) kernel for `group`
    /// query heads a KV head: the smallest that holds them, else the largest.
    pub(crate) fn split_group(self, group: usize) -> u8 {
        let choices = self.split_heads();
        choices.iter().copied().find(|&h| usize::from(h) >= group).unwrap_or(choices[choices.len() - 1])
    }

    /// The head-group sizes of `attention_split_*` for heads of this size (group × size at
    /// most 1024: the block's registers and shared memory).
    pub(crate) fn split_heads(self) -> &'static [u8] {
        match self {
            HeadDims::D256 => &[1, 2, 4],
            _ => &[1, 2, 4, 8],
        }
    }
}

/// A kernel entry point. It takes one parameter, the struct of params.rs that
/// [`Kernel::params`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Embed,
    GatedAct,
    Add,
    Copy,
    RmsNorm,
    RmsNormQ8,
    Rope,
    RopeKv,
    KvStore,
    /// `KvShiftParams`: a context shift's rotation of cached keys (kv_shift.cu).
    KvShift,
    Attention,
    AttentionRows(HeadDims),
    /// `AttentionSplitParams`: decode attention over chunks of the keys, `heads` query heads
    /// (1, 2, 4 or 8; at most 4 for 256 dimensions) a block.
    AttentionSplit {
        dims: HeadDims,
        heads: u8,
    },
    /// `AttentionFlashParams`: prefill attention on the tensor cores (heads of 64, 128, 256).
    AttentionFlash(HeadDims),
    /// `AttentionSplitParams`: the split kernel's decode attention on the tensor cores, keys
    /// streamed by cp.async (attention_decode.cu; heads of 64 and 128, `heads` 1, 2, 4 or 8).
    AttentionDecode {
        dims: HeadDims,
        heads: u8,
    },
    Argmax,
    QuantizeQ8_0,
    QuantizeQ8K,
    RoundF16,
    /// `HalvesParams`: activations to f16 or bf16 for cuBLAS (matmul_blas.cu).
    ToHalves,
    /// `Q8HalvesParams`: q8 activations to f16 for cuBLAS (matmul_blas.cu).
    Q8Halves,
    /// `BiasRowsParams`: a bias added to the rows of cuBLAS's product (matmul_blas.cu).
    BiasRows,
    QuantizeQ8s,
    QuantizeQ8Ks,
    /// `MatVecParams`; `r8`: eight activation rows a warp.
    MatVec {
        t: MatVecType,
        r8: bool,
    },
    /// `MmvParams`, `Mmv2Params` or `Mmv3Params` by form: the decode products of up to eight
    /// activation rows (the tokens of a step of several sequences) at once, in the split q8
    /// layout of all the rows (`mmvn_T`, `mmvn2_T`, `mmvn3_T`, matmul.cuh).
    MmvRows {
        t: Block,
        form: MmvForm,
    },
    /// `MmvParams`, `Mmv2Params` or `Mmv3Params` by form; `occ`: the `_o` build, limited in
    /// registers for more resident blocks (see [`Kernel::decode_variant`]).
    Mmv {
        t: Block,
        form: MmvForm,
        occ: bool,
    },
    /// `Mmv3Params`: three K-quant matrices of mixed types.
    Mmv3Kmix {
        occ: bool,
    },
    /// `MmqParams`; `n32`: tiles of 32 tokens instead of 64.
    Mmq {
        t: Block,
        n32: bool,
    },
    /// `MmqParams`: 128-token tiles of 128 weight rows (`mmq_T_l`; [`MMQ_LARGE_TYPES`]).
    MmqLarge {
        t: Block,
    },
    /// `DequantParams`: weight rows to f16 for cuBLAS (mmq.cu, `dequant_T`).
    Dequant {
        t: Block,
    },
    /// `MmqParams`: the sum of a split-K product's partial results.
    MmqReduce,
    /// `MmqParams`: the tensor-core product of 7-32 tokens, weight fragments loaded from
    /// global memory (mmq_small.cu; Q4_K and Q6_K).
    MmqSmall {
        t: Block,
    },
}

/// The weight types with a `mmqs_T` kernel (mmq_small.cu).
pub(crate) const MMQ_SMALL_TYPES: [Block; 2] = [Block::Q4K, Block::Q6K];
/// The weight types with a `mmq_T_l` kernel (128 × 128 tiles): the legacy types.
pub(crate) const MMQ_LARGE_TYPES: [Block; 5] =
    [Block::Q4_0, Block::Q4_1, Block::Q5_0, Block::Q5_1, Block::Q8_0];

impl Kernel {
    /// Every entry point.
    pub(crate) fn all() -> Vec<Kernel> {
        use Kernel::*;
        let mut v = vec![
            Embed,
            GatedAct,
            Add,
            Copy,
            RmsNorm,
            RmsNormQ8,
            Rope,
            RopeKv,
            KvStore,
            KvShift,
            Attention,
            AttentionRows(HeadDims::D64),
            AttentionRows(HeadDims::D128),
            AttentionRows(HeadDims::D256),
            AttentionFlash(HeadDims::D64),
            AttentionFlash(HeadDims::D128),
            AttentionFlash(HeadDims::D256),
            Argmax,
            QuantizeQ8_0,
            QuantizeQ8K,
            RoundF16,
            ToHalves,
            Q8Halves,
            BiasRows,
            QuantizeQ8s,
            QuantizeQ8Ks,
        ];
        for dims in [HeadDims::D64, HeadDims::D128, HeadDims::D256] {
            v.extend(HeadDims::split_heads(dims).iter().map(|&heads| AttentionSplit { dims, heads }));
        }
        for dims in [HeadDims::D64, HeadDims::D128] {
            v.extend(HeadDims::split_heads(dims).iter().map(|&heads| AttentionDecode { dims, heads }));
        }
        for occ in [false, true] {
            for t in Block::ALL {
                v.extend([MmvForm::One, MmvForm::Gated, MmvForm::Three].map(|form| Mmv { t, form, occ }));
            }
            v.push(Mmv3Kmix { occ });
        }
        let matvec = Block::ALL.map(MatVecType::Block).into_iter().chain([
            MatVecType::F32,
            MatVecType::F16,
            MatVecType::BF16,
        ]);
        for t in matvec {
            v.extend([false, true].map(|r8| MatVec { t, r8 }));
        }
        for t in Block::ALL {
            v.extend([false, true].map(|n32| Mmq { t, n32 }));
            v.push(Dequant { t });
            v.extend([MmvForm::One, MmvForm::Gated, MmvForm::Three].map(|form| MmvRows { t, form }));
        }
        v.push(MmqReduce);
        v.extend(MMQ_SMALL_TYPES.map(|t| MmqSmall { t }));
        v.extend(MMQ_LARGE_TYPES.map(|t| MmqLarge { t }));
        v
    }

    /// The entry point's name in the CUDA C source.
    pub(crate) fn name(self) -> String {
        let fixed = match self {
            Kernel::Embed => "embed",
            Kernel::GatedAct => "gated_act",
            Kernel::Add => "add",
            Kernel::Copy => "copy",
            Kernel::RmsNorm => "rms_norm",
            Kernel::RmsNormQ8 => "rms_norm_q8s",
            Kernel::Rope => "rope",
            Kernel::RopeKv => "rope_kv",
            Kernel::KvStore => "kv_store",
            Kernel::KvShift => "kv_shift",
            Kernel::Attention => "attention",
            Kernel::AttentionRows(HeadDims::D64) => "attention_rows_64",
            Kernel::AttentionRows(HeadDims::D128) => "attention_rows_128",
            Kernel::AttentionRows(HeadDims::D256) => "attention_rows_256",
            Kernel::AttentionSplit { dims, heads } => {
                return format!("attention_split_{}_{heads}", dims.size())
            }
            Kernel::AttentionFlash(dims) => return format!("attention_flash_{}", dims.size()),
            Kernel::AttentionDecode { dims, heads } => {
                return format!("attention_decode_{}_{heads}", dims.size())
            }
            Kernel::Argmax => "argmax",
            Kernel::MmqReduce => "mmq_reduce",
            Kernel::QuantizeQ8_0 => "quantize_q8_0",
            Kernel::QuantizeQ8K => "quantize_q8_k",
            Kernel::RoundF16 => "round_f16",
            Kernel::ToHalves => "to_halves",
            Kernel::Q8Halves => "q8_halves",
            Kernel::BiasRows => "bias_rows",
            Kernel::QuantizeQ8s => "quantize_q8s",
            Kernel::QuantizeQ8Ks => "quantize_q8ks",
            Kernel::MatVec { t, r8 } => {
                return format!("matvec_{}{}", t.suffix(), if r8 { "_r8" } else { "" })
            }
            Kernel::Mmv { t, form, occ } => {
                let prefix = match form {
                    MmvForm::One => "mmv",
                    MmvForm::Gated => "mmv2",
                    MmvForm::Three => "mmv3",
                };
                return format!("{prefix}_{}{}", t.suffix(), if occ { "_o" } else { "" });
            }
            Kernel::Mmv3Kmix { occ } => return format!("mmv3_kmix{}", if occ { "_o" } else { "" }),
            Kernel::MmvRows { t, form } => return format!("{}_{}", form.mmvn(), t.suffix()),
            Kernel::Mmq { t, n32 } => return format!("mmq_{}{}", t.suffix(), if n32 { "_n32" } else { "" }),
            Kernel::MmqSmall { t } => return format!("mmqs_{}", t.suffix()),
            Kernel::MmqLarge { t } => return format!("mmq_{}_l", t.suffix()),
            Kernel::Dequant { t } => return format!("dequant_{}", t.suffix()),
        };
        fixed.to_string()
    }

    /// The name of the parameter struct the entry point takes (params.rs).
    pub(crate) fn params(self) -> &'static str {
        match self {
            Kernel::Embed => "EmbedParams",
            Kernel::GatedAct => "GatedActParams",
            Kernel::Add => "AddParams",
            Kernel::Copy => "CopyParams",
            Kernel::RmsNorm => "RmsNormParams",
            Kernel::RmsNormQ8 => "RmsNormQ8Params",
            Kernel::Rope => "RopeParams",
            Kernel::RopeKv => "RopeKvParams",
            Kernel::KvStore => "KvStoreParams",
            Kernel::KvShift => "KvShiftParams",
            Kernel::Attention | Kernel::AttentionRows(_) => "AttentionParams",
            Kernel::AttentionSplit { .. } | Kernel::AttentionDecode { .. } => "AttentionSplitParams",
            Kernel::AttentionFlash(_) => "AttentionFlashParams",
            Kernel::Argmax => "ArgmaxParams",
            Kernel::QuantizeQ8_0 | Kernel::QuantizeQ8K => "QuantizeParams",
            Kernel::RoundF16 => "RoundF16Params",
            Kernel::ToHalves => "HalvesParams",
            Kernel::Q8Halves => "Q8HalvesParams",
            Kernel::BiasRows => "BiasRowsParams",
            Kernel::QuantizeQ8s | Kernel::QuantizeQ8Ks => "QuantizeSplitParams",
            Kernel::MatVec { .. } => "MatVecParams",
            Kernel::Mmv { form: MmvForm::One, .. } | Kernel::MmvRows { form: MmvForm::One, .. } => {
                "MmvParams"
            }
            Kernel::Mmv { form: MmvForm::Gated, .. } | Kernel::MmvRows { form: MmvForm::Gated, .. } => {
                "Mmv2Params"
            }
            Kernel::Mmv { form: MmvForm::Three, .. }
            | Kernel::MmvRows { form: MmvForm::Three, .. }
            | Kernel::Mmv3Kmix { .. } => "Mmv3Params",
            Kernel::Mmq { .. } | Kernel::MmqReduce | Kernel::MmqSmall { .. } | Kernel::MmqLarge { .. } => {
                "MmqParams"
            }
            Kernel::Dequant { .. } => "DequantParams",
        }
    }

    /// The module the entry point is compiled in.
    pub(crate) fn module(self) -> Module {
        match self {
            Kernel::Embed | Kernel::GatedAct | Kernel::Add | Kernel::Copy => Module::Elementwise,
            Kernel::RmsNorm | Kernel::RmsNormQ8 => Module::Norm,
            Kernel::Rope | Kernel::RopeKv | Kernel::KvStore | Kernel::KvShift => Module::Rope,
            Kernel::Attention => Module::Attention,
            Kernel::AttentionRows(d) => Module::AttentionRows(d),
            Kernel::AttentionSplit { dims, heads } => Module::AttentionSplit(dims, heads),
            Kernel::AttentionDecode { dims, heads } => Module::AttentionDecode(dims, heads),
            Kernel::AttentionFlash(d) => Module::AttentionFlash(d),
            Kernel::Argmax => Module::Sampling,
            Kernel::QuantizeQ8_0
            | Kernel::QuantizeQ8K
            | Kernel::RoundF16
            | Kernel::ToHalves
            | Kernel::Q8Halves
            | Kernel::BiasRows
            | Kernel::QuantizeQ8s
            | Kernel::QuantizeQ8Ks => Module::Quantize,
            Kernel::MatVec { t, .. } => Module::MatVec(t),
            Kernel::MmvRows { t, form } => Module::MmvRows(t, form),
            Kernel::Mmv { t, .. } => Module::Mmv(t),
            Kernel::Mmv3Kmix { .. } => Module::Mmv3Kmix,
            Kernel::Mmq { t, .. }
            | Kernel::MmqSmall { t }
            | Kernel::MmqLarge { t }
            | Kernel::Dequant { t } => Module::Mmq(t),
            Kernel::MmqReduce => Module::MmqReduce,
        }
    }

    /// Bytes of dynamic shared memory a launch of the kernel takes (0 for all but the tensor-core
    /// decode attention: its warps' rings of key and value tiles, attention_decode.cu).
    pub(crate) fn dynamic_smem(self) -> u32 {
        match self {
            // 4 warps · stages · (a key and a value tile of 16 rows of size + 8 halves).
            Kernel::AttentionDecode { dims, .. } => {
                (4 * decode_stages() * 2 * 16 * (dims.size() + 8) * 2) as u32
            }
            _ => 0,
        }
    }

    /// Whether the kernel is written for programmatic dependent launch: it calls `pdl_wait`
    /// (common.cuh) before touching anything an earlier kernel writes, so it may be launched
    /// while that kernel still runs.
    pub(crate) fn pdl_aware(self) -> bool {
        matches!(
            self,
            Kernel::RmsNormQ8
                | Kernel::QuantizeQ8s
                | Kernel::QuantizeQ8Ks
                | Kernel::RopeKv
                | Kernel::Attention
                | Kernel::AttentionSplit { .. }
                | Kernel::AttentionDecode { .. }
                | Kernel::Embed
                | Kernel::Mmv { .. }
                | Kernel::MmvRows { .. }
                | Kernel::Mmv3Kmix { .. }
        )
    }

    /// The build of a decode kernel to launch on rows of `k` values: the `_o` one (at most 80
    /// registers, six blocks a SM) for short rows of 4- and 5-bit types, where a warp has few
    /// loads to issue and more resident warps hide the memory latency better; the other one
    /// (at most 128 registers, four blocks a SM: `MMV_MIN_BLOCKS` in matmul.cuh) for long
    /// rows, where a warp's own unrolled loads keep the memory busy, and for Q8_0. Measured on the H100 (tg128): 1b Q4_K_M 999 -> 1172 tok/s, Q4_0 1285 ->
    /// 1330, but Q8_0 1162 -> 1015 and 8b Q4_K_M 276 -> 233 with `_o`. `force` (from
    /// `WICK_CUDA_OCC`): `Some(false)` never, `Some(true)` always. Other kernels: unchanged.
    pub(crate) fn decode_variant(self, k: usize, force: Option<bool>) -> Kernel {
        let short = |q8_0: bool| force.unwrap_or(k <= 2048 && !q8_0);
        match self {
            Kernel::Mmv { t, form, .. } => Kernel::Mmv { t, form, occ: short(t == Block::Q8_0) },
            Kernel::Mmv3Kmix { .. } => Kernel::Mmv3Kmix { occ: short(false) },
            other => other,
        }
    }
}

/// NVRTC options. No FMA contraction: the CPU reference rounds every product, and token-exact
/// agreement is worth more than the few percent contraction would buy in memory-bound kernels.
fn options(arch: (i32, i32)) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture=compute_{}{}", arch.0, arch.1),
        "--fmad=false".into(),
        "-std=c++17".into(),
    ];
    // Tuning knobs for experiments: registers of the decode kernels (see matmul.cuh) and of
    // the flash attention kernel (attention_flash.cu).
    for (var, define) in [
        ("WICK_CUDA_MMV_MIN_BLOCKS", "MMV_MIN_BLOCKS"),
        ("WICK_CUDA_MMV_MIN_BLOCKS_Q6K", "MMV_MIN_BLOCKS_Q6K"),
        ("WICK_CUDA_FLASH_MIN_BLOCKS", "FA_MIN_BLOCKS"),
        ("WICK_CUDA_SPLIT_MIN_CHUNK", "AS_MIN_CHUNK"),
        ("WICK_CUDA_MMV_UNROLL", "MMV_UNROLL"),
        ("WICK_CUDA_MMVN_ROWS", "MMVN_ROWS"),
        ("WICK_CUDA_MMVN_UNROLL", "MMVN_UNROLL"),
        ("WICK_CUDA_MMVN_MIN_BLOCKS", "MMVN_MIN_BLOCKS"),
        ("WICK_CUDA_MMQ_MIN_BLOCKS", "MMQ_MIN_BLOCKS"),
        ("WICK_CUDA_MMQ_LOADS", "MMQ_LOADS"),
        ("WICK_CUDA_MMQ_MIN_BLOCKS_LARGE", "MMQ_MIN_BLOCKS_LARGE"),
    ] {
        if let Some(n) = std::env::var(var).ok().and_then(|n| n.parse::<u32>().ok()) {
            o.push(format!("-D{define}={n}"));
        }
    }
    // The decode attention's stages: compiled in, and counted by `Kernel::dynamic_smem`.
    o.push(format!("-DAD_STAGES={}", decode_stages()));
    o
}

/// Stages of the tensor-core decode attention's rings (3; `WICK_CUDA_DECODE_STAGES`, 2 to 4,
/// an experiment knob): the tiles a warp has in flight, plus the one it computes.
/// Read once per process: launches ask for it too (`Kernel::dynamic_smem`).
pub(crate) fn decode_stages() -> usize {
    static STAGES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *STAGES.get_or_init(|| {
        std::env::var("WICK_CUDA_DECODE_STAGES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(3usize)
            .clamp(2, 4)
    })
}

/// The CUDA C source of `module`, as NVRTC compiles it: common.cuh, the macro that selects
/// the module's entry points (`MOD_<name>`), the generated parameter header of its family,
/// then the family's files.
pub fn source(module: Module) -> String {
    let common = kernel_file("common.cuh", include_str!("kernels/common.cuh"));
    let mut s = format!("// ---- common.cuh\n{common}\n");
    s += &format!("// ---- module {}\n{}", module.name(), module.defines());
    s += &format!("// ---- params.rs (generated)\n{}\n", params::header(module.family()));
    for (name, text) in module.family().files() {
        s += &format!("// ---- {name}\n{}\n", kernel_file(name, text));
    }
    s
}

/// A kernel file's text: the one built in, or, for kernel work on a GPU machine without
/// rebuilding, the file of that name in `$WICK_CUDA_KERNEL_DIR` where it is set and has one
/// (the cache key is the source, so an edited file compiles afresh).
fn kernel_file(name: &str, built_in: &'static str) -> std::borrow::Cow<'static, str> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        std::env::var_os("WICK_CUDA_KERNEL_DIR").filter(|v| !v.is_empty()).map(PathBuf::from)
    });
    match dir.as_ref().and_then(|d| std::fs::read_to_string(d.join(name)).ok()) {
        Some(text) => text.into(),
        None => built_in.into(),
    }
}

/// FNV-1a, 64 bits: stable across Rust versions (the std hasher is not).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("WICK_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("wick")))
        .or_else(|| env("HOME").map(|p| p.join(".cache").join("wick")))
}

/// Compile `module` for `arch` with NVRTC (no GPU needed), returning the PTX text.
pub fn compile_module(module: Module, arch: (i32, i32)) -> Result<String> {
    let ptx = nvrtc_compile(module, options(arch), nvrtc::Output::Ptx)?;
    String::from_utf8(ptx).map_err(|e| err(format!("NVRTC's PTX of the {} kernels: {e}", module.name())))
}

/// `module` compiled with `opts` by the NVRTC wick chose (nvrtc.rs).
fn nvrtc_compile(module: Module, opts: Vec<String>, out: nvrtc::Output) -> Result<Vec<u8>> {
    let lib = nvrtc::get().map_err(err)?;
    lib.compile(&source(module), &opts, out)
        .map_err(|e| err(format!("NVRTC could not compile the {} kernels: {e}", module.name())))
}

/// Compile every module for `arch` with NVRTC (no GPU needed, a thread a core), returning
/// their PTX texts one after the other. Checks that every [`Kernel`] is an entry point of its
/// module's PTX, taking the one parameter struct `launch` passes, and that a module holds no
/// other entry point (a missing `#ifdef MOD_` would compile a kernel into every module of
/// its family), so CI (which runs this without a GPU) catches a name or module the enum gets
/// wrong.
pub fn compile(arch: (i32, i32)) -> Result<String> {
    let modules = Module::all();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(modules.len());
    let mut ptx: Vec<Option<Result<String>>> = (0..modules.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&m) = modules.get(i) else { return done };
                        done.push((i, compile_module(m, arch)));
                    }
                })
            })
            .collect();
        for j in jobs {
            for (i, r) in j.join().unwrap_or_default() {
                ptx[i] = Some(r);
            }
        }
    });
    let mut all = String::new();
    for (&m, ptx) in modules.iter().zip(ptx) {
        let ptx = ptx.ok_or_else(|| err(format!("the {} kernels were not compiled", m.name())))??;
        let kernels: Vec<Kernel> = Kernel::all().into_iter().filter(|k| k.module() == m).collect();
        for k in &kernels {
            let name = k.name();
            if !ptx.contains(&format!(".entry {name}(")) {
                return Err(err(format!("kernel '{name}' is not an entry point of the {} module", m.name())));
            }
            // Its one parameter has the size of the struct `launch` passes.
            let size = params::size_of(k.params()).unwrap_or(0);
            if !ptx.contains(&format!("{name}_param_0[{size}]")) || ptx.contains(&format!("{name}_param_1")) {
                return Err(err(format!("kernel '{name}' does not take one {} ({size} bytes)", k.params())));
            }
        }
        let entries = ptx.matches(".entry ").count();
        if entries != kernels.len() {
            return Err(err(format!(
                "the {} module has {entries} entry points, not its {} kernels",
                m.name(),
                kernels.len()
            )));
        }
        all += &ptx;
    }
    Ok(all)
}

/// Compile `module` for `arch` with NVRTC to the GPU's own machine code (a cubin ELF for
/// sm_XY; no GPU needed).
pub fn compile_cubin(module: Module, arch: (i32, i32)) -> Result<Vec<u8>> {
    let mut opts = options(arch);
    opts[0] = format!("--gpu-architecture=sm_{}{}", arch.0, arch.1);
    nvrtc_compile(module, opts, nvrtc::Output::Cubin)
}

/// The chosen NVRTC's version, part of the cache key (another NVRTC makes other code).
fn nvrtc_version() -> (i32, i32) {
    nvrtc::get().map_or((0, 0), |n| n.version)
}

/// `module`'s code for `arch` (a cubin, or PTX when `cubin` is false), from the disk cache or
/// freshly compiled (then cached; a cache that cannot be written is not an error).
fn code(module: Module, arch: (i32, i32), cubin: bool) -> Result<Vec<u8>> {
    let (v0, v1) = nvrtc_version();
    let key = fnv1a(format!("{}\n{:?}\nnvrtc {v0}.{v1}", source(module), options(arch)).as_bytes());
    let ext = if cubin { "cubin" } else { "ptx" };
    let file = format!("kernels-{}-sm{}{}-{key:016x}.{ext}", module.name(), arch.0, arch.1);
    let path = cache_dir().map(|d| d.join(file));
    if let Some(bytes) = path.as_ref().and_then(|p| std::fs::read(p).ok()).filter(|b| !b.is_empty()) {
        return Ok(bytes);
    }
    let bytes = if cubin { compile_cubin(module, arch)? } else { compile_module(module, arch)?.into_bytes() };
    if let Some(p) = &path {
        let _ = p.parent().map(std::fs::create_dir_all);
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() && std::fs::rename(&tmp, p).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok(bytes)
}

/// One module's code for one architecture, options and kind (cubin or PTX), made once a
/// process: queued by [`request`], then made by a worker thread, or by the first [`wait`]
/// that finds it still queued (a launch never waits behind modules it does not need).
struct Build {
    module: Module,
    arch: (i32, i32),
    cubin: bool,
    state: Mutex<BuildState>,
    done: Condvar,
}

enum BuildState {
    Queued,
    Running,
    /// The code, or the error's message.
    Done(std::result::Result<Arc<Vec<u8>>, String>),
}

/// What tells builds apart: the module, the architecture, cubin or PTX, and the options
/// (tuning knobs read from the environment).
type BuildKey = (Module, (i32, i32), bool, Vec<String>);

/// Every build of the process, the queue of those not started, and the workers taking them.
#[derive(Default)]
struct Builds {
    all: HashMap<BuildKey, Arc<Build>>,
    queue: VecDeque<Arc<Build>>,
    workers: usize,
}

fn builds() -> MutexGuard<'static, Builds> {
    static BUILDS: OnceLock<Mutex<Builds>> = OnceLock::new();
    lock(BUILDS.get_or_init(Mutex::default))
}

/// A lock that a panicking holder did not spoil (the state it guards is set in one step).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Worker threads that make queued modules: a core each (`WICK_CUDA_COMPILE_THREADS`).
fn max_workers() -> usize {
    std::env::var("WICK_CUDA_COMPILE_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()))
        .max(1)
}

/// Queue `module`'s code for `arch` (a cubin, or PTX) unless it is made, being made or queued,
/// and start a worker if fewer than [`max_workers`] run.
fn request(module: Module, arch: (i32, i32), cubin: bool) -> Arc<Build> {
    let mut b = builds();
    let key = (module, arch, cubin, options(arch));
    if let Some(build) = b.all.get(&key) {
        return build.clone();
    }
    let build =
        Arc::new(Build { module, arch, cubin, state: Mutex::new(BuildState::Queued), done: Condvar::new() });
    b.all.insert(key, build.clone());
    b.queue.push_back(build.clone());
    if b.workers < max_workers() && std::thread::Builder::new().name("wick-nvrtc".into()).spawn(work).is_ok()
    {
        b.workers += 1;
    }
    build
}

/// A worker: make queued modules until the queue is empty.
fn work() {
    loop {
        let next = {
            let mut b = builds();
            loop {
                match b.queue.pop_front() {
                    // Started under the lock, so that `settle` sees it running.
                    Some(build) if start(&build) => break build,
                    Some(_) => {}
                    None => {
                        b.workers -= 1;
                        return;
                    }
                }
            }
        };
        finish(&next);
    }
}

/// Take `build` for this thread (false: another thread took it).
fn start(build: &Build) -> bool {
    let mut state = lock(&build.state);
    let queued = matches!(*state, BuildState::Queued);
    if queued {
        *state = BuildState::Running;
    }
    queued
}

/// Make `build`, taken by [`start`].
fn finish(build: &Build) {
    let (module, arch, cubin) = (build.module, build.arch, build.cubin);
    let t = std::time::Instant::now();
    let made = std::panic::catch_unwind(move || code(module, arch, cubin));
    trace(|| {
        format!(
            "{} {} in {:.3} s",
            module.name(),
            if cubin { "cubin" } else { "PTX" },
            t.elapsed().as_secs_f64()
        )
    });
    let made = match made {
        Ok(Ok(bytes)) => Ok(Arc::new(bytes)),
        Ok(Err(Error::Executor { message, .. })) => Err(message),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("compiling the {} kernels panicked", module.name())),
    };
    *lock(&build.state) = BuildState::Done(made);
    build.done.notify_all();
}

/// `build`'s code: made here if no thread has started it, else waited for.
fn wait(build: &Build) -> Result<Arc<Vec<u8>>> {
    if start(build) {
        finish(build);
    }
    let mut state = lock(&build.state);
    loop {
        if let BuildState::Done(made) = &*state {
            return made.clone().map_err(err);
        }
        state = build.done.wait(state).unwrap_or_else(|e| e.into_inner());
    }
}

/// Forget the builds no thread has started and wait for those running, so that no compile is
/// left running when the process exits (NVRTC's teardown under a running compile can crash
/// it): called when an executor is dropped. A later request queues them again, and a
/// [`wait`] on one forgotten here makes it on its own thread.
fn settle() {
    let t = std::time::Instant::now();
    let running: Vec<Arc<Build>> = {
        let mut b = builds();
        b.queue.clear();
        b.all.retain(|_, build| !matches!(*lock(&build.state), BuildState::Queued));
        b.all.values().filter(|build| matches!(*lock(&build.state), BuildState::Running)).cloned().collect()
    };
    let n = running.len();
    for build in running {
        let mut state = lock(&build.state);
        while matches!(*state, BuildState::Running) {
            state = build.done.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
    trace(|| format!("dropped: waited {:.3} s for {n} running compiles", t.elapsed().as_secs_f64()));
}

/// `WICK_CUDA_TRACE=1`: print `msg` to stderr with the seconds since the first trace (the
/// executor's start): when modules are made and loaded, the weights, graphs and steps.
pub(crate) fn trace(msg: impl FnOnce() -> String) {
    static ON: OnceLock<Option<std::time::Instant>> = OnceLock::new();
    let on = ON.get_or_init(|| {
        (std::env::var("WICK_CUDA_TRACE").as_deref() == Ok("1")).then(std::time::Instant::now)
    });
    if let Some(t0) = on {
        eprintln!("wick-cuda-trace {:7.3} s  {}", t0.elapsed().as_secs_f64(), msg());
    }
}

/// An executor's kernels: the modules it has loaded into its context and the entry points
/// it has looked up, both on first use. Modules are compiled (or read from the disk cache)
/// on worker threads, in the order [`Kernels::prefetch`] asks for them: the executor asks
/// for the modules a model needs as soon as it knows them (the weights' types, the
/// attention's head size), and a launch waits only for its own kernel's module.
pub(crate) struct Kernels {
    ctx: Arc<CudaContext>,
    arch: (i32, i32),
    /// Cubins (false with `WICK_CUDA_CUBIN=0`, and once the driver has refused one: PTX).
    cubin: Cell<bool>,
    modules: RefCell<HashMap<Module, Arc<CudaModule>>>,
    fns: RefCell<HashMap<Kernel, CudaFunction>>,
}

impl Kernels {
    /// No module loaded yet.
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        let arch = ctx.compute_capability().map_err(|e| err(format!("compute capability: {e}")))?;
        Ok(Kernels {
            ctx: ctx.clone(),
            arch,
            cubin: Cell::new(std::env::var("WICK_CUDA_CUBIN").as_deref() != Ok("0")),
            modules: RefCell::new(HashMap::new()),
            fns: RefCell::new(HashMap::new()),
        })
    }

    /// Start compiling `modules` on worker threads (those not loaded yet), in this order.
    pub(crate) fn prefetch(&self, modules: impl IntoIterator<Item = Module>) {
        for m in modules {
            if !self.modules.borrow().contains_key(&m) {
                request(m, self.arch, self.cubin.get());
            }
        }
    }

    /// Whether `k` has been looked up (a launch of it needs no compile nor load).
    pub(crate) fn ready(&self, k: Kernel) -> bool {
        self.fns.borrow().contains_key(&k)
    }

    /// Entry point `k`, its module compiled and loaded first if need be.
    pub(crate) fn get(&self, k: Kernel) -> Result<CudaFunction> {
        if let Some(f) = self.fns.borrow().get(&k) {
            return Ok(f.clone());
        }
        let module = self.module(k.module())?;
        let f = module.load_function(&k.name()).map_err(|e| err(format!("kernel '{}': {e}", k.name())))?;
        if k.dynamic_smem() > 0 {
            // Above 48 KiB a kernel must ask for its dynamic shared memory.
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                k.dynamic_smem() as i32,
            )
            .map_err(|e| {
                err(format!("kernel '{}': {} bytes of shared memory: {e}", k.name(), k.dynamic_smem()))
            })?;
        }
        self.fns.borrow_mut().insert(k, f.clone());
        Ok(f)
    }

    /// `module`, loaded into the context (once).
    fn module(&self, module: Module) -> Result<Arc<CudaModule>> {
        if let Some(m) = self.modules.borrow().get(&module) {
            return Ok(m.clone());
        }
        let t = std::time::Instant::now();
        let loaded = self.load(module)?;
        trace(|| format!("{} loaded after {:.3} s", module.name(), t.elapsed().as_secs_f64()));
        self.modules.borrow_mut().insert(module, loaded.clone());
        Ok(loaded)
    }

    /// Load `module` from its cubin, or from PTX where the cubin could not be made or the
    /// driver refuses it (older than the NVRTC that made it: then PTX from here on).
    fn load(&self, module: Module) -> Result<Arc<CudaModule>> {
        let arch = self.arch;
        if self.cubin.get() {
            if let Ok(bin) = wait(&request(module, arch, true)) {
                match self.ctx.load_module(Ptx::from_binary(bin.to_vec())) {
                    Ok(m) => return Ok(m),
                    Err(_) => self.cubin.set(false),
                }
            }
        }
        let ptx = wait(&request(module, arch, false))?;
        let ptx = String::from_utf8(ptx.to_vec()).map_err(|e| err(format!("cached PTX: {e}")))?;
        self.ctx.load_module(Ptx::from_src(ptx)).map_err(|e| {
            err(format!("loading the {} kernels for sm_{}{}: {e}", module.name(), arch.0, arch.1))
        })
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 173 entry points, each named once (that each is in its module's PTX, and nothing
    /// else is, is checked by `compile`, run in CI with NVRTC).
    #[test]
    fn every_kernel_named_once() {
        let all = Kernel::all();
        assert_eq!(all.len(), 173);
        let names: std::collections::HashSet<String> = all.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), all.len());
    }

    /// 84 modules, each named once (the cache file and the selecting macro), of 1 to 8 kernels
    /// (no longer one module a family: the matmul family's 103 kernels were one), each with
    /// its selection in its source.
    #[test]
    fn modules_split_the_kernels() {
        let modules = Module::all();
        assert_eq!(modules.len(), 84);
        let names: std::collections::HashSet<String> = modules.iter().map(|m| m.name()).collect();
        assert_eq!(names.len(), modules.len());
        for m in &modules {
            let n = Kernel::all().into_iter().filter(|k| k.module() == *m).count();
            assert!((1..=8).contains(&n), "{}: {n} kernels", m.name());
            assert!(source(*m).contains(&m.defines()), "{}", m.name());
        }
        assert_eq!(Module::Mmv(Block::Q4K).name(), "mmv_q4_k");
        assert_eq!(Module::MmvRows(Block::Q6K, MmvForm::Gated).name(), "mmvn2_q6_k");
        assert!(Module::MmvRows(Block::Q6K, MmvForm::Gated).defines().contains("#define MMVN_FORM 2\n"));
    }

    /// A model asks for its weight types' products and its head size's attention only.
    #[test]
    fn modules_a_model_needs() {
        let q4k = Module::for_weights(GgmlType::Q4_K, true);
        assert_eq!(q4k[0], Module::Mmq(Block::Q4K));
        assert!(q4k.contains(&Module::MatVec(MatVecType::Block(Block::Q4K))));
        assert!(q4k.contains(&Module::Mmv(Block::Q4K)));
        assert!(q4k.iter().all(|m| m.name().ends_with("q4_k") || *m == Module::MmqReduce));
        assert!(!q4k.iter().any(|m| matches!(m, Module::MmvRows(..))));
        assert_eq!(Module::for_few_rows(GgmlType::Q4_K)[2], Module::MmvRows(Block::Q4K, MmvForm::Three));
        assert!(Module::for_few_rows(GgmlType::F16).is_empty());
        assert!(!Module::for_weights(GgmlType::Q8_0, false).contains(&Module::Mmq(Block::Q8_0)));
        assert_eq!(Module::for_weights(GgmlType::F16, true), [Module::MatVec(MatVecType::F16)]);
        assert!(Module::for_weights(GgmlType::Q2_K, true).is_empty());
        let all = Module::all();
        for t in [GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q6_K, GgmlType::BF16, GgmlType::F32] {
            assert!(Module::for_weights(t, true).iter().all(|m| all.contains(m)), "{t}");
            assert!(Module::for_few_rows(t).iter().all(|m| all.contains(m)), "{t}");
        }
        assert_eq!(
            Module::for_attention(128, 4, true, true),
            [Module::AttentionFlash(HeadDims::D128), Module::AttentionDecode(HeadDims::D128, 4)]
        );
        assert_eq!(
            Module::for_attention(256, 8, true, true),
            [Module::AttentionFlash(HeadDims::D256), Module::AttentionSplit(HeadDims::D256, 4)]
        );
        assert_eq!(
            Module::for_attention(64, 3, false, false),
            [Module::AttentionRows(HeadDims::D64), Module::AttentionSplit(HeadDims::D64, 4)]
        );
        assert_eq!(
            Module::for_attention(96, 1, true, true),
            [Module::Attention, Module::AttentionRows(HeadDims::D128)]
        );
    }

    /// Decode builds: `_o` for short rows except Q8_0; forced either way; others untouched.
    #[test]
    fn decode_variants() {
        let mmv = |t| Kernel::Mmv { t, form: MmvForm::One, occ: false };
        assert_eq!(mmv(Block::Q4K).decode_variant(2048, None).name(), "mmv_q4_k_o");
        assert_eq!(mmv(Block::Q4K).decode_variant(4096, None).name(), "mmv_q4_k");
        assert_eq!(mmv(Block::Q8_0).decode_variant(2048, None).name(), "mmv_q8_0");
        assert_eq!(mmv(Block::Q8_0).decode_variant(4096, Some(true)).name(), "mmv_q8_0_o");
        assert_eq!(Kernel::Mmv3Kmix { occ: false }.decode_variant(1024, None).name(), "mmv3_kmix_o");
        assert_eq!(Kernel::Mmv3Kmix { occ: false }.decode_variant(1024, Some(false)).name(), "mmv3_kmix");
        assert_eq!(Kernel::Add.decode_variant(16, Some(true)), Kernel::Add);
    }
}
