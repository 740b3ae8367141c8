//! Hyperparameters read from GGUF metadata, checked before any weight is loaded.

use super::keys::{arch_key, suffix};
use crate::exec::{RopeExt, RopeMode};
use crate::gguf::Metadata;
use crate::{Error, Result};

/// The architectures wick implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, Mistral, SmolLM2, TinyLlama.
    Llama,
    /// Qwen2 / Qwen2.5: QKV bias, NeoX RoPE.
    Qwen2,
    /// Qwen3: per-head QK RMSNorm, NeoX RoPE.
    Qwen3,
    /// Gemma 3: sliding-window layers, QK-norm, GELU, scaled embeddings, extra norms.
    Gemma3,
}

impl Arch {
    /// Every architecture wick implements: the one list that parsing, `wick info` and error
    /// messages read.
    pub const ALL: [Arch; 4] = [Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Gemma3];

    /// From `general.architecture`.
    pub fn from_name(name: &str) -> Result<Arch> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| Error::UnsupportedArchitecture(name.to_string()))
    }
    /// The supported architectures' GGUF names, comma-separated (for messages).
    pub fn names() -> String {
        Arch::ALL.map(Arch::name).join(", ")
    }
    /// The GGUF name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// The RoPE scaling the metadata asks for: the frequency scale and the YaRN constants, with
/// llama.cpp's defaults (ext_factor 1 for YaRN, else 0; beta_fast 32, beta_slow 1; the original
/// context defaults to the training context; `rope.scaling.attn_factor` 1).
fn rope_scaling(md: &Metadata, key: &dyn Fn(&str) -> String, n_ctx_train: usize) -> Result<(f32, RopeExt)> {
    let kind = md.str_opt(&key(suffix::ROPE_SCALING_TYPE))?;
    let yarn = kind == Some("yarn");
    let freq_scale = match kind {
        None | Some("none") => 1.0,
        Some("linear") | Some("yarn") => {
            let f = md.f32_opt(&key(suffix::ROPE_SCALING_FACTOR))?.unwrap_or(1.0);
            if !(f.is_finite() && f > 0.0) {
                return Err(Error::bad_metadata(key(suffix::ROPE_SCALING_FACTOR), "must be positive"));
            }
            1.0 / f
        }
        Some(other) => {
            return Err(Error::bad_metadata(
                key(suffix::ROPE_SCALING_TYPE),
                format!("RoPE scaling '{other}' is not supported (none, linear and yarn are)"),
            ))
        }
    };
    let f32_in = |name: &str, default: f32, ok: &dyn Fn(f32) -> bool, what: &str| -> Result<f32> {
        let v = md.f32_opt(&key(name))?.unwrap_or(default);
        if v.is_finite() && ok(v) {
            Ok(v)
        } else {
            Err(Error::bad_metadata(key(name), format!("{v} is out of range ({what})")))
        }
    };
    let mut ext = RopeExt {
        attn_factor: f32_in(suffix::ROPE_SCALING_ATTN_FACTOR, 1.0, &|v| v > 0.0, "must be positive")?,
        ..RopeExt::default()
    };
    if yarn {
        ext.ext_factor =
            f32_in(suffix::ROPE_SCALING_YARN_EXT_FACTOR, 1.0, &|v| (0.0..=1.0).contains(&v), "0 to 1")?;
        ext.beta_fast = f32_in(suffix::ROPE_SCALING_YARN_BETA_FAST, 32.0, &|v| v > 0.0, "must be positive")?;
        ext.beta_slow = f32_in(suffix::ROPE_SCALING_YARN_BETA_SLOW, 1.0, &|v| v > 0.0, "must be positive")?;
        if ext.beta_slow >= ext.beta_fast {
            return Err(Error::bad_metadata(
                key(suffix::ROPE_SCALING_YARN_BETA_SLOW),
                format!("beta_slow {} must be below beta_fast {}", ext.beta_slow, ext.beta_fast),
            ));
        }
        let orig = match md.u32_opt(&key(suffix::ROPE_SCALING_ORIG_CTX))? {
            None | Some(0) => n_ctx_train,
            Some(v) => v as usize,
        };
        if orig > 1 << 24 {
            return Err(Error::bad_metadata(
                key(suffix::ROPE_SCALING_ORIG_CTX),
                format!("{orig} is out of range (1 to {})", 1 << 24),
            ));
        }
        ext.n_ctx_orig = orig;
        if ext.ext_factor != 0.0 {
            // llama.cpp sets the host's attn_factor so that the kernel's own YaRN magnitude
            // correction (1 + 0.1·ln s) is the whole correction: 1 for s > 1 (llama-context.cpp).
            let s = 1.0 / freq_scale;
            let want = if s <= 1.0 { 1.0 } else { 1.0 + 0.1 * s.ln() };
            ext.attn_factor *= want / (1.0 + 0.1 * s.ln());
        }
    }
    Ok((freq_scale, ext))
}

/// Hyperparameters of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Hparams {
    /// Architecture.
    pub arch: Arch,
    /// Context length the model was trained for.
    pub n_ctx_train: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Feed-forward inner size.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Size of a key (and query) head.
    pub head_dim: usize,
    /// Size of a value head.
    pub v_head_dim: usize,
    /// Dimensions of a head that RoPE rotates.
    pub n_rot: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RoPE base of sliding-window layers (Gemma 3).
    pub rope_base_swa: f32,
    /// RoPE frequency scale (1 / linear scaling factor).
    pub rope_freq_scale: f32,
    /// RoPE pairing.
    pub rope_mode: RopeMode,
    /// YaRN and the magnitude scale of RoPE (llama.cpp's defaults where the file says none).
    pub rope_ext: RopeExt,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Sliding window size, for architectures with sliding-window layers.
    pub sliding_window: Option<usize>,
}

impl Hparams {
    /// Read and check the hyperparameters of the architecture named in the metadata.
    pub fn from_metadata(md: &Metadata) -> Result<Hparams> {
        let arch_name = md.str(super::keys::ARCHITECTURE)?;
        let arch = Arch::from_name(arch_name)?;
        let key = |s: &str| arch_key(arch_name, s);
        let usize_key = |s: &str| -> Result<usize> { Ok(md.u32(&key(s))? as usize) };
        let n_embd = usize_key(suffix::EMBEDDING_LENGTH)?;
        let n_head = usize_key(suffix::HEAD_COUNT)?;
        let n_head_kv = match md.u32_opt(&key(suffix::HEAD_COUNT_KV))? {
            Some(v) => v as usize,
            None => n_head,
        };
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(Error::bad_metadata(
                key(suffix::HEAD_COUNT_KV),
                format!("{n_head} query heads cannot be grouped over {n_head_kv} key/value heads"),
            ));
        }
        let head_dim = match md.u32_opt(&key(suffix::KEY_LENGTH))? {
            Some(v) => v as usize,
            None => n_embd / n_head,
        };
        let v_head_dim = md.u32_opt(&key(suffix::VALUE_LENGTH))?.map_or(head_dim, |v| v as usize);
        let n_rot = md.u32_opt(&key(suffix::ROPE_DIMENSION_COUNT))?.map_or(head_dim, |v| v as usize);
        if head_dim == 0 || n_rot > head_dim || n_rot % 2 != 0 || head_dim % 2 != 0 {
            return Err(Error::bad_metadata(
                key(suffix::ROPE_DIMENSION_COUNT),
                "RoPE dimensions do not fit the head",
            ));
        }
        let n_ctx_train = usize_key(suffix::CONTEXT_LENGTH)?;
        let (rope_freq_scale, rope_ext) = rope_scaling(md, &key, n_ctx_train)?;
        let default_base = if arch == Arch::Gemma3 { 1_000_000.0 } else { 10_000.0 };
        let hp = Hparams {
            arch,
            n_ctx_train,
            n_embd,
            n_layer: usize_key(suffix::BLOCK_COUNT)?,
            n_ff: usize_key(suffix::FEED_FORWARD_LENGTH)?,
            n_head,
            n_head_kv,
            head_dim,
            v_head_dim,
            n_rot,
            rope_base: md.f32_opt(&key(suffix::ROPE_FREQ_BASE))?.unwrap_or(default_base),
            // llama.cpp hard-codes 10000 for Gemma 3's local layers.
            rope_base_swa: 10_000.0,
            rope_freq_scale,
            rope_ext,
            rope_mode: if arch == Arch::Llama { RopeMode::Normal } else { RopeMode::Neox },
            eps: md.f32(&key(suffix::RMS_EPS))?,
            sliding_window: match arch {
                Arch::Gemma3 => Some(md.u32(&key(suffix::SLIDING_WINDOW))? as usize),
                _ => None,
            },
        };
        // Every size is bounded before anything is sized from it: a hostile file must not make
        // wick compute with NaNs, divide by zero, or allocate without limit.
        for (name, v, max) in [
            (suffix::EMBEDDING_LENGTH, hp.n_embd, 1 << 20),
            (suffix::BLOCK_COUNT, hp.n_layer, 1 << 12),
            (suffix::FEED_FORWARD_LENGTH, hp.n_ff, 1 << 20),
            (suffix::CONTEXT_LENGTH, hp.n_ctx_train, 1 << 24),
            (suffix::HEAD_COUNT, hp.n_head, 1 << 12),
            (suffix::KEY_LENGTH, hp.head_dim, 1 << 12),
            (suffix::VALUE_LENGTH, hp.v_head_dim, 1 << 12),
        ] {
            if v == 0 || v > max {
                return Err(Error::bad_metadata(key(name), format!("{v} is out of range (1 to {max})")));
            }
        }
        if !(hp.eps > 0.0 && hp.eps < 1.0) {
            return Err(Error::bad_metadata(key(suffix::RMS_EPS), format!("{} is out of range", hp.eps)));
        }
        if !(hp.rope_base.is_finite() && hp.rope_base > 0.0) {
            return Err(Error::bad_metadata(
                key(suffix::ROPE_FREQ_BASE),
                format!("{} is not a finite positive number", hp.rope_base),
            ));
        }
        if let Some(w) = hp.sliding_window {
            if w == 0 {
                return Err(Error::bad_metadata(key(suffix::SLIDING_WINDOW), "a window of 0 sees nothing"));
            }
        }
        Ok(hp)
    }

    /// Whether layer `il` uses sliding-window attention (Gemma 3: five local layers, then one global).
    pub fn is_swa_layer(&self, il: usize) -> bool {
        self.sliding_window.is_some() && il % 6 < 5
    }
}
