//! Weight quantizers: f32 rows to every weight format wick loads.
//!
//! The algorithms are those of llama.cpp's reference quantizers in `ggml/src/ggml-quants.c`
//! (ggml-org/llama.cpp, `quantize_row_q4_0_ref` ... `quantize_row_q6_K_ref` and their helpers
//! `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants`), which are what llama-quantize runs
//! when no importance matrix is given. They are rewritten here from their description:
//!
//! - Legacy 32-element blocks: the scale maps the element of largest magnitude (Q4_0, Q5_0: with
//!   its sign, to the most negative level) or the range [min, max] (Q4_1, Q5_1) onto the levels.
//! - Q3_K and Q6_K (symmetric, 16 scales of 16): per sub-block, try scales around the max-based
//!   one and keep the one minimizing the x²-weighted squared error; then quantize the 16 scales
//!   to 6 (Q3_K) or 8 (Q6_K) bits against the largest and requantize every element against the
//!   stored (rounded) scale.
//! - Q2_K, Q4_K, Q5_K (scale and min per sub-block): per sub-block, a least-squares fit of
//!   scale and min over a sweep of candidate level assignments; scales and mins then quantized to
//!   4 (Q2_K) or 6 bits and the elements requantized against the stored values.
//!
//! Every quantized value is written through [`f16`] exactly as the file will hold it, so
//! requantization sees what `dequantize` will see.

// Index loops mirror the documented layouts more plainly than zipped iterators.
#![allow(clippy::needless_range_loop)]

use super::blocks::{QK, QK_K};
use super::{quantize_row_into, GgmlType};
use crate::{Error, Result};
use half::f16;

/// Below this a group is treated as all zeros (as llama.cpp's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Quantize a row of f32 weights into type `t` (any of [`GgmlType::WEIGHT_TYPES`]).
///
/// `dst` is cleared and filled with `t.row_bytes(x.len())` bytes. Errors (never panics) when
/// `x.len()` is not a whole number of blocks, when `t` is an activation-only format (Q8_1,
/// Q8_K), or when a block-quantized type is asked to encode a NaN or infinite value.
pub fn quantize_weights(t: GgmlType, x: &[f32], dst: &mut Vec<u8>) -> Result<()> {
    use GgmlType::*;
    match t {
        F32 | F16 | BF16 => return quantize_row_into(t, x, dst),
        Q8_1 | Q8_K => {
            return Err(Error::InvalidArgument(format!(
                "quantize_weights: {t} is an activation format; use quantize_row_into"
            )))
        }
        _ => {}
    }
    let bytes = t.row_bytes(x.len() as u64)? as usize;
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "quantize_weights: element {i} is {} and cannot be quantized to {t}",
            x[i]
        )));
    }
    dst.clear();
    dst.reserve(bytes);
    for xb in x.chunks_exact(t.block_size()) {
        match t {
            Q4_0 => q4_0(xb, dst),
            Q4_1 => q4_1(xb, dst),
            Q5_0 => q5_0(xb, dst),
            Q5_1 => q5_1(xb, dst),
            Q8_0 => q8_0(xb, dst),
            Q2_K => q2_k(xb, dst),
            Q3_K => q3_k(xb, dst),
            Q4_K => q45_k(xb, 15, dst),
            Q5_K => q45_k(xb, 31, dst),
            Q6_K => q6_k(xb, dst),
            _ => unreachable!("handled above"),
        }
    }
    debug_assert_eq!(dst.len(), bytes);
    Ok(())
}

/// Round to nearest, ties to even, as llama.cpp's `nearest_int`: adding 1.5 * 2^23 leaves the
/// rounded integer in the low mantissa bits (exact for |v| < 2^22; inputs are clamped to that,
/// far beyond any level). Inline float arithmetic, unlike `round_ties_even` without SSE4.1.
#[inline(always)]
fn nearest(v: f32) -> i32 {
    let v = v.clamp(-4_000_000.0, 4_000_000.0) + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `v` as it reads back after being stored as f16.
#[inline]
fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

fn push_f16(dst: &mut Vec<u8>, v: f32) {
    dst.extend_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// The element of largest magnitude, with its sign.
fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The largest value, or +0 when none is positive (a group of zeros has min -0, and a scale of
/// -0 must not reach the file: llama.cpp writes +0).
fn largest(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |a, &s| if s > a { s } else { a })
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// Q4_0 and Q5_0: `x = d * (q - 2^(bits-1))`, the largest-magnitude element mapping to level 0.
fn symmetric_legacy(x: &[f32], bits: u32) -> (f32, [u8; QK]) {
    let half = (1u32 << (bits - 1)) as f32;
    let top = (1i32 << bits) - 1;
    let d = signed_max(x) / -half;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    // Truncation of a non-negative value: floor(x/d + half + 0.5).
    let q = std::array::from_fn(|j| ((x[j] * id + half + 0.5) as i32).clamp(0, top) as u8);
    (d, q)
}

/// Q4_1 and Q5_1: `x = d * q + min` over the block's range.
fn affine_legacy(x: &[f32], bits: u32) -> (f32, f32, [u8; QK]) {
    let top = (1i32 << bits) - 1;
    let (min, max) = min_max(x);
    let d = (max - min) / top as f32;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = std::array::from_fn(|j| (((x[j] - min) * id + 0.5) as i32).clamp(0, top) as u8);
    (d, min, q)
}

/// Nibbles: element j in the low half of byte j, element j + 16 in the high half.
fn push_nibbles(dst: &mut Vec<u8>, q: &[u8; QK]) {
    dst.extend((0..16).map(|j| (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4)));
}

/// Fifth bits: bit j of a little-endian u32 is the fifth bit of element j.
fn push_fifth_bits(dst: &mut Vec<u8>, q: &[u8; QK]) {
    let qh = (0..QK).fold(0u32, |h, j| h | (((q[j] >> 4) & 1) as u32) << j);
    dst.extend_from_slice(&qh.to_le_bytes());
}

fn q4_0(x: &[f32], dst: &mut Vec<u8>) {
    let (d, q) = symmetric_legacy(x, 4);
    push_f16(dst, d);
    push_nibbles(dst, &q);
}

fn q5_0(x: &[f32], dst: &mut Vec<u8>) {
    let (d, q) = symmetric_legacy(x, 5);
    push_f16(dst, d);
    push_fifth_bits(dst, &q);
    push_nibbles(dst, &q);
}

fn q4_1(x: &[f32], dst: &mut Vec<u8>) {
    let (d, m, q) = affine_legacy(x, 4);
    push_f16(dst, d);
    push_f16(dst, m);
    push_nibbles(dst, &q);
}

fn q5_1(x: &[f32], dst: &mut Vec<u8>) {
    let (d, m, q) = affine_legacy(x, 5);
    push_f16(dst, d);
    push_f16(dst, m);
    push_fifth_bits(dst, &q);
    push_nibbles(dst, &q);
}

/// Q8_0 as llama-quantize writes weights (`d = amax / 127`, `q = round(x / d)` with ties away
/// from zero; the activation converter of `quantize_row_into` rounds ties to even instead).
fn q8_0(x: &[f32], dst: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    push_f16(dst, d);
    dst.extend(x.iter().map(|&v| ((v * id).round() as i32).clamp(-128, 127) as i8 as u8));
}

/// Symmetric levels `-nmax..nmax` for a group, weights `x²`: starting from the scale that maps
/// the largest-magnitude element to `-nmax`, try 18 nearby scales and keep the one with the
/// smallest weighted squared error (equivalently, the largest `(Σwxl)² / Σwl²`). Returns the
/// least-squares scale; `l` receives the levels offset by `nmax` (so `0..2 nmax`).
fn symmetric_fit(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let max = signed_max(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        x.iter().fold((0f32, 0f32), |(slx, sl2), &v| {
            let (w, q) = (v * v, level(iscale, v) as f32);
            (slx + w * v * q, sl2 + w * q * q)
        })
    };
    let mut iscale = -(nmax as f32) / max;
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&i| i != 0) {
        let try_iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (slx, sl2) = sums(try_iscale);
        if sl2 > 0.0 && slx * slx > best * sl2 {
            iscale = try_iscale;
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    for (q, &v) in l.iter_mut().zip(x) {
        *q = (level(iscale, v) + nmax) as u8;
    }
    scale
}

/// Q3_K's group fit: levels `-4..3`, start from the max-based scale, then up to five passes of
/// moving single elements to the level that best fits the current least-squares scale.
/// Returns the scale; `l` receives levels offset by 4.
fn q3_fit(x: &[f32], l: &mut [u8]) -> f32 {
    const NMAX: i32 = 4;
    let max = signed_max(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(NMAX as f32) / max;
    let mut lv = [0i32; 16];
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (q, &v) in lv.iter_mut().zip(x) {
        *q = nearest(iscale * v).clamp(-NMAX, NMAX - 1);
        let w = v * v;
        sumlx += w * v * *q as f32;
        suml2 += w * (*q * *q) as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..x.len() {
            let (v, w, old) = (x[i], x[i] * x[i], lv[i] as f32);
            let mut slx = sumlx - w * v * old;
            if slx <= 0.0 {
                continue;
            }
            let mut sl2 = suml2 - w * old * old;
            let new = nearest(v * sl2 / slx).clamp(-NMAX, NMAX - 1);
            if new == lv[i] {
                continue;
            }
            slx += w * v * new as f32;
            sl2 += w * (new * new) as f32;
            if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                lv[i] = new;
                sumlx = slx;
                suml2 = sl2;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for (q, &v) in l.iter_mut().zip(&lv) {
        *q = (v + NMAX) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Levels `0..=nmax` with a scale and a non-positive offset, `x ≈ scale * l + min`, for a group
/// with weights `w`: sweep `nstep + 1` candidate level assignments (the range scaled by
/// `nmax + rmin + rdelta * k`), solve the weighted least squares for scale and min on each, and
/// keep the best (squared or absolute error). Returns `(scale, -min)`.
#[allow(clippy::too_many_arguments)]
fn affine_fit(
    x: &[f32],
    w: &[f32],
    nmax: i32,
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, max) = min_max(x);
    let sum_w: f32 = w.iter().sum();
    let sum_x: f32 = w.iter().zip(x).map(|(w, v)| w * v).sum();
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best = 0f32;
    for i in 0..n {
        l[i] = nearest(iscale * (x[i] - min)).clamp(0, nmax) as u8;
        best += w[i] * err(scale * l[i] as f32 + min - x[i]);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let q = nearest(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = q as u8;
            let q = q as f32;
            sum_l += w[i] * q;
            sum_l2 += w[i] * q * q;
            sum_xl += w[i] * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det <= 0.0 {
            continue;
        }
        let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if this_min > 0.0 {
            this_min = 0.0;
            this_scale = sum_xl / sum_l2;
        }
        let cur: f32 = (0..n).map(|i| w[i] * err(this_scale * aux[i] as f32 + this_min - x[i])).sum();
        if cur < best {
            l.copy_from_slice(aux);
            best = cur;
            scale = this_scale;
            min = this_min;
        }
    }
    (scale, -min)
}

/// Pack 256 2-bit levels: byte `32 h + l` holds elements `128 h + 32 k + l` at bits `2 k`.
fn push_2bit(dst: &mut Vec<u8>, l: &[u8; QK_K]) {
    for h in (0..QK_K).step_by(128) {
        dst.extend((0..32).map(|i| {
            (l[h + i] & 3) | (l[h + i + 32] & 3) << 2 | (l[h + i + 64] & 3) << 4 | (l[h + i + 96] & 3) << 6
        }));
    }
}

fn q2_k(x: &[f32], dst: &mut Vec<u8>) {
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        let w: [f32; 16] = std::array::from_fn(|i| xs[i].abs());
        (scales[j], mins[j]) = affine_fit(xs, &w, 3, &mut l[16 * j..16 * j + 16], -0.5, 0.1, 15, true);
    }
    let max_scale = largest(&scales);
    let max_min = largest(&mins);
    // 4-bit scales in the low nibbles, 4-bit mins in the high nibbles.
    let mut packed = [0u8; 16];
    let mut d = 0f32;
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for j in 0..16 {
            packed[j] = nearest(iscale * scales[j]).clamp(0, 15) as u8;
        }
        d = max_scale / 15.0;
    }
    let mut dmin = 0f32;
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for j in 0..16 {
            packed[j] |= (nearest(iscale * mins[j]).clamp(0, 15) as u8) << 4;
        }
        dmin = max_min / 15.0;
    }
    let (d16, dmin16) = (f16_round(d), f16_round(dmin));
    for j in 0..16 {
        let ds = d16 * (packed[j] & 0xF) as f32;
        if ds == 0.0 {
            continue;
        }
        let dm = dmin16 * (packed[j] >> 4) as f32;
        for i in 16 * j..16 * j + 16 {
            l[i] = nearest((x[i] + dm) / ds).clamp(0, 3) as u8;
        }
    }
    dst.extend_from_slice(&packed);
    push_2bit(dst, &l);
    push_f16(dst, d);
    push_f16(dst, dmin);
}

fn q3_k(x: &[f32], dst: &mut Vec<u8>) {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 16];
    for j in 0..16 {
        scales[j] = q3_fit(&x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
    }
    let max_scale = signed_max(&scales);
    // 6-bit scales stored offset by 32: low nibbles in bytes 0..8 (scale j at nibble j / 8 of
    // byte j % 8), top two bits in bytes 8..12 (bits 2 (j / 4) of byte 8 + j % 4).
    let mut packed = [0u8; 12];
    let mut d = 0f32;
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for j in 0..16 {
            let s = (nearest(iscale * scales[j]).clamp(-32, 31) + 32) as u8;
            packed[j % 8] |= (s & 0xF) << (4 * (j / 8));
            packed[8 + j % 4] |= (s >> 4) << (2 * (j / 4));
        }
        d = 1.0 / iscale;
    }
    let d16 = f16_round(d);
    let sc = super::blocks::q3k_scales(&packed);
    for j in 0..16 {
        let ds = d16 * sc[j] as f32;
        if ds == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest(x[i] / ds).clamp(-4, 3) + 4) as u8;
        }
    }
    // High bit of element i: bit i / 32 of hmask[i % 32].
    let mut hmask = [0u8; 32];
    for i in 0..QK_K {
        if l[i] > 3 {
            hmask[i % 32] |= 1 << (i / 32);
            l[i] -= 4;
        }
    }
    dst.extend_from_slice(&hmask);
    push_2bit(dst, &l);
    dst.extend_from_slice(&packed);
    push_f16(dst, d);
}

/// Q4_K (`nmax` 15) and Q5_K (`nmax` 31): 8 groups of 32 with 6-bit scales and mins.
fn q45_k(x: &[f32], nmax: i32, dst: &mut Vec<u8>) {
    let (rmin, nstep) = if nmax == 15 { (-1.0, 20) } else { (-0.5, 15) };
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let av = (xs.iter().map(|v| v * v).sum::<f32>() / 32.0).sqrt();
        let w: [f32; 32] = std::array::from_fn(|i| av + xs[i].abs());
        (scales[j], mins[j]) = affine_fit(xs, &w, nmax, &mut l[32 * j..32 * j + 32], rmin, 0.1, nstep, false);
    }
    let max_scale = largest(&scales);
    let max_min = largest(&mins);
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // The packing `k4_scale_min` (blocks.rs) reads back.
    let mut packed = [0u8; 12];
    for j in 0..8 {
        let ls = nearest(inv_scale * scales[j]).clamp(0, 63) as u8;
        let lm = nearest(inv_min * mins[j]).clamp(0, 63) as u8;
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | (lm & 0xF) << 4;
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (max_scale / 63.0, max_min / 63.0);
    let (d16, dmin16) = (f16_round(d), f16_round(dmin));
    for j in 0..8 {
        let (sc, mn) = super::blocks::k4_scale_min(j, &packed);
        let ds = d16 * sc as f32;
        if ds == 0.0 {
            continue;
        }
        let dm = dmin16 * mn as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest((x[i] + dm) / ds).clamp(0, nmax) as u8;
        }
    }
    push_f16(dst, d);
    push_f16(dst, dmin);
    dst.extend_from_slice(&packed);
    if nmax == 31 {
        // Fifth bit of element 64 p + 32 h + i: bit 2 p + h of qh[i].
        let mut qh = [0u8; 32];
        for (i, &q) in l.iter().enumerate() {
            qh[i % 32] |= ((q >> 4) & 1) << (i / 32);
        }
        dst.extend_from_slice(&qh);
    }
    // Element 64 p + i (i < 32) in the low nibble of byte 32 p + i, element 64 p + 32 + i in
    // its high nibble.
    for p in 0..4 {
        dst.extend((0..32).map(|i| (l[64 * p + i] & 0xF) | (l[64 * p + 32 + i] & 0xF) << 4));
    }
}

fn q6_k(x: &[f32], dst: &mut Vec<u8>) {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 16];
    for j in 0..16 {
        scales[j] = symmetric_fit(&x[16 * j..16 * j + 16], 32, &mut l[16 * j..16 * j + 16]);
    }
    let max_scale = signed_max(&scales);
    if max_scale.abs() < GROUP_MAX_EPS {
        dst.extend_from_slice(&[0u8; super::blocks::Q6_K_BYTES]);
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = 1.0 / iscale;
    let sc: [i8; 16] = std::array::from_fn(|j| nearest(iscale * scales[j]).clamp(-128, 127) as i8);
    let d16 = f16_round(d);
    for j in 0..16 {
        let ds = d16 * sc[j] as f32;
        if ds == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest(x[i] / ds).clamp(-32, 31) + 32) as u8;
        }
    }
    // Half h: element 128 h + 32 c + i has its low nibble in nibble c / 2 of
    // ql[64 h + 32 (c % 2) + i] and its top two bits at bits 2 c of qh[32 h + i].
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for h in 0..2 {
        for c in 0..4 {
            for i in 0..32 {
                let q = l[128 * h + 32 * c + i];
                ql[64 * h + 32 * (c % 2) + i] |= (q & 0xF) << (4 * (c / 2));
                qh[32 * h + i] |= (q >> 4) << (2 * c);
            }
        }
    }
    dst.extend_from_slice(&ql);
    dst.extend_from_slice(&qh);
    dst.extend(sc.iter().map(|&s| s as u8));
    push_f16(dst, d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_partial_blocks_activation_types_and_non_finite_values() {
        let mut dst = Vec::new();
        assert!(quantize_weights(GgmlType::Q4_K, &[0.0; 100], &mut dst).is_err());
        assert!(quantize_weights(GgmlType::Q8_K, &[0.0; 256], &mut dst).is_err());
        let mut x = [0.5f32; 32];
        x[3] = f32::NAN;
        assert!(quantize_weights(GgmlType::Q4_0, &x, &mut dst).is_err());
        x[3] = f32::INFINITY;
        assert!(quantize_weights(GgmlType::Q8_0, &x, &mut dst).is_err());
    }

    #[test]
    fn zeros_stay_zeros() {
        let mut dst = Vec::new();
        let mut out = vec![1f32; QK_K];
        for t in GgmlType::WEIGHT_TYPES {
            quantize_weights(t, &[0.0; QK_K], &mut dst).unwrap();
            super::super::dequantize(t, &dst, &mut out).unwrap();
            assert!(out.iter().all(|&v| v == 0.0), "{t}");
        }
    }
}
