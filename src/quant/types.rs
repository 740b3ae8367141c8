//! ggml tensor types: ids as stored in GGUF, block sizes and byte sizes.

use crate::{Error, Result};

/// A ggml tensor type, with the id GGUF stores for it.
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    BF16 = 30,
}

/// Names of ggml type ids wick knows of but does not implement (for error messages).
fn unsupported_name(id: u32) -> &'static str {
    match id {
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => "unknown",
    }
}

impl GgmlType {
    /// All types wick can load as weights.
    pub const WEIGHT_TYPES: [GgmlType; 13] = [
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

    /// The type for a GGUF type id; `tensor` names the tensor for the error message.
    pub fn from_id(id: u32, tensor: &str) -> Result<Self> {
        use GgmlType::*;
        Ok(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            30 => BF16,
            _ => {
                return Err(Error::UnsupportedType {
                    tensor: tensor.to_string(),
                    type_id: id,
                    type_name: unsupported_name(id).to_string(),
                })
            }
        })
    }

    /// The weight type of a ggml name ("Q4_K", "f16"; any case), if wick loads it.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        GgmlType::WEIGHT_TYPES.into_iter().find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Canonical ggml name ("Q4_K", "F16", ...).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
        }
    }

    /// Bytes of a row of `n` elements; an error if `n` is not a whole number of blocks.
    pub fn row_bytes(self, n: u64) -> Result<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return Err(Error::InvalidArgument(format!(
                "a row of {n} elements is not a whole number of {} blocks of {bs}",
                self.name()
            )));
        }
        (n / bs)
            .checked_mul(self.type_size() as u64)
            .ok_or_else(|| Error::InvalidArgument(format!("row of {n} elements overflows")))
    }

    /// Whether this is a block-quantized type (not F32/F16/BF16).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
