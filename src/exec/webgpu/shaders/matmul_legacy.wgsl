// Dot products of one 32-element weight block with one q8_1 activation block (quantize.wgsl),
// integer inside the block and scaled as the CPU reference does: (d_w · d_a) · Σ q_w q_a
// (+ m_w · s_a for the types with a min). `ro`: byte offset of the weight row; `b`: block
// index in the row; `ab`: word index of the activation block.

fn dot_q8_0(ro: u32, b: u32, ab: u32) -> f32 {
    let o = ro + b * 34u;
    var s = 0;
    for (var i = 0u; i < 8u; i++) {
        s += dot_i8(wword(o + 2u + 4u * i), a[ab + 2u + i]);
    }
    return whalf(o) * bitcast<f32>(a[ab]) * f32(s);
}

fn dot_q4_0(ro: u32, b: u32, ab: u32) -> f32 {
    let o = ro + b * 18u;
    var s = 0;
    var sa = 0;
    for (var i = 0u; i < 4u; i++) {
        let q = wword(o + 2u + 4u * i);
        let a0 = a[ab + 2u + i];
        let a1 = a[ab + 6u + i];
        s += dot_u8(q & 0x0f0f0f0fu, a0) + dot_u8((q >> 4u) & 0x0f0f0f0fu, a1);
        sa += sum_i8(a0) + sum_i8(a1);
    }
    return whalf(o) * bitcast<f32>(a[ab]) * f32(s - 8 * sa);
}

fn dot_q4_1(ro: u32, b: u32, ab: u32) -> f32 {
    let o = ro + b * 20u;
    var s = 0;
    for (var i = 0u; i < 4u; i++) {
        let q = wword(o + 4u + 4u * i);
        s += dot_u8(q & 0x0f0f0f0fu, a[ab + 2u + i]) + dot_u8((q >> 4u) & 0x0f0f0f0fu, a[ab + 6u + i]);
    }
    return whalf(o) * bitcast<f32>(a[ab]) * f32(s) + whalf(o + 2u) * bitcast<f32>(a[ab + 1u]);
}

fn dot_q5_0(ro: u32, b: u32, ab: u32) -> f32 {
    let o = ro + b * 22u;
    let qh = wword(o + 2u);
    var s = 0;
    var sa = 0;
    for (var i = 0u; i < 4u; i++) {
        let q = wword(o + 6u + 4u * i);
        let a0 = a[ab + 2u + i];
        let a1 = a[ab + 6u + i];
        let lo = (q & 0x0f0f0f0fu) | spread4(qh >> (4u * i));
        let hi = ((q >> 4u) & 0x0f0f0f0fu) | spread4(qh >> (16u + 4u * i));
        s += dot_u8(lo, a0) + dot_u8(hi, a1);
        sa += sum_i8(a0) + sum_i8(a1);
    }
    return whalf(o) * bitcast<f32>(a[ab]) * f32(s - 16 * sa);
}

fn dot_q5_1(ro: u32, b: u32, ab: u32) -> f32 {
    let o = ro + b * 24u;
    let qh = wword(o + 4u);
    var s = 0;
    for (var i = 0u; i < 4u; i++) {
        let q = wword(o + 8u + 4u * i);
        let lo = (q & 0x0f0f0f0fu) | spread4(qh >> (4u * i));
        let hi = ((q >> 4u) & 0x0f0f0f0fu) | spread4(qh >> (16u + 4u * i));
        s += dot_u8(lo, a[ab + 2u + i]) + dot_u8(hi, a[ab + 6u + i]);
    }
    return whalf(o) * bitcast<f32>(a[ab]) * f32(s) + whalf(o + 2u) * bitcast<f32>(a[ab + 1u]);
}
