// Index of the largest of a row's n values (the first on ties) for each sequence s of the
// graph: the row is s where the logits have a row per sequence, else (`p.all`: a row per
// token) sequence s's last token's row (step.wgsl); the result goes to out[s]. Two passes,
// as one workgroup walking a 262,144-value row took 107 us on an H200 (bound by the latency of
// its loads): `argmax_part`, workgroup (w, s), the largest of chunk w of row s (p.chunk values
// from w · p.chunk) into parts[s · p.parts + w] as (value bits, index; NONE: no value); then
// `argmax_final`, one workgroup per sequence, the largest of those p.parts pairs.
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
@group(0) @binding(2) var<storage, read_write> parts: array<u32>;
@group(0) @binding(3) var<storage, read> step: array<u32>;
@group(0) @binding(4) var<storage, read> mask: array<u32>;
// argmax_final's bindings (its own bind group).
@group(0) @binding(5) var<storage, read> parts_in: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<u32>;

const NONE: u32 = 0xffffffffu;
// -f32::MAX as WGSL takes it (see attention.wgsl: Tint rejects -3.4028235e38 as written).
const LOWEST: f32 = -3.40282346e38;
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;

// Value v of id i (LOWEST where the mask from word `words` leaves i out) into the running
// (best, idx) if it is larger, or the first; ids from `end` on are not the chunk's.
fn take(v: f32, i: u32, end: u32, masked: bool, words: u32, best: ptr<function, f32>, idx: ptr<function, u32>) {
    if (i >= end) {
        return;
    }
    var u = v;
    if (masked && (((mask[words + i / 32u] >> (i % 32u)) & 1u) == 0u || v < LOWEST)) {
        u = LOWEST;
    }
    if (*idx == NONE || u > *best) {
        *best = u;
        *idx = i;
    }
}

// The workgroup's 256 (value, index) pairs in bv, bi: the largest (the lowest index on ties;
// NONE is no value) to bv[0], bi[0].
fn reduce(lid: u32) {
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
}

@compute @workgroup_size(256)
fn argmax_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = wid.y;
    let w = wid.x;
    let row = select(s, step_last(s), p.all != 0u);
    let offset = row * p.n;
    let masked = mask[s] != 0u;
    let words = p.n_seq + s * ((p.n + 31u) / 32u);
    let end = min((w + 1u) * p.chunk, p.n);
    let last = p.n - 1u;
    var best = 0.0;
    var idx = NONE;
    // Invocation lid takes the chunk's values lid, lid + 256, ... in order (the first of equal
    // values stays), eight loads issued before they are compared. Loads past the end read
    // the row's last value and are not compared.
    for (var i = w * p.chunk + lid; i < end; i += 2048u) {
        let v0 = x[offset + i];
        let v1 = x[offset + min(i + 256u, last)];
        let v2 = x[offset + min(i + 512u, last)];
        let v3 = x[offset + min(i + 768u, last)];
        let v4 = x[offset + min(i + 1024u, last)];
        let v5 = x[offset + min(i + 1280u, last)];
        let v6 = x[offset + min(i + 1536u, last)];
        let v7 = x[offset + min(i + 1792u, last)];
        take(v0, i, end, masked, words, &best, &idx);
        take(v1, i + 256u, end, masked, words, &best, &idx);
        take(v2, i + 512u, end, masked, words, &best, &idx);
        take(v3, i + 768u, end, masked, words, &best, &idx);
        take(v4, i + 1024u, end, masked, words, &best, &idx);
        take(v5, i + 1280u, end, masked, words, &best, &idx);
        take(v6, i + 1536u, end, masked, words, &best, &idx);
        take(v7, i + 1792u, end, masked, words, &best, &idx);
    }
    bv[lid] = best;
    bi[lid] = idx;
    reduce(lid);
    if (lid == 0u) {
        let o = 2u * (s * p.parts + w);
        parts[o] = bitcast<u32>(bv[0]);
        parts[o + 1u] = bi[0];
    }
}

@compute @workgroup_size(256)
fn argmax_final(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = wid.x;
    // Chunks in order: a lower chunk's pair has the lower index, as the tie rule wants.
    var best = 0.0;
    var idx = NONE;
    if (lid < p.parts) {
        let o = 2u * (s * p.parts + lid);
        best = bitcast<f32>(parts_in[o]);
        idx = parts_in[o + 1u];
    }
    bv[lid] = best;
    bi[lid] = idx;
    reduce(lid);
    if (lid == 0u) {
        out[s] = select(bi[0], 0u, bi[0] == NONE);
    }
}
