//! AVX2 kernels (x86_64 only, selected at run time by [`available`]).
//!
//! The technique is llama.cpp's (`ggml-cpu/arch/x86/quants.c`): unpack 32 weights into the 32
//! bytes of a register, multiply with the 32 int8 activations by `maddubs` (u8 x i8 -> pairs of
//! i16), widen with `madd` (which also applies the per-16 K-quant scales), accumulate int32 per
//! block and fold the block scales in with one FMA. Signed x signed products use the sign trick
//! (|w| * sign(a, w)). Activations never hold -128, so `maddubs` cannot saturate.
//!
//! Every kernel handles `min(n / block, w.len() / block_bytes, a.len() / act_block_bytes)` blocks,
//! so a bad length gives a wrong number (caught by the callers' debug assertions), never an
//! out-of-bounds read.

use super::blocks::{k4_scale_min, q3k_scales, Q8_K_BYTES};
use super::GgmlType;
use std::arch::x86_64::*;

/// Whether the CPU has AVX2, FMA and F16C (std caches the detection).
#[inline]
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

/// The AVX2 dot product, or None for types without an AVX2 kernel. Call only if [`available`].
#[inline]
pub fn vec_dot(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Option<f32> {
    let at = super::vec_dot_type(t);
    let nb = (n / t.block_size()).min(w.len() / t.type_size()).min(a.len() / at.type_size());
    // SAFETY: `available()` was checked by the caller; every kernel reads only `nb` whole blocks
    // of `w` and `a`, which the line above makes sure both slices hold.
    unsafe {
        Some(match t {
            GgmlType::F32 => dot_f32(nb, w, a),
            GgmlType::F16 => dot_f16(nb, w, a),
            GgmlType::BF16 => dot_bf16(nb, w, a),
            GgmlType::Q4_0 => dot_q4_0(nb, w, a),
            GgmlType::Q5_0 => dot_q5_0(nb, w, a),
            GgmlType::Q8_0 => dot_q8_0(nb, w, a),
            GgmlType::Q4_1 => dot_q4_1(nb, w, a),
            GgmlType::Q5_1 => dot_q5_1(nb, w, a),
            GgmlType::Q2_K => dot_q2_k(nb, w, a),
            GgmlType::Q3_K => dot_q3_k(nb, w, a),
            GgmlType::Q4_K => dot_q4_k(nb, w, a),
            GgmlType::Q5_K => dot_q5_k(nb, w, a),
            GgmlType::Q6_K => dot_q6_k(nb, w, a),
            GgmlType::Q8_1 | GgmlType::Q8_K => return None,
        })
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// f16 at `p` (little-endian) as f32.
///
/// In assembly for the reason given at `avx2_tile::f16x2`: with intrinsics LLVM inserts the
/// 16 bits into an arbitrary live register (often an accumulator) and so chains the conversion
/// to it. `vmovd` from a general register zeroes the rest: no false dependency.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let r: __m128;
    // SAFETY: the caller guarantees 2 readable bytes at `p`; only they are read.
    std::arch::asm!(
        "movzx {t:e}, word ptr [{p}]",
        "vmovd {r}, {t:e}",
        "vcvtph2ps {r}, {r}",
        p = in(reg) p,
        t = out(reg) _,
        r = out(xmm_reg) r,
        options(pure, readonly, nostack, preserves_flags)
    );
    _mm_cvtss_f32(r)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// Sum of products of unsigned `x` and signed `y` bytes, as 8 i32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn mul_sum_u8_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// 16 bytes of nibbles -> 32 bytes: low nibbles in bytes 0..16, high nibbles in 16..32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let v = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// The 32 bits of `bits` -> 32 bytes, 0x10 where the bit is set, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bits_to_0x10(bits: u32) -> __m256i {
    // Byte j gets byte j / 8 of `bits`; OR with a mask that has every bit but j % 8 set.
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10))
}

/// 32 weights of a legacy block as bytes (signed for Q4_0/Q5_0/Q8_0, unsigned for Q4_1/Q5_1).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn legacy_q<const T: u32>(b: *const u8) -> __m256i {
    const Q4_0: u32 = GgmlType::Q4_0 as u32;
    const Q4_1: u32 = GgmlType::Q4_1 as u32;
    const Q5_0: u32 = GgmlType::Q5_0 as u32;
    const Q5_1: u32 = GgmlType::Q5_1 as u32;
    match T {
        Q4_0 => _mm256_sub_epi8(nibbles(b.add(2)), _mm256_set1_epi8(8)),
        Q4_1 => nibbles(b.add(4)),
        Q5_0 => {
            let qh = u32::from_le_bytes([*b.add(2), *b.add(3), *b.add(4), *b.add(5)]);
            let q = _mm256_or_si256(nibbles(b.add(6)), bits_to_0x10(qh));
            _mm256_sub_epi8(q, _mm256_set1_epi8(16))
        }
        Q5_1 => {
            let qh = u32::from_le_bytes([*b.add(4), *b.add(5), *b.add(6), *b.add(7)]);
            _mm256_or_si256(nibbles(b.add(8)), bits_to_0x10(qh))
        }
        _ => load(b.add(2)), // Q8_0
    }
}

/// Legacy type `T` (its ggml id) times Q8_0 or Q8_1 activations: the 1 x 1 tile of
/// `avx2_tile.rs`, which sums in the order of ggml's AVX2 `ggml_vec_dot_q*_q8_*` (and of
/// llamafile's `tinyBLAS_Q0_AVX`), so the result is bit-identical.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_legacy<const T: u32>(ts: usize, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut out = [0f32];
    super::avx2_tile::tile::<T, 1, 1>(ts, nb, [w.as_ptr()], [a.as_ptr()], &mut out);
    out[0]
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_legacy::<{ GgmlType::Q4_0 as u32 }>(18, nb, w, a)
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_legacy::<{ GgmlType::Q5_0 as u32 }>(22, nb, w, a)
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_0(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_legacy::<{ GgmlType::Q8_0 as u32 }>(34, nb, w, a)
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_1(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_legacy::<{ GgmlType::Q4_1 as u32 }>(20, nb, w, a)
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_1(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_legacy::<{ GgmlType::Q5_1 as u32 }>(24, nb, w, a)
}

/// i16 per-16 scales `k` and `k + 1` laid out for `madd` against 32 products.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn scale_pair(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// The 16 bsums of a Q8_K block.
#[inline(always)]
fn bsums(ab: &[u8]) -> [i32; 16] {
    let mut s = [0i32; 16];
    for (k, s) in s.iter_mut().enumerate() {
        *s = i16::from_le_bytes([ab[260 + 2 * k], ab[261 + 2 * k]]) as i32;
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q2_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = 0f32;
    for (wb, ab) in w.chunks_exact(84).zip(a.chunks_exact(Q8_K_BYTES)).take(nb) {
        let da = f32::from_le_bytes([ab[0], ab[1], ab[2], ab[3]]);
        let (d, dmin) = (f16_at(wb.as_ptr().add(80)) * da, f16_at(wb.as_ptr().add(82)) * da);
        let bs = bsums(ab);
        let msum: i32 = (0..16).map(|k| (wb[k] >> 4) as i32 * bs[k]).sum();
        accm += dmin * msum as f32;
        let aq = ab.as_ptr().add(4);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = load(wb.as_ptr().add(16 + 32 * h));
            for s in 0..4 {
                let c = 4 * h + s;
                let qv = _mm256_and_si256(
                    _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)),
                    _mm256_set1_epi8(3),
                );
                let p = _mm256_maddubs_epi16(qv, load(aq.add(32 * c)));
                let sc = scale_pair((wb[2 * c] & 0xF) as i16, (wb[2 * c + 1] & 0xF) as i16);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - accm
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q3_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = 0f32;
    for (wb, ab) in w.chunks_exact(110).zip(a.chunks_exact(Q8_K_BYTES)).take(nb) {
        let da = f32::from_le_bytes([ab[0], ab[1], ab[2], ab[3]]);
        let d = f16_at(wb.as_ptr().add(108)) * da;
        let sc = q3k_scales(&wb[96..108]);
        let bs = bsums(ab);
        // Weights are u - 4 with u = 2 low bits + 4 * high bit in 0..8.
        let msum: i32 = (0..16).map(|k| sc[k] as i32 * bs[k]).sum();
        accm += d * (4 * msum) as f32;
        let aq = ab.as_ptr().add(4);
        let hm = load(wb.as_ptr());
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = load(wb.as_ptr().add(32 + 32 * h));
            for s in 0..4 {
                let c = 4 * h + s;
                let lo = _mm256_and_si256(
                    _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)),
                    _mm256_set1_epi8(3),
                );
                let hb =
                    _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(c as i32)), _mm256_set1_epi8(1));
                let u = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                let p = _mm256_maddubs_epi16(u, load(aq.add(32 * c)));
                sumi = _mm256_add_epi32(
                    sumi,
                    _mm256_madd_epi16(p, scale_pair(sc[2 * c] as i16, sc[2 * c + 1] as i16)),
                );
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - accm
}

/// Q4_K, and Q5_K when `Q5` (its fifth bits: bit c of qh[l] for chunk c).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_q45_k<const Q5: bool, const GEMM: bool>(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    let ts = if Q5 { 176 } else { 144 };
    let qs_off = if Q5 { 48 } else { 16 };
    let mut acc = _mm256_setzero_ps();
    let mut accm = 0f32;
    let (mut acc_s, mut accm_s) = (0f32, 0f32);
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    for (wb, ab) in w.chunks_exact(ts).zip(a.chunks_exact(Q8_K_BYTES)).take(nb) {
        let da = f32::from_le_bytes([ab[0], ab[1], ab[2], ab[3]]);
        let (d, dmin) = (f16_at(wb.as_ptr()) * da, f16_at(wb.as_ptr().add(2)) * da);
        let bs = bsums(ab);
        let mut sc = [0i16; 8];
        let mut msum = 0i32;
        for (j, scj) in sc.iter_mut().enumerate() {
            let (s, m) = k4_scale_min(j, &wb[4..16]);
            *scj = s as i16;
            msum += m as i32 * (bs[2 * j] + bs[2 * j + 1]);
        }
        if Q5 {
            accm += dmin * msum as f32;
        }
        let aq = ab.as_ptr().add(4);
        let mut hbits = if Q5 { load(wb.as_ptr().add(16)) } else { _mm256_setzero_si256() };
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let q = load(wb.as_ptr().add(qs_off + 32 * j));
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if Q5 {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
                hi = _mm256_or_si256(
                    hi,
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4),
                );
                hbits = _mm256_srli_epi16(hbits, 2);
            }
            let plo = _mm256_madd_epi16(
                _mm256_maddubs_epi16(lo, load(aq.add(64 * j))),
                _mm256_set1_epi16(sc[2 * j]),
            );
            let phi = _mm256_madd_epi16(
                _mm256_maddubs_epi16(hi, load(aq.add(64 * j + 32))),
                _mm256_set1_epi16(sc[2 * j + 1]),
            );
            if GEMM {
                // llama.cpp's 4-row kernel (ggml_gemm_q4_K_8x8_q8_K) scales every 64
                // elements: one fused multiply-add per pair of sub-blocks, mins likewise.
                let (_, m0) = k4_scale_min(2 * j, &wb[4..16]);
                let (_, m1) = k4_scale_min(2 * j + 1, &wb[4..16]);
                let mj =
                    m0 as i32 * (bs[4 * j] + bs[4 * j + 1]) + m1 as i32 * (bs[4 * j + 2] + bs[4 * j + 3]);
                acc_s = (hsum_epi32(_mm256_add_epi32(plo, phi)) as f32).mul_add(d, acc_s);
                accm_s = (mj as f32).mul_add(dmin, accm_s);
                continue;
            }
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        }
        if Q5 {
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        } else {
            // llama.cpp repacks Q4_K weights for AVX2 (q4_K_8x8): each output row then takes
            // the whole block's integer sums, scaled by one fused multiply-add per block for
            // the quants and one for the mins, subtracted at the end.
            if !GEMM {
                acc_s = (hsum_epi32(sumi) as f32).mul_add(d, acc_s);
                accm_s = (msum as f32).mul_add(dmin, accm_s);
            }
        }
    }
    if Q5 {
        hsum_ps(acc) - accm
    } else {
        acc_s - accm_s
    }
}

/// Sum of the 8 i32 lanes (exact).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    _mm_cvtsi128_si32(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_q45_k::<false, false>(nb, w, a)
}

/// Q4_K as llama.cpp's 4-row repacked kernel computes it (see [`vec_dot_gemm4`]).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_k_gemm4(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_q45_k::<false, true>(nb, w, a)
}

/// The dot product of a weight row with one of the first `4 * (rows / 4)` activation rows of a
/// batch: llama.cpp computes those with its 4-row kernels, which for repacked types (Q4_K)
/// round differently. None where that is no different from [`vec_dot`]. Call only if
/// [`available`].
#[inline]
pub fn vec_dot_gemm4(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Option<f32> {
    if t != GgmlType::Q4_K {
        return None;
    }
    let nb = (n / t.block_size()).min(w.len() / t.type_size()).min(a.len() / Q8_K_BYTES);
    // SAFETY: as in `vec_dot`.
    unsafe { Some(dot_q4_k_gemm4(nb, w, a)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_q45_k::<true, false>(nb, w, a)
}

/// The 128 quants of half `h` of the Q6_K block at `wb` as four vectors of unsigned bytes
/// (`u` in 0..64, the weight being `u - 32`), in the order of the activations: 32 elements each.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_k_quants(wb: *const u8, h: usize) -> [__m256i; 4] {
    let (m4, m2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
    let ql0 = load(wb.add(64 * h));
    let ql1 = load(wb.add(64 * h + 32));
    let qh = load(wb.add(128 + 32 * h));
    // Bits 2c..2c+2 of qh, moved to bits 4..6 of each byte.
    let h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4);
    let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4);
    let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4);
    let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4);
    [
        _mm256_or_si256(_mm256_and_si256(ql0, m4), h0),
        _mm256_or_si256(_mm256_and_si256(ql1, m4), h1),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), h2),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), h3),
    ]
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6_k(nb: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (wb, ab) in w.chunks_exact(210).zip(a.chunks_exact(Q8_K_BYTES)).take(nb) {
        let da = f32::from_le_bytes([ab[0], ab[1], ab[2], ab[3]]);
        let bs = bsums(ab);
        let sc: [i16; 16] = std::array::from_fn(|k| wb[192 + k] as i8 as i16);
        // Weights are u - 32 with u in 0..64.
        let msum: i32 = (0..16).map(|k| sc[k] as i32 * bs[k]).sum();
        let aq = ab.as_ptr().add(4);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            for (c, q) in q6_k_quants(wb.as_ptr(), h).into_iter().enumerate() {
                let k = 8 * h + 2 * c;
                let p = _mm256_maddubs_epi16(q, load(aq.add(128 * h + 32 * c)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(sc[k], sc[k + 1])));
            }
        }
        // llama.cpp repacks Q6_K weights (q6_K_8x8) and its kernel takes the block's whole
        // integer sum (the -32 offset included): sum += (isum * d) * d_act, the addition fused.
        let isum = hsum_epi32(sumi) - 32 * msum;
        acc = ((isum as f32) * f16_at(wb.as_ptr().add(208))).mul_add(da, acc);
    }
    acc
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (wp, ap) = (w.as_ptr() as *const f32, a.as_ptr() as *const f32);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (l, acc) in acc.iter_mut().enumerate() {
            let o = i + 8 * l;
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(o)), _mm256_loadu_ps(ap.add(o)), *acc);
        }
        i += 32;
    }
    let mut s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    while i < n {
        s += (wp.add(i)).read_unaligned() * (ap.add(i)).read_unaligned();
        i += 1;
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (l, acc) in acc.iter_mut().enumerate() {
            let o = 2 * (i + 8 * l);
            let x = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(o) as *const __m128i));
            let y = _mm256_cvtph_ps(_mm_loadu_si128(ap.add(o) as *const __m128i));
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
        i += 32;
    }
    let mut s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    while i < n {
        s += f16_at(wp.add(2 * i)) * f16_at(ap.add(2 * i));
        i += 1;
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_bf16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (l, acc) in acc.iter_mut().enumerate() {
            let o = 2 * (i + 8 * l);
            *acc = _mm256_fmadd_ps(bf16x8(wp.add(o)), bf16x8(ap.add(o)), *acc);
        }
        i += 32;
    }
    let mut s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    let bf = |p: *const u8| f32::from_bits((u16::from_le_bytes([*p, *p.add(1)]) as u32) << 16);
    while i < n {
        s += bf(wp.add(2 * i)) * bf(ap.add(2 * i));
        i += 1;
    }
    s
}

/// 8 bf16 at `p` as f32 (a bf16 is the top half of an f32).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bf16x8(p: *const u8) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)), 16))
}
