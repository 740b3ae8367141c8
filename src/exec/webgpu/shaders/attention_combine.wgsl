// Decode attention, second pass: merge the splits of attention_split.wgsl for one row and
// query head (one workgroup each): the splits' maxima and sums are brought to the largest
// maximum, and the outputs summed with the same weights and divided by the total.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

const WG: u32 = 64u;
// Each split's weight (at most 128 splits: attention.rs).
var<workgroup> w: array<f32, 128>;

@compute @workgroup_size(64)
fn attention_combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let idx = wg_index(wid);
    if (idx >= p.rows * p.n_heads) {
        return;
    }
    let r = idx / p.n_heads;
    let h = idx % p.n_heads;
    let pos = step_pos(r);
    let lo = split_from(pos);
    let n = pos + 1u - lo;
    let used = (n + split_len(n) - 1u) / split_len(n);
    let base = idx * p.splits;
    var mx = NEG;
    for (var s = 0u; s < used; s++) {
        mx = max(mx, part[2u * (base + s)]);
    }
    for (var s = lid; s < used; s += WG) {
        w[s] = exp(part[2u * (base + s)] - mx);
    }
    workgroupBarrier();
    var tot = 0.0;
    for (var s = 0u; s < used; s++) {
        tot += w[s] * part[2u * (base + s) + 1u];
    }
    let inv = 1.0 / tot;
    let outs = 2u * p.rows * p.n_heads * p.splits;
    for (var d = lid; d < p.head_dim; d += WG) {
        var o = 0.0;
        for (var s = 0u; s < used; s++) {
            o += w[s] * part[outs + (base + s) * p.head_dim + d];
        }
        dst[r * p.q_width + h * p.head_dim + d] = o * inv;
    }
}
