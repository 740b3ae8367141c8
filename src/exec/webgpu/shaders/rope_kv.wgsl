// RoPE of the queries (in place) and of the keys, and the store of the rotated keys and of
// the values into a layer's f16 cache at each row's position, through its sequence's block table: three ops in one dispatch
// (fuse.rs). Invocations, per token row: one per query pair, then one per cache word of keys
// (two adjacent values, each rotated with its partner read from the unrotated keys: the key
// slot is dead afterwards and is left as it was), then one per cache word of values.
// Same float operations as rope.wgsl and kv_store.wgsl: the angles' sines and cosines come
// from the step's table (rope_table.wgsl), made with rope.wgsl's operations.

// The parameters: `RopeKvParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read_write> q: array<f32>;
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
@group(0) @binding(5) var<storage, read_write> kc: array<u32>;
@group(0) @binding(6) var<storage, read_write> vc: array<u32>;
// (sin, cos) · mscale of pair i at token row r's position: entry r · n_rot/2 + i.
@group(0) @binding(7) var<storage, read> table: array<vec2<f32>>;

// Value d of the key head starting at `base` of token row r, rotated.
fn rotated_key(r: u32, base: u32, d: u32) -> f32 {
    if (d >= p.n_rot) {
        return k[base + d];
    }
    let half_rot = p.n_rot / 2u;
    var i = d / 2u;
    var first = d % 2u == 0u;
    if (p.neox != 0u) {
        first = d < half_rot;
        i = select(d - half_rot, d, first);
    }
    let ab = rope_pair(base, i, half_rot, p.neox);
    let ia = ab.x;
    let ib = ab.y;
    let sc = table[r * half_rot + i];
    let x0 = k[ia];
    let x1 = k[ib];
    if (first) {
        return x0 * sc.y - x1 * sc.x;
    }
    return x0 * sc.x + x1 * sc.y;
}

@compute @workgroup_size(64)
fn rope_kv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let half_rot = p.n_rot / 2u;
    let nq = p.rows * p.n_heads * half_rot;
    let nk = p.rows * (p.k_dim / 2u);
    let nv = p.rows * (p.v_dim / 2u);
    var idx = wg_index(wid) * 64u + lid;
    if (idx < nq) {
        let i = idx % half_rot;
        let h = (idx / half_rot) % p.n_heads;
        let r = idx / (half_rot * p.n_heads);
        let sc = table[r * half_rot + i];
        let s = sc.x;
        let c = sc.y;
        let ab = rope_pair(r * p.q_width + h * p.head_dim, i, half_rot, p.neox);
        let ia = ab.x;
        let ib = ab.y;
        let x0 = q[ia];
        let x1 = q[ib];
        q[ia] = x0 * c - x1 * s;
        q[ib] = x0 * s + x1 * c;
        return;
    }
    idx -= nq;
    if (idx < nk) {
        let hd = p.k_dim / 2u;
        let r = idx / hd;
        let e = 2u * (idx % hd);
        let base = r * p.k_dim + (e / p.head_dim) * p.head_dim;
        let d = e % p.head_dim;
        let k0 = rotated_key(r, base, d);
        let k1 = rotated_key(r, base, d + 1u);
        kc[kv_row(step_seq(r), step_pos(r)) * hd + idx % hd] = f16_bits(k0) | (f16_bits(k1) << 16u);
        return;
    }
    idx -= nk;
    if (idx < nv) {
        let hd = p.v_dim / 2u;
        let r = idx / hd;
        let c = idx % hd;
        let s = r * p.v_dim + 2u * c;
        vc[kv_row(step_seq(r), step_pos(r)) * hd + c] = f16_bits(v[s]) | (f16_bits(v[s + 1u]) << 16u);
    }
}
