// Decode attention, second pass: merge the splits of attention_split.wgsl for one row and
// query head (one workgroup each; a row of one split was finished by the split kernel): the
// splits' maxima and sums are brought to the largest maximum, and the outputs summed with the
// same weights and divided by the total.
// Bound by latency (a few KiB a workgroup), so no loop walks the splits one load after
// another: invocation s reads split s's (max, sum), a tree in workgroup memory reduces them,
// and the outputs are read by VG groups of D4 invocations (four dimensions each), group g
// taking splits g, g + VG, ... with every load issued before the sums, then summed across the
// groups in workgroup memory.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

const WG: u32 = 256u;
// At most this many splits (attention.rs: MAX_SPLITS).
const MAX_SPLITS: u32 = 128u;
// Four-value pieces of a head (the kernel is built per head size).
const D4: u32 = {{D4}}u;
const VG: u32 = WG / D4;

// Each split's max, then weight; each split's weighted sum (tree reductions).
var<workgroup> mx: array<f32, MAX_SPLITS>;
var<workgroup> w: array<f32, MAX_SPLITS>;
var<workgroup> tl: array<f32, MAX_SPLITS>;
// The groups' partial outputs.
var<workgroup> og: array<vec4<f32>, WG>;

@compute @workgroup_size(256)
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
    // A row of one split was normalized by attention_split.wgsl itself.
    if (used == 1u) {
        return;
    }
    let base = idx * p.splits;
    let outs = 2u * p.rows * p.n_heads * p.splits;

    // The outputs' loads first: they do not depend on the weights.
    let g = lid / D4;
    let dq = lid % D4;
    // o0, o1, ...: split g + i * VG's four values (MAX_SPLITS / VG of them, written out by
    // kernels.rs: variables, not an array, which the Vulkan driver may keep in memory).
    {{LOADS}}
    var m = NEG;
    var l = 0.0;
    if (lid < used) {
        m = part[2u * (base + lid)];
        l = part[2u * (base + lid) + 1u];
    }
    if (lid < MAX_SPLITS) {
        mx[lid] = m;
    }
    workgroupBarrier();
    // The trees span the used splits' power of two (none for one split: a short context).
    var span = 1u;
    while (span < used) {
        span *= 2u;
    }
    for (var k = span / 2u; k > 0u; k /= 2u) {
        if (lid < k) {
            mx[lid] = max(mx[lid], mx[lid + k]);
        }
        workgroupBarrier();
    }
    let top = mx[0];
    if (lid < MAX_SPLITS) {
        let e = select(0.0, exp(m - top), lid < used);
        w[lid] = e;
        tl[lid] = e * l;
    }
    workgroupBarrier();
    for (var k = span / 2u; k > 0u; k /= 2u) {
        if (lid < k) {
            tl[lid] += tl[lid + k];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / tl[0];

    var sum = vec4<f32>(0.0);
    {{SUMS}}
    og[lid] = sum;
    workgroupBarrier();
    if (lid < D4) {
        var t = vec4<f32>(0.0);
        for (var k = 0u; k < VG; k++) {
            t += og[k * D4 + lid];
        }
        t *= inv;
        let d = r * p.q_width + h * p.head_dim + 4u * lid;
        dst[d] = t.x;
        dst[d + 1u] = t.y;
        dst[d + 2u] = t.z;
        dst[d + 3u] = t.w;
    }
}
