// dst (rows × n_dst) [, columns n_off..n_off + n] = x · Wᵀ (+ bias) for one part of a
// quantized W, in tiles: the prefill product (matvec.wgsl reads the activations again for
// every weight row; here once per BN weight rows, and each weight once per BM tokens).
//
// A workgroup of 256 invocations owns a tile of BM token rows × BN weight rows (64 or 128
// each). The k axis goes in stages of SP 16-value pieces (64 values where the row length and
// workgroup memory allow, else 32; more loads in flight at each wait). Each stage:
// - the invocations unpack the tile's weight rows into pieces of signed bytes with their
//   scale group's float scale and min (matmul_tiled_pieces.wgsl), and load the tile's q8
//   activations (quantize.wgsl) with their group's scale and scaled sum, into workgroup
//   memory;
// - each invocation of the 16 × 16 grid takes RT tokens × CT weight rows (token ty + 16r,
//   weight row tx + 16c): per scale group (GP pieces: 16 or 32 values) it holds its weight
//   rows' pieces in registers and, token by token, adds
//     acc += d_x · (d_w · Σ q_w q_x) [+ m_w · s_x]
//   where the sum is of `dot4I8Packed`s, s_x is d_x · Σq_x over the group (the q8_1 record's
//   s for the legacy types) and m_w the format's min (for the formats that have one; the
//   others' offsets are folded into the signed bytes).
//
// `add` chooses the epilogue (matmul_tile_store.wgsl).
//
// The upper-case names are placeholders, filled in per weight type (kernels.rs).

// Token rows and weight rows of a tile: RT × CT outputs per invocation of a 16 × 16 grid.
const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
// 16-value pieces per stage (2 or 4), per scale group (1 or 2), and groups per stage.
const SP: u32 = {{SP}}u;
const GP: u32 = {{GP}}u;
const NG: u32 = SP / GP;

// The stage's pieces, [piece][row] and [piece][token], and each group's two floats,
// [group][row] and [group][token].
var<workgroup> wq: array<vec4<u32>, {{WQ}}>;
var<workgroup> xq: array<vec4<u32>, {{XQ}}>;
var<workgroup> wsc: array<vec2<f32>, {{WS}}>;
var<workgroup> xsc: array<vec2<f32>, {{XS}}>;

// 16 values as signed bytes and the scale and min (weights) or scale and scaled sum
// (activations) of their group.
struct Piece {
    q: vec4<u32>,
    sc: vec2<f32>,
}

// f32(i) for |i| < 2^22 (every group's sum): the integer added to the bits of 1.5 · 2^23,
// whose unit in the last place is 1, then 1.5 · 2^23 subtracted, both exact; cheaper than a
// conversion instruction.
fn i2f(i: i32) -> f32 {
    return bitcast<f32>(i + 0x4B400000) - 12582912.0;
}

// q8_1 activations (the legacy types; 32-value groups): piece v of token row t, the block's d
// and s.
fn xp_q8_1(t: u32, v: u32) -> Piece {
    let m = a[p.recs + t * p.nb + v / 2u];
    return Piece(a[t * p.avec + v], vec2<f32>(bitcast<f32>(m.x), bitcast<f32>(m.y)));
}

// q8_k activations (the K-quants): piece v of token row t, the block's d and d · Σq over the
// piece's group of GP pieces (v is the group's first piece).
fn xp_q8_k(t: u32, v: u32) -> Piece {
    let b = t * p.nb + v / 16u;
    let i = v % 16u;
    let d = bitcast<f32>(a[p.recs + 5u * b].x);
    let s = bitcast<vec4<i32>>(a[p.recs + 5u * b + 1u + i / 4u]);
    var sum = s[i % 4u];
    if (GP == 2u) {
        sum += s[(i + 1u) % 4u];
    }
    return Piece(a[t * p.avec + v], vec2<f32>(d, d * f32(sum)));
}

// Weight piece e of a stage: piece e / BN (v0 + e / BN of the row) of tile row e % BN.
fn load_w(e: u32, j0: u32, v0: u32) {
    let r = e % BN;
    let lp = e / BN;
    let pc = {{WPIECE}}(min(j0 + r, p.n - 1u) * p.row_bytes, v0 + lp);
    wq[e] = pc.q;
    if (lp % GP == 0u) {
        wsc[(lp / GP) * BN + r] = pc.sc;
    }
}

// Activation piece e of a stage: piece e / BM of tile token e % BM.
fn load_x(e: u32, i0: u32, v0: u32) {
    let r = e % BM;
    let lp = e / BM;
    let pc = {{XPIECE}}(min(i0 + r, p.rows - 1u), v0 + lp);
    xq[e] = pc.q;
    if (lp % GP == 0u) {
        xsc[(lp / GP) * BM + r] = pc.sc;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j0 = wid.x * BN;
    let i0 = wid.y * BM;
    let tx = lid % 16u;
    let ty = lid / 16u;
    {{ACC_DECLS}}
    // p.tasks: stages per row. Rows and tokens past the end repeat the last (their sums are
    // dropped).
    for (var s = 0u; s < p.tasks; s++) {
        let v0 = s * SP;
        {{LOADERS}}
        workgroupBarrier();
        {{COMPUTE}}
        workgroupBarrier();
    }
    {{STORES}}
}
