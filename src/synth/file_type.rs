//! File types: which ggml type each tensor of a synthetic model gets, as llama-quantize chooses.
//!
//! The rules are those of llama.cpp's `llama_tensor_get_type` (`src/llama-quant.cpp`,
//! ggml-org/llama.cpp) for dense models without an importance matrix, restricted to the file
//! types wick writes:
//!
//! - 1-D tensors (norms, biases) stay F32; F32/F16/BF16/Q8_0 files use their type everywhere.
//! - `output.weight` (or the token embedding when the output is tied to it) gets Q6_K in every
//!   quantized file type except Q8_0 (Q8_0 when its rows are not whole blocks of the default
//!   type); an untied token embedding gets the default type.
//! - `attn_v`: Q2_K → Q4_K when there are 4+ query heads per KV head (else Q3_K); Q3_K_M → Q5_K
//!   in the first two layers, Q4_K elsewhere; Q4_K_M and Q5_K_M → Q6_K in the layers where
//!   [`use_more_bits`]; Q4_K_S → Q5_K in the first four layers.
//! - `ffn_down`: Q2_K → Q3_K; Q3_K_M → Q5_K in the first n/16 layers, Q4_K elsewhere; Q4_K_M
//!   and Q5_K_M → Q6_K where [`use_more_bits`]; Q4_K_S → Q5_K in the first n/8 layers.
//! - `attn_output`: Q2_K → Q3_K, Q3_K_M → Q4_K.
//! - Finally, rows that are not whole blocks fall back: Q2_K/Q3_K → Q4_0, Q4_K → Q5_0,
//!   Q5_K → Q5_1, Q6_K → Q8_0, and to F16 when even that does not fit.

use crate::quant::GgmlType;
use crate::{Error, Result};

/// A llama-quantize file type ("ftype"): a default type and a per-tensor mix.
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K_M,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
}

/// What a tensor is, for the mix rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The token embedding.
    TokenEmbd {
        /// Whether it is also the output projection.
        tied: bool,
    },
    /// `output.weight`.
    Output,
    /// `attn_v` of layer `i`.
    AttnV(usize),
    /// `attn_output`.
    AttnOutput,
    /// `ffn_down` of layer `i`.
    FfnDown(usize),
    /// Any other matrix (`attn_q`, `attn_k`, `ffn_gate`, `ffn_up`).
    Matrix,
    /// A 1-D tensor.
    Vector,
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third one
/// between them.
pub fn use_more_bits(i: usize, n: usize) -> bool {
    // (Past the first test, i >= n / 8.)
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

impl FileType {
    /// All file types, in the order of `wick synth --help`.
    pub const ALL: [FileType; 15] = [
        FileType::F32,
        FileType::F16,
        FileType::BF16,
        FileType::Q4_0,
        FileType::Q4_1,
        FileType::Q5_0,
        FileType::Q5_1,
        FileType::Q8_0,
        FileType::Q2_K,
        FileType::Q3_K_M,
        FileType::Q4_K_S,
        FileType::Q4_K_M,
        FileType::Q5_K_S,
        FileType::Q5_K_M,
        FileType::Q6_K,
    ];

    /// The name llama-quantize uses ("Q4_K_M").
    pub fn name(self) -> &'static str {
        use FileType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q2_K => "Q2_K",
            Q3_K_M => "Q3_K_M",
            Q4_K_S => "Q4_K_S",
            Q4_K_M => "Q4_K_M",
            Q5_K_S => "Q5_K_S",
            Q5_K_M => "Q5_K_M",
            Q6_K => "Q6_K",
        }
    }

    /// Parse a name, case-insensitively; "Q3_K", "Q4_K" and "Q5_K" mean their _M variants,
    /// as in llama-quantize.
    pub fn parse(s: &str) -> Result<FileType> {
        let u = s.to_ascii_uppercase();
        let u = match u.as_str() {
            "Q3_K" => "Q3_K_M",
            "Q4_K" => "Q4_K_M",
            "Q5_K" => "Q5_K_M",
            other => other,
        };
        FileType::ALL.into_iter().find(|f| f.name() == u).ok_or_else(|| {
            let names: Vec<&str> = FileType::ALL.iter().map(|f| f.name()).collect();
            Error::InvalidArgument(format!("unknown type '{s}' (available: {})", names.join(", ")))
        })
    }

    /// llama.cpp's `llama_ftype` number, stored as `general.file_type`.
    pub fn llama_ftype(self) -> u32 {
        use FileType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q8_0 => 7,
            Q5_0 => 8,
            Q5_1 => 9,
            Q2_K => 10,
            Q3_K_M => 12,
            Q4_K_S => 14,
            Q4_K_M => 15,
            Q5_K_S => 16,
            Q5_K_M => 17,
            Q6_K => 18,
            BF16 => 32,
        }
    }

    /// The type most matrices get.
    pub fn default_type(self) -> GgmlType {
        use FileType as F;
        match self {
            F::F32 => GgmlType::F32,
            F::F16 => GgmlType::F16,
            F::BF16 => GgmlType::BF16,
            F::Q4_0 => GgmlType::Q4_0,
            F::Q4_1 => GgmlType::Q4_1,
            F::Q5_0 => GgmlType::Q5_0,
            F::Q5_1 => GgmlType::Q5_1,
            F::Q8_0 => GgmlType::Q8_0,
            F::Q2_K => GgmlType::Q2_K,
            F::Q3_K_M => GgmlType::Q3_K,
            F::Q4_K_S | F::Q4_K_M => GgmlType::Q4_K,
            F::Q5_K_S | F::Q5_K_M => GgmlType::Q5_K,
            F::Q6_K => GgmlType::Q6_K,
        }
    }

    /// The type of a tensor with rows of `ncols` elements, in a model of `n_layer` layers with
    /// `n_gqa` query heads per KV head.
    pub fn tensor_type(self, role: Role, ncols: usize, n_layer: usize, n_gqa: usize) -> GgmlType {
        use FileType as F;
        use GgmlType as G;
        let default = self.default_type();
        if role == Role::Vector {
            return G::F32;
        }
        if !default.is_quantized() {
            return default;
        }
        let t = match role {
            Role::Output | Role::TokenEmbd { tied: true } => {
                if !ncols.is_multiple_of(default.block_size()) {
                    G::Q8_0
                } else if default != G::Q8_0 {
                    G::Q6_K
                } else {
                    default
                }
            }
            Role::AttnV(i) => match self {
                F::Q2_K if n_gqa >= 4 => G::Q4_K,
                F::Q2_K => G::Q3_K,
                F::Q3_K_M if i < 2 => G::Q5_K,
                F::Q3_K_M => G::Q4_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n_layer) => G::Q6_K,
                F::Q4_K_S if i < 4 => G::Q5_K,
                _ => default,
            },
            Role::FfnDown(i) => match self {
                F::Q2_K => G::Q3_K,
                F::Q3_K_M if i < n_layer / 16 => G::Q5_K,
                F::Q3_K_M => G::Q4_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n_layer) => G::Q6_K,
                F::Q4_K_S if i < n_layer / 8 => G::Q5_K,
                _ => default,
            },
            Role::AttnOutput => match self {
                F::Q2_K => G::Q3_K,
                F::Q3_K_M => G::Q4_K,
                _ => default,
            },
            _ => default,
        };
        fallback(t, ncols)
    }
}

/// llama.cpp's fallback for rows that are not whole blocks of `t`.
fn fallback(t: GgmlType, ncols: usize) -> GgmlType {
    use GgmlType as G;
    if ncols.is_multiple_of(t.block_size()) {
        return t;
    }
    let f = match t {
        G::Q2_K | G::Q3_K => G::Q4_0,
        G::Q4_K => G::Q5_0,
        G::Q5_K => G::Q5_1,
        G::Q6_K => G::Q8_0,
        _ => G::F16,
    };
    if ncols.is_multiple_of(f.block_size()) {
        f
    } else {
        G::F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_m_mix_of_a_32_layer_model() {
        let f = FileType::Q4_K_M;
        let six: Vec<usize> =
            (0..32).filter(|&i| f.tensor_type(Role::FfnDown(i), 14336, 32, 4) == GgmlType::Q6_K).collect();
        assert_eq!(six, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
        assert_eq!(f.tensor_type(Role::Output, 4096, 32, 4), GgmlType::Q6_K);
        assert_eq!(f.tensor_type(Role::TokenEmbd { tied: false }, 4096, 32, 4), GgmlType::Q4_K);
        assert_eq!(f.tensor_type(Role::TokenEmbd { tied: true }, 4096, 32, 4), GgmlType::Q6_K);
        assert_eq!(f.tensor_type(Role::Matrix, 64, 2, 2), GgmlType::Q5_0);
    }

    #[test]
    fn names_parse() {
        for f in FileType::ALL {
            assert_eq!(FileType::parse(f.name()).unwrap(), f);
        }
        assert_eq!(FileType::parse("q4_k").unwrap(), FileType::Q4_K_M);
        assert!(FileType::parse("Q1_X").is_err());
    }
}
