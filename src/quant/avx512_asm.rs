//! The AVX-512 instructions the kernels use on ymm registers (x86_64 only), in inline assembly:
//! their intrinsics and the `avx512*` target features need Rust 1.89, the crate's minimum is
//! 1.87. Every function here may run only where [`vnni`] says so.

use std::arch::x86_64::*;

/// Whether the CPU has AVX-512 VNNI with 256-bit vectors (`vpdpbusd`, `vpdpwssd` and embedded
/// broadcasts on ymm registers).
#[inline]
pub(super) fn vnni() -> bool {
    is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
}

/// An instruction `op acc, x, y` that adds sums of products of `x` and `y` to the i32 lanes of
/// `acc`, as a function returning the new `acc`.
macro_rules! onto {
    ($(#[$doc:meta])* $name:ident, $op:literal) => {
        $(#[$doc])*
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(super) unsafe fn $name(mut acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
            // SAFETY: register-only instruction; the caller checked the CPU has it.
            std::arch::asm!(
                concat!($op, " {acc}, {x}, {y}"),
                acc = inout(ymm_reg) acc,
                x = in(ymm_reg) x,
                y = in(ymm_reg) y,
                options(pure, nomem, nostack, preserves_flags)
            );
            acc
        }
    };
}

onto!(
    /// `acc` plus the sums of four products of unsigned `x` and signed `y` bytes, as 8 i32 lanes
    /// (`vpdpbusd`): the integers of `maddubs` + `madd` (whose i16 pair sums never saturate in
    /// these kernels: see avx2.rs).
    dpbusd_onto,
    "vpdpbusd"
);

onto!(
    /// `acc` plus the sums of pairs of products of the i16 lanes of `x` and `y`, as 8 i32 lanes
    /// (`vpdpwssd`, which does not saturate): the integers of `madd` and an add.
    dpwssd_onto,
    "vpdpwssd"
);

/// `acc + p * d`, `d` the f32 at `d` in every lane, by one `vfmadd231ps` with an embedded
/// broadcast: a load rather than a shuffle. The same rounding as `_mm256_fmadd_ps` of a
/// broadcast `d`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn fmadd_bcast(mut acc: __m256, p: __m256, d: *const f32) -> __m256 {
    // SAFETY: the caller guarantees 4 readable bytes at `d`; the instruction only reads them.
    std::arch::asm!(
        "vfmadd231ps {acc}, {p}, dword ptr [{d}]{{1to8}}",
        acc = inout(ymm_reg) acc,
        p = in(ymm_reg) p,
        d = in(reg) d,
        options(pure, readonly, nostack, preserves_flags)
    );
    acc
}
