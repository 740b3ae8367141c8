//! AVX2 kernels (x86_64 only, selected at run time).

use super::GgmlType;

/// Whether the CPU has AVX2 and FMA (cached by std after the first call).
#[inline]
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// The AVX2 dot product, or None for types without an AVX2 kernel.
#[inline]
pub fn vec_dot(_t: GgmlType, _n: usize, _w: &[u8], _a: &[u8]) -> Option<f32> {
    None
}
