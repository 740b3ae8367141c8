//! Conversion of f32 rows into the activation formats (and the float weight formats).
//!
//! Rounding follows the reference quantizers of llama.cpp's `ggml-quants.c`
//! (`quantize_row_q8_0_ref`, `quantize_row_q8_1_ref`, `quantize_row_q8_K_ref`).

use super::blocks::{QK, QK_K};
use super::GgmlType;
use crate::{Error, Result};
use half::{bf16, f16};

/// Quantize/convert a row of f32 into type `t` (F32, F16, BF16, Q8_0, Q8_1, Q8_K).
/// `dst` is cleared and filled. `x.len()` must be a whole number of blocks.
pub fn quantize_row_into(t: GgmlType, x: &[f32], dst: &mut Vec<u8>) -> Result<()> {
    let bytes = t.row_bytes(x.len() as u64)? as usize;
    dst.clear();
    match t {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {}
        GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => {
            if fast_blocks(t, x, bytes, dst) {
                return Ok(());
            }
        }
        _ => {
            return Err(Error::InvalidArgument(format!(
                "quantize_row_into: wick only converts to F32, F16, BF16, Q8_0, Q8_1 and Q8_K, not {t}"
            )))
        }
    }
    dst.reserve(bytes);
    scalar(t, x, dst);
    debug_assert_eq!(dst.len(), bytes);
    Ok(())
}

/// The q8 conversions by AVX2 where the CPU has it, block by block, the scalar code taking any
/// block the vector code declines (a NaN or an infinity in it). Fills `dst` (empty, `bytes`
/// long after) and says true; false, with `dst` untouched, without AVX2.
fn fast_blocks(t: GgmlType, x: &[f32], bytes: usize, dst: &mut Vec<u8>) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !super::avx2::available() {
            return false;
        }
        let (qk, bs) = (t.block_size(), t.type_size());
        dst.resize(bytes, 0);
        let mut one = Vec::new();
        for (xb, ob) in x.chunks_exact(qk).zip(dst.chunks_exact_mut(bs)) {
            // SAFETY: AVX2, FMA and F16C checked above.
            let done = unsafe {
                match (t, <&[f32; QK]>::try_from(xb), <&[f32; QK_K]>::try_from(xb)) {
                    (GgmlType::Q8_K, _, Ok(b)) => super::avx2_quantize::q8_k_block(b, ob),
                    (GgmlType::Q8_0 | GgmlType::Q8_1, Ok(b), _) => {
                        super::avx2_quantize::q8_block(b, ob, t == GgmlType::Q8_1)
                    }
                    _ => false,
                }
            };
            if !done {
                one.clear();
                scalar(t, xb, &mut one);
                ob.copy_from_slice(&one);
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (t, x, bytes, dst);
        false
    }
}

/// The conversions in scalar code (the reference the AVX2 forms match byte for byte), for a
/// type [`quantize_row_into`] accepts: appended to `dst`.
fn scalar(t: GgmlType, x: &[f32], dst: &mut Vec<u8>) {
    match t {
        GgmlType::F32 => x.iter().for_each(|v| dst.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x.iter().for_each(|&v| dst.extend_from_slice(&f16::from_f32(v).to_le_bytes())),
        GgmlType::BF16 => x.iter().for_each(|&v| dst.extend_from_slice(&bf16::from_f32(v).to_le_bytes())),
        GgmlType::Q8_0 | GgmlType::Q8_1 => {
            for xb in x.chunks_exact(QK) {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
                // As llama.cpp's x86 code does (the reference's build): id = 127/amax rather
                // than 1/d, and rounding half to even.
                let d = amax / 127.0;
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                let mut qs = [0i8; QK];
                let mut sum = 0i32;
                for (q, &v) in qs.iter_mut().zip(xb) {
                    *q = round_even(v * id) as i8;
                    sum += *q as i32;
                }
                dst.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                if t == GgmlType::Q8_1 {
                    dst.extend_from_slice(&f16::from_f32(sum as f32 * d).to_le_bytes());
                }
                dst.extend(qs.iter().map(|&q| q as u8));
            }
        }
        GgmlType::Q8_K => {
            for xb in x.chunks_exact(QK_K) {
                // The element of largest magnitude, with its sign, maps to -127.
                let (mut amax, mut max) = (0f32, 0f32);
                for &v in xb {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                let mut qs = [0i8; QK_K];
                let mut d = 0f32;
                if amax != 0.0 {
                    let iscale = -127.0 / max;
                    for (q, &v) in qs.iter_mut().zip(xb) {
                        *q = (round_even(iscale * v) as i32).min(127) as i8;
                    }
                    d = 1.0 / iscale;
                }
                dst.extend_from_slice(&d.to_le_bytes());
                dst.extend(qs.iter().map(|&q| q as u8));
                for g in qs.chunks_exact(16) {
                    let s: i16 = g.iter().map(|&q| q as i16).sum();
                    dst.extend_from_slice(&s.to_le_bytes());
                }
            }
        }
        _ => {}
    }
}

/// `x.round_ties_even()` for |x| < 2^22 (and the same saturated integer for larger, infinite or
/// NaN inputs once cast to i8): adding and subtracting 1.5 * 2^23 leaves no fraction bits, so
/// the addition rounds to an integer, ties to even, in the default rounding mode.
///
/// Not `round_ties_even`: without SSE4.1 in the build's baseline it is a call to libm's
/// `rintf` per element (measured: 11% of SmolLM2's prefill).
#[inline(always)]
fn round_even(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    if x.abs() < 4_194_304.0 {
        (x + MAGIC) - MAGIC
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector conversions give the scalar code's bytes: random rows at several scales,
    /// rows with exact halves (ties), zero blocks, a largest magnitude held by several values
    /// of both signs, and blocks with NaN or infinities (which the scalar code takes).
    #[test]
    fn q8_conversions_match_the_scalar_code() {
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15u64);
        let n = 1024;
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for scale in [1e-3f32, 1.0, 37.5, 6e4] {
            rows.push((0..n).map(|_| ((next() % 20001) as f32 / 10000.0 - 1.0) * scale).collect());
        }
        // Halves: products land on ties.
        rows.push(
            (0..n)
                .map(|i| ((next() % 255) as f32 - 127.0) * 0.5 + if i % 32 == 0 { 127.0 } else { 0.0 })
                .collect(),
        );
        let mut special: Vec<f32> = (0..n).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
        special[..256].fill(0.0);
        // Within one 8-value vector: the first of them decides the sign.
        special[256 + 3] = -4.0;
        special[256 + 5] = 4.0;
        special[256 + 77] = -4.0;
        special[512 + 5] = f32::NAN;
        special[768 + 200] = f32::INFINITY;
        special[768 + 201] = f32::NEG_INFINITY;
        rows.push(special);
        for t in [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K] {
            for (i, x) in rows.iter().enumerate() {
                let (mut got, mut want) = (Vec::new(), Vec::new());
                quantize_row_into(t, x, &mut got).unwrap();
                scalar(t, x, &mut want);
                assert_eq!(got.len(), t.row_bytes(n as u64).unwrap() as usize, "{t} row {i}: length");
                if let Some(b) = got.iter().zip(&want).position(|(a, b)| a != b) {
                    panic!("{t} row {i}: byte {b} differs ({} vs {})", got[b], want[b]);
                }
            }
        }
    }
}
