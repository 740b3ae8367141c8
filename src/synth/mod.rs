//! Synthetic models: real architectures and shapes, tokenizer metadata copied from a real
//! GGUF, random weights from a seed. Used for tests (llama.cpp computes reference logits on
//! the very same file) and for benchmarks at sizes no downloadable model has.
//!
//! Files are written as a stream, a batch of rows at a time, so an 8B file needs little memory.
//! Matrix types follow a llama-quantize file type ([`FileType`]: Q4_K_M gives the same per-tensor
//! mix as llama-quantize), quantized with [`quant::quantize_weights`].

mod file_type;

use std::io::Write;

pub use file_type::{use_more_bits, FileType, Role};

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
    /// The llama-quantize file type: the type of each matrix.
    pub file_type: FileType,
    /// The token embedding's type, when it should not follow `file_type`.
    pub embd_type: Option<GgmlType>,
    /// Whether the output projection is tied to the embedding.
    pub tied: bool,
    /// Seed of the weights.
    pub seed: u64,
    /// RoPE base frequency written to the metadata.
    pub rope_base: f32,
    /// Llama 3.1's RoPE scaling factor, where the file carries `rope_freqs.weight` (computed
    /// by [`llama3_rope_factors`] with low/high frequency factors 1 and 4 and an original
    /// context of 8192, as Llama 3.1 and 3.2 define them).
    pub llama3_rope: Option<f32>,
}

/// Llama 3.1's RoPE frequency factors (one per rotated pair of `n_rot` dimensions), as the
/// models' `rope_scaling` defines them and GGUF converters store them in `rope_freqs.weight`:
/// pairs whose wavelength (2π / base^(−2i/n_rot)) is shorter than `orig_ctx / high` keep their
/// frequency (factor 1), those longer than `orig_ctx / low` are slowed by `factor`, and those
/// between move smoothly from one to the other in 1/frequency.
pub fn llama3_rope_factors(
    n_rot: usize,
    base: f32,
    factor: f32,
    low: f32,
    high: f32,
    orig_ctx: f32,
) -> Vec<f32> {
    (0..n_rot / 2)
        .map(|i| {
            let freq = 1.0 / (base as f64).powf(2.0 * i as f64 / n_rot as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let (low, high, factor, orig) = (low as f64, high as f64, factor as f64, orig_ctx as f64);
            if wavelen < orig / high {
                1.0
            } else if wavelen > orig / low {
                factor as f32
            } else {
                let smooth = (orig / wavelen - low) / (high - low);
                (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
            }
        })
        .collect()
}

/// The shapes `wick synth --shape` knows.
pub const SHAPES: [&str; 4] = ["tiny", "small", "1b", "8b"];

impl SynthSpec {
    /// A tiny model (64 hidden, 2 layers; 6 for Gemma 3 so that one layer is global) for tests:
    /// Q8_0 matrices, an F16 embedding.
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
            file_type: FileType::Q8_0,
            embd_type: Some(GgmlType::F16),
            tied: false,
            seed,
            rope_base: 10_000.0,
            llama3_rope: None,
        }
    }

    /// A shape by name (see [`SHAPES`]), with the weights of file type `ft`:
    /// - `tiny`: [`SynthSpec::tiny`] (its embedding is F16 whatever `ft`);
    /// - `small`: 256 hidden, 8 layers, 4 query heads sharing 1 KV head of 64, FFN 768: rows are
    ///   whole K-quant blocks, and 8 layers show the per-layer mix rules (for tests);
    /// - `1b`: 2048 hidden, 16 layers, 32/8 heads of 64, FFN 8192, tied embeddings (Llama 3.2 1B);
    /// - `8b`: 4096 hidden, 32 layers, 32/8 heads of 128, FFN 14336, untied (Llama 3.1 8B).
    ///
    /// `1b` and `8b` have their models' context (131072), RoPE base (500000) and, for the
    /// llama architecture, frequency factors (`rope_freqs.weight`: factor 32 for 3.2 1B, 8 for
    /// 3.1 8B).
    pub fn shape(name: &str, arch: Arch, ft: FileType, seed: u64) -> Result<SynthSpec> {
        let base = |n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, tied| SynthSpec {
            arch,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx: 8192,
            file_type: ft,
            embd_type: None,
            tied,
            seed,
            rope_base: 10_000.0,
            llama3_rope: None,
        };
        let llama3 = |factor: f32| (arch == Arch::Llama).then_some(factor);
        Ok(match name {
            "tiny" => SynthSpec { file_type: ft, ..SynthSpec::tiny(arch, seed) },
            "small" => base(256, 8, 4, 1, 64, 768, false),
            // Llama 3.x's own context (131072), so benchmarks can run at depth 16k and beyond.
            "1b" => SynthSpec {
                n_ctx: 131072,
                rope_base: 500_000.0,
                llama3_rope: llama3(32.0),
                ..base(2048, 16, 32, 8, 64, 8192, true)
            },
            "8b" => SynthSpec {
                n_ctx: 131072,
                rope_base: 500_000.0,
                llama3_rope: llama3(8.0),
                ..base(4096, 32, 32, 8, 128, 14336, false)
            },
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown shape '{other}' (available: {})",
                    SHAPES.join(", ")
                )))
            }
        })
    }

    /// Parameters (elements of all tensors) for a vocabulary of `n_vocab`.
    pub fn n_params(&self, n_vocab: usize) -> u64 {
        tensors(self, n_vocab).iter().map(|g| g.spec.dims.iter().product::<u64>()).sum()
    }

    /// The tensors' names, shapes and types for a vocabulary of `n_vocab`, in file order.
    pub fn tensor_specs(&self, n_vocab: usize) -> Vec<TensorSpec> {
        tensors(self, n_vocab).into_iter().map(|g| g.spec).collect()
    }
}

/// splitmix64: a small, stable generator (weights must not change with a crate version).
struct Rng(u64);

/// splitmix64's increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
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
    /// Or exactly these (drawing nothing from the stream).
    fixed: Option<Vec<f32>>,
}

fn tensors(s: &SynthSpec, n_vocab: usize) -> Vec<Gen> {
    let (ne, hd) = (s.n_embd, s.head_dim);
    let n_gqa = s.n_head / s.n_head_kv.max(1);
    let ty = |role: Role, ncols: usize| s.file_type.tensor_type(role, ncols, s.n_layer, n_gqa);
    let mat = |name: String, k: usize, n: usize, role: Role| Gen {
        amplitude: 1.7 / (k as f32).sqrt(),
        spec: TensorSpec { name, dims: vec![k as u64, n as u64], dtype: ty(role, k) },
        center: 0.0,
        fixed: None,
    };
    let vec1 = |name: String, n: usize, center: f32, amplitude: f32| Gen {
        spec: TensorSpec { name, dims: vec![n as u64], dtype: GgmlType::F32 },
        center,
        amplitude,
        fixed: None,
    };
    let embd_type = s.embd_type.unwrap_or_else(|| ty(Role::TokenEmbd { tied: s.tied }, ne));
    let mut v = vec![Gen {
        spec: TensorSpec {
            name: t::TOKEN_EMBD.into(),
            dims: vec![ne as u64, n_vocab as u64],
            dtype: embd_type,
        },
        center: 0.0,
        amplitude: 1.0,
        fixed: None,
    }];
    if let Some(factor) = s.llama3_rope {
        let f = llama3_rope_factors(hd, s.rope_base, factor, 1.0, 4.0, 8192.0);
        v.push(Gen { fixed: Some(f), ..vec1(t::ROPE_FREQS.into(), hd / 2, 0.0, 0.0) });
    }
    let m = Role::Matrix;
    for il in 0..s.n_layer {
        let b = |n: &str| t::blk(il, n);
        v.push(vec1(b(t::ATTN_NORM), ne, 1.0, 0.2));
        v.push(mat(b(t::ATTN_Q), ne, s.n_head * hd, m));
        v.push(mat(b(t::ATTN_K), ne, s.n_head_kv * hd, m));
        v.push(mat(b(t::ATTN_V), ne, s.n_head_kv * hd, Role::AttnV(il)));
        if s.arch == Arch::Qwen2 {
            v.push(vec1(b(t::ATTN_Q_BIAS), s.n_head * hd, 0.0, 0.5));
            v.push(vec1(b(t::ATTN_K_BIAS), s.n_head_kv * hd, 0.0, 0.5));
            v.push(vec1(b(t::ATTN_V_BIAS), s.n_head_kv * hd, 0.0, 0.5));
        }
        if matches!(s.arch, Arch::Qwen3 | Arch::Gemma3) {
            v.push(vec1(b(t::ATTN_Q_NORM), hd, 1.0, 0.2));
            v.push(vec1(b(t::ATTN_K_NORM), hd, 1.0, 0.2));
        }
        v.push(mat(b(t::ATTN_OUTPUT), s.n_head * hd, ne, Role::AttnOutput));
        if s.arch == Arch::Gemma3 {
            v.push(vec1(b(t::ATTN_POST_NORM), ne, 1.0, 0.2));
        }
        v.push(vec1(b(t::FFN_NORM), ne, 1.0, 0.2));
        v.push(mat(b(t::FFN_GATE), ne, s.n_ff, m));
        v.push(mat(b(t::FFN_UP), ne, s.n_ff, m));
        v.push(mat(b(t::FFN_DOWN), s.n_ff, ne, Role::FfnDown(il)));
        if s.arch == Arch::Gemma3 {
            v.push(vec1(b(t::FFN_POST_NORM), ne, 1.0, 0.2));
        }
    }
    v.push(vec1(t::OUTPUT_NORM.into(), ne, 1.0, 0.2));
    if !s.tied {
        v.push(mat(t::OUTPUT.into(), ne, n_vocab, Role::Output));
    }
    v
}

/// The metadata [`write`] gives a synthetic model: the spec's hyperparameters and the donor's
/// `tokenizer.*` keys. With [`SynthSpec::tensor_specs`] it describes the file without making
/// its weights (the browser tests stream a large model of zeros made on the fly from it).
pub fn metadata(s: &SynthSpec, donor: &Metadata) -> Result<Metadata> {
    let mut md = Metadata::new();
    let a = s.arch.name();
    md.insert(keys::ARCHITECTURE, MetaValue::Str(a.into()));
    md.insert("general.name", MetaValue::Str(format!("wick synthetic {a} seed {}", s.seed)));
    md.insert("general.file_type", MetaValue::U32(s.file_type.llama_ftype()));
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
    md.insert(arch_key(a, suffix::ROPE_FREQ_BASE), MetaValue::F32(s.rope_base));
    md.insert(arch_key(a, suffix::RMS_EPS), MetaValue::F32(1e-6));
    if s.arch == Arch::Gemma3 {
        md.insert(arch_key(a, suffix::SLIDING_WINDOW), u(if s.n_embd <= 64 { 8 } else { 512 }));
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

/// Rows generated and quantized per batch (in parallel natively); memory stays a few MB.
const BATCH_ROWS: usize = 64;

/// Write a synthetic model to `w`, with the tokenizer of `donor` (a real model's metadata).
///
/// Values come from one splitmix64 stream in file order, so the file depends only on the spec
/// and the donor's vocabulary size; splitmix64's state is a counter, so a row's generator can be
/// started directly at its offset and rows are made in parallel without changing a bit.
pub fn write<W: Write>(w: W, spec: &SynthSpec, donor: &Metadata) -> Result<W> {
    write_rows(w, spec, donor, None)
}

/// [`write`], but each tensor's rows repeat its first `distinct_rows` rows (which are those
/// [`write`] makes): an 8B file is written in seconds rather than minutes, for speed and load
/// tests. The file has the same header and size as [`write`]'s.
pub fn write_repeating<W: Write>(
    w: W,
    spec: &SynthSpec,
    donor: &Metadata,
    distinct_rows: usize,
) -> Result<W> {
    write_rows(w, spec, donor, Some(distinct_rows.max(1)))
}

fn write_rows<W: Write>(w: W, spec: &SynthSpec, donor: &Metadata, distinct_rows: Option<usize>) -> Result<W> {
    let n_vocab = donor.str_array("tokenizer.ggml.tokens")?.len();
    let md = metadata(spec, donor)?;
    let gens = tensors(spec, n_vocab);
    let specs: Vec<TensorSpec> = gens.iter().map(|g| g.spec.clone()).collect();
    let mut out = GgufWriter::new(w, &md, &specs)?;
    let mut counter = 0u64; // values drawn so far
    let mut batch: Vec<Vec<u8>> = Vec::new();
    for g in &gens {
        if let Some(values) = &g.fixed {
            let mut bytes = Vec::new();
            quant::quantize_weights(g.spec.dtype, values, &mut bytes)?;
            out.write_tensor_data(&bytes)?;
            continue;
        }
        let k = g.spec.dims[0] as usize;
        let rows: u64 = g.spec.dims[1..].iter().product();
        // Rows `r0..r0 + rows.len()` of the tensor, quantized.
        let make = |r0: u64, rows: &mut [Vec<u8>]| {
            let start = counter + r0 * k as u64;
            for_each_row(rows, |i, bytes| {
                let mut rng = Rng(spec.seed.wrapping_add((start + (i * k) as u64).wrapping_mul(GAMMA)));
                let row: Vec<f32> = (0..k).map(|_| g.center + g.amplitude * rng.uniform()).collect();
                quant::quantize_weights(g.spec.dtype, &row, bytes)
            })
        };
        if let Some(d) = distinct_rows {
            let d = (d as u64).min(rows) as usize;
            let mut pool = vec![Vec::new(); d];
            make(0, &mut pool)?;
            for r in 0..rows {
                out.write_tensor_data(&pool[(r % d as u64) as usize])?;
            }
        } else {
            let mut r0 = 0u64;
            while r0 < rows {
                let n = (rows - r0).min(BATCH_ROWS as u64) as usize;
                batch.resize_with(n, Vec::new);
                make(r0, &mut batch[..n])?;
                for bytes in &batch[..n] {
                    out.write_tensor_data(bytes)?;
                }
                r0 += n as u64;
            }
        }
        counter += rows * k as u64;
    }
    out.finish()
}

#[cfg(not(target_arch = "wasm32"))]
fn for_each_row(rows: &mut [Vec<u8>], f: impl Fn(usize, &mut Vec<u8>) -> Result<()> + Sync) -> Result<()> {
    use rayon::prelude::*;
    rows.par_iter_mut().enumerate().try_for_each(|(i, r)| f(i, r))
}

#[cfg(target_arch = "wasm32")]
fn for_each_row(rows: &mut [Vec<u8>], f: impl Fn(usize, &mut Vec<u8>) -> Result<()>) -> Result<()> {
    rows.iter_mut().enumerate().try_for_each(|(i, r)| f(i, r))
}

/// Metadata of a tokenizer-only GGUF: the donor's `tokenizer.*` keys (and its architecture and
/// name, for information), no tensors. Such a file is a few MB and serves as a donor itself.
pub fn tokenizer_only(donor: &Metadata) -> Result<Metadata> {
    let mut md = Metadata::new();
    for (k, v) in donor.iter().filter(|(k, _)| k.starts_with("tokenizer.") || *k == "general.name") {
        md.insert(k.clone(), v.clone());
    }
    if !md.contains("tokenizer.ggml.tokens") {
        return Err(Error::InvalidArgument("the donor file has no tokenizer metadata".into()));
    }
    Ok(md)
}

/// Write a tokenizer-only GGUF (see [`tokenizer_only`]).
pub fn write_tokenizer_only<W: Write>(w: W, donor: &Metadata) -> Result<W> {
    GgufWriter::new(w, &tokenizer_only(donor)?, &[])?.finish()
}
