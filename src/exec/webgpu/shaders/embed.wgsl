// Embed: dst row r = table row tokens[r] × scale. One dispatch per buffer part of the table;
// each writes only the tokens whose row lies in its part. `DEQ` is the table type's
// dequantization function (dequant.wgsl), substituted when the module is built.

// The parameters: `EmbedParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid) * 64u + lid;
    if (i >= p.rows * p.k) {
        return;
    }
    let r = i / p.k;
    let e = i % p.k;
    let t = step[r];
    if (t < p.row_start || t >= p.row_end) {
        return;
    }
    dst[i] = {{DEQ}}((t - p.row_start) * p.row_bytes, e) * p.scale;
}
