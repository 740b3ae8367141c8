// RoPE angles as ggml computes them (shared by rope.wgsl and rope_kv.wgsl).

fn reduce_angle(t: f32) -> f32 {
    let k = round(t * 0.15915494309189535);
    // 2π = 6.28125 + 0.0019353071795864769: k · 6.28125 is exact for k < 2¹⁶.
    return (t - k * 6.28125) - k * 0.0019353071795864769;
}

// (sin a, cos a) for a in [-π, π], within a few f32 ulps. WGSL promises the built-in sin/cos
// only to 2⁻¹¹ absolute, and browsers' SwiftShader is about that coarse (1.5e-4 measured):
// a = q·π/2 + r with |r| ≤ π/4 (π/2 split in two, Cody–Waite), Taylor series to r¹¹ and r¹⁰
// (truncation below 3e-8), then the quadrant picks and signs the pair.
fn sin_cos(a: f32) -> vec2<f32> {
    let q = round(a * 0.6366197723675814);
    // f32(π/2) = 1.5707963705062866 exceeds π/2 by 4.371139e-8.
    let r = (a - q * 1.5707963705062866) + q * 4.371139e-8;
    let r2 = r * r;
    let sr = r + r * r2 * (-0.16666667 + r2 * (0.008333333 + r2 * (-1.984127e-4 + r2 * (2.7557319e-6 - r2 * 2.5052108e-8))));
    let cr = 1.0 + r2 * (-0.5 + r2 * (0.041666668 + r2 * (-0.0013888889 + r2 * (2.4801587e-5 - r2 * 2.7557319e-7))));
    switch (i32(q) & 3) {
        case 0: { return vec2<f32>(sr, cr); }
        case 1: { return vec2<f32>(cr, -sr); }
        case 2: { return vec2<f32>(-sr, -cr); }
        default: { return vec2<f32>(-cr, sr); }
    }
}

// (sin, cos) of the angle of pair i at position `pos`, times mscale, as RopeConsts (graph.rs)
// defines it: pos · theta_scaleⁱ by repeated multiplication in f32, divided by the pair's
// frequency factor, YaRN's mix of that (extrapolated) angle and the interpolated one (times
// freq_scale), reduced to [-π, π]. Reads the kernel's `p` and `freqs`. WGSL's division may be
// 2.5 ulp off (lavapipe's is exact); a factor of 1 or a power of two (Llama 3's fastest and
// slowest pairs, where the angle is large) divides exactly anyway.
fn rope_sin_cos(pos: u32, i: u32) -> vec2<f32> {
    return rope_sin_cos_from(f32(pos), i);
}

// The same from a position given as an f32 (a context shift's negative delta, kv_shift.wgsl).
fn rope_sin_cos_from(pos: f32, i: u32) -> vec2<f32> {
    var theta = pos;
    // One multiplication a round. Four a round saved an 8B decode layer 2.5 µs of RoPE's ~7 on
    // an H200, but NVIDIA's Vulkan compiler then changed the products' rounding (the op suite's
    // RoPE at position 65521 went 1.4e-3 off): the angle must be exactly ggml's.
    for (var t = 0u; t < i; t++) {
        theta *= p.theta_scale;
    }
    var extrap = theta;
    if (p.has_freqs != 0u) {
        extrap = theta / freqs[i];
    }
    let interp = p.freq_scale * extrap;
    var angle = interp;
    if (p.ext_factor != 0.0) {
        let y = (f32(i) - p.corr_low) / max(0.001, p.corr_high - p.corr_low);
        let mix = (1.0 - clamp(y, 0.0, 1.0)) * p.ext_factor;
        angle = interp * (1.0 - mix) + extrap * mix;
    }
    return sin_cos(reduce_angle(angle)) * p.mscale;
}
