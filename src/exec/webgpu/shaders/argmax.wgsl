// Index of the largest of n values starting at `offset` (the first on ties), in one
// workgroup; the result goes to out[0].

// The parameters: `ArgmaxParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

const NONE: u32 = 0xffffffffu;
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;

@compute @workgroup_size(256)
fn argmax(@builtin(local_invocation_index) lid: u32) {
    var best = 0.0;
    var idx = NONE;
    for (var i = lid; i < p.n; i += 256u) {
        let v = x[p.offset + i];
        if (idx == NONE || v > best) {
            best = v;
            idx = i;
        }
    }
    bv[lid] = best;
    bi[lid] = idx;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (lid < k) {
            let oi = bi[lid + k];
            let ov = bv[lid + k];
            let mi = bi[lid];
            if (oi != NONE && (mi == NONE || ov > bv[lid] || (ov == bv[lid] && oi < mi))) {
                bv[lid] = ov;
                bi[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[0] = select(bi[0], 0u, bi[0] == NONE);
    }
}
