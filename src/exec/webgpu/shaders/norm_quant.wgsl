// RMSNorm of whole rows into another slot, and the q8 quantization of the result that the
// next matrix product reads (quant_piece.wgsl), in one dispatch (fuse.rs). One workgroup per
// 256 values of a row (row length a multiple of 256): it recomputes its row's sum of squares
// (a few KB from cache), normalizes its piece, writes it, and quantizes it as one q8_k block
// or eight q8_1 blocks: the blocks quantize.wgsl would make from the written slot.

// The parameters: `NormQuantParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> q: array<u32>;

var<workgroup> red: array<f32, 64>;

fn weight(i: u32) -> f32 {
    if (p.w_f16 != 0u) {
        return half_lo(w[i >> 1u] >> ((i & 1u) * 16u));
    }
    return bitcast<f32>(w[i]);
}

// The normalized values 4·lid.. of piece `piece`.
fn normed(piece: u32, lid: u32) -> vec4<f32> {
    let per_row = p.group / 256u;
    let row = piece / per_row;
    let base = row * (p.group / 4u);
    let n4 = p.group / 4u;
    // The piece's own values and weights, loaded before the row's sum is waited for (after it
    // they were two more round trips to memory: about 0.6% of an 8B token on an H200).
    let col = (piece % per_row) * 256u + 4u * lid;
    let wv = vec4<f32>(weight(col), weight(col + 1u), weight(col + 2u), weight(col + 3u));
    let own = src[piece * 64u + lid];
    var s = 0.0;
    // Four loads issued before their sums (in the same order as one at a time).
    var i = lid;
    for (; i + 192u < n4; i += 256u) {
        let v0 = src[base + i];
        let v1 = src[base + i + 64u];
        let v2 = src[base + i + 128u];
        let v3 = src[base + i + 192u];
        s += dot(v0, v0);
        s += dot(v1, v1);
        s += dot(v2, v2);
        s += dot(v3, v3);
    }
    for (; i < n4; i += 64u) {
        let v = src[base + i];
        s += dot(v, v);
    }
    red[lid] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (lid < k) {
            red[lid] += red[lid + k];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(red[0] / f32(p.group) + p.eps);
    let v = (own * scale) * wv;
    dst[piece * 64u + lid] = v;
    return v;
}

@compute @workgroup_size(64)
fn norm_q8_k(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let piece = wg_index(wid);
    if (piece >= p.n_pieces) {
        return;
    }
    q8_k_piece(normed(piece, lid), piece, lid, p.recs);
}

@compute @workgroup_size(64)
fn norm_q8_1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let piece = wg_index(wid);
    if (piece >= p.n_pieces) {
        return;
    }
    q8_1_piece(normed(piece, lid), 8u * piece, lid, 8u * p.n_pieces, p.recs);
}
