// Rotary position embedding in place. One invocation per (row, head, pair). Angles as ggml
// computes them (rope_math.wgsl).

// The parameters: `RopeParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
// The frequency factors (n_rot/2), where p.has_freqs; else a dummy.
@group(0) @binding(3) var<storage, read> freqs: array<f32>;

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
    let sc = rope_sin_cos(step_pos(r), i);
    let s = sc.x;
    let c = sc.y;
    let ab = rope_pair(r * p.width + h * p.head_dim, i, half_rot, p.neox);
    let ia = ab.x;
    let ib = ab.y;
    let x0 = x[ia];
    let x1 = x[ib];
    x[ia] = x0 * c - x1 * s;
    x[ib] = x0 * s + x1 * c;
}
