// dst (rows × n_dst) [, columns n_off..n_off + n] = x · Wᵀ (+ bias) for one part of a float
// W (F32, F16 or BF16), in tiles: the prefill product of float weights (matvec_float.wgsl
// reads every weight row once per token row; here once per BM tokens).
//
// A workgroup of 256 invocations owns a tile of BM token rows × BN weight rows (64 or 128
// each). The k axis goes in stages of 16 values. Each stage the invocations convert the tile's
// 16 weight values of each row to f32, and copy the tokens' 16 f32 activations, into workgroup
// memory, transposed ([value][row] and [value][token]); then each invocation of the 16 × 16
// grid adds, value by value, the products of its RT tokens (ty + 16r) and CT weight rows
// (tx + 16c) held in registers: RT + CT loads from workgroup memory for RT · CT multiply-adds.
//
// The epilogue is matmul_tile_store.wgsl's. The upper-case names are placeholders, filled in
// per weight type and tile shape (kernels.rs).

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;

var<workgroup> wt: array<f32, {{WT}}>;
var<workgroup> xt: array<f32, {{XT}}>;

// Values 4q .. 4q + 3 of weight row `row`, as f32.
fn w4(row: u32, q: u32) -> vec4<f32> {
    {{WLOAD}}
}

// Activations as the weights' type sees them: rounded to f16 (bf16) for F16 (BF16) weights, as
// the CPU reference converts them.
fn xround(v: vec4<f32>) -> vec4<f32> {
    {{XROUND}}
}

// Quad e of a stage's weights: values 4 (e / BN) .. + 3 of the stage's 16, of tile row e % BN.
fn load_w(e: u32, j0: u32, q0: u32) {
    let r = e % BN;
    let q = e / BN;
    let v = w4(min(j0 + r, p.n - 1u), q0 + q);
    wt[(4u * q) * BN + r] = v.x;
    wt[(4u * q + 1u) * BN + r] = v.y;
    wt[(4u * q + 2u) * BN + r] = v.z;
    wt[(4u * q + 3u) * BN + r] = v.w;
}

// Quad e of a stage's activations: values 4 (e / BM) .. + 3, of tile token e % BM.
fn load_x(e: u32, i0: u32, q0: u32) {
    let t = e % BM;
    let q = e / BM;
    let v = xround(bitcast<vec4<f32>>(a[min(i0 + t, p.rows - 1u) * p.avec + q0 + q]));
    xt[(4u * q) * BM + t] = v.x;
    xt[(4u * q + 1u) * BM + t] = v.y;
    xt[(4u * q + 2u) * BM + t] = v.z;
    xt[(4u * q + 3u) * BM + t] = v.w;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j0 = wid.x * BN;
    let i0 = wid.y * BM;
    let tx = lid % 16u;
    let ty = lid / 16u;
    {{ACC_DECLS}}
    // p.tasks: stages per row (k / 16). Rows and tokens past the end repeat the last (their
    // sums are dropped).
    for (var s = 0u; s < p.tasks; s++) {
        let q0 = 4u * s;
        {{LOADERS}}
        workgroupBarrier();
        for (var v = 0u; v < 16u; v++) {
            {{COMPUTE}}
        }
        workgroupBarrier();
    }
    {{STORES}}
}
