// dst = x · Wᵀ (+ bias) for F32 and F16 weights, activations read as f32 (rounded to f16 for
// F16 weights, as the CPU reference converts them). Layout and loop as matmul_quant.wgsl;
// `WV(j, e)` / `XV(i)` are substituted per type when the module is built.

struct Params {
    n: u32,
    rows: u32,
    k: u32,
    pad0: u32,
    n_off: u32,
    n_dst: u32,
    has_bias: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<u32>;

var<workgroup> part: array<f32, 32>;

fn w_f32(j: u32, e: u32) -> f32 {
    return bitcast<f32>(w[j * p.k + e]);
}

fn w_f16(j: u32, e: u32) -> f32 {
    let i = j * p.k + e;
    return half_lo(w[i >> 1u] >> ((i & 1u) * 16u));
}

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j = wg_index(wid);
    if (j >= p.n) {
        return;
    }
    for (var r = 0u; r < p.rows; r++) {
        var acc = 0.0;
        for (var e = lid; e < p.k; e += 32u) {
            acc += WV(j, e) * XV(x[r * p.k + e]);
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
    for (var r = 0u; r < p.rows; r++) {
        var acc = 0.0;
        for (var e = 0u; e < p.k; e++) {
            acc += WV(j, e) * XV(x[r * p.k + e]);
        }
        if (p.has_bias != 0u) {
            acc += bitcast<f32>(bias[p.n_off + j]);
        }
        dst[r * p.n_dst + p.n_off + j] = acc;
    }
}
