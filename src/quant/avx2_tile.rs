//! AVX2 tiles for the legacy block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): `R` weight rows times
//! `C` activation rows in one pass over the blocks (x86_64 only, behind [`super::avx2::available`]).
//!
//! Why: a lone dot product spends most of its time unpacking weights and converting block
//! scales, and its one accumulator is a serial chain. A tile unpacks each weight block once for
//! `C` activation rows (prefill) and loads each activation block once for `R` weight rows
//! (decode), with `R * C` independent accumulators.
//!
//! Every pair (weight row, activation row) is summed in exactly the order of
//! `avx2::dot_legacy_q8_0` / `dot_legacy_q8_1` (one 8-lane accumulator, blocks in order, the
//! horizontal sum, then the min terms), so a tile's results are bit-identical to [`super::vec_dot`]
//! (tests/quant_dot.rs checks it).

use super::avx2::{hsum_ps, legacy_q, load, mul_sum_u8_i8};
use super::avx512_asm::vnni;
use super::avx512_asm::{dpbusd_onto, fmadd_bcast};
use super::GgmlType;
use std::arch::x86_64::*;

/// The two f16 at `p` and `p + 2` as f32 in lanes 0 and 1 (lanes 2 and 3: the next 4 bytes).
/// Reads 8 bytes: every legacy weight block and every Q8_0/Q8_1 block has at least 18.
///
/// In assembly because, written with intrinsics, LLVM sees that only lane 0 or 1 is used and
/// loads the f16 with `vpinsrw` into whatever register it treats as undefined: that was the
/// accumulator, which put the scale conversion on the accumulator's dependency chain
/// (measured: 2.9 ns a Q4_1 block instead of about 1). A memory-operand `vcvtph2ps` has no
/// input register, so no false dependency.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16x2(p: *const u8) -> __m128 {
    let r: __m128;
    // SAFETY: the caller guarantees 8 readable bytes at `p`; the instruction only reads them.
    std::arch::asm!(
        "vcvtph2ps {r}, qword ptr [{p}]",
        r = out(xmm_reg) r,
        p = in(reg) p,
        options(pure, readonly, nostack, preserves_flags)
    );
    r
}

/// The tile kernel: `out[r * C + c]` = weight row `r` (at `w[r]`, `ts`-byte blocks) times
/// activation row `c` (at `a[c]`, Q8_0 or Q8_1 blocks), over `nb` blocks.
///
/// # Safety
/// AVX2, FMA and F16C present; every `w[r]` readable for `nb * ts` bytes and every `a[c]` for
/// `nb` activation blocks.
#[inline]
pub(super) unsafe fn tile<const T: u32, const R: usize, const C: usize>(
    ts: usize,
    nb: usize,
    w: [*const u8; R],
    a: [*const u8; C],
    out: &mut [f32],
) {
    if vnni() {
        tile_vnni::<T, R, C>(ts, nb, w, a, out)
    } else {
        tile_avx2::<T, R, C>(ts, nb, w, a, out)
    }
}

/// [`tile_body`] with AVX2 only: byte products by `maddubs` + `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2<const T: u32, const R: usize, const C: usize>(
    ts: usize,
    nb: usize,
    w: [*const u8; R],
    a: [*const u8; C],
    out: &mut [f32],
) {
    tile_body::<T, R, C, false>(ts, nb, w, a, out)
}

/// [`tile_body`] with AVX-512 VNNI: byte products by one `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_vnni<const T: u32, const R: usize, const C: usize>(
    ts: usize,
    nb: usize,
    w: [*const u8; R],
    a: [*const u8; C],
    out: &mut [f32],
) {
    tile_body::<T, R, C, true>(ts, nb, w, a, out)
}

/// Sums of four products of unsigned `x` and signed `y` bytes, as 8 i32 lanes, by one
/// `vpdpbusd` (call only where [`vnni`] says so).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dpbusd(x: __m256i, y: __m256i) -> __m256i {
    dpbusd_onto(_mm256_setzero_si256(), x, y)
}

/// The kernel, inlined into [`tile_avx2`] and [`tile_vnni`] (`V`: use `vpdpbusd`).
#[inline(always)]
unsafe fn tile_body<const T: u32, const R: usize, const C: usize, const V: bool>(
    ts: usize,
    nb: usize,
    w: [*const u8; R],
    a: [*const u8; C],
    out: &mut [f32],
) {
    // Types with a min (Q4_1, Q5_1) pair with Q8_1 (d, s, 32 quants), the others with Q8_0.
    let min = T == GgmlType::Q4_1 as u32 || T == GgmlType::Q5_1 as u32;
    let ats = if min { 36 } else { 34 };
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    // Lane 1 holds the min terms m * s, summed by fused multiply-adds (lane 0 is unused).
    let mut summs = [[_mm_setzero_ps(); C]; R];
    for i in 0..nb {
        let ah: [__m128; C] = std::array::from_fn(|c| f16x2(a[c].add(i * ats)));
        let aq: [__m256i; C] = std::array::from_fn(|c| load(a[c].add(i * ats + ats - 32)));
        for r in 0..R {
            let wb = w[r].add(i * ts);
            let wh = f16x2(wb);
            let q = legacy_q::<T>(wb);
            // Signed weights: the sign trick, |w| once per weight block.
            let aw = if min { q } else { _mm256_sign_epi8(q, q) };
            for c in 0..C {
                if min {
                    summs[r][c] = _mm_fmadd_ps(wh, ah[c], summs[r][c]);
                }
                let d = _mm256_broadcastss_ps(_mm_mul_ss(wh, ah[c]));
                let y = if min { aq[c] } else { _mm256_sign_epi8(aq[c], q) };
                let p = _mm256_cvtepi32_ps(if V { dpbusd(aw, y) } else { mul_sum_u8_i8(aw, y) });
                acc[r][c] = _mm256_fmadd_ps(d, p, acc[r][c]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            let mut s = hsum_ps(acc[r][c]);
            if min {
                s += _mm_cvtss_f32(_mm_movehdup_ps(summs[r][c]));
            }
            out[r * C + c] = s;
        }
    }
}

/// One weight row times four activation rows whose block scales were converted beforehand
/// ([`super::tile_scales`]: per block `[d0, d1, d2, d3, s0, s1, s2, s3]` as f32): the 1 x 4 tile of
/// prefill without a scale conversion, a scalar product and a broadcast per pair, and with the
/// four rows' min terms in one vector. The same operations per pair as [`tile_body`], in the same
/// order, so the same bits.
///
/// # Safety
/// As [`tile`]; `sc` readable for `8 * nb` f32.
#[inline(always)]
unsafe fn tile4s_body<const T: u32, const V: bool>(
    ts: usize,
    nb: usize,
    w: *const u8,
    a: [*const u8; 4],
    sc: *const f32,
    out: &mut [f32; 4],
) {
    let min = T == GgmlType::Q4_1 as u32 || T == GgmlType::Q5_1 as u32;
    let ats = if min { 36 } else { 34 };
    let mut acc = [_mm256_setzero_ps(); 4];
    // Lane c: the min terms m * s of activation row c, summed by fused multiply-adds.
    let mut summs = _mm_setzero_ps();
    for i in 0..nb {
        let wb = w.add(i * ts);
        let sp = sc.add(8 * i);
        let wh = f16x2(wb);
        let wd = _mm256_broadcastss_ps(wh);
        let q = legacy_q::<T>(wb);
        let aw = if min { q } else { _mm256_sign_epi8(q, q) };
        if min {
            summs = _mm_fmadd_ps(_mm_permute_ps::<0b01_01_01_01>(wh), _mm_loadu_ps(sp.add(4)), summs);
        }
        for c in 0..4 {
            let d = _mm256_mul_ps(wd, _mm256_broadcast_ss(&*sp.add(c)));
            let aq = load(a[c].add(i * ats + ats - 32));
            let y = if min { aq } else { _mm256_sign_epi8(aq, q) };
            let p = _mm256_cvtepi32_ps(if V { dpbusd(aw, y) } else { mul_sum_u8_i8(aw, y) });
            acc[c] = _mm256_fmadd_ps(d, p, acc[c]);
        }
    }
    let mut m = [0f32; 4];
    _mm_storeu_ps(m.as_mut_ptr(), summs);
    for c in 0..4 {
        let mut s = hsum_ps(acc[c]);
        if min {
            s += m[c];
        }
        out[c] = s;
    }
}

/// [`tile4s_body`] with AVX2 only.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile4s_avx2<const T: u32>(
    ts: usize,
    nb: usize,
    w: *const u8,
    a: [*const u8; 4],
    sc: *const f32,
    out: &mut [f32; 4],
) {
    tile4s_body::<T, false>(ts, nb, w, a, sc, out)
}

/// [`tile4s_body`] with AVX-512 VNNI (`vpdpbusd`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile4s_vnni<const T: u32>(
    ts: usize,
    nb: usize,
    w: *const u8,
    a: [*const u8; 4],
    sc: *const f32,
    out: &mut [f32; 4],
) {
    tile4s_body::<T, true>(ts, nb, w, a, sc, out)
}

/// [`tile4s_body`] over eight activation rows (two groups of four, their scales at `sc[0]` and
/// `sc[1]`): each weight block unpacked once for eight rows instead of four, the same
/// operations per pair in the same order, so the same bits. Types without a min only (Q4_0,
/// Q5_0, Q8_0): eight accumulators and the unpacked block fill the sixteen ymm registers.
///
/// # Safety
/// As [`tile`]; `sc[0]` and `sc[1]` readable for `8 * nb` f32.
#[inline(always)]
unsafe fn tile8s_body<const T: u32, const V: bool>(
    ts: usize,
    nb: usize,
    w: *const u8,
    a: [*const u8; 8],
    ab: usize,
    sc: [*const f32; 2],
    out: &mut [f32; 8],
) {
    let mut acc = [_mm256_setzero_ps(); 8];
    // With VNNI: the eight scale products of a block in one multiplication, through memory, each
    // pair's fused multiply-add taking its product as a broadcast operand (a load, not a shuffle).
    let mut dv = [0f32; 8];
    for i in 0..nb {
        let wb = w.add(i * ts);
        let wd = _mm256_broadcastss_ps(f16x2(wb));
        let q = legacy_q::<T>(wb);
        let aw = _mm256_sign_epi8(q, q);
        if V {
            let s8 = _mm256_set_m128(_mm_loadu_ps(sc[1].add(8 * i)), _mm_loadu_ps(sc[0].add(8 * i)));
            _mm256_storeu_ps(dv.as_mut_ptr(), _mm256_mul_ps(wd, s8));
        }
        for c in 0..8 {
            let aq = load(a[c].add(i * ab));
            let y = _mm256_sign_epi8(aq, q);
            if V {
                let p = _mm256_cvtepi32_ps(dpbusd(aw, y));
                acc[c] = fmadd_bcast(acc[c], p, dv.as_ptr().add(c));
            } else {
                let d = _mm256_mul_ps(wd, _mm256_broadcast_ss(&*sc[c / 4].add(8 * i + c % 4)));
                acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(mul_sum_u8_i8(aw, y)), acc[c]);
            }
        }
    }
    for c in 0..8 {
        out[c] = hsum_ps(acc[c]);
    }
}

/// [`tile8s_body`] with AVX2 only.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile8s_avx2<const T: u32>(
    ts: usize,
    nb: usize,
    w: *const u8,
    a: [*const u8; 8],
    sc: [*const f32; 2],
    out: &mut [f32; 8],
) {
    tile8s_body::<T, false>(ts, nb, w, a.map(|p| p.add(2)), 34, sc, out)
}

/// [`tile8s_body`] with AVX-512 VNNI (`vpdpbusd`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile8s_vnni<const T: u32>(
    ts: usize,
    nb: usize,
    w: *const u8,
    a: [*const u8; 8],
    sc: [*const f32; 2],
    out: &mut [f32; 8],
) {
    tile8s_body::<T, true>(ts, nb, w, a.map(|p| p.add(2)), 34, sc, out)
}

/// Whether [`dot_tile8s`] takes `t` on this CPU: Q4_0, Q5_0 or Q8_0, with AVX2.
pub fn has_tile8s(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0) && super::avx2::available()
}

/// `out[c]` = weight row `w` times activation row `c` of `a` (eight rows `arb` bytes apart) for
/// Q4_0, Q5_0 or Q8_0, with the activations' block scales from `sc0` and `sc1`
/// ([`super::tile_scales`] of rows 0-3 and 4-7). False (nothing written) for other types or
/// slices too short.
#[allow(clippy::too_many_arguments)]
pub fn dot_tile8s(
    t: GgmlType,
    n: usize,
    w: &[u8],
    a: &[u8],
    arb: usize,
    sc0: &[f32],
    sc1: &[f32],
    out: &mut [f32; 8],
) -> bool {
    let nb = n / t.block_size();
    let ts = t.type_size();
    let fits = has_tile8s(t)
        && n.is_multiple_of(t.block_size())
        && nb * ts <= w.len()
        && nb * 34 <= arb
        && a.len() >= 7 * arb + nb * 34
        && sc0.len() >= 8 * nb
        && sc1.len() >= 8 * nb;
    if !fits {
        return false;
    }
    let ap: [*const u8; 8] = std::array::from_fn(|c| a[c * arb..].as_ptr());
    let (wp, sp) = (w.as_ptr(), [sc0.as_ptr(), sc1.as_ptr()]);
    // SAFETY: features checked above; every row and every scale read lies inside its slice
    // (these types pair with Q8_0 activations: 34-byte blocks, the quants from byte 2).
    unsafe {
        macro_rules! go {
            ($t:expr) => {
                if vnni() {
                    tile8s_vnni::<{ $t as u32 }>(ts, nb, wp, ap, sp, out)
                } else {
                    tile8s_avx2::<{ $t as u32 }>(ts, nb, wp, ap, sp, out)
                }
            };
        }
        match t {
            GgmlType::Q4_0 => go!(GgmlType::Q4_0),
            GgmlType::Q5_0 => go!(GgmlType::Q5_0),
            _ => go!(GgmlType::Q8_0),
        }
    }
    true
}

/// [`tile8s_body`] over a run of `nw` weight rows `wrb` bytes apart: weight row `j` times
/// activation row `c` into `out[c * ostride + j]`. One call for the run: the checks, the
/// dispatch and the call were 2-3% of Gemma 3 270M's prefill made once per weight row.
///
/// # Safety
/// As [`tile8s_body`] for every row (`V`: VNNI present); `out` writable at every index written.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile8s_run<const T: u32, const V: bool>(
    ts: usize,
    nb: usize,
    w: *const u8,
    wrb: usize,
    nw: usize,
    p: *const u8,
    sc: [*const f32; 2],
    out: *mut f32,
    ostride: usize,
) {
    let a: [*const u8; 8] = std::array::from_fn(|c| p.add(32 * c));
    for j in 0..nw {
        let mut o = [0f32; 8];
        tile8s_body::<T, V>(ts, nb, w.add(j * wrb), a, 256, sc, &mut o);
        for (c, v) in o.into_iter().enumerate() {
            *out.add(c * ostride + j) = v;
        }
    }
}

/// [`dot_tile8s`] for `nw` weight rows `wrb` bytes apart in `w`: weight row `j` times activation
/// row `c` into `out[c * ostride + j]`. False (nothing written) where [`dot_tile8s`] would be, or
/// where `out` is too short.
#[allow(clippy::too_many_arguments)]
pub fn dot_tile8s_run(
    t: GgmlType,
    n: usize,
    (w, wrb, nw): (&[u8], usize, usize),
    packed: &[u8],
    sc: [&[f32]; 2],
    out: &mut [f32],
    ostride: usize,
) -> bool {
    let nb = n / t.block_size();
    let ts = t.type_size();
    let fits = has_tile8s(t)
        && nw > 0
        && n.is_multiple_of(t.block_size())
        && nb * ts <= wrb
        && w.len() >= (nw - 1) * wrb + nb * ts
        && packed.len() >= 256 * nb
        && sc.iter().all(|s| s.len() >= 8 * nb)
        && ostride >= nw
        && out.len() >= 7 * ostride + nw;
    if !fits {
        return false;
    }
    let (wp, ap) = (w.as_ptr(), packed.as_ptr());
    let (sp, op) = ([sc[0].as_ptr(), sc[1].as_ptr()], out.as_mut_ptr());
    // SAFETY: features checked above; every weight row, activation row and scale read lies
    // inside its slice, and every write inside `out` (`fits`).
    unsafe {
        macro_rules! go {
            ($t:expr) => {
                if vnni() {
                    tile8s_run::<{ $t as u32 }, true>(ts, nb, wp, wrb, nw, ap, sp, op, ostride)
                } else {
                    tile8s_run::<{ $t as u32 }, false>(ts, nb, wp, wrb, nw, ap, sp, op, ostride)
                }
            };
        }
        match t {
            GgmlType::Q4_0 => go!(GgmlType::Q4_0),
            GgmlType::Q5_0 => go!(GgmlType::Q5_0),
            _ => go!(GgmlType::Q8_0),
        }
    }
    true
}

/// `out[c]` = weight row `w` times activation row `c` of `a` (four rows `arb` bytes apart) for a
/// legacy type `t`, with the activations' block scales from `sc` ([`super::tile_scales`] of the
/// same four rows). False (nothing written) for other types or slices too short.
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
    let nb = n / t.block_size();
    let (ts, ats) = (t.type_size(), at.type_size());
    let fits = n.is_multiple_of(t.block_size())
        && nb * ts <= w.len()
        && nb * ats <= arb
        && a.len() >= 3 * arb + nb * ats
        && sc.len() >= 8 * nb;
    if !fits || !super::avx2::available() {
        return false;
    }
    let ap: [*const u8; 4] = std::array::from_fn(|c| a[c * arb..].as_ptr());
    let (wp, sp) = (w.as_ptr(), sc.as_ptr());
    // SAFETY: features checked above; every row and every scale read lies inside its slice.
    unsafe {
        macro_rules! go {
            ($t:expr) => {
                if vnni() {
                    tile4s_vnni::<{ $t as u32 }>(ts, nb, wp, ap, sp, out)
                } else {
                    tile4s_avx2::<{ $t as u32 }>(ts, nb, wp, ap, sp, out)
                }
            };
        }
        match t {
            GgmlType::Q4_0 => go!(GgmlType::Q4_0),
            GgmlType::Q4_1 => go!(GgmlType::Q4_1),
            GgmlType::Q5_0 => go!(GgmlType::Q5_0),
            GgmlType::Q5_1 => go!(GgmlType::Q5_1),
            GgmlType::Q8_0 => go!(GgmlType::Q8_0),
            _ => return false,
        }
    }
    true
}

/// `out[r * C + c]` = weight row `r` times activation row `c` for a legacy type `t`, rows of `n`
/// elements: `w` holds `R` rows of `wrb` bytes, `a` holds `C` rows of `arb` bytes. False (and
/// nothing written) for other types or slices too short for the shapes.
pub fn dot_tile<const R: usize, const C: usize>(
    t: GgmlType,
    n: usize,
    w: &[u8],
    wrb: usize,
    a: &[u8],
    arb: usize,
    out: &mut [f32],
) -> bool {
    let at = super::vec_dot_type(t);
    let nb = n / t.block_size();
    let (ts, ats) = (t.type_size(), at.type_size());
    // The safe boundary: every row the kernel reads lies inside its slice.
    let fits = n.is_multiple_of(t.block_size())
        && nb * ts <= wrb
        && nb * ats <= arb
        && w.len() >= R * wrb
        && a.len() >= C * arb
        && out.len() >= R * C;
    if !fits || !super::avx2::available() {
        return false;
    }
    let wp: [*const u8; R] = std::array::from_fn(|r| w[r * wrb..].as_ptr());
    let ap: [*const u8; C] = std::array::from_fn(|c| a[c * arb..].as_ptr());
    // SAFETY: features checked above; rows bounded by `fits`.
    unsafe {
        match t {
            GgmlType::Q4_0 => tile::<{ GgmlType::Q4_0 as u32 }, R, C>(ts, nb, wp, ap, out),
            GgmlType::Q4_1 => tile::<{ GgmlType::Q4_1 as u32 }, R, C>(ts, nb, wp, ap, out),
            GgmlType::Q5_0 => tile::<{ GgmlType::Q5_0 as u32 }, R, C>(ts, nb, wp, ap, out),
            GgmlType::Q5_1 => tile::<{ GgmlType::Q5_1 as u32 }, R, C>(ts, nb, wp, ap, out),
            GgmlType::Q8_0 => tile::<{ GgmlType::Q8_0 as u32 }, R, C>(ts, nb, wp, ap, out),
            _ => return false,
        }
    }
    true
}

/// `out[j]` = weight row `j` (rows `wrb` bytes apart in `w`) times the activation row `a`, for a
/// legacy type `t`: one 1 x 1 tile per row, in one call (decode's loop, without a dispatch per
/// row). False (nothing written) for other types or slices too short.
pub fn dot_rows(t: GgmlType, n: usize, w: &[u8], wrb: usize, a: &[u8], out: &mut [f32]) -> bool {
    let at = super::vec_dot_type(t);
    let nb = n / t.block_size();
    let (ts, ats) = (t.type_size(), at.type_size());
    let fits = n.is_multiple_of(t.block_size())
        && nb * ts <= wrb
        && nb * ats <= a.len()
        && w.len() >= out.len() * wrb;
    if !fits || !super::avx2::available() {
        return false;
    }
    // SAFETY: features checked above; every row read lies inside `w` and `a` (`fits`).
    unsafe {
        let v = vnni();
        match (t, v) {
            (GgmlType::Q4_0, false) => rows_avx2::<{ GgmlType::Q4_0 as u32 }, false>(ts, nb, w, wrb, a, out),
            (GgmlType::Q4_0, true) => rows_avx2::<{ GgmlType::Q4_0 as u32 }, true>(ts, nb, w, wrb, a, out),
            (GgmlType::Q4_1, false) => rows_avx2::<{ GgmlType::Q4_1 as u32 }, false>(ts, nb, w, wrb, a, out),
            (GgmlType::Q4_1, true) => rows_avx2::<{ GgmlType::Q4_1 as u32 }, true>(ts, nb, w, wrb, a, out),
            (GgmlType::Q5_0, false) => rows_avx2::<{ GgmlType::Q5_0 as u32 }, false>(ts, nb, w, wrb, a, out),
            (GgmlType::Q5_0, true) => rows_avx2::<{ GgmlType::Q5_0 as u32 }, true>(ts, nb, w, wrb, a, out),
            (GgmlType::Q5_1, false) => rows_avx2::<{ GgmlType::Q5_1 as u32 }, false>(ts, nb, w, wrb, a, out),
            (GgmlType::Q5_1, true) => rows_avx2::<{ GgmlType::Q5_1 as u32 }, true>(ts, nb, w, wrb, a, out),
            (GgmlType::Q8_0, false) => rows_avx2::<{ GgmlType::Q8_0 as u32 }, false>(ts, nb, w, wrb, a, out),
            (GgmlType::Q8_0, true) => rows_avx2::<{ GgmlType::Q8_0 as u32 }, true>(ts, nb, w, wrb, a, out),
            _ => return false,
        }
    }
    true
}

/// The loop of [`dot_rows`] (`V`: `vpdpbusd`, which the caller checked the CPU has).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<const T: u32, const V: bool>(
    ts: usize,
    nb: usize,
    w: &[u8],
    wrb: usize,
    a: &[u8],
    out: &mut [f32],
) {
    for (j, o) in out.iter_mut().enumerate() {
        tile_body::<T, 1, 1, V>(ts, nb, [w.as_ptr().add(j * wrb)], [a.as_ptr()], std::slice::from_mut(o));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both instantiations, `maddubs` + `madd` and `vpdpbusd`, give the same bits (the suite in
    /// tests/quant_dot.rs only reaches the one this CPU dispatches to).
    /// The 1 x 8 run gives the same bits through AVX2 alone and through VNNI (with its
    /// embedded-broadcast multiply-adds), on packed activations, for the types it takes.
    #[test]
    fn avx2_and_vnni_runs_agree() {
        if !super::super::avx2::available() || !vnni() {
            return;
        }
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15u64);
        let (n, nw) = (320usize, 3usize);
        let nb = n / 32;
        for t in [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0] {
            let ts = t.type_size();
            let mut w: Vec<u8> = (0..nw * nb * ts).map(|_| next() as u8).collect();
            for b in w.chunks_exact_mut(ts) {
                b[..2].copy_from_slice(&half::f16::from_f32((next() % 1000) as f32 * 1e-4).to_le_bytes());
            }
            let mut a = Vec::new();
            for _ in 0..8 {
                let x: Vec<f32> = (0..n).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
                let mut r = Vec::new();
                super::super::quantize_row_into(GgmlType::Q8_0, &x, &mut r).unwrap();
                a.extend_from_slice(&r);
            }
            let arb = a.len() / 8;
            let (mut sc0, mut sc1) = (vec![0f32; 8 * nb], vec![0f32; 8 * nb]);
            super::super::tile_scales(t, n, &a, arb, &mut sc0);
            super::super::tile_scales(t, n, &a[4 * arb..], arb, &mut sc1);
            let mut packed = vec![0u8; 256 * nb];
            super::super::pack_tile8(n, &a, arb, &mut packed);
            let (mut o1, mut o2) = (vec![0f32; 8 * nw], vec![0f32; 8 * nw]);
            let sp = [sc0.as_ptr(), sc1.as_ptr()];
            // SAFETY: features checked above; `nw` rows of `nb` blocks in `w`, 8 packed rows of
            // `nb` blocks, `8 * nb` scales each, `8 * nw` outputs.
            unsafe {
                let (wp, pp, wrb, p1, p2) =
                    (w.as_ptr(), packed.as_ptr(), nb * ts, o1.as_mut_ptr(), o2.as_mut_ptr());
                macro_rules! both {
                    ($t:expr) => {{
                        tile8s_run::<{ $t as u32 }, false>(ts, nb, wp, wrb, nw, pp, sp, p1, nw);
                        tile8s_run::<{ $t as u32 }, true>(ts, nb, wp, wrb, nw, pp, sp, p2, nw);
                    }};
                }
                match t {
                    GgmlType::Q4_0 => both!(GgmlType::Q4_0),
                    GgmlType::Q5_0 => both!(GgmlType::Q5_0),
                    _ => both!(GgmlType::Q8_0),
                }
            }
            for i in 0..8 * nw {
                assert_eq!(o1[i].to_bits(), o2[i].to_bits(), "{t} output {i}: {} vs {}", o1[i], o2[i]);
            }
            assert!(o1.iter().all(|&v| v != 0.0), "{t}: zero outputs");
        }
    }

    #[test]
    fn avx2_and_vnni_tiles_agree() {
        if !super::super::avx2::available() || !vnni() {
            return;
        }
        let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1Du64);
        for t in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0] {
            let n = 256;
            let (ts, nb) = (t.type_size(), n / 32);
            let mut w: Vec<u8> = (0..4 * nb * ts).map(|_| next() as u8).collect();
            // Finite block scales: d (and m) as small f16 values.
            for b in w.chunks_exact_mut(ts) {
                b[..2].copy_from_slice(&half::f16::from_f32((next() % 1000) as f32 * 1e-4).to_le_bytes());
                if matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1) {
                    b[2..4]
                        .copy_from_slice(&half::f16::from_f32((next() % 1000) as f32 * -1e-4).to_le_bytes());
                }
            }
            let x: Vec<f32> = (0..4 * n).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
            let mut a = Vec::new();
            for row in x.chunks_exact(n) {
                let mut r = Vec::new();
                super::super::quantize_row_into(super::super::vec_dot_type(t), row, &mut r).unwrap();
                a.extend_from_slice(&r);
            }
            let arb = a.len() / 4;
            let wp: [*const u8; 4] = std::array::from_fn(|r| w[r * nb * ts..].as_ptr());
            let ap: [*const u8; 4] = std::array::from_fn(|c| a[c * arb..].as_ptr());
            let (mut o1, mut o2) = ([0f32; 16], [0f32; 16]);
            // The scaled 1 x 4 tile of weight row 0, both ways.
            let mut sc = vec![0f32; 8 * nb];
            super::super::tile_scales(t, n, &a, arb, &mut sc);
            let (mut s1, mut s2) = ([0f32; 4], [0f32; 4]);
            // SAFETY: features checked above; 4 rows of `nb` blocks each in `w` and `a`, `8 * nb`
            // scales.
            unsafe {
                macro_rules! both {
                    ($t:expr) => {{
                        tile_avx2::<{ $t as u32 }, 4, 4>(ts, nb, wp, ap, &mut o1);
                        tile_vnni::<{ $t as u32 }, 4, 4>(ts, nb, wp, ap, &mut o2);
                        tile4s_avx2::<{ $t as u32 }>(ts, nb, wp[0], ap, sc.as_ptr(), &mut s1);
                        tile4s_vnni::<{ $t as u32 }>(ts, nb, wp[0], ap, sc.as_ptr(), &mut s2);
                    }};
                }
                match t {
                    GgmlType::Q4_0 => both!(GgmlType::Q4_0),
                    GgmlType::Q4_1 => both!(GgmlType::Q4_1),
                    GgmlType::Q5_0 => both!(GgmlType::Q5_0),
                    GgmlType::Q5_1 => both!(GgmlType::Q5_1),
                    _ => both!(GgmlType::Q8_0),
                }
            }
            for i in 0..16 {
                assert_eq!(o1[i].to_bits(), o2[i].to_bits(), "{t} pair {i}: {} vs {}", o1[i], o2[i]);
            }
            for c in 0..4 {
                assert_eq!(
                    s1[c].to_bits(),
                    o1[c].to_bits(),
                    "{t} scaled tile, row {c}: {} vs {}",
                    s1[c],
                    o1[c]
                );
                assert_eq!(
                    s2[c].to_bits(),
                    o1[c].to_bits(),
                    "{t} scaled VNNI tile, row {c}: {} vs {}",
                    s2[c],
                    o1[c]
                );
            }
            assert!(o1.iter().any(|&v| v != 0.0), "{t}: all zero");
        }
    }
}
