// Decode attention, split along the cache (flash-decoding), first pass: a workgroup takes one
// split of the keys a row sees (split_len keys from split_from, computed from the row's own
// position at run time: the command buffer is replayed for every token; each row may belong
// to another sequence, whose block table maps its keys to cache rows: step.wgsl) for one KV head and HB of the query heads
// that share it, so each key and value is read once for all of them. Keys are walked in tiles
// of 64 with an online softmax; the split's running max, sum and unnormalized output per head
// go to `part`, which attention_combine.wgsl merges. Workgroups past the last split exit.
// Layout of `part`: (m, l) pairs for every (row, head, split), then the outputs (head_dim
// values each) in the same order.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> kc: array<{{KV4}}>;
@group(0) @binding(4) var<storage, read> vc: array<{{KV4}}>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

const WG: u32 = 64u;
// Query heads per workgroup.
const HB: u32 = {{HB}}u;
// Threads per head in the softmax step (each owns HB keys of the tile).
const SEGW: u32 = WG / HB;

// The queries (rounded to f16, as the CPU's K·Q product with f16 keys), head h at h * 64.
var<workgroup> qs: array<vec4<f32>, {{QS}}>;
// Scores and probabilities of the tile, head h at h * WG.
var<workgroup> sc: array<f32, {{HB64}}>;
var<workgroup> pr: array<f32, {{HB64}}>;
// Each head's rescaling of the output for this tile.
var<workgroup> alpha: array<f32, HB>;
var<workgroup> lsum: array<f32, WG>;

@compute @workgroup_size(64)
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
    let d4 = p.head_dim / 4u;
    let h0 = kvh * p.group + blk * HB;
    let nh = min(HB, p.group - blk * HB);

    for (var i = lid; i < HB * 64u; i += WG) {
        let h = i / 64u;
        let t = i % 64u;
        var v = vec4<f32>(0.0);
        if (h < nh && t < d4) {
            let x = q[(r * p.q_width + (h0 + h) * p.head_dim) / 4u + t];
            v = vec4<f32>(f16_round(x.x), f16_round(x.y), f16_round(x.z), f16_round(x.w));
        }
        qs[i] = v;
    }
    workgroupBarrier();

    // Softmax role: head oh, keys seg * HB .. of each tile; running max m and partial sum l.
    let oh = lid / SEGW;
    let seg = lid % SEGW;
    var m = NEG;
    var l = 0.0;
    // Output role: values 4 dq .. 4 dq + 3 of heads hs, hs + ns, ...
    let ns = WG / d4;
    let dq = lid % d4;
    let hs = lid / d4;
    var acc: array<vec4<f32>, HB>;
    let kb = kvh * p.head_dim / 4u;

    // Scores: invocation lid takes key t0 + lid for every head. Zeroed by hand at every tile
    // rather than declared in the loop body (Chromium's compiler zeroes a loop-local `var` only
    // once: see attention_tiled.wgsl).
    var d: array<f32, HB>;
    for (var t0 = c0; t0 < c1; t0 += WG) {
        let cnt = min(WG, c1 - t0);
        // The tile's cache rows: t0 is a multiple of 64, so its keys lie in one block.
        let pb = step_block(seq, t0 / 64u) * 64u;
        for (var h = 0u; h < HB; h++) {
            d[h] = 0.0;
        }
        if (lid < cnt) {
            let row = (pb + lid) * (p.k_dim / 4u) + kb;
            // Four loads issued before their products.
            var t = 0u;
            for (; t + 4u <= d4; t += 4u) {
                let k0 = kv4(kc[row + t]);
                let k1 = kv4(kc[row + t + 1u]);
                let k2 = kv4(kc[row + t + 2u]);
                let k3 = kv4(kc[row + t + 3u]);
                for (var h = 0u; h < HB; h++) {
                    let b = h * 64u + t;
                    d[h] += dot(k0, qs[b]) + dot(k1, qs[b + 1u]) + dot(k2, qs[b + 2u]) + dot(k3, qs[b + 3u]);
                }
            }
            for (; t < d4; t++) {
                let k = kv4(kc[row + t]);
                for (var h = 0u; h < HB; h++) {
                    d[h] += dot(k, qs[h * 64u + t]);
                }
            }
        }
        for (var h = 0u; h < HB; h++) {
            sc[h * WG + lid] = select(NEG, score_of(d[h]), lid < cnt && t0 + lid >= lo);
        }
        workgroupBarrier();

        var tmax = NEG;
        for (var j = 0u; j < cnt; j++) {
            tmax = max(tmax, sc[oh * WG + j]);
        }
        let mn = max(m, tmax);
        let a = exp(m - mn);
        m = mn;
        var ls = 0.0;
        for (var k = 0u; k < HB; k++) {
            let j = seg * HB + k;
            let e = select(0.0, exp(sc[oh * WG + j] - mn), j < cnt);
            pr[oh * WG + j] = e;
            ls += e;
        }
        l = l * a + ls;
        if (seg == 0u) {
            alpha[oh] = a;
        }
        workgroupBarrier();

        if (hs < ns) {
            for (var k = 0u; k < HB; k++) {
                let h = hs + k * ns;
                if (h < HB) {
                    acc[k] *= alpha[h];
                }
            }
            let vrow = p.v_dim / 4u;
            let vb = pb * vrow + kb + dq;
            // Four loads issued before their products.
            var j = 0u;
            for (; j + 4u <= cnt; j += 4u) {
                let v0 = kv4(vc[vb + j * vrow]);
                let v1 = kv4(vc[vb + (j + 1u) * vrow]);
                let v2 = kv4(vc[vb + (j + 2u) * vrow]);
                let v3 = kv4(vc[vb + (j + 3u) * vrow]);
                for (var k = 0u; k < HB; k++) {
                    let h = hs + k * ns;
                    if (h < HB) {
                        let b = h * WG + j;
                        acc[k] += pr[b] * v0 + pr[b + 1u] * v1 + pr[b + 2u] * v2 + pr[b + 3u] * v3;
                    }
                }
            }
            for (; j < cnt; j++) {
                let v = kv4(vc[vb + j * vrow]);
                for (var k = 0u; k < HB; k++) {
                    let h = hs + k * ns;
                    if (h < HB) {
                        acc[k] += pr[h * WG + j] * v;
                    }
                }
            }
        }
        workgroupBarrier();
    }

    lsum[lid] = l;
    workgroupBarrier();
    let base = (r * p.n_heads + h0) * p.splits + s;
    if (seg == 0u && oh < nh) {
        var tot = 0.0;
        for (var i = 0u; i < SEGW; i++) {
            tot += lsum[lid + i];
        }
        let ml = 2u * (base + oh * p.splits);
        part[ml] = m;
        part[ml + 1u] = tot;
    }
    if (hs < ns) {
        let outs = 2u * p.rows * p.n_heads * p.splits;
        for (var k = 0u; k < HB; k++) {
            let h = hs + k * ns;
            if (h < nh) {
                let o = outs + (base + h * p.splits) * p.head_dim + 4u * dq;
                part[o] = acc[k].x;
                part[o + 1u] = acc[k].y;
                part[o + 2u] = acc[k].z;
                part[o + 3u] = acc[k].w;
            }
        }
    }
}
