//! Plain scalar reference dot products: weight row of type `t` times activations already
//! converted to `vec_dot_type(t)`. Built on the same block decomposition as `dequantize`;
//! written for clarity, not speed. The fast paths are tested against these.

use super::blocks::{self, bf16_at, f16_at, f32_at, QK, QK_K};
use super::GgmlType;

/// Reference dot product of one weight row (`n` elements) with converted activations.
pub fn vec_dot_ref(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    match t {
        GgmlType::F32 => {
            (0..n).map(|i| f32_at(w, 4 * i) as f64 * f32_at(a, 4 * i) as f64).sum::<f64>() as f32
        }
        GgmlType::F16 => {
            (0..n).map(|i| f16_at(w, 2 * i) as f64 * f16_at(a, 2 * i) as f64).sum::<f64>() as f32
        }
        GgmlType::BF16 => {
            (0..n).map(|i| bf16_at(w, 2 * i) as f64 * bf16_at(a, 2 * i) as f64).sum::<f64>() as f32
        }
        GgmlType::Q4_0
        | GgmlType::Q4_1
        | GgmlType::Q5_0
        | GgmlType::Q5_1
        | GgmlType::Q8_0
        | GgmlType::Q8_1 => {
            // Activations are Q8_1 (d, s = d * sum q, q) for the types with a min, else Q8_0.
            let at = super::vec_dot_type(t);
            let (wts, ats) = (t.type_size(), at.type_size());
            let mut acc = 0f32;
            for i in 0..n / QK {
                let wb = blocks::unpack_legacy(t, &w[i * wts..(i + 1) * wts]);
                let ab = &a[i * ats..(i + 1) * ats];
                let ablk = blocks::unpack_legacy(at, ab);
                let sumi: i32 = wb.q.iter().zip(ablk.q.iter()).map(|(&x, &y)| x as i32 * y as i32).sum();
                acc += wb.d * ablk.d * sumi as f32;
                if wb.has_min {
                    acc += wb.m * f16_at(ab, 2);
                }
            }
            acc
        }
        GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::Q8_K => {
            let wts = t.type_size();
            let mut acc = 0f32;
            for i in 0..n / QK_K {
                let ab = &a[i * blocks::Q8_K_BYTES..(i + 1) * blocks::Q8_K_BYTES];
                let da = f32_at(ab, 0);
                let aq = |j: usize| ab[4 + j] as i8 as i32;
                if t == GgmlType::Q8_K {
                    let wb = &w[i * wts..(i + 1) * wts];
                    let sumi: i32 = (0..QK_K).map(|j| wb[4 + j] as i8 as i32 * aq(j)).sum();
                    acc += f32_at(wb, 0) * da * sumi as f32;
                    continue;
                }
                let k = blocks::unpack_k(t, &w[i * wts..(i + 1) * wts]);
                // x = d * sc * q - dmin * mn, summed per 16-element sub-block.
                let (mut isum, mut msum) = (0i32, 0i32);
                for s in 0..16 {
                    let dot: i32 = (16 * s..16 * s + 16).map(|j| k.q[j] as i32 * aq(j)).sum();
                    let asum: i32 = (16 * s..16 * s + 16).map(aq).sum();
                    isum += k.sc[s] as i32 * dot;
                    msum += k.mn[s] as i32 * asum;
                }
                acc += da * (k.d * isum as f32 - k.dmin * msum as f32);
            }
            acc
        }
    }
}
