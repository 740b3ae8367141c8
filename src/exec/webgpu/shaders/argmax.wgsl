// Index of the largest of a row's n values (the first on ties), one workgroup per sequence s
// of the graph: the row is s where the logits have a row per sequence, else (`p.all`: a row
// per token) sequence s's last token's row (step.wgsl); the result goes to out[s].
//
// Token masks (constrained decoding): where mask[s] is not 0, only the ids that sequence s's
// mask allows count (ceil(n / 32) words from mask[n_seq + s · ceil(n / 32)], bit i % 32 of
// word i / 32 for id i); the others are taken as -inf, as the host's masking sets them. WGSL
// has no infinity (Tint rejects one written out), so -inf, the mask's or a logit's, is
// taken as the lowest finite f32: the order is the host's but for a logit of exactly -f32::MAX,
// which ties with -inf here.

// The parameters: `ArgmaxParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<storage, read> step: array<u32>;
@group(0) @binding(4) var<storage, read> mask: array<u32>;

const NONE: u32 = 0xffffffffu;
// -f32::MAX as WGSL takes it (see attention.wgsl: Tint rejects -3.4028235e38 as written).
const LOWEST: f32 = -3.40282346e38;
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;

@compute @workgroup_size(256)
fn argmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = wid.x;
    let row = select(s, step_last(s), p.all != 0u);
    let offset = row * p.n;
    let masked = mask[s] != 0u;
    let words = p.n_seq + s * ((p.n + 31u) / 32u);
    var best = 0.0;
    var idx = NONE;
    for (var i = lid; i < p.n; i += 256u) {
        var v = x[offset + i];
        if (masked && (((mask[words + i / 32u] >> (i % 32u)) & 1u) == 0u || v < LOWEST)) {
            v = LOWEST;
        }
        if (idx == NONE || v > best) {
            best = v;
            idx = i;
        }
    }
    bv[lid] = best;
    bi[lid] = idx;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (lid < k) {
            let oi = bi[lid + k];
            let ov = bv[lid + k];
            let mi = bi[lid];
            if (oi != NONE && (mi == NONE || ov > bv[lid] || (ov == bv[lid] && oi < mi))) {
                bv[lid] = ov;
                bi[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[s] = select(bi[0], 0u, bi[0] == NONE);
    }
}
