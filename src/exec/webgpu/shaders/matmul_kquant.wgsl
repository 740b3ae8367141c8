// Dot products of one 256-element K-quant super-block with one q8_k activation block
// (quantize.wgsl): integer sums per sub-block, then d_a · (d_w · Σ sc·dot − dmin_w · Σ mn·Σq_a)
// as the CPU reference does. Arguments as in matmul_legacy.wgsl.

fn dot_q4_k(ro: u32, b: u32, ab: u32) -> f32 {
    let o = ro + b * 144u;
    let s0 = wword(o + 4u);
    let s1 = wword(o + 8u);
    let s2 = wword(o + 12u);
    var isum = 0;
    var msum = 0;
    for (var c = 0u; c < 8u; c++) {
        let sm = k4_scale_min(c, s0, s1, s2);
        var dot = 0;
        var asum = 0;
        for (var i = 0u; i < 8u; i++) {
            let q = (wword(o + 16u + 32u * (c / 2u) + 4u * i) >> (4u * (c % 2u))) & 0x0f0f0f0fu;
            let aw = a[ab + 1u + 8u * c + i];
            dot += dot_u8(q, aw);
            asum += sum_i8(aw);
        }
        isum += i32(sm.x) * dot;
        msum += i32(sm.y) * asum;
    }
    return bitcast<f32>(a[ab]) * (whalf(o) * f32(isum) - whalf(o + 2u) * f32(msum));
}

fn dot_q6_k(ro: u32, b: u32, ab: u32) -> f32 {
    let o = ro + b * 210u;
    var isum = 0;
    for (var h = 0u; h < 2u; h++) {
        for (var c = 0u; c < 4u; c++) {
            for (var i = 0u; i < 8u; i++) {
                let lo = (wword(o + 64u * h + 32u * (c % 2u) + 4u * i) >> (4u * (c / 2u))) & 0x0f0f0f0fu;
                let hi = (wword(o + 128u + 32u * h + 4u * i) >> (2u * c)) & 0x03030303u;
                let aw = a[ab + 1u + 32u * h + 8u * c + i];
                let idx = 8u * h + 2u * c + i / 4u;
                let sc = sext8(wword(o + 192u + (idx & ~3u)), idx & 3u);
                isum += sc * (dot_u8(lo | (hi << 4u), aw) - 32 * sum_i8(aw));
            }
        }
    }
    return bitcast<f32>(a[ab]) * (whalf(o + 208u) * f32(isum));
}
