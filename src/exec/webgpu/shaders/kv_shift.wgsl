// Context shift: rotate the f16 keys of a few cache blocks by the angle of `p.delta` positions
// (see exec/kv_shift.rs), in one layer. The cache is f16 two per word on both precision paths
// (with or without `shader-f16`): read and written as u32 words, converted by hand, exactly.
// One invocation per two consecutive pairs of a head (n_rot % 4 == 0): it owns the words they
// touch (normal: two adjacent words; neox: a word in each half), so no two invocations write
// one word. Same float operations as rope.wgsl, at the angle of the delta (rope_math.wgsl).

// The parameters: `KvShiftParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
// The blocks whose rows move.
@group(0) @binding(1) var<storage, read> blocks: array<u32>;
@group(0) @binding(2) var<storage, read_write> kc: array<u32>;
// The frequency factors (n_rot/2), where p.has_freqs; else a dummy.
@group(0) @binding(3) var<storage, read> freqs: array<f32>;

// (x0, x1) rotated by (sin, cos) `sc`, as rope.wgsl rotates.
fn rotate(x: vec2<f32>, sc: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(x.x * sc.y - x.y * sc.x, x.x * sc.x + x.y * sc.y);
}

@compute @workgroup_size(64)
fn kv_shift(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let quads = p.n_rot / 4u;
    let idx = wg_index(wid) * 64u + lid;
    if (idx >= p.n_rows * p.n_heads * quads) {
        return;
    }
    let j = idx % quads;
    let h = (idx / quads) % p.n_heads;
    let r = idx / (quads * p.n_heads);
    let row = blocks[r / 64u] * 64u + r % 64u;
    // Word offset of the head (head_dim is even).
    let base = (row * p.k_dim + h * p.head_dim) / 2u;
    let sc0 = rope_sin_cos_from(p.delta, 2u * j);
    let sc1 = rope_sin_cos_from(p.delta, 2u * j + 1u);
    if (p.neox != 0u) {
        // Pairs 2j and 2j+1: elements 2j, 2j+1 (word w0) with 2j+n_rot/2, 2j+1+n_rot/2 (word w1).
        let w0 = base + j;
        let w1 = base + j + quads;
        let a = half2(kc[w0]);
        let b = half2(kc[w1]);
        let p0 = rotate(vec2<f32>(a.x, b.x), sc0);
        let p1 = rotate(vec2<f32>(a.y, b.y), sc1);
        kc[w0] = f16_bits(p0.x) | (f16_bits(p1.x) << 16u);
        kc[w1] = f16_bits(p0.y) | (f16_bits(p1.y) << 16u);
    } else {
        // Pair i is word i of the head.
        let w0 = base + 2u * j;
        let q0 = rotate(half2(kc[w0]), sc0);
        let q1 = rotate(half2(kc[w0 + 1u]), sc1);
        kc[w0] = f16_bits(q0.x) | (f16_bits(q0.y) << 16u);
        kc[w0 + 1u] = f16_bits(q1.x) | (f16_bits(q1.y) << 16u);
    }
}
