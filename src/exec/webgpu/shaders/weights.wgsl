// Byte access to raw GGUF blocks held in `w: array<u32>` (the including kernel binds `w`).
// GGUF blocks are not 4-byte aligned (Q8_0 is 34 bytes), so words are read at any byte offset.

// The 4 bytes at byte offset `off`, little-endian.
fn wword(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    if (s == 0u) {
        return w[i];
    }
    return (w[i] >> s) | (w[i + 1u] << (32u - s));
}

// The byte at `off`.
fn wbyte(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

// The f16 at an even byte offset.
fn whalf(off: u32) -> f32 {
    return half_lo(w[off >> 2u] >> ((off & 2u) * 8u));
}

// Element (4 low bits) and 5th bit spread: bit k of h goes to bit 4 of byte k.
fn spread4(h: u32) -> u32 {
    return ((h & 1u) << 4u) | (((h >> 1u) & 1u) << 12u) | (((h >> 2u) & 1u) << 20u)
        | (((h >> 3u) & 1u) << 28u);
}

// Scale and min of sub-block j (0..8) of Q4_K/Q5_K from the 12 scale bytes (three words).
fn k4_scale_min(j: u32, s0: u32, s1: u32, s2: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>((s0 >> (8u * j)) & 63u, (s1 >> (8u * j)) & 63u);
    }
    let t = 8u * (j - 4u);
    let b2 = (s2 >> t) & 0xffu;
    let b0 = (s0 >> t) & 0xffu;
    let b1 = (s1 >> t) & 0xffu;
    return vec2<u32>((b2 & 0xfu) | ((b0 >> 6u) << 4u), (b2 >> 4u) | ((b1 >> 6u) << 4u));
}
