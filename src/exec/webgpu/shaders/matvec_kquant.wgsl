// Tasks of the 256-element K-quant super-blocks (see matvec.wgsl) against q8_k activations:
// integer sums per 16- or 32-element sub-block times their integer scales, then
// d_a · (d_w · Σ sc · dot − dmin_w · Σ mn · Σq_a), as the CPU reference does. The mins and the
// formats' offsets (−32 for Q6_K, −4 for Q3_K's clear high bits) use the activations' sums per
// 16 values, so every weight byte feeds a `dot4I8Packed` unchanged but for masks and shifts.
//
// Weight bytes per task (16 read for the quants plus the shared headers, which hit in cache):
// - Q4_K (144-byte blocks, 16-aligned): 8 tasks of 32 values; one 16-byte load of quants and
//   one of the header (d, dmin, 12 scale bytes). 4.5 bits per weight.
// - Q5_K (176, 16-aligned): as Q4_K plus 16 bytes of high bits shared by two tasks. 5.5 bits.
// - Q6_K (210, 2-aligned): 8 tasks of 32 values; 16 bytes of low and 16 of high bits (shared
//   by two tasks), two scale bytes. 6.56 bits.
// - Q2_K (84, 4-aligned): 4 tasks of 64 values; 16 bytes of quants, 2 scale words. 2.6 bits.
// - Q3_K (110, 2-aligned): 4 tasks of 64 values; 16 bytes of quants, 16 of high bits, the
//   12 scale bytes. 3.4 bits.

// Sum of the 16 activations i (0..16) of q8_k block b (its record holds them).
fn asum16(b: u32, i: u32) -> i32 {
    return bitcast<i32>(a[p.recs + 5u * b + 1u + i / 4u][i % 4u]);
}

// Q4_K, Q5_K task s = 2j + h (0..8) of a block: 16 bytes holding values 16h..16h+16 of
// sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles).
fn act_q4_k(r: u32, t: u32) -> Act {
    let b = r * p.nb + t / 8u;
    let s = t % 8u;
    let i0 = 4u * (s / 2u) + s % 2u;
    var x: Act;
    x.q0 = a[16u * b + i0];
    x.q1 = a[16u * b + i0 + 2u];
    x.d = bitcast<f32>(a[p.recs + 5u * b].x);
    x.s = vec4<i32>(asum16(b, i0), asum16(b, i0 + 2u), 0, 0);
    return x;
}

fn k4_finish(v: u32, j: u32, lo: vec4<u32>, hi: vec4<u32>, x: Act) -> f32 {
    let hd = w[v];
    let dm = whalf2(16u * v);
    let sm0 = vec2<i32>(k4_scale_min(2u * j, hd.y, hd.z, hd.w));
    let sm1 = vec2<i32>(k4_scale_min(2u * j + 1u, hd.y, hd.z, hd.w));
    let isum = sm0.x * dot16(lo, x.q0) + sm1.x * dot16(hi, x.q1);
    let msum = sm0.y * x.s.x + sm1.y * x.s.y;
    return x.d * (dm.x * f32(isum) - dm.y * f32(msum));
}

fn dot_q4_k(ro: u32, t: u32, x: Act) -> f32 {
    let s = t % 8u;
    let v = (ro + (t / 8u) * 144u) / 16u;
    let q = w[v + 1u + s];
    let lo = q & vec4<u32>(M4);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(M4);
    return k4_finish(v, s / 2u, lo, hi, x);
}

fn dot_q5_k(ro: u32, t: u32, x: Act) -> f32 {
    let s = t % 8u;
    let j = s / 2u;
    let v = (ro + (t / 8u) * 176u) / 16u;
    let qh = w[v + 1u + s % 2u];
    let q = w[v + 3u + s];
    let lo = (q & vec4<u32>(M4)) | (((qh >> vec4<u32>(2u * j)) & vec4<u32>(M1)) << vec4<u32>(4u));
    let hi = ((q >> vec4<u32>(4u)) & vec4<u32>(M4)) | (((qh >> vec4<u32>(2u * j + 1u)) & vec4<u32>(M1)) << vec4<u32>(4u));
    return k4_finish(v, j, lo, hi, x);
}

// Q6_K task s = 4hh + 2cm + lh (0..8): values 16lh..16lh+16 of chunks cm and cm + 2 of half
// hh; they share 16 bytes of low bits (low, high nibbles) and of high bits (2-bit fields).
// Their scales and activation sums are 16-value groups i0 = 8hh + 2cm + lh and i0 + 4.
fn act_q6_k(r: u32, t: u32) -> Act {
    let b = r * p.nb + t / 8u;
    let i0 = t % 8u + 4u * ((t % 8u) / 4u);
    var x: Act;
    x.q0 = a[16u * b + i0];
    x.q1 = a[16u * b + i0 + 4u];
    x.d = bitcast<f32>(a[p.recs + 5u * b].x);
    x.s = vec4<i32>(asum16(b, i0), asum16(b, i0 + 4u), 0, 0);
    return x;
}

fn dot_q6_k(ro: u32, t: u32, x: Act) -> f32 {
    let s = t % 8u;
    let hh = s / 4u;
    let cm = (s / 2u) % 2u;
    let lh = s % 2u;
    let i0 = 8u * hh + 2u * cm + lh;
    let o = ro + (t / 8u) * 210u;
    let ql = wvec(o + 64u * hh + 32u * cm + 16u * lh);
    let qh = wvec(o + 128u + 32u * hh + 16u * lh);
    let v0 = (ql & vec4<u32>(M4)) | (((qh >> vec4<u32>(2u * cm)) & vec4<u32>(M2)) << vec4<u32>(4u));
    let v1 = ((ql >> vec4<u32>(4u)) & vec4<u32>(M4)) | (((qh >> vec4<u32>(2u * cm + 4u)) & vec4<u32>(M2)) << vec4<u32>(4u));
    let sc0 = bitcast<i32>(wbyte(o + 192u + i0) << 24u) >> 24u;
    let sc1 = bitcast<i32>(wbyte(o + 196u + i0) << 24u) >> 24u;
    let isum = sc0 * (dot16(v0, x.q0) - 32 * x.s.x) + sc1 * (dot16(v1, x.q1) - 32 * x.s.y);
    return x.d * (whalf(o + 208u) * f32(isum));
}

// Q2_K, Q3_K task s = 2hh + lh (0..4): 16 bytes of 2-bit fields holding values 16lh..16lh+16
// of the four chunks c = 4hh + cc (field cc); 16-value groups 2c + lh = 8hh + lh + 2cc.
fn act_q2_k(r: u32, t: u32) -> Act {
    let b = r * p.nb + t / 4u;
    let s = t % 4u;
    let i0 = 8u * (s / 2u) + s % 2u;
    let u = 16u * b + i0;
    var x: Act;
    x.q0 = a[u];
    x.q1 = a[u + 2u];
    x.q2 = a[u + 4u];
    x.q3 = a[u + 6u];
    x.d = bitcast<f32>(a[p.recs + 5u * b].x);
    x.s = vec4<i32>(asum16(b, i0), asum16(b, i0 + 2u), asum16(b, i0 + 4u), asum16(b, i0 + 6u));
    return x;
}

fn dot_q2_k(ro: u32, t: u32, x: Act) -> f32 {
    let s = t % 4u;
    let hh = s / 2u;
    let lh = s % 2u;
    let o = ro + (t / 4u) * 84u;
    let q = wvec(o + 16u + 32u * hh + 16u * lh);
    // Scale bytes 8hh + lh + 2cc: (scale, min) nibbles.
    let s0 = wword(o + 8u * hh) >> (8u * lh);
    let s1 = wword(o + 8u * hh + 4u) >> (8u * lh);
    let sc = vec4<u32>(s0, s0 >> 16u, s1, s1 >> 16u) & vec4<u32>(0xffu);
    let isum = i32(sc.x & 15u) * dot16(q & vec4<u32>(M2), x.q0)
        + i32(sc.y & 15u) * dot16((q >> vec4<u32>(2u)) & vec4<u32>(M2), x.q1)
        + i32(sc.z & 15u) * dot16((q >> vec4<u32>(4u)) & vec4<u32>(M2), x.q2)
        + i32(sc.w & 15u) * dot16((q >> vec4<u32>(6u)) & vec4<u32>(M2), x.q3);
    let msum = dot(vec4<i32>(sc >> vec4<u32>(4u)), x.s);
    let dm = whalf2(o + 80u);
    return x.d * (dm.x * f32(isum) - dm.y * f32(msum));
}

fn dot_q3_k(ro: u32, t: u32, x: Act) -> f32 {
    let s = t % 4u;
    let hh = s / 2u;
    let lh = s % 2u;
    let o = ro + (t / 4u) * 110u;
    let q = wvec(o + 32u + 32u * hh + 16u * lh);
    let hm = wvec(o + 16u * lh) >> vec4<u32>(4u * hh);
    let sv = wvec(o + 96u);
    let i0 = 8u * hh + lh;
    var isum = 0;
    for (var cc = 0u; cc < 4u; cc++) {
        let v = ((q >> vec4<u32>(2u * cc)) & vec4<u32>(M2)) | (((hm >> vec4<u32>(cc)) & vec4<u32>(M1)) << vec4<u32>(2u));
        var qa = x.q0;
        if (cc == 1u) {
            qa = x.q1;
        } else if (cc == 2u) {
            qa = x.q2;
        } else if (cc == 3u) {
            qa = x.q3;
        }
        isum += q3k_scale(i0 + 2u * cc, sv) * (dot16(v, qa) - 4 * x.s[cc]);
    }
    return x.d * (whalf(o + 108u) * f32(isum));
}
