//! Synthetic models: real architectures and shapes, tokenizer metadata copied from a real
//! GGUF, random weights from a seed. Used for tests (llama.cpp computes reference logits on
//! the very same file) and for benchmarks at sizes no downloadable model has.
//!
//! Files are written as a stream, a few rows at a time, so an 8B file needs little memory.

use std::io::Write;

use crate::gguf::{GgufWriter, MetaValue, Metadata, TensorSpec};
use crate::model::keys::{self, arch_key, suffix, tensor as t};
use crate::model::Arch;
use crate::quant::{self, GgmlType};
use crate::{Error, Result};

/// Shape and types of a synthetic model.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    /// Architecture.
    pub arch: Arch,
    /// Hidden size.
    pub n_embd: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head size.
    pub head_dim: usize,
    /// Feed-forward size.
    pub n_ff: usize,
    /// Training context length written to the metadata.
    pub n_ctx: usize,
    /// Type of the 2-D weight matrices.
    pub matrix_type: GgmlType,
    /// Type of the token embedding.
    pub embd_type: GgmlType,
    /// Whether the output projection is tied to the embedding.
    pub tied: bool,
    /// Seed of the weights.
    pub seed: u64,
}

impl SynthSpec {
    /// A tiny model (64 hidden, 2 layers; 6 for Gemma 3 so that one layer is global) for tests.
    pub fn tiny(arch: Arch, seed: u64) -> SynthSpec {
        SynthSpec {
            arch,
            n_embd: 64,
            n_layer: if arch == Arch::Gemma3 { 6 } else { 2 },
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            n_ff: 128,
            n_ctx: 2048,
            matrix_type: GgmlType::Q8_0,
            embd_type: GgmlType::F16,
            tied: false,
            seed,
        }
    }
}

/// splitmix64: a small, stable generator (weights must not change with a crate version).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// One tensor to generate: name, ggml dims, type, and how its values are drawn.
struct Gen {
    spec: TensorSpec,
    /// Values are `center + amplitude · uniform`.
    center: f32,
    amplitude: f32,
}

fn tensors(s: &SynthSpec, n_vocab: usize) -> Vec<Gen> {
    let (ne, hd) = (s.n_embd, s.head_dim);
    let mat = |name: String, k: usize, n: usize, ty: GgmlType| Gen {
        amplitude: 1.7 / (k as f32).sqrt(),
        spec: TensorSpec { name, dims: vec![k as u64, n as u64], dtype: ty },
        center: 0.0,
    };
    let vec1 = |name: String, n: usize, center: f32, amplitude: f32| Gen {
        spec: TensorSpec { name, dims: vec![n as u64], dtype: GgmlType::F32 },
        center,
        amplitude,
    };
    let mut v = vec![Gen {
        spec: TensorSpec {
            name: t::TOKEN_EMBD.into(),
            dims: vec![ne as u64, n_vocab as u64],
            dtype: s.embd_type,
        },
        center: 0.0,
        amplitude: 1.0,
    }];
    let mt = s.matrix_type;
    for il in 0..s.n_layer {
        let b = |n: &str| t::blk(il, n);
        v.push(vec1(b(t::ATTN_NORM), ne, 1.0, 0.2));
        v.push(mat(b(t::ATTN_Q), ne, s.n_head * hd, mt));
        v.push(mat(b(t::ATTN_K), ne, s.n_head_kv * hd, mt));
        v.push(mat(b(t::ATTN_V), ne, s.n_head_kv * hd, mt));
        if s.arch == Arch::Qwen2 {
            v.push(vec1(b(t::ATTN_Q_BIAS), s.n_head * hd, 0.0, 0.5));
            v.push(vec1(b(t::ATTN_K_BIAS), s.n_head_kv * hd, 0.0, 0.5));
            v.push(vec1(b(t::ATTN_V_BIAS), s.n_head_kv * hd, 0.0, 0.5));
        }
        if matches!(s.arch, Arch::Qwen3 | Arch::Gemma3) {
            v.push(vec1(b(t::ATTN_Q_NORM), hd, 1.0, 0.2));
            v.push(vec1(b(t::ATTN_K_NORM), hd, 1.0, 0.2));
        }
        v.push(mat(b(t::ATTN_OUTPUT), s.n_head * hd, ne, mt));
        if s.arch == Arch::Gemma3 {
            v.push(vec1(b(t::ATTN_POST_NORM), ne, 1.0, 0.2));
        }
        v.push(vec1(b(t::FFN_NORM), ne, 1.0, 0.2));
        v.push(mat(b(t::FFN_GATE), ne, s.n_ff, mt));
        v.push(mat(b(t::FFN_UP), ne, s.n_ff, mt));
        v.push(mat(b(t::FFN_DOWN), s.n_ff, ne, mt));
        if s.arch == Arch::Gemma3 {
            v.push(vec1(b(t::FFN_POST_NORM), ne, 1.0, 0.2));
        }
    }
    v.push(vec1(t::OUTPUT_NORM.into(), ne, 1.0, 0.2));
    if !s.tied {
        v.push(mat(t::OUTPUT.into(), ne, n_vocab, mt));
    }
    v
}

fn metadata(s: &SynthSpec, donor: &Metadata) -> Result<Metadata> {
    let mut md = Metadata::new();
    let a = s.arch.name();
    md.insert(keys::ARCHITECTURE, MetaValue::Str(a.into()));
    md.insert("general.name", MetaValue::Str(format!("wick synthetic {a} seed {}", s.seed)));
    let u = |v: usize| MetaValue::U32(v as u32);
    md.insert(arch_key(a, suffix::CONTEXT_LENGTH), u(s.n_ctx));
    md.insert(arch_key(a, suffix::EMBEDDING_LENGTH), u(s.n_embd));
    md.insert(arch_key(a, suffix::BLOCK_COUNT), u(s.n_layer));
    md.insert(arch_key(a, suffix::FEED_FORWARD_LENGTH), u(s.n_ff));
    md.insert(arch_key(a, suffix::HEAD_COUNT), u(s.n_head));
    md.insert(arch_key(a, suffix::HEAD_COUNT_KV), u(s.n_head_kv));
    md.insert(arch_key(a, suffix::KEY_LENGTH), u(s.head_dim));
    md.insert(arch_key(a, suffix::VALUE_LENGTH), u(s.head_dim));
    md.insert(arch_key(a, suffix::ROPE_DIMENSION_COUNT), u(s.head_dim));
    md.insert(arch_key(a, suffix::ROPE_FREQ_BASE), MetaValue::F32(10_000.0));
    md.insert(arch_key(a, suffix::RMS_EPS), MetaValue::F32(1e-6));
    if s.arch == Arch::Gemma3 {
        md.insert(arch_key(a, suffix::SLIDING_WINDOW), u(8));
    }
    let mut n = 0;
    for (k, v) in donor.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        md.insert(k.clone(), v.clone());
        n += 1;
    }
    if n == 0 {
        return Err(Error::InvalidArgument("the donor file has no tokenizer metadata".into()));
    }
    Ok(md)
}

/// Write a synthetic model to `w`, with the tokenizer of `donor` (a real model's metadata).
pub fn write<W: Write>(w: W, spec: &SynthSpec, donor: &Metadata) -> Result<W> {
    let n_vocab = donor.str_array("tokenizer.ggml.tokens")?.len();
    let md = metadata(spec, donor)?;
    let gens = tensors(spec, n_vocab);
    let specs: Vec<TensorSpec> = gens.iter().map(|g| g.spec.clone()).collect();
    let mut out = GgufWriter::new(w, &md, &specs)?;
    let mut rng = Rng(spec.seed);
    let (mut row, mut bytes) = (Vec::new(), Vec::new());
    for g in &gens {
        let k = g.spec.dims[0] as usize;
        let rows: u64 = g.spec.dims[1..].iter().product();
        for _ in 0..rows {
            row.clear();
            row.extend((0..k).map(|_| g.center + g.amplitude * rng.uniform()));
            quant::quantize_row_into(g.spec.dtype, &row, &mut bytes)?;
            out.write_tensor_data(&bytes)?;
        }
    }
    out.finish()
}
