//! Block formats: layouts, dequantization and dot products on the CPU.
//!
//! - [`dequantize`]: any supported type to f32 (bit-identical to the `gguf` Python package).
//! - [`quantize_row_into`]: f32 to the activation formats (Q8_0, Q8_1, Q8_K) and F32/F16/BF16.
//! - [`vec_dot`]: weight row times activations converted to [`vec_dot_type`], with integer
//!   arithmetic inside blocks as in llama.cpp's CPU backend; AVX2 on x86_64 when the CPU has it,
//!   portable scalar code elsewhere (wasm included). [`vec_dot_ref`] is the plain reference.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod blocks;
mod dequant;
mod dot;
mod dot_ref;
mod quantize;
mod types;

pub use dequant::dequantize;
pub use dot::{vec_dot, vec_dot_portable};
pub use dot_ref::vec_dot_ref;
pub use quantize::quantize_row_into;
pub use types::GgmlType;

/// The format activations are converted to before a dot product with weights of type `t`
/// (llama.cpp's CPU choice: F32, F16 and BF16 keep their type, Q4_0/Q5_0/Q8_0 use Q8_0,
/// Q4_1/Q5_1 use Q8_1, the K-quants use Q8_K; Q8_1 and Q8_K pair with themselves).
pub fn vec_dot_type(t: GgmlType) -> GgmlType {
    use GgmlType::*;
    match t {
        F32 => F32,
        F16 => F16,
        BF16 => BF16,
        Q4_0 | Q5_0 | Q8_0 => Q8_0,
        Q4_1 | Q5_1 | Q8_1 => Q8_1,
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => Q8_K,
    }
}
