// Access to raw GGUF blocks held in `w: array<vec4<u32>>` (the including kernel binds `w`).
// Kernels whose blocks are 16-byte aligned (Q4_K, Q5_K, F32, F16, BF16) index `w` directly,
// one 16-byte load per access; the others read words at any byte offset through these helpers
// (Q8_0 blocks are 34 bytes, Q6_K 210, Q3_K 110: only 2-byte aligned).

// Word i (4-byte units).
fn ww(i: u32) -> u32 {
    return w[i >> 2u][i & 3u];
}

// The 4 bytes at byte offset `off`, little-endian. Both cases are computed and one picked:
// blocks of 2-byte alignment alternate between them, so a branch diverges (see `wvec`).
fn wword(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    let lo = ww(i);
    let shifted = (lo >> s) | (ww(i + 1u) << ((32u - s) & 31u));
    return select(shifted, lo, s == 0u);
}

// The 16 bytes at byte offset `off`: four aligned words, or five funnel-shifted. (Loading the
// one or two 16-byte units holding them and picking words by `switch` was measured slower on
// an H100: Q6_K's 14336x4096 product took 59 µs rather than 50, the picks diverge.) The fifth
// word is loaded and shifted in either case, then the aligned words picked where they are the
// answer: with a branch instead, an 8B Q4_K_M decode step on an H200 took 50 µs more (of 3.58
// ms), its Q6_K products 34 µs a call rather than 31.5. Neighbouring Q6_K and Q8_0 blocks
// alternate between the two cases, so the branch diverged.
fn wvec(off: u32) -> vec4<u32> {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    let v = vec4<u32>(ww(i), ww(i + 1u), ww(i + 2u), ww(i + 3u));
    let next = vec4<u32>(v.yzw, ww(i + 4u));
    let shifted = (v >> vec4<u32>(s)) | (next << vec4<u32>((32u - s) & 31u));
    return select(shifted, v, s == 0u);
}

// The byte at `off`.
fn wbyte(off: u32) -> u32 {
    return (ww(off >> 2u) >> ((off & 3u) * 8u)) & 0xffu;
}

// Byte k (0..16) of a 16-byte vector.
fn vbyte(v: vec4<u32>, k: u32) -> u32 {
    return (v[k >> 2u] >> (8u * (k & 3u))) & 0xffu;
}

// Scale and min of sub-block j (0..8) of Q4_K/Q5_K from the 12 scale bytes (three words):
// sub-blocks 0..4 are the low 6 bits of bytes j and 4 + j, 4..8 are nibbles of byte 8 + j - 4
// with the top 2 bits of bytes j - 4 and j. Both are computed and one picked, without a
// branch: neighbouring invocations take different sub-blocks, and the branch made the
// products' lanes diverge (an 8B decode step on an H200 through Vulkan spent 123 µs more,
// of 3.70 ms; the products are bound by their instructions there, not by memory).
fn k4_scale_min(j: u32, s0: u32, s1: u32, s2: u32) -> vec2<u32> {
    let sh = 8u * (j & 3u);
    let b0 = (s0 >> sh) & 0xffu;
    let b1 = (s1 >> sh) & 0xffu;
    let b2 = (s2 >> sh) & 0xffu;
    let low = vec2<u32>(b0 & 63u, b1 & 63u);
    let high = vec2<u32>((b2 & 0xfu) | ((b0 >> 6u) << 4u), (b2 >> 4u) | ((b1 >> 6u) << 4u));
    return select(high, low, j < 4u);
}

// Signed scale i (0..16) of Q3_K from its 12 packed bytes (x, y, z of `s`): low 4 bits are
// nibble i / 8 of byte i % 8, top 2 bits are bits 2 (i / 4) of byte 8 + i % 4; minus 32.
fn q3k_scale(i: u32, s: vec4<u32>) -> i32 {
    let lo = (vbyte(s, i % 8u) >> (4u * (i / 8u))) & 15u;
    let hi = (vbyte(s, 8u + i % 4u) >> (2u * (i / 4u))) & 3u;
    return i32(lo | (hi << 4u)) - 32;
}

// Byte masks: the low 4, 2 and 1 bits of each byte of a word.
const M4: u32 = 0x0f0f0f0fu;
const M2: u32 = 0x03030303u;
const M1: u32 = 0x01010101u;

// The 5th bits of elements 4c..4c+4 (bits of `h`) moved to bit 4 of each byte.
fn spread4(h: vec4<u32>) -> vec4<u32> {
    return ((h & vec4<u32>(1u)) << vec4<u32>(4u)) | (((h >> vec4<u32>(1u)) & vec4<u32>(1u)) << vec4<u32>(12u))
        | (((h >> vec4<u32>(2u)) & vec4<u32>(1u)) << vec4<u32>(20u))
        | (((h >> vec4<u32>(3u)) & vec4<u32>(1u)) << vec4<u32>(28u));
}
