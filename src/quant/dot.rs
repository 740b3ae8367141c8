//! The portable dot products (scalar code shaped so the compiler can vectorize it; the path on
//! CPUs without AVX2, and on wasm for the types `simd128.rs` lacks), and the dispatch to the
//! AVX2 kernels on x86_64 and the simd128 kernels on wasm32.

// Index loops over fixed-size arrays read more plainly than zipped iterators here.
#![allow(clippy::needless_range_loop)]

use super::blocks::{self, f16_at, f32_at, Q8_K_BYTES, QK, QK_K};
use super::GgmlType;
use crate::fma::mul_add;

/// Dot product of one weight row of type `t` (`n` elements, raw GGUF bytes) with activations
/// already converted by `quantize_row_into(vec_dot_type(t), ...)`.
///
/// This is the CPU executor's inner loop: it does not allocate and does not return a `Result`.
/// The caller guarantees `n` is a whole number of blocks and both slices hold exactly `n`
/// elements (checked with `debug_assert!`). In release builds a violation never panics or reads
/// out of range: only the whole blocks present in both slices are summed.
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
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        if let Some(r) = super::simd128::vec_dot(t, n, w_row, acts) {
            return r;
        }
    }
    vec_dot_portable(t, n, w_row, acts)
}

/// [`vec_dot`] for the first `4 * (rows / 4)` activation rows of a batch of `rows`: llama.cpp's
/// CPU backend runs those through its 4-row kernels, which for repacked weight types (Q4_K on
/// x86) round differently from its one-row kernels; the other rows use [`vec_dot`].
#[inline]
pub fn vec_dot_gemm4(t: GgmlType, n: usize, w_row: &[u8], acts: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2::available() {
            if let Some(r) = super::avx2::vec_dot_gemm4(t, n, w_row, acts) {
                return r;
            }
            return vec_dot(t, n, w_row, acts);
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        if let Some(r) = super::simd128::vec_dot_gemm4(t, n, w_row, acts) {
            return r;
        }
    }
    if t == GgmlType::Q4_K {
        return dot_q4_k_gemm4(n, w_row, acts);
    }
    vec_dot(t, n, w_row, acts)
}

/// `out[c]` = [`vec_dot_gemm4`] of the weight row `w_row` with activation row `c` of `acts`
/// (four rows `arb` bytes apart): prefill's four-row groups. On x86 with AVX2, Q4_K and Q6_K
/// run as one tile (each weight block unpacked once for the four rows), bit-identical to the
/// four calls; other types and CPUs take the calls.
#[inline]
pub fn vec_dot_gemm4_tile(t: GgmlType, n: usize, w_row: &[u8], acts: &[u8], arb: usize, out: &mut [f32; 4]) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2_ktile::gemm4_tile(t, n, w_row, acts, arb, out) {
            return;
        }
    }
    for (c, o) in out.iter_mut().enumerate() {
        *o = vec_dot_gemm4(t, n, w_row, acts.get(c * arb..(c + 1) * arb).unwrap_or(&[]));
    }
}

/// [`vec_dot_gemm4_tile`] for `nw` weight rows `wrb` bytes apart in `w`: weight row `j` times
/// activation row `c` into `out[c * ostride + j]`, in one call on x86 (the same bits).
#[allow(clippy::too_many_arguments)]
pub fn vec_dot_gemm4_run(
    t: GgmlType,
    n: usize,
    w: &[u8],
    wrb: usize,
    nw: usize,
    acts: &[u8],
    arb: usize,
    out: &mut [f32],
    ostride: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2_ktile::gemm4_run(t, n, w, wrb, nw, acts, arb, out, ostride) {
            return;
        }
    }
    for j in 0..nw {
        let mut o = [0f32; 4];
        vec_dot_gemm4_tile(t, n, w.get(j * wrb..(j + 1) * wrb).unwrap_or(&[]), acts, arb, &mut o);
        put_strided(&o, out, ostride, j);
    }
}

/// `o[c]` into `out[c * ostride + j]` where that is inside `out`: a run's results for one
/// weight row.
fn put_strided(o: &[f32], out: &mut [f32], ostride: usize, j: usize) {
    for (c, &v) in o.iter().enumerate() {
        if let Some(x) = out.get_mut(c * ostride + j) {
            *x = v;
        }
    }
}

/// [`vec_dot_gemm4`] by the portable code alone (what the wasm tests hold the simd128 kernels
/// to).
#[doc(hidden)]
pub fn vec_dot_gemm4_portable(t: GgmlType, n: usize, w_row: &[u8], acts: &[u8]) -> f32 {
    if t == GgmlType::Q4_K {
        return dot_q4_k_gemm4(n, w_row, acts);
    }
    vec_dot_portable(t, n, w_row, acts)
}

/// `out[j]` = [`vec_dot`] of weight row `j` (rows `wrb` bytes apart in `w`) with the activation
/// row `a`: the decode loop, bit-identical to one [`vec_dot`] per row, dispatched once.
pub fn vec_dot_rows(t: GgmlType, n: usize, w: &[u8], wrb: usize, a: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2_tile::dot_rows(t, n, w, wrb, a, out) {
            return;
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        if super::simd128::dot_rows(t, n, w, wrb, a, out) {
            return;
        }
    }
    for (j, o) in out.iter_mut().enumerate() {
        *o = vec_dot(t, n, w.get(j * wrb..(j + 1) * wrb).unwrap_or(&[]), a);
    }
}

/// Whether [`vec_dot_tile4`] has a tiled kernel for `t` on this CPU (else it loops over
/// [`vec_dot`], and a caller gains nothing from tiles): the legacy types with AVX2 on x86, and
/// in wasm with simd128.
pub fn has_tile(t: GgmlType) -> bool {
    use GgmlType::*;
    let legacy = matches!(t, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0);
    #[cfg(target_arch = "x86_64")]
    {
        legacy && super::avx2::available()
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        legacy
    }
    #[cfg(not(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128"))))]
    {
        let _ = legacy;
        false
    }
}

/// `out[r * C + c]` = [`vec_dot`] of weight row `r` and activation row `c`: `w` holds `R`
/// weight rows of `wrb` bytes, `a` holds `C` activation rows of `arb` bytes, each row `n`
/// elements. Bit-identical to `R * C` calls of [`vec_dot`]; on x86 with AVX2 the legacy types
/// run as one tile (each weight block unpacked once for all `C` rows, each activation block
/// loaded once for all `R` rows). Rows missing from short slices read as empty.
#[inline]
pub fn vec_dot_tile<const R: usize, const C: usize>(
    t: GgmlType,
    n: usize,
    w: &[u8],
    wrb: usize,
    a: &[u8],
    arb: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2_tile::dot_tile::<R, C>(t, n, w, wrb, a, arb, out) {
            return;
        }
    }
    for r in 0..R {
        let wr = w.get(r * wrb..(r + 1) * wrb).unwrap_or(&[]);
        for c in 0..C {
            let ar = a.get(c * arb..(c + 1) * arb).unwrap_or(&[]);
            if let Some(o) = out.get_mut(r * C + c) {
                *o = vec_dot(t, n, wr, ar);
            }
        }
    }
}

/// The activation block scales of four rows (`acts`, rows `arb` bytes apart, of
/// `vec_dot_type(t)`) as [`vec_dot_tile4`] reads them: per block `[d0, d1, d2, d3, s0, s1, s2,
/// s3]` as f32 (`s`, Q8_1's `d * sum(q)`, is 0 for Q8_0). Converted once per matmul instead of
/// once per weight row. Only legacy types have a scale per 32 activations; for others (and
/// short slices) `out` is left as it is.
pub fn tile_scales(t: GgmlType, n: usize, acts: &[u8], arb: usize, out: &mut [f32]) {
    let at = super::vec_dot_type(t);
    if !matches!(at, GgmlType::Q8_0 | GgmlType::Q8_1) {
        return;
    }
    let (ats, nb) = (at.type_size(), n / QK);
    for (i, o) in out.chunks_exact_mut(8).take(nb).enumerate() {
        for c in 0..4 {
            let Some(b) = acts.get(c * arb + i * ats..c * arb + (i + 1) * ats) else { return };
            o[c] = f16_at(b, 0);
            o[4 + c] = if at == GgmlType::Q8_1 { f16_at(b, 2) } else { 0.0 };
        }
    }
}

/// `out[c]` = [`vec_dot`] of the weight row `w_row` with activation row `c` of `acts` (four
/// rows `arb` bytes apart), `scales` being [`tile_scales`] of those rows: prefill's 1 x 4 tile
/// for the legacy types on x86 and in wasm, bit-identical to [`vec_dot_tile`]; elsewhere
/// [`vec_dot_tile`]. Always inlined: out of line (as [`vec_dot_tile8`]'s fallback made it), its
/// call cost SmolLM2's prefill 6%.
#[inline(always)]
pub fn vec_dot_tile4(
    t: GgmlType,
    n: usize,
    w_row: &[u8],
    acts: &[u8],
    arb: usize,
    scales: &[f32],
    out: &mut [f32; 4],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2_tile::dot_tile4s(t, n, w_row, acts, arb, scales, out) {
            return;
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        if super::simd128::dot_tile4s(t, n, w_row, acts, arb, scales, out) {
            return;
        }
    }
    let _ = scales;
    vec_dot_tile::<1, 4>(t, n, w_row, w_row.len(), acts, arb, out);
}

/// Whether [`vec_dot_tile8`] has a kernel of its own for `t` here (else it is two
/// [`vec_dot_tile4`], and callers take those directly).
pub fn has_tile8(t: GgmlType) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::avx2_tile::has_tile8s(t)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = t;
        false
    }
}

/// `out[c]` = [`vec_dot`] of the weight row `w_row` with activation row `c` of `acts` (eight
/// rows `arb` bytes apart), `sc0` and `sc1` being [`tile_scales`] of rows 0-3 and 4-7: the
/// 1 x 8 tile of Q4_0, Q5_0 and Q8_0 on x86 (each weight block unpacked once for eight rows),
/// bit-identical to [`vec_dot_tile4`]; elsewhere two of those.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn vec_dot_tile8(
    t: GgmlType,
    n: usize,
    w_row: &[u8],
    acts: &[u8],
    arb: usize,
    sc0: &[f32],
    sc1: &[f32],
    out: &mut [f32; 8],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2_tile::dot_tile8s(t, n, w_row, acts, arb, sc0, sc1, out) {
            return;
        }
    }
    let (lo, hi) = out.split_at_mut(4);
    if let (Ok(lo), Ok(hi)) = (<&mut [f32; 4]>::try_from(lo), <&mut [f32; 4]>::try_from(hi)) {
        vec_dot_tile4(t, n, w_row, acts, arb, sc0, lo);
        vec_dot_tile4(t, n, w_row, acts.get(4 * arb..).unwrap_or(&[]), arb, sc1, hi);
    }
}

/// The quants of eight Q8_0 activation rows (`acts`, `arb` bytes apart, `n` values each) as
/// [`vec_dot_tile8_run`] reads them: block by block, the eight rows' 32 bytes one after another
/// (256 bytes a block). The rows' own 34-byte blocks put every other 32-byte load across a cache
/// line. Leaves `out` as it is where the slices are short.
pub fn pack_tile8(n: usize, acts: &[u8], arb: usize, out: &mut [u8]) {
    for (i, blk) in out.chunks_exact_mut(256).take(n / QK).enumerate() {
        for (c, dst) in blk.chunks_exact_mut(32).enumerate() {
            if let Some(src) = acts.get(c * arb + 34 * i + 2..c * arb + 34 * i + 34) {
                dst.copy_from_slice(src);
            }
        }
    }
}

/// Eight activation rows as [`vec_dot_tile8_run`] reads them.
pub struct Tile8Acts<'a> {
    /// The rows themselves, `arb` bytes apart.
    pub raw: &'a [u8],
    /// Bytes from one row to the next in `raw`.
    pub arb: usize,
    /// Their quants, [`pack_tile8`] of the eight rows.
    pub packed: &'a [u8],
    /// [`tile_scales`] of rows 0-3 and of rows 4-7.
    pub scales: [&'a [f32]; 2],
}

/// [`vec_dot_tile8`] for `nw` weight rows `wrb` bytes apart in `w`: weight row `j` times
/// activation row `c` into `out[c * ostride + j]`, in one call on x86 (the same bits), which
/// reads the quants from `a.packed`.
pub fn vec_dot_tile8_run(
    t: GgmlType,
    n: usize,
    (w, wrb, nw): (&[u8], usize, usize),
    a: &Tile8Acts,
    out: &mut [f32],
    ostride: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx2_tile::dot_tile8s_run(t, n, (w, wrb, nw), a.packed, a.scales, out, ostride) {
            return;
        }
    }
    let [sc0, sc1] = a.scales;
    for j in 0..nw {
        let mut o = [0f32; 8];
        vec_dot_tile8(t, n, w.get(j * wrb..(j + 1) * wrb).unwrap_or(&[]), a.raw, a.arb, sc0, sc1, &mut o);
        put_strided(&o, out, ostride, j);
    }
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
        GgmlType::F16 => dot_half(n, w, a, blocks::f16_to_f32_branchless),
        GgmlType::BF16 => dot_half(n, w, a, |h| f32::from_bits((h as u32) << 16)),
        // Each arm passes a constant type so the always-inlined helpers specialize.
        GgmlType::Q4_0 => dot_legacy(GgmlType::Q4_0, n, w, a),
        GgmlType::Q4_1 => dot_legacy(GgmlType::Q4_1, n, w, a),
        GgmlType::Q5_0 => dot_legacy(GgmlType::Q5_0, n, w, a),
        GgmlType::Q5_1 => dot_legacy(GgmlType::Q5_1, n, w, a),
        GgmlType::Q8_0 => dot_legacy(GgmlType::Q8_0, n, w, a),
        GgmlType::Q8_1 => dot_legacy(GgmlType::Q8_1, n, w, a),
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
        GgmlType::Q2_K => dot_k(GgmlType::Q2_K, n, w, a),
        GgmlType::Q3_K => dot_k(GgmlType::Q3_K, n, w, a),
        GgmlType::Q4_K => dot_q4_k(n, w, a),
        GgmlType::Q5_K => dot_k(GgmlType::Q5_K, n, w, a),
        GgmlType::Q6_K => dot_k(GgmlType::Q6_K, n, w, a),
    }
}

/// Legacy blocks times Q8_0/Q8_1 activations: 32 weights unpacked to bytes, an integer dot
/// product per block, the block scales applied once.
#[inline(always)]
fn dot_legacy(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let at = super::vec_dot_type(t);
    let aoff = at.type_size() - QK;
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (wb, ab) in w.chunks_exact(t.type_size()).zip(a.chunks_exact(at.type_size())).take(n / QK) {
        let aq: &[u8; QK] = ab[aoff..].try_into().unwrap();
        let mut q = [0i8; QK];
        let d = f16_at(wb, 0);
        match t {
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let (off, bias) = if t == GgmlType::Q4_0 { (2, 8) } else { (4, 0) };
                let qs: &[u8; 16] = wb[off..off + 16].try_into().unwrap();
                for j in 0..16 {
                    q[j] = (qs[j] & 0xF) as i8 - bias;
                    q[j + 16] = (qs[j] >> 4) as i8 - bias;
                }
            }
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let (off, bias) = if t == GgmlType::Q5_0 { (2, 16) } else { (4, 0) };
                let qh = u32::from_le_bytes(wb[off..off + 4].try_into().unwrap());
                let qs: &[u8; 16] = wb[off + 4..off + 20].try_into().unwrap();
                for j in 0..16 {
                    let h0 = ((qh >> j) as u8 & 1) << 4;
                    let h1 = ((qh >> (j + 16)) as u8 & 1) << 4;
                    q[j] = ((qs[j] & 0xF) | h0) as i8 - bias;
                    q[j + 16] = ((qs[j] >> 4) | h1) as i8 - bias;
                }
            }
            _ => {
                let off = t.type_size() - QK;
                let qs: &[u8; QK] = wb[off..].try_into().unwrap();
                for j in 0..QK {
                    q[j] = qs[j] as i8;
                }
            }
        }
        // The x86 kernels' order (see avx2.rs): 8 lanes of 4-byte partial sums, one fused
        // multiply-add per lane and block.
        let dd = d * f16_at(ab, 0);
        for l in 0..8 {
            let mut p = 0i32;
            for j in 4 * l..4 * l + 4 {
                p += q[j] as i32 * aq[j] as i8 as i32;
            }
            acc[l] = mul_add(p as f32, dd, acc[l]);
        }
    }
    if matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1) {
        // The min terms m * s in a second pass (interleaved with the loop above they halve
        // its speed), summed with fused multiply-adds as GCC compiles ggml's `summs += m * s`.
        for (wb, ab) in w.chunks_exact(t.type_size()).zip(a.chunks_exact(at.type_size())).take(n / QK) {
            let m = blocks::f16_to_f32_branchless(u16::from_le_bytes([wb[2], wb[3]]));
            summs = mul_add(m, blocks::f16_to_f32_branchless(u16::from_le_bytes([ab[2], ab[3]])), summs);
        }
    }
    hsum8(&acc) + summs
}

/// The 8-lane horizontal sum of the x86 kernels: halves, then pairs, then the last two.
#[inline(always)]
pub(crate) fn hsum8(v: &[f32; 8]) -> f32 {
    let s: [f32; 4] = std::array::from_fn(|i| v[i] + v[i + 4]);
    (s[0] + s[2]) + (s[1] + s[3])
}

/// K-quant blocks times Q8_K activations; the mins use the activations' per-16 sums.
#[inline(always)]
fn dot_k(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
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

/// F16 or BF16 rows (`cvt` converts one value), 8 f32 accumulators.
#[inline(always)]
fn dot_half(n: usize, w: &[u8], a: &[u8], cvt: impl Fn(u16) -> f32) -> f32 {
    let n = n.min(w.len() / 2).min(a.len() / 2);
    let (w, a) = (&w[..2 * n], &a[..2 * n]);
    let h = |b: &[u8], i: usize| cvt(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]));
    let mut acc = [0f32; 8];
    for (wc, ac) in w.chunks_exact(16).zip(a.chunks_exact(16)) {
        for l in 0..8 {
            acc[l] += h(wc, l) * h(ac, l);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in (n / 8) * 8..n {
        s += h(w, i) * h(a, i);
    }
    s
}

/// Activation scale and the 16 per-16 sums of a Q8_K block.
#[inline(always)]
fn q8k_head(ab: &[u8]) -> (f32, [i32; 16]) {
    let bs = std::array::from_fn(|k| i16::from_le_bytes([ab[260 + 2 * k], ab[261 + 2 * k]]) as i32);
    (f32_at(ab, 0), bs)
}

/// Sum over 32 bytes of `f(w) * a` with the activations as i8.
#[inline(always)]
fn dot32(w: &[u8; 32], a: &[u8], f: impl Fn(u8) -> u8) -> i32 {
    let a: &[u8; 32] = a[..32].try_into().unwrap();
    let mut s = 0i32;
    for l in 0..32 {
        s += f(w[l]) as i32 * a[l] as i8 as i32;
    }
    s
}

/// Q4_K as llama.cpp's 4-row repacked kernel computes it: one fused multiply-add per 64
/// elements for the quants and one for the mins.
fn dot_q4_k_gemm4(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for (wb, ab) in w.chunks_exact(blocks::Q4_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
        let (da, bs) = q8k_head(ab);
        let (d, dmin) = (f16_at(wb, 0) * da, f16_at(wb, 2) * da);
        for j in 0..4 {
            let (sc0, m0) = blocks::k4_scale_min(2 * j, &wb[4..16]);
            let (sc1, m1) = blocks::k4_scale_min(2 * j + 1, &wb[4..16]);
            let q: &[u8; 32] = wb[16 + 32 * j..48 + 32 * j].try_into().unwrap();
            let aq = &ab[4 + 64 * j..];
            let isum = sc0 as i32 * dot32(q, aq, |b| b & 0xF) + sc1 as i32 * dot32(q, &aq[32..], |b| b >> 4);
            let msum = m0 as i32 * (bs[4 * j] + bs[4 * j + 1]) + m1 as i32 * (bs[4 * j + 2] + bs[4 * j + 3]);
            acc = mul_add(isum as f32, d, acc);
            accm = mul_add(msum as f32, dmin, accm);
        }
    }
    acc - accm
}

/// Q4_K without the generic unpacking: nibbles straight into 32-wide integer dot products.
fn dot_q4_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for (wb, ab) in w.chunks_exact(blocks::Q4_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
        let (da, bs) = q8k_head(ab);
        let (mut isum, mut msum) = (0i32, 0i32);
        for j in 0..4 {
            let (sc0, m0) = blocks::k4_scale_min(2 * j, &wb[4..16]);
            let (sc1, m1) = blocks::k4_scale_min(2 * j + 1, &wb[4..16]);
            let q: &[u8; 32] = wb[16 + 32 * j..48 + 32 * j].try_into().unwrap();
            let aq = &ab[4 + 64 * j..];
            isum += sc0 as i32 * dot32(q, aq, |b| b & 0xF) + sc1 as i32 * dot32(q, &aq[32..], |b| b >> 4);
            msum += m0 as i32 * (bs[4 * j] + bs[4 * j + 1]) + m1 as i32 * (bs[4 * j + 2] + bs[4 * j + 3]);
        }
        // As llama.cpp's AVX2 kernel for repacked Q4_K (q4_K_8x8): one fused multiply-add per
        // block for the quants and one for the mins, subtracted at the end.
        acc = mul_add(isum as f32, f16_at(wb, 0) * da, acc);
        accm = mul_add(msum as f32, f16_at(wb, 2) * da, accm);
    }
    acc - accm
}
