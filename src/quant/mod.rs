//! Block formats: layouts, dequantization and dot products on the CPU.
//!
//! - [`dequantize`]: any supported type to f32, bit-identical to the `gguf` Python package
//!   (tests/quant_fixtures.rs).
//! - [`quantize_row_into`]: f32 to the activation formats (Q8_0, Q8_1, Q8_K) and F32/F16/BF16,
//!   rounding as llama.cpp's reference quantizers do.
//! - [`quantize_weights`]: f32 to every weight format (legacy and K-quants), with the algorithms
//!   of llama.cpp's reference quantizers (what llama-quantize runs without an importance matrix).
//! - [`vec_dot`]: weight row times activations converted to [`vec_dot_type`], with integer
//!   arithmetic inside blocks as in llama.cpp's CPU backend.
//!
//! Design decisions:
//! - Blocks are parsed by byte offset (`blocks.rs`), not cast to `#[repr(C)]` structs: GGUF tensor
//!   data has no alignment guarantee. Block sizes are checked by compile-time asserts.
//! - One decomposition per block (`x = d * sc * q - dmin * mn`, see `blocks.rs`) feeds both
//!   `dequantize` and the plain reference [`vec_dot_ref`]; the fast paths are independent code
//!   tested against that reference on random blocks (tests/quant_dot.rs).
//! - Four dot product paths: [`vec_dot_ref`] (clarity), [`vec_dot_portable`] (scalar code the
//!   compiler can vectorize; used on CPUs without AVX2), AVX2+FMA+F16C kernels chosen at run
//!   time on x86_64 (`avx2.rs`), and wasm simd128 kernels compiled in when the wasm target has
//!   simd128 (`simd128.rs`; on by default in `.cargo/config.toml`; types without a kernel there
//!   take the portable path). [`vec_dot`] dispatches. The simd128 kernels of the legacy types sum
//!   their floats in their own order (wasm has no fused multiply-add); tests/web_quant.rs holds
//!   every simd128 kernel to the portable code in the browser.
//! - Batched forms for the CPU executor's matmul, bit-identical to [`vec_dot`] per pair:
//!   [`vec_dot_rows`] (decode: many weight rows, one dispatch) and [`vec_dot_tile`] (prefill:
//!   each weight block unpacked once for several activation rows). On x86_64 the legacy types
//!   run them as tiles (`avx2_tile.rs`), with `vpdpbusd` where the CPU has AVX-512 VNNI; prefill's
//!   1 x 4 tile ([`vec_dot_tile4`]) reads the activations' block scales converted once per
//!   matmul ([`tile_scales`]); Q4_K and
//!   Q6_K have four-row tiles of their own ([`vec_dot_gemm4_tile`], `avx2_ktile.rs`). The run
//!   forms ([`vec_dot_tile8_run`], [`vec_dot_gemm4_run`]) take the L1-sized run of weight rows a
//!   matmul hands a thread in one call; the 1 x 8 one reads the activation quants packed by
//!   [`pack_tile8`]. The AVX-512 instructions (`vpdpbusd`, `vpdpwssd`, embedded broadcasts) are
//!   inline assembly in `avx512_asm.rs`.
//! - The hot path never allocates, never panics and never reads out of bounds, even when the
//!   caller breaks its length contract (debug builds assert it).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_ktile;
#[cfg(target_arch = "x86_64")]
mod avx2_quantize;
#[cfg(target_arch = "x86_64")]
mod avx2_tile;
#[cfg(target_arch = "x86_64")]
mod avx512_asm;
mod blocks;
mod dequant;
mod dot;
mod dot_ref;
mod quantize;
mod quantize_weights;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
mod types;

#[cfg(target_arch = "wasm32")]
pub(crate) use blocks::f16_to_f32_branchless;
pub use dequant::dequantize;
pub use dot::{
    has_tile, has_tile8, pack_tile8, tile_scales, vec_dot, vec_dot_gemm4, vec_dot_gemm4_portable,
    vec_dot_gemm4_run, vec_dot_gemm4_tile, vec_dot_portable, vec_dot_rows, vec_dot_tile, vec_dot_tile4,
    vec_dot_tile8, vec_dot_tile8_run, Tile8Acts,
};
pub use dot_ref::vec_dot_ref;
pub use quantize::quantize_row_into;
pub use quantize_weights::quantize_weights;
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
