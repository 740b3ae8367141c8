// The gate and up products and SiLU in one dispatch (fuse.rs): a workgroup owns ROWS rows of
// both matrices (same type and shape; `w2` is the up matrix, read through copies of the
// weight functions renamed with a `_2` suffix) and writes up := x·Wuᵀ and
// gate := silu(x·Wgᵀ) · up, with the float operations of the separate kernels.

@group(0) @binding(7) var<storage, read> w2: array<vec4<u32>>;
@group(0) @binding(9) var<storage, read_write> dst2: array<f32>;

fn store_gated(r: u32, j: u32, g: f32, u: f32) {
    if (j < p.n) {
        let i = r * p.n_dst + p.n_off + j;
        dst2[i] = u;
        dst[i] = g / (1.0 + exp(-g)) * u;
    }
}

@compute @workgroup_size(64)
fn main_gated(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32{{SG_ARGS}}) {
    let j0 = wg_index(wid) * {{ROWS}};
    if (j0 >= p.n) {
        return;
    }
    let last = p.n - 1u;
    {{ROW_OFFSETS}}
    for (var r = 0u; r < p.rows; r++) {
        var acc = vec4<f32>(0.0);
        var acc_up = vec4<f32>(0.0);
        for (var t = lid; t < p.tasks; t += WG) {
            let act = {{ACT}}(r, t);
            {{ACCUMULATE}}
            {{UP_LINES}}
        }
        let tot = {{REDUCE}};
        workgroupBarrier();
        acc = acc_up;
        let tot_up = {{REDUCE}};
        if (lid == 0u) {
            {{GATED_STORES}}
        }
        workgroupBarrier();
    }
}
