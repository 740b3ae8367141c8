//! wasm simd128 kernels (the browser build; compiled in when the target has `simd128`, which
//! `.cargo/config.toml` turns on for wasm32).
//!
//! The integer sums are exact, as in the portable code in `dot.rs` (i8 x i8 products widened by
//! `extmul` to i16, pairs summed to i32 by `extadd_pairwise` and lanes by shuffles, or by
//! `i32x4_dot_i16x8` against a splatted scale). How the floats are combined:
//! - K-quants (Q4_K, Q5_K, Q6_K): in the portable code's order, so the results are bit-identical.
//! - Legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): each block's products go into four i32 lanes
//!   (lane l: elements 4l..4l + 4 of each 16-value half, the partition of relaxed SIMD's dot
//!   product, so that both builds have the same lanes and the same results), which are
//!   converted, multiplied by the block's scale and added into four f32 lanes (the min terms of
//!   Q4_1/Q5_1 into one f32), summed at the end. Q8_0 has other lanes (those of
//!   `i32x4_dot_i16x8` on the values widened to i16, in both builds: `q8_dot32`). Not the
//!   portable code's order: that one keeps eight lanes updated by fused multiply-adds
//!   (llama.cpp's x86 order), and wasm has no fused multiply-add (`mul_add` is a libm call;
//!   emulating it exactly through f64 per lane and block cost more than all the integer work,
//!   and left the browser's decode at 9 tokens/s; `crate::fma` does it once per 64 or 256
//!   values, where the K-quants need it). The difference is
//!   a few f32 roundings of the block terms (tests/web_quant.rs bounds it by 2^-20 of the sum of
//!   the block terms' magnitudes).
//!
//! With `relaxed-simd` (the browser builds made for engines that have it; pkg-config/build.sh),
//! the integer sums of weights whose quants are unsigned below 128 (every type but Q8_0) take
//! `i32x4.relaxed_dot_i8x16_i7x16_add`: four products a lane in one instruction, where plain
//! simd128 needs five. Its result is defined only where the second operand's top bits are
//! clear, and its 16-bit pair sums may saturate: the quants are at most 63 and the activations
//! at least -128, so a pair sum is at most 2 · 128 · 63 = 16,128 in magnitude and the results
//! are exact everywhere. Formats with an offset (Q4_0's 8, Q5_0's 16, Q6_K's 32) take the
//! unsigned quants and subtract the offset times the activations' sums. The K-quants' integer
//! totals are the same numbers, so their results keep their bits; the legacy types' four lanes
//! hold other partial sums, within the same bound as above.
//!
//! As in `avx2.rs`, each kernel reads only the whole blocks present in both slices.

// Index loops over fixed-size arrays read more plainly than zipped iterators here.
#![allow(clippy::needless_range_loop)]

use super::blocks::{
    f16_at, f32_at, k4_scale_min, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, Q8_0_BYTES, Q8_K_BYTES, QK, QK_K,
};
use super::GgmlType;
use crate::fma::mul_add;
use core::arch::wasm32::*;

/// Whether the relaxed dot product is compiled in (see the module notes).
const RELAXED: bool = cfg!(target_feature = "relaxed-simd");

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

/// Sums of products of 32 activations (`a`, signed) and 32 unsigned quants below 128 (`q`), as
/// four i32 lanes (lane l: elements 4l..4l + 4 of each half), added to `acc`.
///
/// (The two halves' products are summed lane by lane, so each lane's value is [`sdot32`]'s.)
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn udot32(a: [v128; 2], q: [v128; 2], acc: v128) -> v128 {
    i32x4_relaxed_dot_i8x16_i7x16_add(a[1], q[1], i32x4_relaxed_dot_i8x16_i7x16_add(a[0], q[0], acc))
}

/// Sums of products of 32 signed quants (`q0`, `q1`: the block's two halves) and activations
/// (`a0`, `a1`), exact, as four i32 lanes in the partition of the relaxed dot product (lane l:
/// elements 4l..4l + 4 of each half): [`udot32`]'s lanes, for signed values and plain simd128.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn sdot32(q0: v128, q1: v128, a0: v128, a1: v128) -> v128 {
    let pairs =
        |lo: v128, hi: v128| i32x4_add(i32x4_extadd_pairwise_i16x8(lo), i32x4_extadd_pairwise_i16x8(hi));
    // Pairs (2m, 2m + 1) of elements 0..8 and 8..16, both halves added.
    let lo = pairs(i16x8_extmul_low_i8x16(q0, a0), i16x8_extmul_low_i8x16(q1, a1));
    let hi = pairs(i16x8_extmul_high_i8x16(q0, a0), i16x8_extmul_high_i8x16(q1, a1));
    i32x4_add(i32x4_shuffle::<0, 2, 4, 6>(lo, hi), i32x4_shuffle::<1, 3, 5, 7>(lo, hi))
}

/// A block half's 16 signed bytes widened to i16: elements 0..8, then 8..16.
#[inline(always)]
fn widen(v: v128) -> [v128; 2] {
    [i16x8_extend_low_i8x16(v), i16x8_extend_high_i8x16(v)]
}

/// Q8_0's 32 products of signed quants (`q0`, `q1`) and activations already widened to i16
/// (`a`: [`widen`] of each half), exact, as four i32 lanes (lane l: elements 2l, 2l + 1,
/// 8 + 2l and 9 + 2l of each half). Not [`sdot32`]'s lanes: both builds take this one for
/// Q8_0 (relaxed SIMD's product needs unsigned quants), so they still agree. Widening and
/// `i32x4_dot_i16x8` is about two thirds of [`sdot32`]'s instructions, and half when the
/// activations were widened once for all weight rows (decode).
#[inline(always)]
fn q8_dot32(q0: v128, q1: v128, a: &[v128; 4]) -> v128 {
    let [w0, w1] = widen(q0);
    let [w2, w3] = widen(q1);
    let d = |w: v128, x: v128| i32x4_dot_i16x8(w, x);
    i32x4_add(i32x4_add(d(w0, a[0]), d(w1, a[1])), i32x4_add(d(w2, a[2]), d(w3, a[3])))
}

/// A block's two halves of activations widened to i16, as [`q8_dot32`] takes them.
#[inline(always)]
fn widen_halves(a0: v128, a1: v128) -> [v128; 4] {
    let ([w0, w1], [w2, w3]) = (widen(a0), widen(a1));
    [w0, w1, w2, w3]
}

/// The 16 fifth bits of Q5_0/Q5_1 (bits 0..16 of `h`) as bytes of 0 or 0x10.
#[inline(always)]
fn fifth_bits(h: u32) -> v128 {
    let v = i8x16_swizzle(u16x8_splat(h as u16), u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    v128_and(i8x16_eq(v128_and(v, bit), bit), u8x16_splat(0x10))
}

/// A legacy weight block's 32 quants as stored (unsigned but for Q8_0; [`block_sum`] applies
/// the offsets), the two halves of the block.
#[inline(always)]
fn legacy_quants<const K: u8>(wb: &[u8]) -> (v128, v128) {
    match K {
        Legacy::Q4_0 | Legacy::Q4_1 => {
            let qs = load(wb, if K == Legacy::Q4_0 { 2 } else { 4 });
            (v128_and(qs, u8x16_splat(0xF)), u8x16_shr(qs, 4))
        }
        Legacy::Q5_0 | Legacy::Q5_1 => {
            let off = if K == Legacy::Q5_0 { 2 } else { 4 };
            let qh = u32::from_le_bytes(wb[off..off + 4].try_into().unwrap());
            let qs = load(wb, off + 4);
            let lo = v128_or(v128_and(qs, u8x16_splat(0xF)), fifth_bits(qh));
            let hi = v128_or(u8x16_shr(qs, 4), fifth_bits(qh >> 16));
            (lo, hi)
        }
        _ => (load(wb, 2), load(wb, 18)),
    }
}

/// Whether legacy type `K` has a min (Q4_1, Q5_1: the weight's min times the activations' s).
const fn has_min(k: u8) -> bool {
    k == Legacy::Q4_1 || k == Legacy::Q5_1
}

/// The lanes of a legacy product's accumulator summed, plus the min terms.
#[inline(always)]
fn legacy_total(acc: v128, summs: f32) -> f32 {
    let acc = f32x4_add(acc, i32x4_shuffle::<2, 3, 0, 1>(acc, acc));
    (f32x4_extract_lane::<0>(acc) + f32x4_extract_lane::<1>(acc)) + summs
}

/// One block's terms into (`acc`, `summs`): `p` the four exact partial sums of its 32 integer
/// products ([`block_sum`]), `dd` the product of the weight's and the activations' scales, `ms`
/// the weight's min times the activations' s (min types).
#[inline(always)]
fn legacy_block<const K: u8>(p: v128, dd: f32, ms: f32, acc: &mut v128, summs: &mut f32) {
    // The partial sums scaled and added in f32.
    let p = f32x4_convert_i32x4(p);
    *acc = f32x4_add(*acc, f32x4_mul(p, f32x4_splat(dd)));
    if has_min(K) {
        // The min times the activations' sum (a product of two f16 values: exact).
        *summs += ms;
    }
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
        let ms = if has_min(K) { f16_at(wb, 2) * f16_at(ab, 2) } else { 0.0 };
        let (q0, q1) = legacy_quants::<K>(wb);
        let p = block_sum::<K>(q0, q1, load(ab, aoff), load(ab, aoff + 16));
        legacy_block::<K>(p, f16_at(wb, 0) * f16_at(ab, 0), ms, &mut acc, &mut summs);
    }
    legacy_total(acc, summs)
}

/// Calls `$f::<K>($args)` for the legacy type `$t` (`Some`), or gives None for other types.
macro_rules! legacy {
    ($t:expr, $f:ident, $($arg:expr),*) => {
        match $t {
            GgmlType::Q4_0 => Some($f::<{ Legacy::Q4_0 }>($($arg),*)),
            GgmlType::Q4_1 => Some($f::<{ Legacy::Q4_1 }>($($arg),*)),
            GgmlType::Q5_0 => Some($f::<{ Legacy::Q5_0 }>($($arg),*)),
            GgmlType::Q5_1 => Some($f::<{ Legacy::Q5_1 }>($($arg),*)),
            GgmlType::Q8_0 => Some($f::<{ Legacy::Q8_0 }>($($arg),*)),
            _ => None,
        }
    };
}

/// `out[c]` = [`vec_dot`] of the legacy weight row `w` with activation row `c` of `a` (four rows
/// `arb` bytes apart), `sc` holding those rows' scales as f32 (`dot::tile_scales`): prefill's
/// 1 x 4 tile, each weight block unpacked once for the four rows and no activation scale
/// converted per row. The same operations per (row, block) as [`vec_dot`]: bit-identical.
/// False (nothing written) for other types or slices too short.
pub fn dot_tile4s(
    t: GgmlType,
    n: usize,
    w: &[u8],
    a: &[u8],
    arb: usize,
    sc: &[f32],
    out: &mut [f32; 4],
) -> bool {
    let at = super::vec_dot_type(t);
    let nb = n / QK;
    let fits =
        matches!(t, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0)
            && n.is_multiple_of(QK)
            && nb * t.type_size() <= w.len()
            && nb * at.type_size() <= arb
            && a.len() >= 3 * arb + nb * at.type_size()
            && sc.len() >= 8 * nb;
    fits && legacy!(t, tile4s, nb, w, a, arb, sc, out).is_some()
}

#[inline(always)]
fn tile4s<const K: u8>(nb: usize, w: &[u8], a: &[u8], arb: usize, sc: &[f32], out: &mut [f32; 4]) {
    let t = Legacy::ggml(K);
    let (ts, ats) = (t.type_size(), super::vec_dot_type(t).type_size());
    let aoff = ats - QK;
    let mut acc = [f32x4_splat(0.0); 4];
    let mut summs = [0f32; 4];
    for i in 0..nb {
        let wb = &w[i * ts..(i + 1) * ts];
        let (q0, q1) = legacy_quants::<K>(wb);
        let (dw, mw) = (f16_at(wb, 0), if has_min(K) { f16_at(wb, 2) } else { 0.0 });
        let s = &sc[8 * i..8 * i + 8];
        for c in 0..4 {
            let ab = &a[c * arb + i * ats..c * arb + (i + 1) * ats];
            let p = block_sum::<K>(q0, q1, load(ab, aoff), load(ab, aoff + 16));
            legacy_block::<K>(p, dw * s[c], mw * s[4 + c], &mut acc[c], &mut summs[c]);
        }
    }
    for c in 0..4 {
        out[c] = legacy_total(acc[c], summs[c]);
    }
}

/// Most blocks of a decode activation row whose scales [`dot_rows`] converts once (on the
/// stack: 4 KiB).
const ROW_BLOCKS: usize = 512;

/// `out[j]` = [`vec_dot`] of legacy weight row `j` (rows `wrb` bytes apart in `w`) with the
/// activation row `a`, its scales converted once for all rows: the decode loop, bit-identical
/// to [`vec_dot`]. False (nothing written) for other types, rows over [`ROW_BLOCKS`] blocks,
/// or slices too short.
pub fn dot_rows(t: GgmlType, n: usize, w: &[u8], wrb: usize, a: &[u8], out: &mut [f32]) -> bool {
    let at = super::vec_dot_type(t);
    let nb = n / QK;
    let fits =
        matches!(t, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0)
            && n.is_multiple_of(QK)
            && nb <= ROW_BLOCKS
            && nb * t.type_size() <= wrb
            && nb * at.type_size() <= a.len()
            && w.len() >= out.len() * wrb;
    fits && legacy!(t, rows, nb, w, wrb, a, out).is_some()
}

#[inline(always)]
fn rows<const K: u8>(nb: usize, w: &[u8], wrb: usize, a: &[u8], out: &mut [f32]) {
    if K == Legacy::Q8_0 {
        return rows_q8(nb, w, wrb, a, out);
    }
    let t = Legacy::ggml(K);
    let (ts, ats) = (t.type_size(), super::vec_dot_type(t).type_size());
    let aoff = ats - QK;
    // The activations' scale and s of each block, as f32.
    let mut sc = [0f32; 2 * ROW_BLOCKS];
    // With relaxed SIMD, the offset's products with each block's activations (`block_sum`'s
    // second product, the same for every weight row) for Q4_0 and Q5_0: 8 KiB.
    let pre = RELAXED && legacy_offset(K) != 0;
    let mut offs = [i32x4_splat(0); ROW_BLOCKS];
    for (i, ab) in a.chunks_exact(ats).take(nb).enumerate() {
        sc[2 * i] = f16_at(ab, 0);
        sc[2 * i + 1] = if has_min(K) { f16_at(ab, 2) } else { 0.0 };
        if pre {
            offs[i] = offset_sum::<K>(load(ab, aoff), load(ab, aoff + 16));
        }
    }
    for (j, o) in out.iter_mut().enumerate() {
        let wr = &w[j * wrb..j * wrb + nb * ts];
        let mut acc = f32x4_splat(0.0);
        let mut summs = 0f32;
        for (i, (wb, ab)) in wr.chunks_exact(ts).zip(a.chunks_exact(ats)).enumerate() {
            let ms = if has_min(K) { f16_at(wb, 2) * sc[2 * i + 1] } else { 0.0 };
            let (q0, q1) = legacy_quants::<K>(wb);
            let (a0, a1) = (load(ab, aoff), load(ab, aoff + 16));
            let p = if pre {
                i32x4_sub(unsigned_sum(q0, q1, a0, a1), offs[i])
            } else {
                block_sum::<K>(q0, q1, a0, a1)
            };
            legacy_block::<K>(p, f16_at(wb, 0) * sc[2 * i], ms, &mut acc, &mut summs);
        }
        *o = legacy_total(acc, summs);
    }
}

/// [`rows`] for Q8_0, the activations widened to i16 once for all weight rows (32 KiB on the
/// stack at most): the same operations per block as [`legacy_block`], so the same bits.
#[inline(always)]
fn rows_q8(nb: usize, w: &[u8], wrb: usize, a: &[u8], out: &mut [f32]) {
    const TS: usize = Q8_0_BYTES;
    let mut sc = [0f32; ROW_BLOCKS];
    let mut wide = [[i32x4_splat(0); 4]; ROW_BLOCKS];
    for (i, ab) in a.chunks_exact(TS).take(nb).enumerate() {
        sc[i] = f16_at(ab, 0);
        wide[i] = widen_halves(load(ab, 2), load(ab, 18));
    }
    for (j, o) in out.iter_mut().enumerate() {
        let wr = &w[j * wrb..j * wrb + nb * TS];
        let mut acc = f32x4_splat(0.0);
        for (i, wb) in wr.chunks_exact(TS).enumerate() {
            let p = f32x4_convert_i32x4(q8_dot32(load(wb, 2), load(wb, 18), &wide[i]));
            acc = f32x4_add(acc, f32x4_mul(p, f32x4_splat(f16_at(wb, 0) * sc[i])));
        }
        *o = legacy_total(acc, 0.0);
    }
}

/// The offset Q4_0 and Q5_0 subtract from their stored quants (0: none).
const fn legacy_offset(k: u8) -> i8 {
    match k {
        Legacy::Q4_0 => 8,
        Legacy::Q5_0 => 16,
        _ => 0,
    }
}

/// A legacy block's 32 products of quants `q0`, `q1` (as stored) and activations `a0`, `a1`,
/// exact, as four i32 lanes.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn block_sum<const K: u8>(q0: v128, q1: v128, a0: v128, a1: v128) -> v128 {
    if K == Legacy::Q8_0 {
        return q8_dot32(q0, q1, &widen_halves(a0, a1));
    }
    let o = i8x16_splat(legacy_offset(K));
    let (q0, q1) = if legacy_offset(K) != 0 { (i8x16_sub(q0, o), i8x16_sub(q1, o)) } else { (q0, q1) };
    sdot32(q0, q1, a0, a1)
}

/// As above, the unsigned quants through the relaxed dot product, less the offset times the
/// activations' sums (Q8_0's signed weights as plain simd128 does).
///
/// Decode (`rows`) computes the offset's products once for all weight rows.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn block_sum<const K: u8>(q0: v128, q1: v128, a0: v128, a1: v128) -> v128 {
    if K == Legacy::Q8_0 {
        return q8_dot32(q0, q1, &widen_halves(a0, a1));
    }
    let p = unsigned_sum(q0, q1, a0, a1);
    if legacy_offset(K) == 0 {
        return p;
    }
    i32x4_sub(p, offset_sum::<K>(a0, a1))
}

/// The products of unsigned quants below 128 (`q0`, `q1`) and activations, exact, in
/// [`udot32`]'s lanes: that instruction with relaxed SIMD, [`sdot32`] (the same lanes) without.
#[inline(always)]
fn unsigned_sum(q0: v128, q1: v128, a0: v128, a1: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        udot32([a0, a1], [q0, q1], i32x4_splat(0))
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        sdot32(q0, q1, a0, a1)
    }
}

/// Q4_0's or Q5_0's offset times the activations' sums, as [`unsigned_sum`]'s lanes.
#[inline(always)]
fn offset_sum<const K: u8>(a0: v128, a1: v128) -> v128 {
    let o = i8x16_splat(legacy_offset(K));
    unsigned_sum(o, o, a0, a1)
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
#[cfg(not(target_feature = "relaxed-simd"))]
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

/// As above for unsigned quants below 128, through the relaxed dot product (the same integer
/// total in other lanes).
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn dot32_scaled2(q: [v128; 2], ab: &[u8], off: usize, s0: i16, s1: i16) -> v128 {
    let z = i32x4_splat(0);
    let d0 = i32x4_relaxed_dot_i8x16_i7x16_add(load(ab, off), q[0], z);
    let d1 = i32x4_relaxed_dot_i8x16_i7x16_add(load(ab, off + 16), q[1], z);
    if s0 == s1 {
        return i32x4_mul(i32x4_add(d0, d1), i32x4_splat(s0 as i32));
    }
    i32x4_add(i32x4_mul(d0, i32x4_splat(s0 as i32)), i32x4_mul(d1, i32x4_splat(s1 as i32)))
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
                acc = mul_add(is as f32, f16_at(wb, 0) * da, acc);
                accm = mul_add(ms as f32, f16_at(wb, 2) * da, accm);
            } else {
                isum = isum.wrapping_add(is);
                msum = msum.wrapping_add(ms);
            }
        }
        if !GEMM4 {
            acc = mul_add(isum as f32, f16_at(wb, 0) * da, acc);
            accm = mul_add(msum as f32, f16_at(wb, 2) * da, accm);
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
        let mut offset = 0i32;
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
                    let q = v128_or(lo, hi);
                    if RELAXED {
                        q
                    } else {
                        i8x16_sub(q, i8x16_splat(32))
                    }
                });
                // Sub-blocks 8h + 2c and 8h + 2c + 1, each with its scale.
                let s = 8 * h + 2 * c;
                let off = 4 + 128 * h + 32 * c;
                let (s0, s1) = (wb[192 + s] as i8 as i16, wb[193 + s] as i8 as i16);
                isum = i32x4_add(isum, dot32_scaled2(q, ab, off, s0, s1));
                if RELAXED {
                    // The offset: 32 times each 16 activations' sum (16-value groups s, s + 1).
                    let bs = |k: usize| i16::from_le_bytes([ab[260 + 2 * k], ab[261 + 2 * k]]) as i32;
                    offset += 32 * (s0 as i32 * bs(s) + s1 as i32 * bs(s + 1));
                }
            }
        }
        // As `dot_k` with Q6_K's zero mins: d * isum - 0 * 0.
        let (d, isum) = (f16_at(wb, 208), hsum_i32(isum) - offset);
        acc += f32_at(ab, 0) * (d * isum as f32 - 0f32 * 0f32);
    }
    acc
}
