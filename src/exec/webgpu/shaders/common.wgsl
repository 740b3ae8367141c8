// Helpers prepended to every kernel of the WebGPU executor (after half_f16.wgsl or
// half_f32.wgsl, which define half_lo and half2 for the precision path in use).

// The bits of the f16 nearest to x, ties to even: what the CPU reference (the `half` crate,
// ggml's FP32_TO_FP16) gives. Done by hand because WGSL leaves pack2x16float's rounding to the
// implementation.
fn f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u;
    }
    let e = i32(a >> 23u) - 112;
    let m = a & 0x7fffffu;
    if (e >= 31) {
        return sign | 0x7c00u;
    }
    if (e <= 0) {
        if (e < -10) {
            return sign;
        }
        let mm = m | 0x800000u;
        let shift = u32(14 - e);
        let half = 1u << (shift - 1u);
        var r = mm >> shift;
        let rem = mm & ((1u << shift) - 1u);
        if (rem > half || (rem == half && (r & 1u) == 1u)) {
            r += 1u;
        }
        return sign | r;
    }
    var r = (u32(e) << 10u) | (m >> 13u);
    let rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) == 1u)) {
        r += 1u;
    }
    return sign | r;
}

// The f32 value of the f16 with bits `h`. By hand: unpack2x16float may flush f16 subnormals
// to zero (lavapipe does), and small block scales and activations are subnormal in f16.
fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let v = f32(m) * 5.9604645e-8;
        return select(v, -v, s != 0u);
    }
    if (e == 31u) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// x rounded to the nearest f16 value.
fn f16_round(x: f32) -> f32 {
    return f16_to_f32(f16_bits(x));
}

// bf16 bits of x rounded to nearest even (the `half` crate's bf16::from_f32; no NaNs here),
// as the f32 whose top 16 bits they are.
fn bf16_round(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}

// Signed byte k (0..4) of w.
fn sext8(w: u32, k: u32) -> i32 {
    return bitcast<i32>(w << (24u - 8u * k)) >> 24u;
}

// Workgroup index of a 2-D dispatch whose x extent is at most 32768 (see `groups` in Rust).
fn wg_index(wid: vec3<u32>) -> u32 {
    return wid.y * 32768u + wid.x;
}
