// Causal attention of one query row and head over the f16 KV cache (one workgroup each),
// reading the keys and values of the row's sequence through its block table (step.wgsl),
// with ggml's numerics: the query rounded to f16, max-subtracted softmax, probabilities
// rounded to f16 before the product with the values. Scores are kept in workgroup memory up
// to 2048 keys and recomputed beyond, so any context length fits. KV2/KVF: the cache's element
// type (two f16) and its conversion to vec2<f32>: vec2<f16> and the hardware with `shader-f16`, else u32 and half2.

// The parameters: `AttentionParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<{{KV2}}>;
@group(0) @binding(4) var<storage, read> vc: array<{{KV2}}>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;

const WG: u32 = 64u;
// Scores of up to this many keys are kept rather than recomputed in the later passes.
const KEPT: u32 = 2048u;
var<workgroup> qh: array<f32, 256>;
var<workgroup> kept: array<f32, 2048>;
var<workgroup> red: array<f32, 64>;
var<workgroup> pw: array<f32, 64>;
// The cache rows of the value tile's keys.
var<workgroup> prow: array<u32, 64>;

// The score of the key in cache row `j`.
fn score(j: u32, kvh: u32) -> f32 {
    let kb = (j * p.k_dim + kvh * p.head_dim) / 2u;
    let n2 = p.head_dim / 2u;
    var d = 0.0;
    // Four loads issued before their sums (in the same order as one at a time).
    var t = 0u;
    for (; t + 4u <= n2; t += 4u) {
        let k0 = {{KVF}}(kc[kb + t]);
        let k1 = {{KVF}}(kc[kb + t + 1u]);
        let k2 = {{KVF}}(kc[kb + t + 2u]);
        let k3 = {{KVF}}(kc[kb + t + 3u]);
        d += k0.x * qh[2u * t];
        d += k0.y * qh[2u * t + 1u];
        d += k1.x * qh[2u * t + 2u];
        d += k1.y * qh[2u * t + 3u];
        d += k2.x * qh[2u * t + 4u];
        d += k2.y * qh[2u * t + 5u];
        d += k3.x * qh[2u * t + 6u];
        d += k3.y * qh[2u * t + 7u];
    }
    for (; t < n2; t++) {
        let kv = {{KVF}}(kc[kb + t]);
        d += kv.x * qh[2u * t];
        d += kv.y * qh[2u * t + 1u];
    }
    var v = d * p.scale;
    if (p.softcap > 0.0) {
        v = tanh(v / p.softcap) * p.softcap;
    }
    return v;
}

// Value element vi of the cache (flat index).
fn value(vi: u32) -> f32 {
    let pair = {{KVF}}(vc[vi >> 1u]);
    return select(pair.x, pair.y, (vi & 1u) == 1u);
}

// The score of key j (position j of sequence seq): kept from the first pass, or recomputed.
fn score_of(j: u32, start: u32, kvh: u32, keep: bool, seq: u32) -> f32 {
    if (keep) {
        return kept[j - start];
    }
    return score(kv_row(seq, j), kvh);
}

@compute @workgroup_size(64)
fn attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let idx = wg_index(wid);
    if (idx >= p.rows * p.n_heads) {
        return;
    }
    let r = idx / p.n_heads;
    let h = idx % p.n_heads;
    let kvh = h / p.group;
    let pos = step_pos(r);
    let seq = step_seq(r);
    var start = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        start = pos + 1u - p.window;
    }
    let qb = r * p.q_width + h * p.head_dim;
    for (var t = lid; t < p.head_dim; t += WG) {
        qh[t] = f16_round(q[qb + t]);
    }
    workgroupBarrier();

    // Just below -f32::MAX as written: Chrome's Tint rejects -3.4028235e38 (as an abstract
    // float it exceeds f32's range before rounding); this literal rounds to -f32::MAX.
    // Each invocation keeps the scores of its own keys (j - start ≡ lid mod WG): no barrier
    // is needed between writing and reading them.
    let keep = pos + 1u - start <= KEPT;
    var m = -3.40282346e38;
    for (var j = start + lid; j <= pos; j += WG) {
        let sj = score(kv_row(seq, j), kvh);
        if (keep) {
            kept[j - start] = sj;
        }
        m = max(m, sj);
    }
    red[lid] = m;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (lid < k) {
            red[lid] = max(red[lid], red[lid + k]);
        }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();

    var s = 0.0;
    for (var j = start + lid; j <= pos; j += WG) {
        s += exp(score_of(j, start, kvh, keep, seq) - mx);
    }
    red[lid] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (lid < k) {
            red[lid] += red[lid + k];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    workgroupBarrier();

    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var t0 = start; t0 <= pos; t0 += WG) {
        let j = t0 + lid;
        var pr = 0.0;
        if (j <= pos) {
            pr = f16_round(exp(score_of(j, start, kvh, keep, seq) - mx) * inv);
        }
        pw[lid] = pr;
        prow[lid] = kv_row(seq, min(j, pos));
        workgroupBarrier();
        let cnt = min(WG, pos + 1u - t0);
        for (var c = 0u; c < 4u; c++) {
            let dd = lid + c * WG;
            if (dd < p.head_dim) {
                var av = acc[c];
                let col = kvh * p.head_dim + dd;
                // Eight loads issued before their sums (in the same order as one at a time).
                var jj = 0u;
                for (; jj + 8u <= cnt; jj += 8u) {
                    let v0 = value(prow[jj] * p.v_dim + col);
                    let v1 = value(prow[jj + 1u] * p.v_dim + col);
                    let v2 = value(prow[jj + 2u] * p.v_dim + col);
                    let v3 = value(prow[jj + 3u] * p.v_dim + col);
                    let v4 = value(prow[jj + 4u] * p.v_dim + col);
                    let v5 = value(prow[jj + 5u] * p.v_dim + col);
                    let v6 = value(prow[jj + 6u] * p.v_dim + col);
                    let v7 = value(prow[jj + 7u] * p.v_dim + col);
                    av += pw[jj] * v0;
                    av += pw[jj + 1u] * v1;
                    av += pw[jj + 2u] * v2;
                    av += pw[jj + 3u] * v3;
                    av += pw[jj + 4u] * v4;
                    av += pw[jj + 5u] * v5;
                    av += pw[jj + 6u] * v6;
                    av += pw[jj + 7u] * v7;
                }
                for (; jj < cnt; jj++) {
                    av += pw[jj] * value(prow[jj] * p.v_dim + col);
                }
                acc[c] = av;
            }
        }
        workgroupBarrier();
    }
    for (var c = 0u; c < 4u; c++) {
        let dd = lid + c * WG;
        if (dd < p.head_dim) {
            dst[qb + dd] = acc[c];
        }
    }
}
