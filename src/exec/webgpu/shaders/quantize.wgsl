// Activations quantized for the matrix products, rounding as the CPU reference does
// (llama.cpp's quantize_row_q8_0/q8_1/q8_K). Layout (u32 words; GPU-friendly, not GGUF's):
// all rows' quants first, 4 per word in element order (so a 16-byte load gives 16 values),
// then from word `recs` one record per block:
// - q8_1 (32 values; serves the legacy types): [d, s, Σq, 0]; d = f16(amax / 127) and
//   s = f16(d · Σq) as f32 (Q8_0 partners use d and Σq only).
// - q8_k (256 values; the K-quants): [d, 0, 0, 0, Σq of each 16 values (16 × i32)].
// The block sums let the kernels fold a weight format's offset or min into one multiply.
// One invocation per 4 values; blocks reduce their |max| through workgroup memory.

// The parameters: `QuantizeParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;

// Eight 32-value blocks per workgroup, eight invocations per block.
@compute @workgroup_size(64)
fn quant_q8_1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let blk0 = wg_index(wid) * 8u;
    var v = vec4<f32>(0.0);
    if (blk0 + lid / 8u < p.n_blocks) {
        v = x[blk0 * 8u + lid];
    }
    q8_1_piece(v, blk0, lid, p.n_blocks, p.recs);
}

// One 256-value block per workgroup.
@compute @workgroup_size(64)
fn quant_q8_k(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let blk = wg_index(wid);
    if (blk >= p.n_blocks) {
        return;
    }
    q8_k_piece(x[blk * 64u + lid], blk, lid, p.recs);
}
