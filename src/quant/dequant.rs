//! Dequantization of whole rows to f32 (the reference for every other path, and checked
//! bit for bit against the `gguf` Python package's numpy dequantization).

use super::blocks::{self, bf16_at, f16_at, f32_at, QK, QK_K};
use super::GgmlType;
use crate::{Error, Result};

/// Dequantize `dst.len()` elements from `src` (must be exactly `t.row_bytes(dst.len())` bytes).
///
/// The float operations are done in the same order as the `gguf` package (`(d * sc) * q - dmin * m`)
/// so the results are bit-identical to it.
pub fn dequantize(t: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let need = t.row_bytes(dst.len() as u64)?;
    if src.len() as u64 != need {
        return Err(Error::InvalidArgument(format!(
            "dequantize {t}: {} elements need {need} bytes, got {}",
            dst.len(),
            src.len()
        )));
    }
    let ts = t.type_size();
    match t {
        GgmlType::F32 => {
            for (y, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *y = f32_at(b, 0);
            }
        }
        GgmlType::F16 => {
            for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *y = f16_at(b, 0);
            }
        }
        GgmlType::BF16 => {
            for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *y = bf16_at(b, 0);
            }
        }
        GgmlType::Q4_0
        | GgmlType::Q4_1
        | GgmlType::Q5_0
        | GgmlType::Q5_1
        | GgmlType::Q8_0
        | GgmlType::Q8_1 => {
            for (y, b) in dst.chunks_exact_mut(QK).zip(src.chunks_exact(ts)) {
                let blk = blocks::unpack_legacy(t, b);
                for (y, &q) in y.iter_mut().zip(blk.q.iter()) {
                    let v = blk.d * q as f32;
                    // Adding a zero min would turn -0.0 into +0.0; keep the sign as numpy does.
                    *y = if blk.has_min { v + blk.m } else { v };
                }
            }
        }
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => {
            for (y, b) in dst.chunks_exact_mut(QK_K).zip(src.chunks_exact(ts)) {
                let k = blocks::unpack_k(t, b);
                let has_min = matches!(t, GgmlType::Q2_K | GgmlType::Q4_K | GgmlType::Q5_K);
                for (s, y) in y.chunks_exact_mut(16).enumerate() {
                    let dl = k.d * k.sc[s] as f32;
                    let ml = k.dmin * k.mn[s] as f32;
                    for (y, &q) in y.iter_mut().zip(&k.q[16 * s..16 * s + 16]) {
                        let v = dl * q as f32;
                        *y = if has_min { v - ml } else { v };
                    }
                }
            }
        }
        GgmlType::Q8_K => {
            for (y, b) in dst.chunks_exact_mut(QK_K).zip(src.chunks_exact(ts)) {
                let d = f32_at(b, 0);
                for (y, &q) in y.iter_mut().zip(&b[4..4 + QK_K]) {
                    *y = d * q as i8 as f32;
                }
            }
        }
    }
    Ok(())
}
