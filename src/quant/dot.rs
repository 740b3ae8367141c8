//! The portable dot products (scalar code shaped so the compiler can vectorize it; the path on
//! wasm and on CPUs without AVX2), and the dispatch to the AVX2 kernels on x86_64.

use super::blocks::{self, f16_at, f32_at, Q8_K_BYTES, QK, QK_K};
use super::GgmlType;
use half::{bf16, f16};

/// Dot product of one weight row of type `t` (`n` elements, raw GGUF bytes) with activations
/// already converted by `quantize_row_into(vec_dot_type(t), ...)`.
///
/// This is the CPU executor's inner loop: it does not allocate and does not return a `Result`.
/// The caller guarantees `n` is a whole number of blocks and both slices hold exactly `n`
/// elements (checked with `debug_assert!`; in release, short slices panic on a bounds check
/// rather than read out of range).
#[inline]
pub fn vec_dot(t: GgmlType, n: usize, w_row: &[u8], acts: &[u8]) -> f32 {
    debug_assert_eq!(n % t.block_size(), 0);
    debug_assert_eq!(w_row.len(), n / t.block_size() * t.type_size());
    let at = super::vec_dot_type(t);
    debug_assert_eq!(acts.len(), n / at.block_size() * at.type_size());
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2::available() {
            if let Some(r) = super::avx2::vec_dot(t, n, w_row, acts) {
                return r;
            }
        }
    }
    vec_dot_portable(t, n, w_row, acts)
}

#[inline(always)]
fn dot_i8<const N: usize>(x: &[i8; N], y: &[u8]) -> i32 {
    let mut s = 0i32;
    for (&a, &b) in x.iter().zip(&y[..N]) {
        s += a as i32 * b as i8 as i32;
    }
    s
}

/// The portable path (also the fallback of the AVX2 dispatch for types it does not cover).
pub fn vec_dot_portable(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    match t {
        GgmlType::F32 => {
            let n = n.min(w.len() / 4).min(a.len() / 4);
            let (w, a) = (&w[..4 * n], &a[..4 * n]);
            let mut acc = [0f32; 8];
            for (wc, ac) in w.chunks_exact(32).zip(a.chunks_exact(32)) {
                for l in 0..8 {
                    acc[l] += f32_at(wc, 4 * l) * f32_at(ac, 4 * l);
                }
            }
            let mut s: f32 = acc.iter().sum();
            for (wc, ac) in w
                .chunks_exact(32)
                .remainder()
                .chunks_exact(4)
                .zip(a.chunks_exact(32).remainder().chunks_exact(4))
            {
                s += f32_at(wc, 0) * f32_at(ac, 0);
            }
            s
        }
        GgmlType::F16 | GgmlType::BF16 => {
            let n = n.min(w.len() / 2).min(a.len() / 2);
            let cvt = |b: &[u8], i: usize| {
                let h = [b[2 * i], b[2 * i + 1]];
                if t == GgmlType::F16 {
                    f16::from_le_bytes(h).to_f32()
                } else {
                    bf16::from_le_bytes(h).to_f32()
                }
            };
            let mut acc = [0f32; 8];
            for c in 0..n / 8 {
                for l in 0..8 {
                    acc[l] += cvt(w, 8 * c + l) * cvt(a, 8 * c + l);
                }
            }
            let mut s: f32 = acc.iter().sum();
            for i in (n / 8) * 8..n {
                s += cvt(w, i) * cvt(a, i);
            }
            s
        }
        GgmlType::Q4_0
        | GgmlType::Q4_1
        | GgmlType::Q5_0
        | GgmlType::Q5_1
        | GgmlType::Q8_0
        | GgmlType::Q8_1 => {
            let at = super::vec_dot_type(t);
            let mut acc = 0f32;
            for (wb, ab) in w.chunks_exact(t.type_size()).zip(a.chunks_exact(at.type_size())).take(n / QK) {
                let blk = blocks::unpack_legacy(t, wb);
                let aoff = at.type_size() - QK;
                let sumi = dot_i8(&blk.q, &ab[aoff..]);
                acc += blk.d * f16_at(ab, 0) * sumi as f32;
                if blk.has_min {
                    acc += blk.m * f16_at(ab, 2);
                }
            }
            acc
        }
        GgmlType::Q8_K => {
            let mut acc = 0f32;
            for (wb, ab) in w.chunks_exact(Q8_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
                let mut q = [0i8; QK_K];
                for (q, &b) in q.iter_mut().zip(&wb[4..4 + QK_K]) {
                    *q = b as i8;
                }
                acc += f32_at(wb, 0) * f32_at(ab, 0) * dot_i8(&q, &ab[4..]) as f32;
            }
            acc
        }
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => {
            let mut acc = 0f32;
            for (wb, ab) in w.chunks_exact(t.type_size()).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
                let k = blocks::unpack_k(t, wb);
                let (mut isum, mut msum) = (0i32, 0i32);
                for s in 0..16 {
                    let q: &[i8; 16] = k.q[16 * s..16 * s + 16].try_into().unwrap();
                    isum += k.sc[s] as i32 * dot_i8(q, &ab[4 + 16 * s..]);
                    let bsum = i16::from_le_bytes([ab[260 + 2 * s], ab[261 + 2 * s]]);
                    msum += k.mn[s] as i32 * bsum as i32;
                }
                acc += f32_at(ab, 0) * (k.d * isum as f32 - k.dmin * msum as f32);
            }
            acc
        }
    }
}
