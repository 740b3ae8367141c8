//! Elementwise and attention kernels of the CPU executor, written to match ggml's CPU
//! numerics where that matters for token-exact agreement (f64 sums in RMSNorm, RoPE angles
//! by repeated multiplication, f16 KV cache, f16-rounded GELU).

use half::f16;

use super::{par, Weight};
use crate::exec::{Gate, RopeMode};
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
    for g in dst.chunks_mut(group) {
        // ggml squares in f32 and sums in f64.
        let sum: f64 = g.iter().map(|&v| (v * v) as f64).sum();
        let mean = (sum / group as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        g.iter_mut().zip(w).for_each(|(v, w)| *v = (*v * scale) * w);
    }
}

/// Rotary embedding in place: row r of `x` is at position `pos + r`.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    x: &mut [f32],
    pos: usize,
    n_heads: usize,
    head_dim: usize,
    n_rot: usize,
    base: f32,
    freq_scale: f32,
    mode: RopeMode,
) {
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut cs = vec![(0f32, 0f32); n_rot / 2];
    for (r, row) in x.chunks_mut(n_heads * head_dim).enumerate() {
        // Angles as ggml computes them: p·scaleⁱ by repeated multiplication in f32.
        let mut theta = (pos + r) as f32;
        for c in cs.iter_mut() {
            let t = freq_scale * theta;
            *c = (t.cos(), t.sin());
            theta *= theta_scale;
        }
        for head in row.chunks_mut(head_dim) {
            for (i, &(cos, sin)) in cs.iter().enumerate() {
                let (a, b) = match mode {
                    RopeMode::Normal => (2 * i, 2 * i + 1),
                    RopeMode::Neox => (i, i + n_rot / 2),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
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

/// Causal attention: query row r (position pos + r) over cached positions [start, pos + r].
pub fn attention(q: &[f32], out: &mut [f32], kv: &KvView, pos: usize, s: AttnShape) {
    let hd = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let width = s.n_heads * hd;
    // One task per (row, head): out is split into head-sized pieces in that order.
    par::for_each_chunk(out, hd, |i, o| {
        let (r, h) = (i / s.n_heads, i % s.n_heads);
        let p = pos + r;
        let start = s.window.map_or(0, |w| (p + 1).saturating_sub(w));
        let kvh = h / group;
        // ggml rounds the query to f16 before the f16 K·Q product.
        let qh: Vec<f32> = q[r * width + h * hd..r * width + (h + 1) * hd]
            .iter()
            .map(|&v| f16::from_f32(v).to_f32())
            .collect();
        let mut scores: Vec<f32> = (start..=p)
            .map(|j| {
                let kr = &kv.k[j * kv.k_dim + kvh * hd..j * kv.k_dim + (kvh + 1) * hd];
                let d: f32 = kr.iter().zip(&qh).map(|(k, q)| k.to_f32() * q).sum();
                let mut v = d * s.scale;
                if let Some(c) = s.softcap {
                    v = (v / c).tanh() * c;
                }
                v
            })
            .collect();
        let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f64;
        for v in scores.iter_mut() {
            *v = (*v - max).exp();
            sum += *v as f64;
        }
        let inv = (1.0 / sum) as f32;
        o.iter_mut().for_each(|v| *v = 0.0);
        for (j, &w) in (start..=p).zip(&scores) {
            // ggml converts the probabilities to f16 for the product with the f16 values.
            let w = f16::from_f32(w * inv).to_f32();
            let vr = &kv.v[j * kv.v_dim + kvh * hd..j * kv.v_dim + (kvh + 1) * hd];
            o.iter_mut().zip(vr).for_each(|(o, v)| *o += w * v.to_f32());
        }
    });
}

/// ggml's GELU (tanh approximation), evaluated as its f16 lookup table does.
fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044715;
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let x = f16::from_f32(x).to_f32();
    let y = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh());
    f16::from_f32(y).to_f32()
}

/// gate = act(gate) * up.
pub fn gated_act(gate: &mut [f32], up: &[f32], act: Gate) {
    match act {
        Gate::Silu => gate.iter_mut().zip(up).for_each(|(g, &u)| *g = *g / (1.0 + (-*g).exp()) * u),
        Gate::Gelu => gate.iter_mut().zip(up).for_each(|(g, &u)| *g = gelu(*g) * u),
    }
}

/// Index of the largest value (the first on ties; NaN never wins).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] || v[best].is_nan() {
            best = i;
        }
    }
    best as u32
}
