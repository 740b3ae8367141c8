// Element e of the weight row starting at byte `ro`, one function per block format
// (the same float operations as the CPU's `quant::dequantize`). Used by embed.wgsl.

fn deq_f32(ro: u32, e: u32) -> f32 {
    return bitcast<f32>(wword(ro + 4u * e));
}

fn deq_f16(ro: u32, e: u32) -> f32 {
    return whalf(ro + 2u * e);
}

fn deq_q8_0(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 32u) * 34u;
    let q = bitcast<i32>(wbyte(o + 2u + e % 32u) << 24u) >> 24u;
    return whalf(o) * f32(q);
}

// The 4-bit value of element l (0..32) of a 16-byte nibble array at `qs`.
fn nibble(qs: u32, l: u32) -> u32 {
    let b = wbyte(qs + l % 16u);
    return select(b & 15u, b >> 4u, l >= 16u);
}

fn deq_q4_0(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 32u) * 18u;
    return whalf(o) * f32(i32(nibble(o + 2u, e % 32u)) - 8);
}

fn deq_q4_1(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 32u) * 20u;
    return whalf(o) * f32(nibble(o + 4u, e % 32u)) + whalf(o + 2u);
}

fn deq_q5_0(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 32u) * 22u;
    let l = e % 32u;
    let q = nibble(o + 6u, l) | (((wword(o + 2u) >> l) & 1u) << 4u);
    return whalf(o) * f32(i32(q) - 16);
}

fn deq_q5_1(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 32u) * 24u;
    let l = e % 32u;
    let q = nibble(o + 8u, l) | (((wword(o + 4u) >> l) & 1u) << 4u);
    return whalf(o) * f32(q) + whalf(o + 2u);
}

fn deq_q4_k(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 256u) * 144u;
    let i = e % 256u;
    let c = i / 32u;
    let sm = k4_scale_min(c, wword(o + 4u), wword(o + 8u), wword(o + 12u));
    let q = (wbyte(o + 16u + 32u * (c / 2u) + i % 32u) >> (4u * (c % 2u))) & 15u;
    return (whalf(o) * f32(sm.x)) * f32(q) - whalf(o + 2u) * f32(sm.y);
}

fn deq_q6_k(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 256u) * 210u;
    let i = e % 256u;
    let h = i / 128u;
    let c = (i % 128u) / 32u;
    let l = i % 32u;
    let lo = (wbyte(o + 64u * h + 32u * (c % 2u) + l) >> (4u * (c / 2u))) & 15u;
    let hi = (wbyte(o + 128u + 32u * h + l) >> (2u * c)) & 3u;
    let sc = bitcast<i32>(wbyte(o + 192u + i / 16u) << 24u) >> 24u;
    return (whalf(o + 208u) * f32(sc)) * f32(i32(lo | (hi << 4u)) - 32);
}

fn deq_bf16(ro: u32, e: u32) -> f32 {
    let off = ro + 2u * e;
    return bitcast<f32>(((ww(off >> 2u) >> ((off & 2u) * 8u)) & 0xffffu) << 16u);
}

fn deq_q5_k(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 256u) * 176u;
    let i = e % 256u;
    let c = i / 32u;
    let l = i % 32u;
    let sm = k4_scale_min(c, wword(o + 4u), wword(o + 8u), wword(o + 12u));
    let q = ((wbyte(o + 48u + 32u * (c / 2u) + l) >> (4u * (c % 2u))) & 15u) | (((wbyte(o + 16u + l) >> c) & 1u) << 4u);
    return (whalf(o) * f32(sm.x)) * f32(q) - whalf(o + 2u) * f32(sm.y);
}

fn deq_q2_k(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 256u) * 84u;
    let i = e % 256u;
    let c = i / 32u;
    let q = (wbyte(o + 16u + 32u * (c / 4u) + i % 32u) >> (2u * (c % 4u))) & 3u;
    let sb = wbyte(o + i / 16u);
    return (whalf(o + 80u) * f32(sb & 15u)) * f32(q) - whalf(o + 82u) * f32(sb >> 4u);
}

fn deq_q3_k(ro: u32, e: u32) -> f32 {
    let o = ro + (e / 256u) * 110u;
    let i = e % 256u;
    let c = i / 32u;
    let l = i % 32u;
    let lo = (wbyte(o + 32u + 32u * (c / 4u) + l) >> (2u * (c % 4u))) & 3u;
    let hi = (wbyte(o + l) >> c) & 1u;
    let sc = q3k_scale(i / 16u, wvec(o + 96u));
    return (whalf(o + 108u) * f32(sc)) * f32(i32(lo | (hi << 2u)) - 4);
}
