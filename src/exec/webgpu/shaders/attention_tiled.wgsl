// Prefill attention as tiled flash attention: a workgroup takes BM (row, query head) pairs of
// one KV head (rows × the heads sharing it, so each staged key serves them all) and walks the
// keys they see in tiles of BC, staged through workgroup memory DC dimensions at a time, with
// an online softmax: per pair a running max, sum and unnormalized output. Key tiles wholly
// after the last row (causal) or before the first row's window are never visited; nothing
// grows with rows × context. Invocation (ti, tj) scores pairs 4 ti .. 4 ti + 3 against keys
// tj * KJ .. and owns those pairs' outputs at dimensions c * DC + 4 tj .. + 3 of each chunk c.
// A workgroup's pairs are rows of one sequence (step.wgsl): each sequence's pairs are cut into
// tiles of BM on their own, and the tiles of all sequences numbered in order; a KV head has
// ceil(rows g / BM) + S - 1 workgroups (the most tiles S sequences can need), and those past
// the step's tiles exit. Keys are read through the sequence's block table, looked up once per
// key tile (BC divides 64: a tile lies in one block).

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> kc: array<{{KV4}}>;
@group(0) @binding(4) var<storage, read> vc: array<{{KV4}}>;
@group(0) @binding(5) var<storage, read_write> dst: array<vec4<f32>>;

const WG: u32 = 64u;
const NO_SEQ: u32 = 0xffffffffu;
const BM: u32 = {{BM}}u;
const BC: u32 = {{BC}}u;
// Dimension chunks of a head (head_dim / DC, rounded up).
const NCH: u32 = {{NCH}}u;
const TI: u32 = {{TI}}u;
const TJ: u32 = {{TJ}}u;
// Dimensions per chunk (4 per invocation of a row of the grid) and keys scored per invocation.
const DC: u32 = {{DC}}u;
const KJ: u32 = {{KJ}}u;

// Queries of the chunk (rounded to f16 as the CPU's K·Q product), dimension-major: the four
// pairs of an invocation's rows in one vector.
var<workgroup> qs: array<vec4<f32>, {{QS}}>;
// Keys of the chunk, dimension-major (scores), then values, key-major (outputs).
var<workgroup> ks: array<vec4<f32>, {{KS}}>;
// Scores, then probabilities, of the tile: key-major, four pairs a vector.
var<workgroup> ps: array<vec4<f32>, {{PS4}}>;
// Per pair: running max, running sum, this tile's rescaling.
var<workgroup> rm: array<f32, BM>;
var<workgroup> rl: array<f32, BM>;
var<workgroup> ra: array<f32, BM>;

@compute @workgroup_size(64)
fn attention_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = p.group;
    let per_kv = (p.rows * g + BM - 1u) / BM + p.n_seq - 1u;
    let n_kv = p.n_heads / g;
    let idx = wg_index(wid);
    if (idx >= per_kv * n_kv) {
        return;
    }
    let kvh = idx / per_kv;
    // The sequence and pairs of tile idx % per_kv (uniform: read from the step buffer at
    // uniform indices, so the early return keeps the barriers below in uniform control flow).
    var t = idx % per_kv;
    var seq = NO_SEQ;
    var m0 = 0u;
    var m_end = 0u;
    let n_seqs = step_count();
    for (var sq = 0u; sq < n_seqs; sq++) {
        let a = step_start(sq) * g;
        let b = step_start(sq + 1u) * g;
        let nt = (b - a + BM - 1u) / BM;
        if (t < nt) {
            seq = sq;
            m0 = a + t * BM;
            m_end = min(m0 + BM, b);
            break;
        }
        t -= nt;
    }
    if (seq == NO_SEQ) {
        return;
    }
    // Rows of a sequence are at consecutive positions: row r of this tile's sequence is at
    // pos0 + r - r0.
    let r0 = m0 / g;
    let pos0 = step_pos(r0);
    let key_hi = pos0 + (m_end - 1u) / g - r0 + 1u;
    let key_lo = keys_from(pos0);
    let ti = lid / TJ;
    let tj = lid % TJ;
    let d4 = p.head_dim / 4u;
    let kb = kvh * p.head_dim / 4u;
    if (lid < BM) {
        rm[lid] = NEG;
        rl[lid] = 0.0;
    }
    // Outputs of the invocation's four pairs, a variable per dimension chunk (acc0, acc1, ...:
    // written out, so that no array is indexed by the chunk loops, which hold barriers and
    // are not unrolled: an array indexed by anything but constants would live in memory).
    {{ACC_DECLS}}

    for (var k0 = key_lo / BC * BC; k0 < key_hi; k0 += BC) {
        // The tile's scores of the invocation's four pairs (a vector) and KJ keys (s0, s1,
        // ...: written out). Declared with an initializer: a loop-local `var` without one is
        // a fresh zero at each iteration in WGSL, but Chromium's compiler (seen in Chromium
        // 156 on SwiftShader) zeroed it once, so every tile added the previous tiles' scores
        // to its own (naga does it right: gfx-rs/wgpu#9489).
        {{S_DECLS}}
        // The tile's first key's cache row.
        let pb = step_block(seq, k0 / 64u) * 64u + k0 % 64u;
        for (var c = 0u; c < NCH; c++) {
            let c4 = c * (DC / 4u);
            for (var i = lid; i < BM * DC / 4u; i += WG) {
                let pl = i / (DC / 4u);
                let dq = i % (DC / 4u);
                let m = m0 + pl;
                var v = vec4<f32>(0.0);
                if (m < m_end && c4 + dq < d4) {
                    let x = q[((m / g) * p.q_width + (kvh * g + m % g) * p.head_dim) / 4u + c4 + dq];
                    v = vec4<f32>(f16_round(x.x), f16_round(x.y), f16_round(x.z), f16_round(x.w));
                }
                for (var e = 0u; e < 4u; e++) {
                    qs[(4u * dq + e) * (BM / 4u) + pl / 4u][pl % 4u] = v[e];
                }
            }
            for (var i = lid; i < BC * DC / 4u; i += WG) {
                let jl = i / (DC / 4u);
                let dq = i % (DC / 4u);
                let j = k0 + jl;
                var v = vec4<f32>(0.0);
                if (j < key_hi && c4 + dq < d4) {
                    v = kv4(kc[(pb + jl) * (p.k_dim / 4u) + kb + c4 + dq]);
                }
                for (var e = 0u; e < 4u; e++) {
                    ks[(4u * dq + e) * (BC / 4u) + jl / 4u][jl % 4u] = v[e];
                }
            }
            workgroupBarrier();
            for (var dd = 0u; dd < DC; dd++) {
                let qv = qs[dd * (BM / 4u) + ti];
                {{QK}}
            }
            workgroupBarrier();
        }

        {{PUT_SCORES}}
        workgroupBarrier();
        if (lid < BM) {
            var tmax = NEG;
            for (var j = 0u; j < BC; j++) {
                tmax = max(tmax, ps[j * (BM / 4u) + lid / 4u][lid % 4u]);
            }
            let mo = rm[lid];
            let mn = max(mo, tmax);
            let a = exp(mo - mn);
            var ls = 0.0;
            for (var j = 0u; j < BC; j++) {
                let x = ps[j * (BM / 4u) + lid / 4u][lid % 4u];
                let e = select(0.0, exp(x - mn), x > NEG);
                ps[j * (BM / 4u) + lid / 4u][lid % 4u] = e;
                ls += e;
            }
            rm[lid] = mn;
            rl[lid] = rl[lid] * a + ls;
            ra[lid] = a;
        }
        workgroupBarrier();

        {{PV_CHUNKS}}
    }

    let o = (kvh * g * p.head_dim) / 4u + tj;
    {{STORES}}
}

// The scores `sv` of key jl of the tile (at k0) for the invocation's four pairs (from m0: row
// ti of the grid), masked (causal, window, past the pairs), to `ps`.
fn put_scores(jl: u32, sv: vec4<f32>, k0: u32, m0: u32, m_end: u32, pos0: u32, r0: u32, ti: u32) {
    var out = vec4<f32>(NEG);
    let j = k0 + jl;
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + 4u * ti + i;
        let pos = pos0 + m / p.group - r0;
        if (m < m_end && j <= pos && j >= keys_from(pos)) {
            out[i] = score_of(sv[i]);
        }
    }
    ps[jl * (BM / 4u) + ti] = out;
}

// Chunk c of the outputs of the invocation's pairs (`a`), rescaled by the tile's `ra`, plus
// the tile's probabilities times the chunk's values, staged through `ks`. Called in uniform
// control flow (barriers).
fn pv_chunk(c: u32, a: array<vec4<f32>, 4>, k0: u32, key_hi: u32, pb: u32, kb: u32, lid: u32) -> array<vec4<f32>, 4> {
    let ti = lid / TJ;
    let tj = lid % TJ;
    let d4 = p.head_dim / 4u;
    // Four variables, not an array: a function-local array here was kept in memory, and the
    // loop below ran at a fraction of the scores' speed.
    var o0 = a[0] * ra[4u * ti];
    var o1 = a[1] * ra[4u * ti + 1u];
    var o2 = a[2] * ra[4u * ti + 2u];
    var o3 = a[3] * ra[4u * ti + 3u];
    let c4 = c * (DC / 4u);
    for (var i = lid; i < BC * DC / 4u; i += WG) {
        let jl = i / (DC / 4u);
        let dq = i % (DC / 4u);
        let j = k0 + jl;
        var v = vec4<f32>(0.0);
        if (j < key_hi && c4 + dq < d4) {
            v = kv4(vc[(pb + jl) * (p.v_dim / 4u) + kb + c4 + dq]);
        }
        ks[jl * (DC / 4u) + dq] = v;
    }
    workgroupBarrier();
    for (var j = 0u; j < BC; j++) {
        let v = ks[j * (DC / 4u) + tj];
        let pv = ps[j * (BM / 4u) + ti];
        o0 += pv.x * v;
        o1 += pv.y * v;
        o2 += pv.z * v;
        o3 += pv.w * v;
    }
    workgroupBarrier();
    return array<vec4<f32>, 4>(o0, o1, o2, o3);
}

// Chunk c of the outputs of the invocation's pairs, divided by their sums, to `dst` (`o`: the
// KV head's first query head's first piece, plus the invocation's column).
fn store_chunk(c: u32, a: array<vec4<f32>, 4>, m0: u32, m_end: u32, o: u32, lid: u32) {
    let g = p.group;
    let ti = lid / TJ;
    let dq = c * (DC / 4u) + lid % TJ;
    if (dq >= p.head_dim / 4u) {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        let pl = 4u * ti + i;
        let m = m0 + pl;
        if (m < m_end) {
            dst[((m / g) * p.q_width) / 4u + ((m % g) * p.head_dim) / 4u + o + c * (DC / 4u)] = a[i] / rl[pl];
        }
    }
}
