//! wasm simd128 kernels (the browser build; compiled in when the target has `simd128`, which
//! `.cargo/config.toml` turns on for wasm32).
//!
//! The integer sums are exact, as in the portable code in `dot.rs` (i8 x i8 products widened by
//! `extmul` to i16, pairs summed to i32 by `extadd_pairwise`, or by `i32x4_dot_i16x8` against a
//! splatted scale). How the floats are combined:
//! - K-quants (Q4_K, Q5_K, Q6_K): in the portable code's order, so the results are bit-identical.
//! - Legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): each block's products go into four i32 lanes,
//!   which are converted, multiplied by the block's scale and added into four f32 lanes (the
//!   min terms of Q4_1/Q5_1 into one f32), summed at the end. Not the portable code's order: that
//!   one keeps eight lanes updated by fused multiply-adds (llama.cpp's x86 order), and wasm has
//!   no fused multiply-add (`mul_add` is a libm call; emulating it exactly through f64 cost more
//!   than all the integer work, and left the browser's decode at 9 tokens/s). The difference is
//!   a few f32 roundings of the block terms (tests/web_quant.rs bounds it by 2^-20 of the sum of
//!   the block terms' magnitudes).
//!
//! As in `avx2.rs`, each kernel reads only the whole blocks present in both slices.

// Index loops over fixed-size arrays read more plainly than zipped iterators here.
#![allow(clippy::needless_range_loop)]

use super::blocks::{f16_at, f32_at, k4_scale_min, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, Q8_K_BYTES, QK, QK_K};
use super::GgmlType;
use core::arch::wasm32::*;

/// The simd128 dot product, or None for types without a kernel here.
#[inline]
pub fn vec_dot(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Option<f32> {
    Some(match t {
        GgmlType::Q4_0 => dot_legacy::<{ Legacy::Q4_0 }>(n, w, a),
        GgmlType::Q4_1 => dot_legacy::<{ Legacy::Q4_1 }>(n, w, a),
        GgmlType::Q5_0 => dot_legacy::<{ Legacy::Q5_0 }>(n, w, a),
        GgmlType::Q5_1 => dot_legacy::<{ Legacy::Q5_1 }>(n, w, a),
        GgmlType::Q8_0 => dot_legacy::<{ Legacy::Q8_0 }>(n, w, a),
        GgmlType::Q4_K => dot_q4_k::<false>(n, w, a),
        GgmlType::Q5_K => dot_q5_k(n, w, a),
        GgmlType::Q6_K => dot_q6_k(n, w, a),
        _ => return None,
    })
}

/// Q4_K in the order of llama.cpp's 4-row kernel, as `dot::vec_dot_gemm4` computes it.
#[inline]
pub fn vec_dot_gemm4(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Option<f32> {
    (t == GgmlType::Q4_K).then(|| dot_q4_k::<true>(n, w, a))
}

/// The legacy weight types, as a const parameter (a `GgmlType` cannot be one).
struct Legacy;
impl Legacy {
    const Q4_0: u8 = 0;
    const Q4_1: u8 = 1;
    const Q5_0: u8 = 2;
    const Q5_1: u8 = 3;
    const Q8_0: u8 = 4;

    const fn ggml(k: u8) -> GgmlType {
        match k {
            0 => GgmlType::Q4_0,
            1 => GgmlType::Q4_1,
            2 => GgmlType::Q5_0,
            3 => GgmlType::Q5_1,
            _ => GgmlType::Q8_0,
        }
    }
}

/// 16 bytes at `b[off..]`.
#[inline(always)]
fn load(b: &[u8], off: usize) -> v128 {
    let s: &[u8; 16] = b[off..off + 16].try_into().unwrap();
    // SAFETY: `s` is 16 readable bytes; wasm loads need no alignment.
    unsafe { v128_load(s.as_ptr() as *const v128) }
}

/// Sums of products of two i8x16 vectors, exact, as four i32 lanes of four products each
/// (lane l: elements 2l, 2l + 1, 2l + 8, 2l + 9).
#[inline(always)]
fn dot16(w: v128, a: v128) -> v128 {
    i32x4_add(
        i32x4_extadd_pairwise_i16x8(i16x8_extmul_low_i8x16(w, a)),
        i32x4_extadd_pairwise_i16x8(i16x8_extmul_high_i8x16(w, a)),
    )
}

/// The 16 fifth bits of Q5_0/Q5_1 (bits 0..16 of `h`) as bytes of 0 or 0x10.
#[inline(always)]
fn fifth_bits(h: u32) -> v128 {
    let v = i8x16_swizzle(u16x8_splat(h as u16), u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    v128_and(i8x16_eq(v128_and(v, bit), bit), u8x16_splat(0x10))
}

/// Legacy blocks times Q8_0/Q8_1 activations: the terms of `dot::dot_legacy`, summed in the
/// order the module notes give.
#[inline(always)]
fn dot_legacy<const K: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let t = Legacy::ggml(K);
    let at = super::vec_dot_type(t);
    let aoff = at.type_size() - QK;
    let mut acc = f32x4_splat(0.0);
    let mut summs = 0f32;
    for (wb, ab) in w.chunks_exact(t.type_size()).zip(a.chunks_exact(at.type_size())).take(n / QK) {
        let (a0, a1) = (load(ab, aoff), load(ab, aoff + 16));
        let (q0, q1) = match K {
            Legacy::Q4_0 | Legacy::Q4_1 => {
                let qs = load(wb, if K == Legacy::Q4_0 { 2 } else { 4 });
                let (lo, hi) = (v128_and(qs, u8x16_splat(0xF)), u8x16_shr(qs, 4));
                if K == Legacy::Q4_0 {
                    (i8x16_sub(lo, i8x16_splat(8)), i8x16_sub(hi, i8x16_splat(8)))
                } else {
                    (lo, hi)
                }
            }
            Legacy::Q5_0 | Legacy::Q5_1 => {
                let off = if K == Legacy::Q5_0 { 2 } else { 4 };
                let qh = u32::from_le_bytes(wb[off..off + 4].try_into().unwrap());
                let qs = load(wb, off + 4);
                let lo = v128_or(v128_and(qs, u8x16_splat(0xF)), fifth_bits(qh));
                let hi = v128_or(u8x16_shr(qs, 4), fifth_bits(qh >> 16));
                if K == Legacy::Q5_0 {
                    (i8x16_sub(lo, i8x16_splat(16)), i8x16_sub(hi, i8x16_splat(16)))
                } else {
                    (lo, hi)
                }
            }
            _ => (load(wb, 2), load(wb, 18)),
        };
        // Four exact partial sums of the block's 32 products, scaled and added in f32.
        let p = f32x4_convert_i32x4(i32x4_add(dot16(q0, a0), dot16(q1, a1)));
        acc = f32x4_add(acc, f32x4_mul(p, f32x4_splat(f16_at(wb, 0) * f16_at(ab, 0))));
        if K == Legacy::Q4_1 || K == Legacy::Q5_1 {
            // The min times the activations' sum (a product of two f16 values: exact).
            summs += f16_at(wb, 2) * f16_at(ab, 2);
        }
    }
    let acc = f32x4_add(acc, i32x4_shuffle::<2, 3, 0, 1>(acc, acc));
    (f32x4_extract_lane::<0>(acc) + f32x4_extract_lane::<1>(acc)) + summs
}

/// The i32x4 lanes summed (integer: any order gives the same bits).
#[inline(always)]
fn hsum_i32(v: v128) -> i32 {
    let v = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let v = i32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
    i32x4_extract_lane::<0>(v)
}

/// `sc * sum(q[i] * a[i])` over 32 bytes (`q` as i8 in two vectors, `a` at `ab[off..]`), as
/// i32x4 partial sums.
#[inline(always)]
fn dot32_scaled(q: [v128; 2], ab: &[u8], off: usize, sc: i16) -> v128 {
    dot32_scaled2(q, ab, off, sc, sc)
}

/// As [`dot32_scaled`] with a scale per 16 elements: `s0` for the first, `s1` for the second.
#[inline(always)]
fn dot32_scaled2(q: [v128; 2], ab: &[u8], off: usize, s0: i16, s1: i16) -> v128 {
    let (s0, s1) = (i16x8_splat(s0), i16x8_splat(s1));
    let (a0, a1) = (load(ab, off), load(ab, off + 16));
    let d0 = i32x4_add(
        i32x4_dot_i16x8(i16x8_extmul_low_i8x16(q[0], a0), s0),
        i32x4_dot_i16x8(i16x8_extmul_high_i8x16(q[0], a0), s0),
    );
    let d1 = i32x4_add(
        i32x4_dot_i16x8(i16x8_extmul_low_i8x16(q[1], a1), s1),
        i32x4_dot_i16x8(i16x8_extmul_high_i8x16(q[1], a1), s1),
    );
    i32x4_add(d0, d1)
}

/// Q4_K times Q8_K as `dot::dot_q4_k` (`GEMM4`: as `dot::dot_q4_k_gemm4`, one fused
/// multiply-add per 64 elements).
#[inline(always)]
fn dot_q4_k<const GEMM4: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for (wb, ab) in w.chunks_exact(Q4_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
        let da = f32_at(ab, 0);
        let bs = |k: usize| i16::from_le_bytes([ab[260 + 2 * k], ab[261 + 2 * k]]) as i32;
        let (mut isum, mut msum) = (0i32, 0i32);
        for j in 0..4 {
            let (sc0, m0) = k4_scale_min(2 * j, &wb[4..16]);
            let (sc1, m1) = k4_scale_min(2 * j + 1, &wb[4..16]);
            let (q0, q1) = (load(wb, 16 + 32 * j), load(wb, 32 + 32 * j));
            let m4 = u8x16_splat(0xF);
            let lo = dot32_scaled([v128_and(q0, m4), v128_and(q1, m4)], ab, 4 + 64 * j, sc0 as i16);
            let hi = dot32_scaled([u8x16_shr(q0, 4), u8x16_shr(q1, 4)], ab, 36 + 64 * j, sc1 as i16);
            let is = hsum_i32(i32x4_add(lo, hi));
            let ms = m0 as i32 * (bs(4 * j) + bs(4 * j + 1)) + m1 as i32 * (bs(4 * j + 2) + bs(4 * j + 3));
            if GEMM4 {
                acc = (is as f32).mul_add(f16_at(wb, 0) * da, acc);
                accm = (ms as f32).mul_add(f16_at(wb, 2) * da, accm);
            } else {
                isum = isum.wrapping_add(is);
                msum = msum.wrapping_add(ms);
            }
        }
        if !GEMM4 {
            acc = (isum as f32).mul_add(f16_at(wb, 0) * da, acc);
            accm = (msum as f32).mul_add(f16_at(wb, 2) * da, accm);
        }
    }
    acc - accm
}

/// Q5_K times Q8_K as `dot::dot_k` computes it: Q4_K's nibbles and scales plus a fifth bit
/// (bit c of `qh[l]` for chunk c).
#[inline(always)]
fn dot_q5_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (wb, ab) in w.chunks_exact(Q5_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
        let bs = |k: usize| i16::from_le_bytes([ab[260 + 2 * k], ab[261 + 2 * k]]) as i32;
        let qh = [load(wb, 16), load(wb, 32)];
        // Bit c of each qh byte, moved to bit 4.
        let fifth = |v: v128, c: u32| {
            let v = if c <= 4 { u8x16_shl(v, 4 - c) } else { u8x16_shr(v, c - 4) };
            v128_and(v, u8x16_splat(0x10))
        };
        let (mut isum, mut msum) = (i32x4_splat(0), 0i32);
        for j in 0..4 {
            let (sc0, m0) = k4_scale_min(2 * j, &wb[4..16]);
            let (sc1, m1) = k4_scale_min(2 * j + 1, &wb[4..16]);
            let (q0, q1) = (load(wb, 48 + 32 * j), load(wb, 64 + 32 * j));
            let m4 = u8x16_splat(0xF);
            let (c0, c1) = (2 * j as u32, 2 * j as u32 + 1);
            let lo =
                [v128_or(v128_and(q0, m4), fifth(qh[0], c0)), v128_or(v128_and(q1, m4), fifth(qh[1], c0))];
            let hi =
                [v128_or(u8x16_shr(q0, 4), fifth(qh[0], c1)), v128_or(u8x16_shr(q1, 4), fifth(qh[1], c1))];
            isum = i32x4_add(isum, dot32_scaled(lo, ab, 4 + 64 * j, sc0 as i16));
            isum = i32x4_add(isum, dot32_scaled(hi, ab, 36 + 64 * j, sc1 as i16));
            msum += m0 as i32 * (bs(4 * j) + bs(4 * j + 1)) + m1 as i32 * (bs(4 * j + 2) + bs(4 * j + 3));
        }
        let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
        acc += f32_at(ab, 0) * (d * hsum_i32(isum) as f32 - dmin * msum as f32);
    }
    acc
}

/// Q6_K times Q8_K as `dot::dot_k` computes it (signed 6-bit quants, no mins).
#[inline(always)]
fn dot_q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (wb, ab) in w.chunks_exact(Q6_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
        let mut isum = i32x4_splat(0);
        for h in 0..2 {
            let ql = [0, 16, 32, 48].map(|o| load(wb, 64 * h + o));
            let qh = [0, 16].map(|o| load(wb, 128 + 32 * h + o));
            // Chunk c (32 elements): nibble c / 2 of ql[32 (c % 2)..], bits 2c..2c+2 of qh.
            for c in 0..4 {
                let q: [v128; 2] = std::array::from_fn(|i| {
                    let l = ql[2 * (c % 2) + i];
                    let lo = if c < 2 { v128_and(l, u8x16_splat(0xF)) } else { u8x16_shr(l, 4) };
                    let hi = v128_and(
                        match c {
                            0 => u8x16_shl(qh[i], 4),
                            1 => u8x16_shl(qh[i], 2),
                            2 => qh[i],
                            _ => u8x16_shr(qh[i], 2),
                        },
                        u8x16_splat(0x30),
                    );
                    i8x16_sub(v128_or(lo, hi), i8x16_splat(32))
                });
                // Sub-blocks 8h + 2c and 8h + 2c + 1, each with its scale.
                let s = 8 * h + 2 * c;
                let off = 4 + 128 * h + 32 * c;
                let (s0, s1) = (wb[192 + s] as i8 as i16, wb[193 + s] as i8 as i16);
                isum = i32x4_add(isum, dot32_scaled2(q, ab, off, s0, s1));
            }
        }
        // As `dot_k` with Q6_K's zero mins: d * isum - 0 * 0.
        let (d, isum) = (f16_at(wb, 208), hsum_i32(isum));
        acc += f32_at(ab, 0) * (d * isum as f32 - 0f32 * 0f32);
    }
    acc
}
