// Activations quantized for the matrix products, rounding as the CPU reference does
// (llama.cpp's quantize_row_q8_0/q8_1/q8_K). Layout (u32 words; GPU-friendly, not GGUF's):
// all rows' quants first, 4 per word in element order (so a 16-byte load gives 16 values),
// then from word `recs` one record per block:
// - q8_1 (32 values; serves the legacy types): [d, s, Σq, 0]; d = f16(amax / 127) and
//   s = f16(d · Σq) as f32 (Q8_0 partners use d and Σq only).
// - q8_k (256 values; the K-quants): [d, 0, 0, 0, Σq of each 16 values (16 × i32)].
// The block sums let the kernels fold a weight format's offset or min into one multiply.
// One invocation per 4 values; blocks reduce their |max| through workgroup memory.

struct Params {
    n_blocks: u32,
    recs: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;

var<workgroup> sh_v: array<f32, 64>;
var<workgroup> sh_s: array<i32, 64>;

fn pack_sum(v: vec4<i32>, lid: u32) -> u32 {
    sh_s[lid] = v.x + v.y + v.z + v.w;
    return pack4xI8(v);
}

// Eight 32-value blocks per workgroup, eight invocations per block.
@compute @workgroup_size(64)
fn quant_q8_1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let blk = wg_index(wid) * 8u + lid / 8u;
    let valid = blk < p.n_blocks;
    var v = vec4<f32>(0.0);
    if (valid) {
        v = x[blk * 8u + lid % 8u];
    }
    let av = abs(v);
    sh_v[lid] = max(max(av.x, av.y), max(av.z, av.w));
    workgroupBarrier();
    let g = lid & ~7u;
    var amax = 0.0;
    for (var i = 0u; i < 8u; i++) {
        amax = max(amax, sh_v[g + i]);
    }
    let d = amax / 127.0;
    let id = select(0.0, 127.0 / amax, amax != 0.0);
    let word = pack_sum(vec4<i32>(round(v * id)), lid);
    workgroupBarrier();
    if (!valid) {
        return;
    }
    q[blk * 8u + lid % 8u] = word;
    if (lid % 8u == 0u) {
        var sum = 0;
        for (var i = 0u; i < 8u; i++) {
            sum += sh_s[g + i];
        }
        let m = p.recs + 4u * blk;
        q[m] = bitcast<u32>(f16_round(d));
        q[m + 1u] = bitcast<u32>(f16_round(f32(sum) * d));
        q[m + 2u] = bitcast<u32>(sum);
        q[m + 3u] = 0u;
    }
}

// One 256-value block per workgroup.
@compute @workgroup_size(64)
fn quant_q8_k(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let blk = wg_index(wid);
    if (blk >= p.n_blocks) {
        return;
    }
    let v = x[blk * 64u + lid];
    // The element of largest magnitude, with its sign, maps to -127; the first one on ties
    // (pairwise merges keep the lower half's on equality, as the CPU's scan does).
    var best = v.x;
    for (var c = 1u; c < 4u; c++) {
        if (abs(v[c]) > abs(best)) {
            best = v[c];
        }
    }
    sh_v[lid] = best;
    workgroupBarrier();
    for (var s = 1u; s < 64u; s <<= 1u) {
        if (lid % (2u * s) == 0u && abs(sh_v[lid + s]) > abs(sh_v[lid])) {
            sh_v[lid] = sh_v[lid + s];
        }
        workgroupBarrier();
    }
    let mx = sh_v[0];
    var iscale = 0.0;
    var d = 0.0;
    if (mx != 0.0) {
        iscale = -127.0 / mx;
        d = 1.0 / iscale;
    }
    let word = pack_sum(min(vec4<i32>(round(iscale * v)), vec4<i32>(127)), lid);
    q[blk * 64u + lid] = word;
    workgroupBarrier();
    let m = p.recs + 20u * blk;
    if (lid % 4u == 0u) {
        q[m + 4u + lid / 4u] = bitcast<u32>(sh_s[lid] + sh_s[lid + 1u] + sh_s[lid + 2u] + sh_s[lid + 3u]);
    }
    if (lid < 4u) {
        q[m + lid] = select(0u, bitcast<u32>(d), lid == 0u);
    }
}
