// RMSNorm in place over every `group` consecutive values, times the weight (F32 or F16).
// One workgroup of 256 per group. In place (placeholder SRC: x), or reading another slot
// (flag FROM; SRC: src, binding 3) rather than copying it into x first: a copy would also end
// the compute pass. (The CPU sums the squares in f64; here in f32, tree-reduced.)

// The parameters: `RmsNormParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
// #if FROM
@group(0) @binding(3) var<storage, read> src: array<f32>;
// #endif

var<workgroup> red: array<f32, 256>;

fn weight(i: u32) -> f32 {
    if (p.w_f16 != 0u) {
        return half_lo(w[i >> 1u] >> ((i & 1u) * 16u));
    }
    return bitcast<f32>(w[i]);
}

@compute @workgroup_size(256)
fn rms_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wg_index(wid);
    if (g >= p.n_groups) {
        return;
    }
    let base = g * p.group;
    var s = 0.0;
    for (var i = lid; i < p.group; i += 256u) {
        let v = {{SRC}}[base + i];
        s += v * v;
    }
    red[lid] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (lid < k) {
            red[lid] += red[lid + k];
        }
        workgroupBarrier();
    }
    let mean = red[0] / f32(p.group);
    let scale = 1.0 / sqrt(mean + p.eps);
    for (var i = lid; i < p.group; i += 256u) {
        x[base + i] = ({{SRC}}[base + i] * scale) * weight(i);
    }
}
