//! Elementwise and attention kernels of the CPU executor, written to match ggml's CPU
//! numerics where that matters for token-exact agreement (f64 sums in RMSNorm, RoPE angles
//! by repeated multiplication, f16 KV cache, f16-rounded GELU).

use half::f16;

use super::{par, Weight};
use crate::exec::{kv_row, Gate, RopeConsts, RopeMode};
use crate::fma::mul_add;
use crate::quant;
use crate::Result;

/// dst rows = rows `tokens` of the embedding table, times `scale`.
pub fn embed(table: &Weight, tokens: &[u32], dst: &mut [f32], scale: f32) -> Result<()> {
    let k = table.k();
    let rb = table.dtype.row_bytes(k as u64)? as usize;
    for (row, &t) in dst.chunks_mut(k).zip(tokens) {
        let t = t as usize;
        quant::dequantize(table.dtype, &table.data[t * rb..(t + 1) * rb], row)?;
        if scale != 1.0 {
            row.iter_mut().for_each(|v| *v *= scale);
        }
    }
    Ok(())
}

/// A small weight (norm scale, bias) as f32.
pub fn f32_weight(w: &Weight) -> Result<Vec<f32>> {
    let n: usize = w.dims.iter().product::<u64>() as usize;
    let mut out = vec![0.0; n];
    quant::dequantize(w.dtype, &w.data, &mut out)?;
    Ok(out)
}

/// RMSNorm of every `group` elements, times `w`. `src` None means in place on `dst`.
pub fn rms_norm(src: Option<&[f32]>, dst: &mut [f32], w: &[f32], group: usize, eps: f32) {
    if let Some(src) = src {
        dst.copy_from_slice(src);
    }
    par::for_each_rows(dst, group, |_, part| {
        for g in part.chunks_mut(group) {
            // ggml squares in f32 and sums in f64.
            let sum: f64 = g.iter().map(|&v| (v * v) as f64).sum();
            let mean = (sum / group as f64) as f32;
            let scale = 1.0 / (mean + eps).sqrt();
            g.iter_mut().zip(w).for_each(|(v, w)| *v = (*v * scale) * w);
        }
    });
}

/// Rotary embedding in place: row r of `x` is at position `pos + r`. `freqs`: the frequency
/// factors (n_rot/2), each pair's angle divided by its own; `k`: the angle constants
/// (YaRN, scales).
#[allow(clippy::too_many_arguments)]
pub fn rope(
    x: &mut [f32],
    positions: &[usize],
    n_heads: usize,
    head_dim: usize,
    n_rot: usize,
    k: &RopeConsts,
    freqs: Option<&[f32]>,
    mode: RopeMode,
) {
    let s = RopeRows { n_heads, head_dim, n_rot, k, freqs, mode };
    par::for_each_rows(x, n_heads * head_dim, |r0, part| {
        let pos = positions.get(r0..).unwrap_or(&[]);
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("fma") {
                // SAFETY: the CPU has FMA (checked above).
                return unsafe { rope_rows_fma(part, pos, &s) };
            }
        }
        rope_rows(part, pos, &s)
    });
}

/// What [`rope`] was given besides the rows and their positions.
struct RopeRows<'a> {
    n_heads: usize,
    head_dim: usize,
    n_rot: usize,
    k: &'a RopeConsts,
    freqs: Option<&'a [f32]>,
    mode: RopeMode,
}

/// [`rope_rows`] compiled with FMA: `mul_add` one instruction instead of a call to libm's
/// `fmaf` (the same bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rope_rows_fma(x: &mut [f32], positions: &[usize], s: &RopeRows) {
    rope_rows(x, positions, s)
}

/// [`rope`] of the rows of `x`, row r at `positions[r]`.
#[inline(always)]
fn rope_rows(x: &mut [f32], positions: &[usize], s: &RopeRows) {
    let RopeRows { n_heads, head_dim, n_rot, k, freqs, mode } = *s;
    let mut cs = vec![(0f32, 0f32); n_rot / 2];
    for (row, &p) in x.chunks_mut(n_heads * head_dim).zip(positions) {
        // Angles as ggml computes them: p·scaleⁱ by repeated multiplication in f32.
        let mut theta = p as f32;
        for (i, c) in cs.iter_mut().enumerate() {
            let extrap = match freqs {
                Some(f) => theta / f[i],
                None => theta,
            };
            *c = k.cos_sin(i, extrap);
            theta *= k.theta_scale;
        }
        for head in row.chunks_mut(head_dim) {
            for (i, &(cos, sin)) in cs.iter().enumerate() {
                let (a, b) = match mode {
                    RopeMode::Normal => (2 * i, 2 * i + 1),
                    RopeMode::Neox => (i, i + n_rot / 2),
                };
                let (x0, x1) = (head[a], head[b]);
                // GCC contracts ggml's `x0*cos - x1*sin` and `x0*sin + x1*cos` into one
                // fused multiply-add each, the first product being the fused one.
                head[a] = mul_add(x0, cos, -(x1 * sin));
                head[b] = mul_add(x0, sin, x1 * cos);
            }
        }
    }
}

/// A layer's KV cache, as attention reads it.
pub struct KvView<'a> {
    pub k: &'a [f16],
    pub v: &'a [f16],
    pub k_dim: usize,
    pub v_dim: usize,
}

/// Head layout and masking of an attention op.
#[derive(Clone, Copy)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub window: Option<usize>,
    pub softcap: Option<f32>,
}

/// Sum of 16 lanes in the order of `_mm512_reduce_add_ps` (GCC): halves, then quarters, ...
#[inline]
fn reduce16(v: &[f32; 16]) -> f32 {
    let a: [f32; 8] = std::array::from_fn(|i| v[i + 8] + v[i]);
    let b: [f32; 4] = std::array::from_fn(|i| a[i + 4] + a[i]);
    let c: [f32; 2] = std::array::from_fn(|i| b[i + 2] + b[i]);
    c[1] + c[0]
}

/// f16 x f16 dot product as llamafile's AVX512 `tinyBLAS<16>` computes it (16 lanes, fused
/// multiply-adds along the row, then the 16-lane reduction). `n` must be a multiple of 16.
fn dot_f16_lanes16(a: &[f16], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has FMA and F16C (checked above).
            return unsafe { dot_f16_lanes16_fma(a, b) };
        }
    }
    dot_f16_lanes16_impl(a, b)
}

/// The same code compiled with FMA instructions for `mul_add`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_lanes16_fma(a: &[f16], b: &[f32]) -> f32 {
    dot_f16_lanes16_impl(a, b)
}

#[inline(always)]
fn dot_f16_lanes16_impl(a: &[f16], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut buf = [0f32; 64];
    for (ca, cb) in a.chunks(64).zip(b.chunks(64)) {
        let n = ca.len().min(cb.len()) / 16 * 16;
        f16_to_f32(&ca[..n], &mut buf[..n]);
        fma_lanes16(&mut acc, &buf[..n], cb);
    }
    reduce16(&acc)
}

/// Lane l of `acc` gains a[i] * b[i] for every i = l mod 16, in order, by fused multiply-adds
/// (whole groups of 16 only).
#[inline(always)]
fn fma_lanes16(acc: &mut [f32; 16], a: &[f32], b: &[f32]) {
    for (ca, cb) in a.chunks_exact(16).zip(b.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = fma_f16s(ca[l], cb[l], acc[l]);
        }
    }
}

/// f16 x f16 dot product as ggml's `ggml_vec_dot_f16` (AVX512 build) computes it: 64 elements
/// per step into four 16-lane accumulators by fused multiply-adds, the accumulators summed
/// pairwise ((0+2)+(1+3)), then the 16-lane reduction. `n` must be a multiple of 64.
fn dot_f16_vec(a: &[f16], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has FMA and F16C (checked above).
            return unsafe { dot_f16_vec_fma(a, b) };
        }
    }
    dot_f16_vec_impl(a, b)
}

/// The same code compiled with FMA instructions for `mul_add`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_vec_fma(a: &[f16], b: &[f32]) -> f32 {
    dot_f16_vec_impl(a, b)
}

#[inline(always)]
fn dot_f16_vec_impl(a: &[f16], b: &[f32]) -> f32 {
    let exact = |src: &[f16], dst: &mut [f32]| {
        f16_to_f32(src, dst);
        true
    };
    // (The exact conversion takes every chunk, so there is always a sum.)
    dot_f16_chunks(a, b, exact).unwrap_or(0.0)
}

/// The sums of [`dot_f16_vec`], each 64 values of `a` made f32 by `convert` (which may refuse
/// a chunk: then None).
#[inline(always)]
fn dot_f16_chunks(a: &[f16], b: &[f32], convert: impl Fn(&[f16], &mut [f32]) -> bool) -> Option<f32> {
    let mut sum = [[0f32; 16]; 4];
    let mut ca = [0f32; 64];
    for (ch, cb) in a.chunks_exact(64).zip(b.chunks_exact(64)) {
        if !convert(ch, &mut ca) {
            return None;
        }
        for (j, s) in sum.iter_mut().enumerate() {
            for (l, s) in s.iter_mut().enumerate() {
                let i = 16 * j + l;
                *s = fma_f16s(ca[i], cb[i], *s);
            }
        }
    }
    let s0: [f32; 16] = std::array::from_fn(|l| (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]));
    Some(reduce16(&s0))
}

/// 2^112: an f16 value's bits moved into f32 position read as the value times 2^-112.
#[cfg(any(target_arch = "wasm32", test))]
const F16_RAW_SCALE: f32 = f32::from_bits(0x7780_0000);

/// On wasm: `dst[i]` = `src[i]` times 2^-112, exactly (normals and subnormals alike): the f16
/// bits moved into f32 position, the sign kept, three integer operations a value where the
/// exact conversion takes eight. Multiplied by an f16 value times 2^112, each gives the exact
/// product of the two f16 values, as the converted value would. False (`dst` unspecified) when
/// `src` holds an Inf or NaN, which this does not carry over.
#[cfg(any(target_arch = "wasm32", test))]
fn f16_to_f32_raw(src: &[f16], dst: &mut [f32]) -> bool {
    let mut special = 0u32;
    for (d, s) in dst.iter_mut().zip(src) {
        let h = s.to_bits();
        special |= ((h & 0x7c00) == 0x7c00) as u32;
        // Sign-extended and shifted: bits 31..28 are the sign, 27..13 the exponent and fraction.
        *d = f32::from_bits((((h as i16 as i32) << 13) as u32) & 0x8fff_ffff);
    }
    special == 0
}

/// On wasm: [`dot_f16_vec`] of `a` with the f16-rounded query whose values times 2^112 are
/// `qs`, each key row read through [`f16_to_f32_raw`]: the same products, the same sums, the
/// same bits. None when the row holds an Inf or NaN.
#[cfg(any(target_arch = "wasm32", test))]
fn dot_f16_vec_raw(a: &[f16], qs: &[f32]) -> Option<f32> {
    dot_f16_chunks(a, qs, f16_to_f32_raw)
}

/// `a * b + c` with one rounding, for f16 values `a` and `b`: their product is exact in f32,
/// so the fused multiply-add and a multiply then an add give the same bits. The fused form where
/// it is an instruction; on wasm, whose `mul_add` is a libm `fmaf` call per element, the two
/// operations.
#[inline(always)]
fn fma_f16s(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "wasm32")]
    {
        a * b + c
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        a.mul_add(b, c)
    }
}

/// ggml's `ggml_v_expf` (AVX512 build), one lane: exp(x) within 1.5 ulp. Every step is one
/// IEEE operation (fused where ggml fuses), so any target computes the same bits; it is fastest
/// where `mul_add` is an instruction (see [`swiglu`]; on wasm, `crate::fma`).
#[inline(always)]
fn v_expf(x: f32) -> f32 {
    let c = |b: u32| f32::from_bits(b);
    let r = c(0x4b40_0000);
    let z = mul_add(x, c(0x3fb8_aa3b), r);
    let n = z - r;
    let b = mul_add(-n, c(0x35bf_be8e), mul_add(-n, c(0x3f31_7200), x));
    let u = b * b;
    let j =
        mul_add(mul_add(c(0x3c07_2010), b, c(0x3d2b_9f17)), u, mul_add(c(0x3e2a_af33), b, c(0x3eff_fedb)));
    let j = mul_add(j, u, mul_add(c(0x3f7f_fff6), b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    // scalef: j * 2^n with one rounding.
    let ni = n as i32;
    if (-126..=127).contains(&ni) {
        j * f32::from_bits(((ni + 127) as u32) << 23)
    } else if ni > 127 {
        j * f32::from_bits(254 << 23) * f32::from_bits(((ni - 127 + 127) as u32) << 23)
    } else {
        ((j as f64) * 2f64.powi(ni)) as f32
    }
}

/// Where query row r stands: its position, and its sequence's block table.
#[derive(Clone, Copy)]
pub struct QueryAt<'a> {
    pub pos: usize,
    pub blocks: &'a [u32],
}

/// Causal attention: query row r (at `at[r]`) over its sequence's cached positions
/// [start, at[r].pos].
pub fn attention(q: &[f32], out: &mut [f32], kv: &KvView, at: &[QueryAt], s: AttnShape) {
    let hd = s.head_dim;
    let width = s.n_heads * hd;
    // A single query row (decode) takes another path in llama.cpp: K·Q by ggml_vec_dot_f16
    // (measured: tinyBLAS's order there disagrees with llama.cpp's decode, matches its batches).
    let single = q.len() == width;
    let wide = if single { None } else { WideKv::of(kv, at, &s) };
    let wide = wide.as_ref();
    // One task per (row, head): out is split into head-sized pieces in that order.
    par::for_each_chunk(out, hd, |i, o| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                unsafe { attend_head_fma(i, o, q, kv, wide, at, &s, single) };
                return;
            }
        }
        attend_head(i, o, q, kv, wide, at, &s, single)
    });
}

/// The cached rows a prefill reads, as f32, converted once for every query row and head
/// that reads them (converted row by row inside each (query row, head) task, the f16 rows
/// were 8% of Gemma 3 270M's pp64). Exact, so the results keep their bits.
struct WideKv {
    /// The first position held.
    lo: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl WideKv {
    /// The most values held: 64 MiB natively, 16 MiB in wasm (whose memory never shrinks).
    const MAX: usize = if cfg!(target_arch = "wasm32") { 1 << 22 } else { 1 << 24 };

    /// The rows of positions [lo, hi] when every query row reads the same sequence (one block
    /// table) and they fit in [`Self::MAX`]; otherwise none (each task converts its own rows).
    fn of(kv: &KvView, at: &[QueryAt], s: &AttnShape) -> Option<Self> {
        let first = at.first()?;
        if !at.iter().all(|a| std::ptr::eq(a.blocks, first.blocks)) {
            return None;
        }
        let hi = at.iter().map(|a| a.pos).max()?;
        let lo = at.iter().map(|a| s.window.map_or(0, |w| (a.pos + 1).saturating_sub(w))).min()?;
        let n = hi + 1 - lo;
        if n.checked_mul(kv.k_dim + kv.v_dim)? > Self::MAX {
            return None;
        }
        let convert = |src: &[f16], dim: usize| {
            let mut dst = vec![0f32; n * dim];
            // Sixteen rows a task.
            par::for_each_chunk(&mut dst, 16 * dim.max(1), |ci, part| {
                for (i, row) in part.chunks_exact_mut(dim).enumerate() {
                    let j = kv_row(first.blocks, lo + 16 * ci + i);
                    f16_to_f32(&src[j * dim..(j + 1) * dim], row);
                }
            });
            dst
        };
        Some(Self { lo, k: convert(kv.k, kv.k_dim), v: convert(kv.v, kv.v_dim) })
    }
}

/// f32 x f32 dot product in the lanes of [`dot_f16_lanes16`] (its f16 operand converted
/// beforehand: the same bits). `n` must be a multiple of 16.
fn dot_f32_lanes16(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has FMA (checked above).
            return unsafe { dot_f32_lanes16_fma(a, b) };
        }
    }
    dot_f32_lanes16_impl(a, b)
}

/// The same code compiled with FMA instructions for `mul_add`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_lanes16_fma(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_lanes16_impl(a, b)
}

#[inline(always)]
fn dot_f32_lanes16_impl(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    fma_lanes16(&mut acc, a, b);
    reduce16(&acc)
}

/// [`attend_head`] compiled with AVX2, FMA and F16C: `mul_add` (every step of `v_expf`) becomes
/// one instruction instead of a call to libm's `fmaf` (the same bits either way), and the f16
/// rows are converted inline.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_head_fma(
    i: usize,
    o: &mut [f32],
    q: &[f32],
    kv: &KvView,
    wide: Option<&WideKv>,
    at: &[QueryAt],
    s: &AttnShape,
    single: bool,
) {
    attend_head(i, o, q, kv, wide, at, s, single)
}

/// Task `i` of [`attention`]: query row `i / n_heads`, head `i % n_heads`, into `o`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_head(
    i: usize,
    o: &mut [f32],
    q: &[f32],
    kv: &KvView,
    wide: Option<&WideKv>,
    at: &[QueryAt],
    s: &AttnShape,
    single: bool,
) {
    let hd = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let width = s.n_heads * hd;
    let (r, h) = (i / s.n_heads, i % s.n_heads);
    let (p, blocks) = (at[r].pos, at[r].blocks);
    let start = s.window.map_or(0, |w| (p + 1).saturating_sub(w));
    let kvh = h / group;
    // ggml rounds the query to f16 before the f16 K·Q product.
    let mut qh = q[r * width + h * hd..r * width + (h + 1) * hd].to_vec();
    round_to_f16(&mut qh);
    // wasm's decode reads the f16 keys by their bits (`dot_f16_vec_raw`), against the query
    // times 2^112.
    #[cfg(target_arch = "wasm32")]
    let qs: Vec<f32> = if single { qh.iter().map(|&x| x * F16_RAW_SCALE).collect() } else { Vec::new() };
    let scaled = |d: f32| {
        let mut v = d * s.scale;
        if let Some(c) = s.softcap {
            v = (v / c).tanh() * c;
        }
        v
    };
    let mut scores: Vec<f32> = (start..=p)
        .map(|j| {
            if let Some(w) = wide {
                let kr = &w.k[(j - w.lo) * kv.k_dim + kvh * hd..(j - w.lo) * kv.k_dim + (kvh + 1) * hd];
                let d = if hd.is_multiple_of(16) {
                    dot_f32_lanes16(kr, &qh)
                } else {
                    kr.iter().zip(&qh).map(|(k, q)| k * q).sum()
                };
                return scaled(d);
            }
            let j = kv_row(blocks, j);
            let kr = &kv.k[j * kv.k_dim + kvh * hd..j * kv.k_dim + (kvh + 1) * hd];
            let d: f32 = if single && hd.is_multiple_of(64) {
                #[cfg(target_arch = "wasm32")]
                if let Some(d) = dot_f16_vec_raw(kr, &qs) {
                    return scaled(d);
                }
                dot_f16_vec(kr, &qh)
            } else if hd.is_multiple_of(16) {
                dot_f16_lanes16(kr, &qh)
            } else {
                kr.iter().zip(&qh).map(|(k, q)| k.to_f32() * q).sum()
            };
            scaled(d)
        })
        .collect();
    let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    // ggml's softmax (AVX512 build): 16-wide chunks through ggml_v_expf, each chunk summed
    // in f32 by the 16-lane reduction and added to an f64 sum (a tail would use expf). llama.cpp's
    // row is the KV cache's used cells padded (to 256), a multiple of 16, so every score
    // goes through ggml_v_expf (verified: the expf tail disagrees on SmolLM2). Masked
    // cells (beyond the row, before the window) add exact zeros.
    let n_kv = (p + 1).div_ceil(16) * 16;
    let mut sum = 0f64;
    let mut chunk = [0f32; 16];
    for c0 in (0..n_kv).step_by(16) {
        for (l, c) in chunk.iter_mut().enumerate() {
            let jj = c0 + l;
            *c = 0.0;
            if jj >= start && jj <= p {
                *c = v_expf(scores[jj - start] - max);
                scores[jj - start] = *c;
            }
        }
        sum += reduce16(&chunk) as f64;
    }
    let inv = (1.0 / sum) as f32;
    o.iter_mut().for_each(|v| *v = 0.0);
    // ggml converts the probabilities to f16 for the product with the f16 values.
    let mut probs: Vec<f32> = scores.iter().map(|&w| w * inv).collect();
    round_to_f16(&mut probs);
    let vrow = |j: usize| {
        let j = kv_row(blocks, j);
        &kv.v[j * kv.v_dim + kvh * hd..j * kv.v_dim + (kvh + 1) * hd]
    };
    // One value row at a time in f32 (exact), converted in bulk.
    let mut vbuf = vec![0f32; hd];
    // As llamafile's tinyBLAS<16> (f16 x f16, AVX512): lane (j mod 16) sums its positions in
    // order (a product of two f16 values is exact in f32, so the fused multiply-add is one
    // rounded addition), then the 16-lane reduction.
    // The accumulators are laid out lane-major (`acc[lane][d]`), so that adding a value row
    // is one contiguous multiply-add over the head's dimensions (vectorized); each (lane, d)
    // accumulator sees the same additions in the same order as ggml's lanes.
    if single {
        // Decoding, llama.cpp's P·V is ggml_vec_dot_f16 over the padded row too: position j
        // goes to accumulator (j mod 64) / 16, lane j mod 16, reduced as in `dot_f16_vec`.
        let mut acc = vec![0f32; 64 * hd];
        for (j, &w) in (start..=p).zip(&probs) {
            // On wasm the value row by its bits and the probability times 2^112 (the same
            // exact products: see `f16_to_f32_raw`).
            #[cfg(target_arch = "wasm32")]
            let w = if f16_to_f32_raw(vrow(j), &mut vbuf) {
                w * F16_RAW_SCALE
            } else {
                f16_to_f32(vrow(j), &mut vbuf);
                w
            };
            #[cfg(not(target_arch = "wasm32"))]
            f16_to_f32(vrow(j), &mut vbuf);
            let a = &mut acc[(j % 64) * hd..(j % 64 + 1) * hd];
            a.iter_mut().zip(&vbuf).for_each(|(a, v)| *a += w * v);
        }
        // Per dimension d: lane l's four accumulators (k = 0..4) summed as (0 + 2) + (1 + 3),
        // then `reduce16` over the lanes; done for every d at once, row by row (contiguous in
        // d, so vectorized), with the same additions in the same order.
        let row = |k: usize, l: usize| (16 * k + l) * hd;
        let mut lanes = vec![0f32; 16 * hd];
        for (l, s) in lanes.chunks_exact_mut(hd).enumerate() {
            let (a0, a1, a2, a3) = (row(0, l), row(1, l), row(2, l), row(3, l));
            for (d, s) in s.iter_mut().enumerate() {
                *s = (acc[a0 + d] + acc[a2 + d]) + (acc[a1 + d] + acc[a3 + d]);
            }
        }
        reduce16_rows(&mut lanes, hd, o);
        return;
    }
    let mut acc = vec![0f32; 16 * hd];
    for (j, &w) in (start..=p).zip(&probs) {
        let vr = match wide {
            Some(x) => &x.v[(j - x.lo) * kv.v_dim + kvh * hd..(j - x.lo) * kv.v_dim + (kvh + 1) * hd],
            None => {
                f16_to_f32(vrow(j), &mut vbuf);
                &vbuf[..]
            }
        };
        let a = &mut acc[(j % 16) * hd..(j % 16 + 1) * hd];
        a.iter_mut().zip(vr).for_each(|(a, v)| *a += w * v);
    }
    reduce16_rows(&mut acc, hd, o);
}

/// `o[d]` = [`reduce16`] of the 16 lanes `lanes[l * hd + d]`, for every d at once: the same
/// additions in the same order, row by row (contiguous, so vectorized) rather than 16 strided
/// loads a dimension. `lanes` is overwritten.
fn reduce16_rows(lanes: &mut [f32], hd: usize, o: &mut [f32]) {
    for half in [8, 4, 2, 1] {
        let (lo, hi) = lanes.split_at_mut(half * hd);
        lo.iter_mut().zip(&hi[..half * hd]).for_each(|(a, b)| *a += *b);
    }
    o.iter_mut().zip(&lanes[..hd]).for_each(|(o, v)| *o = *v);
}

/// `dst[i] = src[i]` as f32 (exact; `dst` as long as `src`), eight at a time by F16C where the
/// CPU has it. (half's bulk conversion costs more in its wrapper than in the conversion for the
/// 64-value rows of attention: a quarter of a long prefill's time went to it.)
#[inline]
fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "wasm32")]
    {
        // half's bulk conversion is a branchy loop per value on wasm; this one has no branches,
        // so the compiler can vectorize it (simd128).
        for (d, s) in dst.iter_mut().zip(src) {
            *d = crate::quant::f16_to_f32_branchless(s.to_bits());
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has F16C (checked above).
            unsafe { f16_to_f32_f16c(src, dst) };
            return;
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
}

/// `dst[i] = f16::from_f32(src[i])` (as long as the shorter), eight at a time by F16C where
/// the CPU has it: the KV cache's stores.
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has F16C (checked above).
            unsafe { f32_to_f16_f16c(src, dst) };
            return;
        }
    }
    dst.iter_mut().zip(src).for_each(|(d, s)| *d = f16::from_f32(*s));
}

/// [`f32_to_f16`] by `vcvtps2ph`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn f32_to_f16_f16c(src: &[f32], dst: &mut [f16]) {
    use std::arch::x86_64::{
        __m128i, _mm256_cvtps_ph, _mm256_loadu_ps, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
    };
    let full = src.len() / 8 * 8;
    for i in (0..full).step_by(8) {
        // SAFETY: i + 8 <= full <= both lengths; unaligned load and store.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(src.as_ptr().add(i)));
            _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
        }
    }
    dst[full..].iter_mut().zip(&src[full..]).for_each(|(d, s)| *d = f16::from_f32(*s));
}

/// Each value rounded to f16 (to nearest, ties to even, as `f16::from_f32`) and back to f32,
/// eight at a time by F16C where the CPU has it: attention's rounded queries and probabilities
/// (one call of half's per value was 2% of Gemma 3 270M's prefill).
#[inline]
fn round_to_f16(xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has F16C (checked above).
            unsafe { round_to_f16_f16c(xs) };
            return;
        }
    }
    xs.iter_mut().for_each(|x| *x = f16::from_f32(*x).to_f32());
}

/// [`round_to_f16`] by `vcvtps2ph` and `vcvtph2ps`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
#[inline]
unsafe fn round_to_f16_f16c(xs: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_storeu_ps, _MM_FROUND_TO_NEAREST_INT,
    };
    let mut chunks = xs.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: eight values in `c`; unaligned load and store.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    chunks.into_remainder().iter_mut().for_each(|x| *x = f16::from_f32(*x).to_f32());
}

/// [`f16_to_f32`] by `vcvtph2ps`, eight values an instruction (inlined into the attention,
/// which is compiled with F16C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
#[inline]
unsafe fn f16_to_f32_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, within both slices; unaligned loads and stores.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for (d, s) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = s.to_f32();
    }
}

/// ggml's GELU (tanh approximation), evaluated as its f16 lookup table does.
fn gelu(x: f32, table: &[f16]) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    table[f16::from_f32(x).to_bits() as usize].to_f32()
}

/// gate = gelu(gate) * up, eight at a time: F16C rounds to f16 as `f16::from_f32` does (half
/// uses the same instruction where the CPU has it), and a gather reads the table, so the
/// results are [`gelu`]'s bits. (One value at a time it was 3.5% of Gemma 3 270M's pp64.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn gelu_mul_avx2(gate: &mut [f32], up: &[f32], table: &[f16]) {
    use std::arch::x86_64::*;
    let n = gate.len().min(up.len());
    // The gather reads 4 bytes at each entry: the table has one entry past the last index.
    if table.len() <= u16::MAX as usize + 1 {
        return gate.iter_mut().zip(up).for_each(|(g, &u)| *g = gelu(*g, table) * u);
    }
    let (lo, hi) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, within both slices; every gathered entry (at most index 65535,
        // 4 bytes) lies inside the table, checked above.
        unsafe {
            let x = _mm256_loadu_ps(gate.as_ptr().add(i));
            let idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x));
            let g = _mm256_i32gather_epi32::<2>(table.as_ptr() as *const i32, idx);
            let g = _mm256_and_si256(g, _mm256_set1_epi32(0xFFFF));
            // The eight 16-bit entries in order in the low half.
            let p = _mm256_permute4x64_epi64::<0b10_00>(_mm256_packus_epi32(g, g));
            let mut y = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
            y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LE_OQ>(x, lo));
            y = _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_GE_OQ>(x, hi));
            _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(y, _mm256_loadu_ps(up.as_ptr().add(i))));
        }
        i += 8;
    }
    gate[i..n].iter_mut().zip(&up[i..n]).for_each(|(g, &u)| *g = gelu(*g, table) * u);
}

/// GELU of every f16 value, rounded to f16: ggml's table, built once (as ggml does at init).
/// A lookup instead of a `tanh` per element: measured, libm's `tanhf` was 8% of Gemma 3's prefill.
fn gelu_table() -> &'static [f16] {
    static TABLE: std::sync::OnceLock<Vec<f16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        const COEF_A: f32 = 0.044715;
        (0..=u16::MAX)
            .map(|bits| {
                let x = f16::from_bits(bits).to_f32();
                f16::from_f32(0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh()))
            })
            // One more entry, for the vector form's 4-byte gathers.
            .chain([f16::ZERO])
            .collect()
    })
}

/// gate = act(gate) * up, split among the threads in prefill.
pub fn gated_act(gate: &mut [f32], up: &[f32], act: Gate) {
    par::for_each_rows(gate, 1024, |r0, part| {
        let u = up.get(r0 * 1024..r0 * 1024 + part.len()).unwrap_or(&[]);
        gated_act_run(part, u, act)
    });
}

/// [`gated_act`] on one thread.
fn gated_act_run(gate: &mut [f32], up: &[f32], act: Gate) {
    match act {
        Gate::Silu => swiglu(gate, up),
        Gate::Gelu => {
            let table = gelu_table();
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") {
                    // SAFETY: the CPU has AVX2 and F16C (checked above).
                    return unsafe { gelu_mul_avx2(gate, up, table) };
                }
            }
            gate.iter_mut().zip(up).for_each(|(g, &u)| *g = gelu(*g, table) * u)
        }
    }
}

/// gate = silu(gate) * up as ggml's `ggml_vec_swiglu_f32` (AVX512 build): 16-wide chunks
/// through `ggml_v_silu` (x / (1 + v_expf(-x))), the tail by the C library's expf.
fn swiglu(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has FMA (checked above).
            return unsafe { swiglu_fma(gate, up) };
        }
    }
    swiglu_impl(gate, up)
}

/// The same code compiled with FMA instructions for `mul_add`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn swiglu_fma(gate: &mut [f32], up: &[f32]) {
    swiglu_impl(gate, up)
}

#[inline(always)]
fn swiglu_impl(gate: &mut [f32], up: &[f32]) {
    let full = gate.len() / 16 * 16;
    let (gv, gt) = gate.split_at_mut(full);
    gv.iter_mut().zip(up).for_each(|(g, &u)| *g = *g / (1.0 + v_expf(0.0 - *g)) * u);
    gt.iter_mut().zip(&up[full..]).for_each(|(g, &u)| *g = *g / (1.0 + (-*g).exp()) * u);
}

/// Index of the largest value (the first on ties; NaN never wins).
pub fn argmax(v: &[f32]) -> u32 {
    let Some(&first) = v.first() else {
        return 0;
    };
    // The best value kept in a register (re-reading v[best] every step cost 4% of Gemma 3's
    // decode over its 262144 logits); the same choices as comparing against v[best].
    let (mut best, mut bv) = (0, first);
    for (i, &x) in v.iter().enumerate() {
        if x > bv || bv.is_nan() {
            best = i;
            bv = x;
        }
    }
    best as u32
}

/// [`argmax`] of `v` with the ids that token mask `mask` leaves out taken as -inf (as the
/// host's masking sets them; [`crate::exec::SeqStep::mask`]).
pub fn argmax_masked(v: &[f32], mask: &[u32]) -> u32 {
    let masked = |i: usize, x: f32| if crate::exec::mask_allows(mask, i) { x } else { f32::NEG_INFINITY };
    let Some(&first) = v.first() else {
        return 0;
    };
    let (mut best, mut bv) = (0, masked(0, first));
    for (i, &x) in v.iter().enumerate() {
        let x = masked(i, x);
        if x > bv || bv.is_nan() {
            best = i;
            bv = x;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// wasm's key and value rows read by their bits: every finite f16 value times 2^-112 exactly,
    /// products with a scaled f16 value equal to the exact ones, the K·Q dot product the same
    /// bits as `dot_f16_vec`'s, and an Inf or NaN turned away.
    #[test]
    fn raw_f16_rows_give_the_exact_products() {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).filter(|h| h.is_finite()).collect();
        let mut raw = vec![0f32; all.len()];
        assert!(f16_to_f32_raw(&all, &mut raw));
        let mut next = crate::test_rng::xorshift(0x0f16_0f16);
        let ws: Vec<f16> = (0..64).map(|_| all[next() as usize % all.len()]).collect();
        for (h, r) in all.iter().zip(&raw) {
            assert_eq!((r * F16_RAW_SCALE).to_bits(), h.to_f32().to_bits(), "{h}");
            for w in &ws {
                let want = w.to_f32() * h.to_f32();
                assert_eq!((w.to_f32() * F16_RAW_SCALE * r).to_bits(), want.to_bits(), "{w} x {h}");
            }
        }
        for trial in 0..200 {
            // Keys and queries of every magnitude (subnormals and signed zeros included).
            let k: Vec<f16> = (0..256).map(|_| all[next() as usize % all.len()]).collect();
            let q: Vec<f32> = (0..256).map(|_| all[next() as usize % all.len()].to_f32() / 64.0).collect();
            let mut qh = q.clone();
            round_to_f16(&mut qh);
            let qs: Vec<f32> = qh.iter().map(|&x| x * F16_RAW_SCALE).collect();
            let (got, want) = (dot_f16_vec_raw(&k, &qs), dot_f16_vec_impl(&k, &qh));
            assert_eq!(got.map(f32::to_bits), Some(want.to_bits()), "trial {trial}");
        }
        let mut k = vec![f16::ONE; 64];
        for special in [f16::INFINITY, f16::NEG_INFINITY, f16::NAN] {
            k[37] = special;
            assert_eq!(dot_f16_vec_raw(&k, &[1.0; 64]), None);
        }
    }

    /// The bulk roundings to f16 give `f16::from_f32`'s bits: every f16 value, the midpoints
    /// between neighbours (ties to even), values past the largest f16, subnormals, and lengths
    /// that leave a tail.
    #[test]
    fn bulk_f16_rounding_matches_half() {
        let mut x: Vec<f32> = Vec::new();
        for b in 0..u16::MAX {
            let (v, next) = (f16::from_bits(b).to_f32(), f16::from_bits(b + 1).to_f32());
            if v.is_finite() && next.is_finite() {
                x.extend([v, (v + next) / 2.0, v + (next - v) * 0.25]);
            }
        }
        x.extend([65520.0, 1e9, -1e9, 1e-8, -3e-7, f32::INFINITY]);
        for len in [x.len(), 13, 7] {
            let mut got = x[..len].to_vec();
            round_to_f16(&mut got);
            let mut halves = vec![f16::ZERO; len];
            f32_to_f16(&x[..len], &mut halves);
            for ((g, h), v) in got.iter().zip(&halves).zip(&x) {
                assert_eq!(g.to_bits(), f16::from_f32(*v).to_f32().to_bits(), "{v}");
                assert_eq!(h.to_bits(), f16::from_f32(*v).to_bits(), "{v}");
            }
        }
    }

    /// The vector GELU gives the scalar code's bits: every finite f16 value, values between
    /// them, the ±10 edges, infinities and NaN.
    #[test]
    fn vector_gelu_matches_the_scalar_code() {
        let mut x: Vec<f32> =
            (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).filter(|v| v.is_finite()).collect();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..4096 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            x.push((seed % 2_000_001) as f32 / 50_000.0 - 20.0);
        }
        x.extend([
            -10.0,
            10.0,
            -10.000001,
            9.999999,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e30,
            -1e30,
        ]);
        let up: Vec<f32> = (0..x.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let table = gelu_table();
        let want: Vec<f32> = x.iter().zip(&up).map(|(&g, &u)| gelu(g, table) * u).collect();
        let mut got = x.clone();
        gated_act(&mut got, &up, Gate::Gelu);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits(), "x = {}: {g} vs {w}", x[i]);
        }
    }
}
