// The quantization of one workgroup's 256 activations (shared by quantize.wgsl and
// norm_quant.wgsl; the including module binds `q: array<u32>` read_write). Invocation `lid`
// holds values 4·lid..4·lid+4 of the piece in `v`.

var<workgroup> sh_v: array<f32, 64>;
var<workgroup> sh_s: array<i32, 64>;

fn pack_sum(v: vec4<i32>, lid: u32) -> u32 {
    sh_s[lid] = v.x + v.y + v.z + v.w;
    return pack4xI8(v);
}

// Eight 32-value q8_1 blocks, first block `blk0`; blocks from `n_blocks` on are not written.
fn q8_1_piece(v: vec4<f32>, blk0: u32, lid: u32, n_blocks: u32, recs: u32) {
    let blk = blk0 + lid / 8u;
    let valid = blk < n_blocks;
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
        let m = recs + 4u * blk;
        q[m] = bitcast<u32>(f16_round(d));
        q[m + 1u] = bitcast<u32>(f16_round(f32(sum) * d));
        q[m + 2u] = bitcast<u32>(sum);
        q[m + 3u] = 0u;
    }
}

// One 256-value q8_k block `blk`.
fn q8_k_piece(v: vec4<f32>, blk: u32, lid: u32, recs: u32) {
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
    // Every invocation scans the 64 in order, eight loads a round (the same pick as a tree of
    // pairwise merges, with one barrier rather than seven).
    var mx = 0.0;
    for (var j = 0u; j < 64u; j += 8u) {
        let x0 = sh_v[j];
        let x1 = sh_v[j + 1u];
        let x2 = sh_v[j + 2u];
        let x3 = sh_v[j + 3u];
        let x4 = sh_v[j + 4u];
        let x5 = sh_v[j + 5u];
        let x6 = sh_v[j + 6u];
        let x7 = sh_v[j + 7u];
        mx = select(mx, x0, abs(x0) > abs(mx));
        mx = select(mx, x1, abs(x1) > abs(mx));
        mx = select(mx, x2, abs(x2) > abs(mx));
        mx = select(mx, x3, abs(x3) > abs(mx));
        mx = select(mx, x4, abs(x4) > abs(mx));
        mx = select(mx, x5, abs(x5) > abs(mx));
        mx = select(mx, x6, abs(x6) > abs(mx));
        mx = select(mx, x7, abs(x7) > abs(mx));
    }
    var iscale = 0.0;
    var d = 0.0;
    if (mx != 0.0) {
        iscale = -127.0 / mx;
        d = 1.0 / iscale;
    }
    let word = pack_sum(min(vec4<i32>(round(iscale * v)), vec4<i32>(127)), lid);
    q[blk * 64u + lid] = word;
    workgroupBarrier();
    let m = recs + 20u * blk;
    if (lid % 4u == 0u) {
        q[m + 4u + lid / 4u] = bitcast<u32>(sh_s[lid] + sh_s[lid + 1u] + sh_s[lid + 2u] + sh_s[lid + 3u]);
    }
    if (lid < 4u) {
        q[m + lid] = select(0u, bitcast<u32>(d), lid == 0u);
    }
}
