// dst (rows × n_dst) [, columns n_off..n_off + n] = x · Wᵀ (+ bias) for one part of W.
//
// A weight row is cut into `tasks`: pieces of (mostly) 16 weight bytes that one invocation
// turns into a partial dot product with integer `dot4I8Packed`s (quantized types; the
// activations were quantized by quantize.wgsl) or f32 `dot`s (float types). `ACT(r, t)` loads
// the activations task t of token row r needs; `DOT(ro, t, act)` reads the weight bytes of
// task t of the weight row at byte `ro` and returns its share of the dot product. Both are
// substituted per weight type (matvec_legacy.wgsl, matvec_kquant.wgsl, matvec_float.wgsl).
//
// The upper-case names are placeholders, filled in per kernel (template.rs, kernels.rs).
//
// `main` (GPUs): a workgroup of 64 invocations owns ROWS consecutive weight rows; invocation
// i takes tasks i, i + 64, ... of every one of those rows, loading each task's activations
// once for all ROWS rows. Consecutive invocations read consecutive 16-byte pieces, so a
// subgroup's loads cover whole cache lines. The 64 partial sums of each row are reduced
// through workgroup memory (REDUCE; with subgroup operations where the device has them).
// Token rows (prefill) are looped inside, re-reading the weight rows from cache.
//
// `main_rows` (CPU-emulated adapters): one invocation per weight row, tasks in order.

// What one task reads of the activations: up to 64 values (four 16-byte units, q8 or f32
// bits), the block scale, the q8_1 block's s, and block sums (matvec_kquant.wgsl).
struct Act {
    q0: vec4<u32>,
    q1: vec4<u32>,
    q2: vec4<u32>,
    q3: vec4<u32>,
    d: f32,
    m: f32,
    s: vec4<i32>,
}

const WG: u32 = 64u;
var<workgroup> red: array<vec4<f32>, 64>;

fn store(r: u32, j: u32, v: f32) {
    if (j < p.n) {
        var o = v;
        if (p.has_bias != 0u) {
            o += bias[p.n_off + j];
        }
        let i = r * p.n_dst + p.n_off + j;
        dst[i] = o;
        if (p.add != 0u) {
            res[i] = res[i] + o;
        }
    }
}

// The 64 invocations' partial sums of the workgroup's rows, through workgroup memory:
// 8 invocations add 8 each, then one adds those 8.
fn reduce_wg(acc: vec4<f32>, lid: u32) -> vec4<f32> {
    red[lid] = acc;
    workgroupBarrier();
    if (lid < 8u) {
        var s = red[8u * lid];
        for (var i = 1u; i < 8u; i++) {
            s += red[8u * lid + i];
        }
        red[8u * lid] = s;
    }
    workgroupBarrier();
    var t = red[0];
    for (var i = 1u; i < 8u; i++) {
        t += red[8u * i];
    }
    return t;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32{{SG_ARGS}}) {
    let j0 = wg_index(wid) * {{ROWS}};
    if (j0 >= p.n) {
        return;
    }
    // Rows past the end repeat the last row (their sums are dropped): no checks in the loop.
    let last = p.n - 1u;
    {{ROW_OFFSETS}}
    for (var r = 0u; r < p.rows; r++) {
        var acc = vec4<f32>(0.0);
        for (var t = lid; t < p.tasks; t += WG) {
            let act = {{ACT}}(r, t);
            {{ACCUMULATE}}
        }
        let tot = {{REDUCE}};
        if (lid == 0u) {
            {{STORES}}
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(64)
fn main_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let j = wg_index(wid) * 64u + lid;
    if (j >= p.n) {
        return;
    }
    let ro = j * p.row_bytes;
    for (var r = 0u; r < p.rows; r++) {
        var acc = 0.0;
        for (var t = 0u; t < p.tasks; t++) {
            acc += {{DOT}}(ro, t, {{ACT}}(r, t));
        }
        store(r, j, acc);
    }
}
