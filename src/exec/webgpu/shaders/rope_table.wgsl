// The RoPE angles of a step: (sin, cos) · mscale of pair i at each token row's position,
// computed once per step for every layer that rotates with the same constants (rope_kv.wgsl
// reads them). One invocation per (row, pair); the same float operations as rope.wgsl
// (rope_math.wgsl), so the rotations keep their bits. An 8b decode layer spent about 3 µs of
// its ~7 µs RoPE dispatch in the angle's loop of up to 63 dependent multiplications.

// The parameters: `RopeParams` (params.rs), declared once for Rust and WGSL; the head fields
// are unused.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read_write> table: array<vec2<f32>>;
// The frequency factors (n_rot/2), where p.has_freqs; else a dummy.
@group(0) @binding(3) var<storage, read> freqs: array<f32>;

@compute @workgroup_size(64)
fn rope_table(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let half_rot = p.n_rot / 2u;
    let idx = wg_index(wid) * 64u + lid;
    if (idx >= p.rows * half_rot) {
        return;
    }
    table[idx] = rope_sin_cos(step_pos(idx / half_rot), idx % half_rot);
}
