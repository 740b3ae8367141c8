//! AVX2 tiles for Q4_K and Q6_K weights in prefill: one weight row times four activation rows
//! (Q8_K) in one pass over the blocks (x86_64 only, behind [`super::avx2::available`]).
//!
//! Why: the one-row kernels in avx2.rs unpack every weight block (nibbles, 6-bit scales and
//! mins, Q6_K's high bits) once per activation row, and reduce each partial sum to a scalar on
//! its own. Here a weight block is unpacked once for the four rows, and the four rows' integer
//! sums are reduced together (one transposing horizontal add), so the float steps run in four
//! lanes at once.
//!
//! Every pair keeps the order of its one-row kernel exactly (tests/quant_dot.rs checks the bits):
//! - Q4_K as [`super::vec_dot_gemm4`] computes it (llama.cpp's 4-row repacked kernel): per 64
//!   elements one fused multiply-add of the integer sum by `d * d_act`, one for the mins by
//!   `dmin * d_act`, subtracted at the end. Integer sums are exact, so how they are formed
//!   (here: four rows reduced at once) cannot change a bit; the float steps are the same
//!   operations in the same order, one lane per activation row.
//! - Q6_K as [`super::vec_dot`] computes it (its 4-row path rounds the same): per block the
//!   whole integer sum less 32 times the scale-weighted activation sums, times the block's `d`,
//!   then fused into the accumulator by the activation scale.

use super::avx2::{f16_at, load, q6_k_quants, scale_pair};
use super::blocks::{Q8_K_BYTES, QK_K};
use super::GgmlType;
use std::arch::x86_64::*;

/// Bytes of a Q4_K and a Q6_K block.
const Q4K: usize = 144;
const Q6K: usize = 210;

/// The sums of the eight i32 lanes of each of `v[0..4]`, as the four lanes of one vector (exact).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum4(v: [__m256i; 4]) -> __m128i {
    let s01 = _mm256_hadd_epi32(v[0], v[1]);
    let s23 = _mm256_hadd_epi32(v[2], v[3]);
    // Lanes 0..4: the low halves' sums of rows 0..4, lanes 4..8 the high halves'.
    let s = _mm256_hadd_epi32(s01, s23);
    _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1))
}

/// `acc` plus the sums of pairs of products of the i16 lanes of `x` and `y` (`madd`), as 8 i32
/// lanes: with `V` (AVX-512 VNNI) one `vpdpwssd`, else `madd` and an add. The same integers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn madd_onto<const V: bool>(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
    if V {
        super::avx512_asm::dpwssd_onto(acc, x, y)
    } else {
        _mm256_add_epi32(acc, _mm256_madd_epi16(x, y))
    }
}

/// The four activation rows' block scales (f32 at the start of each Q8_K block).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn act_scales(a: [*const u8; 4]) -> __m128 {
    _mm_setr_ps(
        (a[0] as *const f32).read_unaligned(),
        (a[1] as *const f32).read_unaligned(),
        (a[2] as *const f32).read_unaligned(),
        (a[3] as *const f32).read_unaligned(),
    )
}

/// Q4_K row `w` (`nb` blocks) times the four Q8_K rows at `a` (`nb` blocks each), in the order of
/// llama.cpp's 4-row kernel; `out[c]` for activation row `c`.
///
/// # Safety
/// AVX2, FMA and F16C present; `w` readable for `nb` Q4_K blocks, every `a[c]` for `nb` Q8_K
/// blocks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q4_k_1x4<const V: bool>(nb: usize, w: *const u8, a: [*const u8; 4], out: &mut [f32; 4]) {
    let m4 = _mm256_set1_epi8(0x0F);
    let (mut acc, mut accm) = (_mm_setzero_ps(), _mm_setzero_ps());
    for i in 0..nb {
        let wb = w.add(i * Q4K);
        let ab: [*const u8; 4] = std::array::from_fn(|c| a[c].add(i * Q8_K_BYTES));
        let da = act_scales(ab);
        let d = _mm_mul_ps(_mm_set1_ps(f16_at(wb)), da);
        let dmin = _mm_mul_ps(_mm_set1_ps(f16_at(wb.add(2))), da);
        // The eight 6-bit scales and mins (blocks::k4_scale_min, all at once).
        let s = std::slice::from_raw_parts(wb.add(4), 12);
        let mut sc = [0i16; 8];
        let mut mn = [0i16; 16];
        for j in 0..8 {
            let (x, m) = super::blocks::k4_scale_min(j, s);
            sc[j] = x as i16;
            // Each min twice: it weighs the two per-16 activation sums of its 32 elements.
            mn[2 * j] = m as i16;
            mn[2 * j + 1] = m as i16;
        }
        // Per row, m_k * (bsum[2k] + bsum[2k + 1]) in lane k; lanes 2j and 2j + 1 belong to
        // the j-th 64 elements.
        let mv = _mm256_loadu_si256(mn.as_ptr() as *const __m256i);
        let mins: [__m256i; 4] = std::array::from_fn(|c| _mm256_madd_epi16(load(ab[c].add(260)), mv));
        // Pairs of lanes summed: lanes (0, 1, 4, 5) hold rows 0/1's sums for 64-element groups
        // (0, 1, 2, 3) as [r0 j0, r0 j1, r1 j0, r1 j1 | r0 j2, r0 j3, r1 j2, r1 j3].
        let m01 = _mm256_hadd_epi32(mins[0], mins[1]);
        let m23 = _mm256_hadd_epi32(mins[2], mins[3]);
        let (m01lo, m01hi) = (_mm256_castsi256_si128(m01), _mm256_extracti128_si256(m01, 1));
        let (m23lo, m23hi) = (_mm256_castsi256_si128(m23), _mm256_extracti128_si256(m23, 1));
        let pick = |x: __m128i, y: __m128i, odd: bool| -> __m128i {
            let (x, y) = (_mm_castsi128_ps(x), _mm_castsi128_ps(y));
            _mm_castps_si128(if odd {
                _mm_shuffle_ps::<0b11_01_11_01>(x, y)
            } else {
                _mm_shuffle_ps::<0b10_00_10_00>(x, y)
            })
        };
        let mj = [
            pick(m01lo, m23lo, false),
            pick(m01lo, m23lo, true),
            pick(m01hi, m23hi, false),
            pick(m01hi, m23hi, true),
        ];
        for j in 0..4 {
            let q = load(wb.add(16 + 32 * j));
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            let (s0, s1) = (_mm256_set1_epi16(sc[2 * j]), _mm256_set1_epi16(sc[2 * j + 1]));
            let sums: [__m256i; 4] = std::array::from_fn(|c| {
                let aq = ab[c].add(4 + 64 * j);
                let plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load(aq)), s0);
                madd_onto::<V>(plo, _mm256_maddubs_epi16(hi, load(aq.add(32))), s1)
            });
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4(sums)), d, acc);
            accm = _mm_fmadd_ps(_mm_cvtepi32_ps(mj[j]), dmin, accm);
        }
    }
    _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc, accm));
}

/// Q6_K row `w` (`nb` blocks) times the four Q8_K rows at `a`, in the order of the one-row
/// kernel (`avx2::dot_q6_k`); `out[c]` for activation row `c`.
///
/// # Safety
/// As [`q4_k_1x4`], with Q6_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_k_1x4<const V: bool>(nb: usize, w: *const u8, a: [*const u8; 4], out: &mut [f32; 4]) {
    let mut acc = _mm_setzero_ps();
    for i in 0..nb {
        let wb = w.add(i * Q6K);
        let ab: [*const u8; 4] = std::array::from_fn(|c| a[c].add(i * Q8_K_BYTES));
        let da = act_scales(ab);
        let scp = wb.add(192);
        let sc: [i16; 16] = std::array::from_fn(|k| *scp.add(k) as i8 as i16);
        // Every row starts from -32 * sum_k sc[k] * bsum[k] (the weights are u - 32).
        let scv = _mm256_loadu_si256(sc.as_ptr() as *const __m256i);
        let mut sumi: [__m256i; 4] = std::array::from_fn(|c| {
            let m = _mm256_madd_epi16(load(ab[c].add(260)), scv);
            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(m, 5))
        });
        for h in 0..2 {
            for (k, q) in q6_k_quants(wb, h).into_iter().enumerate() {
                let s = 8 * h + 2 * k;
                let scale = scale_pair(sc[s], sc[s + 1]);
                for c in 0..4 {
                    let p = _mm256_maddubs_epi16(q, load(ab[c].add(4 + 128 * h + 32 * k)));
                    sumi[c] = madd_onto::<V>(sumi[c], p, scale);
                }
            }
        }
        let x = _mm_mul_ps(_mm_cvtepi32_ps(hsum4(sumi)), _mm_set1_ps(f16_at(wb.add(208))));
        acc = _mm_fmadd_ps(x, da, acc);
    }
    _mm_storeu_ps(out.as_mut_ptr(), acc);
}

/// `out[c]` = [`super::vec_dot_gemm4`] of the weight row `w` with activation row `c` of `a`
/// (four rows, `arb` bytes apart), rows of `n` elements, for Q4_K and Q6_K. False (nothing
/// written) for other types, slices too short for the shapes, or a CPU without AVX2.
pub fn gemm4_tile(t: GgmlType, n: usize, w: &[u8], a: &[u8], arb: usize, out: &mut [f32; 4]) -> bool {
    let ts = match t {
        GgmlType::Q4_K => Q4K,
        GgmlType::Q6_K => Q6K,
        _ => return false,
    };
    let nb = n / QK_K;
    let fits = n.is_multiple_of(QK_K)
        && w.len() >= nb * ts
        && nb * Q8_K_BYTES <= arb
        && a.len() >= 3 * arb + nb * Q8_K_BYTES;
    if !fits || !super::avx2::available() {
        return false;
    }
    let ap: [*const u8; 4] = std::array::from_fn(|c| a[c * arb..].as_ptr());
    // SAFETY: features checked above; the weight row and the four activation rows lie inside
    // their slices (`fits`).
    unsafe {
        match (t == GgmlType::Q4_K, super::avx512_asm::vnni()) {
            (true, true) => q4_k_1x4::<true>(nb, w.as_ptr(), ap, out),
            (true, false) => q4_k_1x4::<false>(nb, w.as_ptr(), ap, out),
            (false, true) => q6_k_1x4::<true>(nb, w.as_ptr(), ap, out),
            (false, false) => q6_k_1x4::<false>(nb, w.as_ptr(), ap, out),
        }
    }
    true
}

/// [`gemm4_tile`] for `nw` weight rows `wrb` bytes apart in `w`: weight row `j` times activation
/// row `c` into `out[c * ostride + j]`, the checks and the dispatch once for the run. False
/// (nothing written) where [`gemm4_tile`] would be, or where `out` is too short.
#[allow(clippy::too_many_arguments)]
pub fn gemm4_run(
    t: GgmlType,
    n: usize,
    w: &[u8],
    wrb: usize,
    nw: usize,
    a: &[u8],
    arb: usize,
    out: &mut [f32],
    ostride: usize,
) -> bool {
    let ts = match t {
        GgmlType::Q4_K => Q4K,
        GgmlType::Q6_K => Q6K,
        _ => return false,
    };
    let nb = n / QK_K;
    let fits = nw > 0
        && n.is_multiple_of(QK_K)
        && nb * ts <= wrb
        && w.len() >= (nw - 1) * wrb + nb * ts
        && nb * Q8_K_BYTES <= arb
        && a.len() >= 3 * arb + nb * Q8_K_BYTES
        && ostride >= nw
        && out.len() >= 3 * ostride + nw;
    if !fits || !super::avx2::available() {
        return false;
    }
    let ap: [*const u8; 4] = std::array::from_fn(|c| a[c * arb..].as_ptr());
    // SAFETY: features checked above; every weight row and the four activation rows lie inside
    // their slices, and every write inside `out` (`fits`).
    unsafe {
        let (q4k, wp, op) = (t == GgmlType::Q4_K, w.as_ptr(), out.as_mut_ptr());
        if super::avx512_asm::vnni() {
            run4::<true>(q4k, nb, wp, wrb, nw, ap, op, ostride)
        } else {
            run4::<false>(q4k, nb, wp, wrb, nw, ap, op, ostride)
        }
    }
    true
}

/// The loop of [`gemm4_run`], with the tiles inlined.
///
/// # Safety
/// As [`q4_k_1x4`] / [`q6_k_1x4`] for every row (`V`: VNNI present); `out` writable at every
/// index written.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn run4<const V: bool>(
    q4k: bool,
    nb: usize,
    w: *const u8,
    wrb: usize,
    nw: usize,
    a: [*const u8; 4],
    out: *mut f32,
    ostride: usize,
) {
    for j in 0..nw {
        let mut o = [0f32; 4];
        if q4k {
            q4_k_1x4::<V>(nb, w.add(j * wrb), a, &mut o);
        } else {
            q6_k_1x4::<V>(nb, w.add(j * wrb), a, &mut o);
        }
        for (c, v) in o.into_iter().enumerate() {
            *out.add(c * ostride + j) = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Q4_K and Q6_K four-row tiles give the same bits with `vpdpwssd` (VNNI) as with
    /// `madd` and an add.
    #[test]
    fn avx2_and_vnni_k_tiles_agree() {
        if !super::super::avx2::available() || !super::super::avx512_asm::vnni() {
            return;
        }
        let mut next = crate::test_rng::xorshift(0xD1B5_4A32_D192_ED03u64);
        let (n, nw) = (512usize, 3usize);
        let nb = n / QK_K;
        let mut a = Vec::new();
        for _ in 0..4 {
            let x: Vec<f32> = (0..n).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
            let mut r = Vec::new();
            super::super::quantize_row_into(GgmlType::Q8_K, &x, &mut r).unwrap();
            a.extend_from_slice(&r);
        }
        let arb = a.len() / 4;
        let ap: [*const u8; 4] = std::array::from_fn(|c| a[c * arb..].as_ptr());
        for (q4k, ts) in [(true, Q4K), (false, Q6K)] {
            let mut w: Vec<u8> = (0..nw * nb * ts).map(|_| next() as u8).collect();
            for b in w.chunks_exact_mut(ts) {
                let d = half::f16::from_f32((next() % 1000) as f32 * 1e-4).to_le_bytes();
                let at = if q4k { 0 } else { 208 };
                b[at..at + 2].copy_from_slice(&d);
                if q4k {
                    b[2..4]
                        .copy_from_slice(&half::f16::from_f32((next() % 1000) as f32 * 1e-5).to_le_bytes());
                }
            }
            let (mut o1, mut o2) = (vec![0f32; 4 * nw], vec![0f32; 4 * nw]);
            // SAFETY: features checked above; `nw` rows of `nb` blocks in `w`, 4 activation rows
            // of `nb` blocks, `4 * nw` outputs.
            unsafe {
                run4::<false>(q4k, nb, w.as_ptr(), nb * ts, nw, ap, o1.as_mut_ptr(), nw);
                run4::<true>(q4k, nb, w.as_ptr(), nb * ts, nw, ap, o2.as_mut_ptr(), nw);
            }
            for i in 0..4 * nw {
                assert_eq!(o1[i].to_bits(), o2[i].to_bits(), "q4k={q4k} output {i}: {} vs {}", o1[i], o2[i]);
            }
            assert!(o1.iter().all(|&v| v != 0.0), "q4k={q4k}: zero outputs");
        }
    }
}
