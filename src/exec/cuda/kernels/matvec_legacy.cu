// Legacy 32-element weight blocks times q8_0 (Q4_0, Q5_0, Q8_0) or q8_1 (Q4_1, Q5_1)
// activation blocks. Layouts: src/quant/blocks.rs.

// The fifth bits of four elements (bit `first + t` of qh for byte t) moved to bit 4 of each byte.
__device__ __forceinline__ u32 high_bits(u32 qh, int first) {
    u32 h = 0;
    for (int t = 0; t < 4; t++) h |= ((qh >> (first + t)) & 1u) << (8 * t + 4);
    return h;
}

// Σ w·a over a block: low nibbles pair with a[0..16], high nibbles with a[16..32]; hbits
// adds Q5's fifth bits. Returns the integer sum and Σa (for the offset of the signed types).
template <int QOFF, int AOFF, bool Q5>
__device__ __forceinline__ int dot_nibbles(const u8* w, const u8* a, int* asum) {
    int s = 0, as = 0;
    u32 qh = Q5 ? ld_u32(w + QOFF - 4) : 0;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        u32 w4 = ld_u32(w + QOFF + 4 * g);
        u32 lo = w4 & 0x0f0f0f0fu, hi = (w4 >> 4) & 0x0f0f0f0fu;
        if (Q5) {
            lo |= high_bits(qh, 4 * g);
            hi |= high_bits(qh, 4 * g + 16);
        }
        int a0 = ld_i32(a + AOFF + 4 * g), a1 = ld_i32(a + AOFF + 16 + 4 * g);
        s = dp4a((int)lo, a0, s);
        s = dp4a((int)hi, a1, s);
        as = dp4a(0x01010101, a0, as);
        as = dp4a(0x01010101, a1, as);
    }
    *asum = as;
    return s;
}

__device__ float dot_q4_0(const u8* w, const u8* a) {
    int as, s = dot_nibbles<2, 2, false>(w, a, &as);
    return ld_f16(w) * ld_f16(a) * (float)(s - 8 * as);
}
__device__ float dot_q4_1(const u8* w, const u8* a) {
    int as, s = dot_nibbles<4, 4, false>(w, a, &as);
    return ld_f16(w) * ld_f16(a) * (float)s + ld_f16(w + 2) * ld_f16(a + 2);
}
__device__ float dot_q5_0(const u8* w, const u8* a) {
    int as, s = dot_nibbles<6, 2, true>(w, a, &as);
    return ld_f16(w) * ld_f16(a) * (float)(s - 16 * as);
}
__device__ float dot_q5_1(const u8* w, const u8* a) {
    int as, s = dot_nibbles<8, 4, true>(w, a, &as);
    return ld_f16(w) * ld_f16(a) * (float)s + ld_f16(w + 2) * ld_f16(a + 2);
}
__device__ float dot_q8_0(const u8* w, const u8* a) {
    int s = 0;
#pragma unroll
    for (int g = 0; g < 8; g++) s = dp4a(ld_i32(w + 2 + 4 * g), ld_i32(a + 2 + 4 * g), s);
    return ld_f16(w) * ld_f16(a) * (float)s;
}

MATVEC(matvec_q4_0, 18, 34, 32, dot_q4_0)
MATVEC(matvec_q4_1, 20, 36, 32, dot_q4_1)
MATVEC(matvec_q5_0, 22, 34, 32, dot_q5_0)
MATVEC(matvec_q5_1, 24, 36, 32, dot_q5_1)
MATVEC(matvec_q8_0, 34, 34, 32, dot_q8_0)
