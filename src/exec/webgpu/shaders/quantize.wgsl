// Activations quantized for the matrix products, rounding as the CPU reference does
// (llama.cpp's quantize_row_q8_0/q8_1/q8_K). Layouts (u32 words, GPU-friendly, not GGUF's):
// - q8_1: per 32 values [d, s, 8 words of 4 i8]; d = f16(amax / 127), s = f16(d · Σq) as f32.
//   Serves the Q8_0 partners too (same d and q; s unused).
// - q8_k: per 256 values [d, 64 words of 4 i8]; d as f32.

struct Params {
    n_blocks: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;

@compute @workgroup_size(64)
fn quant_q8_1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid) * 64u + lid;
    if (i >= p.n_blocks) {
        return;
    }
    let base = i * 32u;
    var amax = 0.0;
    for (var l = 0u; l < 32u; l++) {
        amax = max(amax, abs(x[base + l]));
    }
    let d = amax / 127.0;
    let id = select(0.0, 127.0 / amax, amax != 0.0);
    var sum = 0;
    for (var t = 0u; t < 8u; t++) {
        var word = 0u;
        for (var k = 0u; k < 4u; k++) {
            let v = i32(round(x[base + 4u * t + k] * id));
            sum += v;
            word |= (bitcast<u32>(v) & 0xffu) << (8u * k);
        }
        q[i * 10u + 2u + t] = word;
    }
    q[i * 10u] = bitcast<u32>(f16_round(d));
    q[i * 10u + 1u] = bitcast<u32>(f16_round(f32(sum) * d));
}

@compute @workgroup_size(64)
fn quant_q8_k(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid) * 64u + lid;
    if (i >= p.n_blocks) {
        return;
    }
    let base = i * 256u;
    // The element of largest magnitude, with its sign, maps to -127.
    var amax = 0.0;
    var mx = 0.0;
    for (var l = 0u; l < 256u; l++) {
        let v = x[base + l];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    var d = 0.0;
    var iscale = 0.0;
    if (amax != 0.0) {
        iscale = -127.0 / mx;
        d = 1.0 / iscale;
    }
    for (var t = 0u; t < 64u; t++) {
        var word = 0u;
        for (var k = 0u; k < 4u; k++) {
            let v = min(i32(round(iscale * x[base + 4u * t + k])), 127);
            word |= (bitcast<u32>(v) & 0xffu) << (8u * k);
        }
        q[i * 65u + 1u + t] = word;
    }
    q[i * 65u] = bitcast<u32>(d);
}
