// Store the step's key (or value) rows into a layer's f16 cache at each row's position, through its
// sequence's block table (step.wgsl).
// Two values per invocation, packed as one u32 (row width is even).

// The parameters: `KvStoreParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache: array<u32>;

@compute @workgroup_size(64)
fn kv_store(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let hd = p.dim / 2u;
    let i = wg_index(wid) * 64u + lid;
    if (i >= p.rows * hd) {
        return;
    }
    let r = i / hd;
    let c = i % hd;
    let s = r * p.dim + 2u * c;
    cache[kv_row(step_seq(r), step_pos(r)) * hd + c] = f16_bits(src[s]) | (f16_bits(src[s + 1u]) << 16u);
}
