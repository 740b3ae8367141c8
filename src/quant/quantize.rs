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
    dst.reserve(bytes);
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
        _ => {
            return Err(Error::InvalidArgument(format!(
                "quantize_row_into: wick only converts to F32, F16, BF16, Q8_0, Q8_1 and Q8_K, not {t}"
            )))
        }
    }
    debug_assert_eq!(dst.len(), bytes);
    Ok(())
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
