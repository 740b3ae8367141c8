// Rotary position embedding in place. One invocation per (row, head, pair). Angles as ggml
// computes them: p · theta_scaleⁱ by repeated multiplication in f32; the angle is reduced to
// [-π, π] before sin/cos (GPU sin/cos are only accurate there).

struct Params {
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
    rows: u32,
    theta_scale: f32,
    freq_scale: f32,
    neox: u32,
    width: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;

fn reduce_angle(t: f32) -> f32 {
    let k = round(t * 0.15915494309189535);
    // 2π = 6.28125 + 0.0019353071795864769: k · 6.28125 is exact for k < 2¹⁶.
    return (t - k * 6.28125) - k * 0.0019353071795864769;
}

@compute @workgroup_size(64)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let half_rot = p.n_rot / 2u;
    let idx = wg_index(wid) * 64u + lid;
    if (idx >= p.rows * p.n_heads * half_rot) {
        return;
    }
    let i = idx % half_rot;
    let h = (idx / half_rot) % p.n_heads;
    let r = idx / (half_rot * p.n_heads);
    var theta = f32(step[0] + r);
    for (var t = 0u; t < i; t++) {
        theta *= p.theta_scale;
    }
    let ang = reduce_angle(p.freq_scale * theta);
    let c = cos(ang);
    let s = sin(ang);
    let base = r * p.width + h * p.head_dim;
    var ia = base + 2u * i;
    var ib = ia + 1u;
    if (p.neox != 0u) {
        ia = base + i;
        ib = ia + half_rot;
    }
    let x0 = x[ia];
    let x1 = x[ib];
    x[ia] = x0 * c - x1 * s;
    x[ib] = x0 * s + x1 * c;
}
