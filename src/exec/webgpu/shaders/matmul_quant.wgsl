// dst (rows × n_dst) [, columns n_off..n_off + n] = x · Wᵀ (+ bias) for a quantized W part.
// One workgroup per weight row; it loops over the step's rows (prefill reuses the weight row
// while it is in cache). `DOT` is the type's block dot product (matmul_legacy.wgsl,
// matmul_kquant.wgsl), substituted when the module is built; `a` holds the activations
// already quantized by quantize.wgsl (`ablk` words per block).

struct Params {
    n: u32,
    rows: u32,
    row_bytes: u32,
    nb: u32,
    n_off: u32,
    n_dst: u32,
    has_bias: u32,
    ablk: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> a: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<u32>;

var<workgroup> part: array<f32, 32>;

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j = wg_index(wid);
    if (j >= p.n) {
        return;
    }
    let ro = j * p.row_bytes;
    for (var r = 0u; r < p.rows; r++) {
        var acc = 0.0;
        for (var b = lid; b < p.nb; b += 32u) {
            acc += DOT(ro, b, (r * p.nb + b) * p.ablk);
        }
        part[lid] = acc;
        workgroupBarrier();
        for (var s = 16u; s > 0u; s >>= 1u) {
            if (lid < s) {
                part[lid] += part[lid + s];
            }
            workgroupBarrier();
        }
        if (lid == 0u) {
            var v = part[0];
            if (p.has_bias != 0u) {
                v += bitcast<f32>(bias[p.n_off + j]);
            }
            dst[r * p.n_dst + p.n_off + j] = v;
        }
        workgroupBarrier();
    }
}

// The same product with one invocation per weight row and no workgroup memory or barriers:
// faster on CPU-emulated adapters (lavapipe, SwiftShader), where barriers are expensive and
// memory coalescing does not matter. Sums in row order, like the CPU.
@compute @workgroup_size(64)
fn main_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j = wg_index(wid) * 64u + lid;
    if (j >= p.n) {
        return;
    }
    let ro = j * p.row_bytes;
    for (var r = 0u; r < p.rows; r++) {
        var acc = 0.0;
        for (var b = 0u; b < p.nb; b++) {
            acc += DOT(ro, b, (r * p.nb + b) * p.ablk);
        }
        if (p.has_bias != 0u) {
            acc += bitcast<f32>(bias[p.n_off + j]);
        }
        dst[r * p.n_dst + p.n_off + j] = acc;
    }
}
