// The weight pieces of matmul_tiled.wgsl: `wp_T(ro, v)` unpacks values 16v..16v+16 of the
// weight row at byte `ro` into signed bytes and returns them with the float scale and min of
// their scale group (32 values for the legacy types, Q4_K and Q5_K; 16 for Q6_K, Q3_K and
// Q2_K), so that the group's share of a dot product is d · Σ q·q_x + m · Σ x. Offsets (−8 for
// Q4_0, −16 for Q5_0, −32 for Q6_K, −4 where Q3_K's high bit is clear) are subtracted in the
// bytes; mins (Q4_1, Q5_1 and the K-quants with mins) stay floats.

// The bytes of x minus `off` as signed bytes, for bytes below 0x80 + off: adding 0x80 − off
// cannot carry out of a byte, and flipping the top bit subtracts 0x80 modulo 256.
fn sub_bytes(x: vec4<u32>, off: u32) -> vec4<u32> {
    return (x + vec4<u32>((0x80u - off) * 0x01010101u)) ^ vec4<u32>(0x80808080u);
}

// Legacy blocks of 32 values (16 bytes of nibbles: low nibbles values 0..16, high 16..32).
fn wp_q4_0(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 2u) * 18u;
    let q = (wvec(o + 2u) >> vec4<u32>(4u * (v % 2u))) & vec4<u32>(M4);
    return Piece(sub_bytes(q, 8u), vec2<f32>(whalf(o), 0.0));
}

fn wp_q4_1(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 2u) * 20u;
    let q = (wvec(o + 4u) >> vec4<u32>(4u * (v % 2u))) & vec4<u32>(M4);
    return Piece(q, vec2<f32>(whalf(o), whalf(o + 2u)));
}

// Q5_0/Q5_1: the nibbles of half h with their 5th bits (qh bits 16h..16h+16).
fn q5_piece(q: vec4<u32>, qh: u32, h: u32) -> vec4<u32> {
    let hb = vec4<u32>(qh >> (16u * h)) >> vec4<u32>(0u, 4u, 8u, 12u);
    return ((q >> vec4<u32>(4u * h)) & vec4<u32>(M4)) | spread4(hb);
}

fn wp_q5_0(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 2u) * 22u;
    let q = q5_piece(wvec(o + 6u), wword(o + 2u), v % 2u);
    return Piece(sub_bytes(q, 16u), vec2<f32>(whalf(o), 0.0));
}

fn wp_q5_1(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 2u) * 24u;
    let q = q5_piece(wvec(o + 8u), wword(o + 4u), v % 2u);
    return Piece(q, vec2<f32>(whalf(o), whalf(o + 2u)));
}

fn wp_q8_0(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 2u) * 34u;
    return Piece(wvec(o + 2u + 16u * (v % 2u)), vec2<f32>(whalf(o), 0.0));
}

// Q4_K/Q5_K (16-byte aligned): piece v of a super-block is half h of sub-block sb, whose
// nibbles are the low (even sb) or high (odd) ones of quant bytes 32 (sb / 2) + 16h...
fn k4_piece_scale(u: u32, sb: u32) -> vec2<f32> {
    let hd = w[u];
    let sm = k4_scale_min(sb, hd.y, hd.z, hd.w);
    let dm = whalf2(16u * u);
    return vec2<f32>(dm.x * f32(sm.x), -dm.y * f32(sm.y));
}

fn wp_q4_k(ro: u32, v: u32) -> Piece {
    let u = (ro + (v / 16u) * 144u) / 16u;
    let sb = (v % 16u) / 2u;
    let q = (w[u + 1u + 2u * (sb / 2u) + v % 2u] >> vec4<u32>(4u * (sb % 2u))) & vec4<u32>(M4);
    return Piece(q, k4_piece_scale(u, sb));
}

// ... and for Q5_K bit sb of the high-bit bytes 16h..16h+16.
fn wp_q5_k(ro: u32, v: u32) -> Piece {
    let u = (ro + (v / 16u) * 176u) / 16u;
    let sb = (v % 16u) / 2u;
    let h = v % 2u;
    let lo = (w[u + 3u + 2u * (sb / 2u) + h] >> vec4<u32>(4u * (sb % 2u))) & vec4<u32>(M4);
    let hi = (w[u + 1u + h] >> vec4<u32>(sb)) & vec4<u32>(M1);
    return Piece(lo | (hi << vec4<u32>(4u)), k4_piece_scale(u, sb));
}

// Q6_K: piece pp (0..16) of a super-block is values 16lh..16lh+16 of chunk c (0..4) of half
// n (pp = 8n + 2c + lh): low bits from the nibbles c / 2 of ql bytes 64n + 32 (c % 2) + 16lh..,
// high bits from bits 2c of qh bytes 32n + 16lh..; its scale is byte pp of the scales.
fn wp_q6_k(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 16u) * 210u;
    let pp = v % 16u;
    let n = pp / 8u;
    let c = (pp % 8u) / 2u;
    let lh = pp % 2u;
    let ql = (wvec(o + 64u * n + 32u * (c % 2u) + 16u * lh) >> vec4<u32>(4u * (c / 2u))) & vec4<u32>(M4);
    let qh = (wvec(o + 128u + 32u * n + 16u * lh) >> vec4<u32>(2u * c)) & vec4<u32>(M2);
    let sc = sext8(wbyte(o + 192u + pp), 0u);
    return Piece(sub_bytes(ql | (qh << vec4<u32>(4u)), 32u), vec2<f32>(whalf(o + 208u) * f32(sc), 0.0));
}

// Q2_K and Q3_K: piece pp (0..16) of a super-block is values 16lh..16lh+16 of shift j (0..4)
// of half n (pp = 8n + 2j + lh): 2 bits at 2j of quant bytes 32n + 16lh..; its scale is
// number pp.
fn wp_q2_k(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 16u) * 84u;
    let pp = v % 16u;
    let n = pp / 8u;
    let j = (pp % 8u) / 2u;
    let lh = pp % 2u;
    let q = (wvec(o + 16u + 32u * n + 16u * lh) >> vec4<u32>(2u * j)) & vec4<u32>(M2);
    let sc = wbyte(o + pp);
    let dm = vec2<f32>(whalf(o + 80u), whalf(o + 82u));
    return Piece(q, vec2<f32>(dm.x * f32(sc & 15u), -dm.y * f32(sc >> 4u)));
}

// Q3_K's third bit is bit 4n + j of hmask bytes 16lh..; clear means minus 4.
fn wp_q3_k(ro: u32, v: u32) -> Piece {
    let o = ro + (v / 16u) * 110u;
    let pp = v % 16u;
    let n = pp / 8u;
    let j = (pp % 8u) / 2u;
    let lh = pp % 2u;
    let q = (wvec(o + 32u + 32u * n + 16u * lh) >> vec4<u32>(2u * j)) & vec4<u32>(M2);
    let hm = (wvec(o + 16u * lh) >> vec4<u32>(4u * n + j)) & vec4<u32>(M1);
    let sc = q3k_scale(pp, wvec(o + 96u));
    return Piece(sub_bytes(q | (hm << vec4<u32>(2u)), 4u), vec2<f32>(whalf(o + 108u) * f32(sc), 0.0));
}
