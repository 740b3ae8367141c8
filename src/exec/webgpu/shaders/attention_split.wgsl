// Decode attention, split along the cache (flash-decoding), first pass: a workgroup takes one
// split of the keys a row sees (split_len keys from split_from, computed from the row's own
// position at run time: the command buffer is replayed for every token; each row may belong
// to another sequence, whose block table maps its keys to cache rows: step.wgsl) for one KV
// head and HB of the query heads that share it, so each key and value is read once for all of
// them. The split's running max, sum and unnormalized output per head go to `part`, which
// attention_combine.wgsl merges. Workgroups past the last split exit.
//
// Keys are walked in tiles of T = 64 (one block of the cache). A tile costs one round trip to
// memory: every invocation issues its loads of the tile's keys and values together, into
// registers, before any of them is used (the kernel is bound by latency, not bandwidth: a
// split is a tile or two). Then, with three barriers a tile:
// - scores: P invocations a key, each taking every P-th four dimensions (so that the P
//   neighbours read 32 contiguous bytes), partial dot products for the HB heads to `red`;
// - softmax: WG / HB invocations a head, each summing the parts of its key(s) into a score,
//   then the tile's max over the head's scores, the running max and the rescaling `alpha`,
//   and probabilities to `pe`;
// - values: VG groups of D4 invocations, group k taking keys k, k + VG, ... (an invocation owns
//   four dimensions: the D4 of a group read one whole value row), accumulating every head.
// At the end the VG groups' outputs are summed through `red`, a head at a time.
// Layout of `part`: (m, l) pairs for every (row, head, split), then the outputs (head_dim
// values each) in the same order.
// A row whose keys all fit in one split (a context of at most 64 keys, or of one split's
// length) needs no merge: its workgroup writes the normalized output to `dst` with the
// merge's float operations, and attention_combine.wgsl skips the row. That saved an 8B
// decode layer on an H200 the merge's ~6 µs at short contexts.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> kc: array<{{KV4}}>;
@group(0) @binding(4) var<storage, read> vc: array<{{KV4}}>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;
@group(0) @binding(6) var<storage, read_write> dst: array<f32>;

const WG: u32 = 256u;
// Keys per tile.
const T: u32 = 64u;
// Query heads per workgroup.
const HB: u32 = {{HB}}u;
// Four-value pieces of a head (head_dim / 4: the kernel is built per head size).
const D4: u32 = {{D4}}u;
// Invocations per key in the scores (each loads ceil(D4 / P) pieces: k0, k1, ... written out
// by kernels.rs).
const P: u32 = WG / T;
// Key groups in the values, and the keys each invocation of a group loads.
const VG: u32 = WG / D4;
// Invocations per head in the softmax, and the keys each takes.
const SPH: u32 = WG / HB;
const KS: u32 = (T + SPH - 1u) / SPH;

// The queries (rounded to f16, as the CPU's K·Q product with f16 keys), head h at h * D4.
var<workgroup> qs: array<vec4<f32>, {{QS}}>;
// Partial scores (head, key, part), and the score of (head, key) in place of its first part
// (read and written by one invocation); at the end, the running sums, then the groups'
// outputs of one head.
var<workgroup> red: array<f32, {{RED}}>;
// The tile's probabilities, head h at h * T.
var<workgroup> pe: array<f32, {{HBT}}>;
// Each head's rescaling of the output for this tile.
var<workgroup> alpha: array<f32, HB>;
// Each head's final max and sum (a row of one split).
var<workgroup> fin_m: array<f32, HB>;
var<workgroup> fin_l: array<f32, HB>;

@compute @workgroup_size(256)
fn attention_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var idx = wg_index(wid);
    let n_kv = p.n_heads / p.group;
    if (idx >= p.splits * p.blocks * n_kv * p.rows) {
        return;
    }
    let s = idx % p.splits;
    idx /= p.splits;
    let blk = idx % p.blocks;
    idx /= p.blocks;
    let kvh = idx % n_kv;
    let r = idx / n_kv;
    let pos = step_pos(r);
    let seq = step_seq(r);
    let lo = keys_from(pos);
    let lo_tile = split_from(pos);
    let hi = pos + 1u;
    let len = split_len(hi - lo_tile);
    let c0 = lo_tile + s * len;
    if (c0 >= hi) {
        return;
    }
    let c1 = min(hi, c0 + len);
    // One split holds every key: attention_combine.wgsl's `used` is 1.
    let whole = hi - lo_tile <= len;
    let h0 = kvh * p.group + blk * HB;
    let nh = min(HB, p.group - blk * HB);

    // Scores role: key kk of the tile, pieces kp, kp + P, ...
    let kk = lid / P;
    let kp = lid % P;
    // Softmax role: head oh, keys oj * KS ..; running max m and this invocation's share l of
    // the running sum.
    let oh = lid / SPH;
    let oj = lid % SPH;
    var m = NEG;
    var l = 0.0;
    // Values role: keys vk, vk + VG, ..., pieces vd of every head.
    let vk = lid / D4;
    let vd = lid % D4;
    let kb = kvh * p.head_dim / 4u;
    let krow = p.k_dim / 4u;
    let vrow = p.v_dim / 4u;

    // Per head: the partial scores d0, d1, ... (zeroed by hand at every tile rather than
    // declared in the loop body: Chromium's compiler zeroes a loop-local `var` only once, see
    // attention_tiled.wgsl) and the outputs acc0, acc1, ...: written-out variables, not arrays,
    // which the Vulkan driver kept in memory inside this loop (it holds barriers).
    {{DECLS}}
    for (var t0 = c0; t0 < c1; t0 += T) {
        let cnt = min(T, c1 - t0);
        // The tile's cache rows: t0 is a multiple of 64, so its keys lie in one block.
        let pb = step_block(seq, t0 / 64u) * 64u;
        // Every load of the tile before any use, written out (k0, k1, ..., v0, v1, ...: the
        // loaded values in registers, never in an array). Rows past the split are clamped to
        // its last key (rows of a block past the sequence's end hold anything, NaN included)
        // and masked below; pieces past the head (D4 not a multiple of P) are zeroed.
        let kr0 = (pb + min(kk, cnt - 1u)) * krow + kb;
        let vr0 = pb * vrow + kb + vd;
        {{LOADS}}
        // The queries, staged once while the first tile's loads are in flight.
        if (t0 == c0) {
            for (var i = lid; i < HB * D4; i += WG) {
                let h = i / D4;
                var v = vec4<f32>(0.0);
                if (h < nh) {
                    let x = q[(r * p.q_width + (h0 + h) * p.head_dim) / 4u + i % D4];
                    v = vec4<f32>(f16_round(x.x), f16_round(x.y), f16_round(x.z), f16_round(x.w));
                }
                qs[i] = v;
            }
            workgroupBarrier();
        }

        {{ZERO}}
        {{DOTS}}
        {{PARTIALS}}
        workgroupBarrier();

        for (var k = 0u; k < KS; k++) {
            let j = oj * KS + k;
            if (j < T) {
                // P = 4 parts, added in order.
                let b = (oh * T + j) * P;
                let x = ((red[b] + red[b + 1u]) + red[b + 2u]) + red[b + 3u];
                red[(oh * T + j) * P] = select(NEG, score_of(x), j < cnt && t0 + j >= lo);
            }
        }
        workgroupBarrier();

        // Eight loads a round, issued before their maxima (a load, then its use, a key at a
        // time was about 2 µs of an 8B layer's ~15 on an H200 at a tile).
        var tmax = NEG;
        for (var j = 0u; j < T; j += 8u) {
            let b = (oh * T + j) * P;
            let x0 = red[b];
            let x1 = red[b + P];
            let x2 = red[b + 2u * P];
            let x3 = red[b + 3u * P];
            let x4 = red[b + 4u * P];
            let x5 = red[b + 5u * P];
            let x6 = red[b + 6u * P];
            let x7 = red[b + 7u * P];
            tmax = max(tmax, max(max(max(x0, x1), max(x2, x3)), max(max(x4, x5), max(x6, x7))));
        }
        let mn = max(m, tmax);
        let a = exp(m - mn);
        m = mn;
        var ls = 0.0;
        for (var k = 0u; k < KS; k++) {
            let j = oj * KS + k;
            if (j < T) {
                let e = select(0.0, exp(red[(oh * T + j) * P] - mn), j < cnt);
                pe[oh * T + j] = e;
                ls += e;
            }
        }
        l = l * a + ls;
        if (oj == 0u) {
            alpha[oh] = a;
        }
        workgroupBarrier();

        if (vk < VG) {
            {{RESCALE}}
            {{ACCUMULATE}}
        }
    }

    // The sums: each head's SPH shares, through `red`.
    workgroupBarrier();
    red[lid] = l;
    workgroupBarrier();
    let base = (r * p.n_heads + h0) * p.splits + s;
    if (oj == 0u && oh < nh) {
        // Eight loads a round before their sums (added in the same order as one at a time;
        // SPH = 256 / HB is a multiple of 8).
        var tot = 0.0;
        for (var i = 0u; i < SPH; i += 8u) {
            let b = lid + i;
            let x0 = red[b];
            let x1 = red[b + 1u];
            let x2 = red[b + 2u];
            let x3 = red[b + 3u];
            let x4 = red[b + 4u];
            let x5 = red[b + 5u];
            let x6 = red[b + 6u];
            let x7 = red[b + 7u];
            tot = tot + x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
        }
        if (whole) {
            fin_m[oh] = m;
            fin_l[oh] = tot;
        } else {
            let ml = 2u * (base + oh * p.splits);
            part[ml] = m;
            part[ml + 1u] = tot;
        }
    }
    // The outputs: the VG groups' sums, a head at a time.
    let o = 2u * p.rows * p.n_heads * p.splits + base * p.head_dim + 4u * lid;
    let d = r * p.q_width + h0 * p.head_dim + 4u * lid;
    {{OUTPUTS}}
}

// Head h's output: every group's `a` (invocation (vk, vd)'s four dimensions) summed through
// `red` by the first D4 invocations, to `part` at `o` + h's offset; or, for a row of one split
// (`whole`), normalized as attention_combine.wgsl does it, to `dst` at `d` + h's offset.
// Called in uniform control flow (it has barriers).
fn output_head(h: u32, a: vec4<f32>, lid: u32, nh: u32, o: u32, d: u32, whole: bool) {
    workgroupBarrier();
    if (lid < VG * D4) {
        red[4u * lid] = a.x;
        red[4u * lid + 1u] = a.y;
        red[4u * lid + 2u] = a.z;
        red[4u * lid + 3u] = a.w;
    }
    workgroupBarrier();
    if (lid < D4 && h < nh) {
        // Group g's four values at 4 (g D4 + lid), every group's loaded before the sum
        // (written out by kernels.rs: s0, s1, ...; added in order).
        var sum = vec4<f32>(0.0);
        {{OUT_SUM}}
        if (whole) {
            // The merge of one split: its weight exp(m - max) = exp(0), the sums scaled by it,
            // then times the inverse of the weighted total.
            let mh = fin_m[h];
            let e = exp(mh - mh);
            let inv = 1.0 / (e * fin_l[h]);
            let t = (vec4<f32>(0.0) + e * sum) * inv;
            let j = d + h * p.head_dim;
            dst[j] = t.x;
            dst[j + 1u] = t.y;
            dst[j + 2u] = t.z;
            dst[j + 3u] = t.w;
            return;
        }
        let i = o + h * p.splits * p.head_dim;
        part[i] = sum.x;
        part[i + 1u] = sum.y;
        part[i + 2u] = sum.z;
        part[i + 3u] = sum.w;
    }
}
