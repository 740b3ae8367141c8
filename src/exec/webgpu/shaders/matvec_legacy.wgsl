// Tasks of the legacy 32-element formats (see matvec.wgsl) against q8_1 activations, with
// integer sums inside a block scaled as the CPU reference does: d_w · d_a · Σ q_w q_a, the
// format's offset folded in through the activations' Σq (−8 Σq_a for Q4_0, −16 for Q5_0),
// the min through s (+ m_w · s_a for Q4_1, Q5_1). Weight blocks are 18 to 34 bytes, not
// 4-byte aligned: words are read through `wvec` (weights.wgsl).
// Bytes read per 32 weights: the block (18 to 34) + 32 activation bytes and their 16-byte
// record (shared by the workgroup's rows).

// One task per block: the block's 32 activations and record.
fn act_q8_1(r: u32, t: u32) -> Act {
    let b = r * p.nb + t;
    let m = a[p.recs + b];
    var x: Act;
    x.q0 = a[2u * b];
    x.q1 = a[2u * b + 1u];
    x.d = bitcast<f32>(m.x);
    x.m = bitcast<f32>(m.y);
    x.s = vec4<i32>(bitcast<i32>(m.z), 0, 0, 0);
    return x;
}

// Q8_0: two tasks per block (16 values each).
fn act_q8_0(r: u32, t: u32) -> Act {
    let b = r * p.nb + t / 2u;
    var x: Act;
    x.q0 = a[2u * b + t % 2u];
    x.d = bitcast<f32>(a[p.recs + b].x);
    return x;
}

fn dot_q8_0(ro: u32, t: u32, x: Act) -> f32 {
    let o = ro + (t / 2u) * 34u;
    let q = wvec(o + 2u + 16u * (t % 2u));
    return whalf(o) * x.d * f32(dot16(q, x.q0));
}

fn dot_q4_0(ro: u32, t: u32, x: Act) -> f32 {
    let o = ro + t * 18u;
    let q = wvec(o + 2u);
    let s = dot16(q & vec4<u32>(M4), x.q0) + dot16((q >> vec4<u32>(4u)) & vec4<u32>(M4), x.q1);
    return whalf(o) * x.d * f32(s - 8 * x.s.x);
}

fn dot_q4_1(ro: u32, t: u32, x: Act) -> f32 {
    let o = ro + t * 20u;
    let dm = vec2<f32>(whalf(o), whalf(o + 2u));
    let q = wvec(o + 4u);
    let s = dot16(q & vec4<u32>(M4), x.q0) + dot16((q >> vec4<u32>(4u)) & vec4<u32>(M4), x.q1);
    return dm.x * x.d * f32(s) + dm.y * x.m;
}

// Q5_0/Q5_1: the 16 low nibbles and 16 high nibbles with their 5th bits (qh bits 0..16, 16..32).
fn q5_dot(q: vec4<u32>, qh: u32, x: Act) -> i32 {
    let h = vec4<u32>(qh) >> vec4<u32>(0u, 4u, 8u, 12u);
    let lo = (q & vec4<u32>(M4)) | spread4(h);
    let hi = ((q >> vec4<u32>(4u)) & vec4<u32>(M4)) | spread4(h >> vec4<u32>(16u));
    return dot16(lo, x.q0) + dot16(hi, x.q1);
}

fn dot_q5_0(ro: u32, t: u32, x: Act) -> f32 {
    let o = ro + t * 22u;
    let s = q5_dot(wvec(o + 6u), wword(o + 2u), x);
    return whalf(o) * x.d * f32(s - 16 * x.s.x);
}

fn dot_q5_1(ro: u32, t: u32, x: Act) -> f32 {
    let o = ro + t * 24u;
    let dm = vec2<f32>(whalf(o), whalf(o + 2u));
    let s = q5_dot(wvec(o + 8u), wword(o + 4u), x);
    return dm.x * x.d * f32(s) + dm.y * x.m;
}
