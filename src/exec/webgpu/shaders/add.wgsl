// dst += b, elementwise (the executor copies a into dst first when dst is neither operand).

// The parameters: `CountParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;

@compute @workgroup_size(64)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid) * 64u + lid;
    if (i < p.n) {
        dst[i] = dst[i] + b[i];
    }
}
