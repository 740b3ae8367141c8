// Legacy 32-element weight blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) times q8_0 (Q4_0, Q5_0,
// Q8_0) or q8_1 (Q4_1, Q5_1) activations. Weights in the device layout of common.cuh.

// The fifth bits of four elements (bit `first + t` of qh for byte t) moved to bit 4 of each byte.
__device__ __forceinline__ u32 high_bits(u32 qh, int first) {
    u32 h = 0;
    for (int t = 0; t < 4; t++) h |= ((qh >> (first + t)) & 1u) << (8 * t + 4);
    return h;
}

// ---- prefill: whole blocks against q8 activation blocks in the file layout (d, [s], qs[32])

// Σ w·a over a block: low nibbles pair with a[0..16], high nibbles with a[16..32]; Q5 adds
// the fifth bits from qh. Returns the integer sum and Σa (for the offset of the signed types).
template <int AOFF, bool Q5>
__device__ __forceinline__ int dot_nibbles(const u8* q, u32 qh, const u8* a, int* asum) {
    int s = 0, as = 0;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        u32 w4 = *(const u32*)(q + 4 * g);
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

__device__ float dot_q4_0(const u8* q, const u8* h, const u8* a) {
    int as, s = dot_nibbles<2, false>(q, 0, a, &as);
    return ld_f16(h) * ld_f16(a) * (float)(s - 8 * as);
}
__device__ float dot_q4_1(const u8* q, const u8* h, const u8* a) {
    int as, s = dot_nibbles<4, false>(q, 0, a, &as);
    return ld_f16(h) * ld_f16(a) * (float)s + ld_f16(h + 2) * ld_f16(a + 2);
}
__device__ float dot_q5_0(const u8* q, const u8* h, const u8* a) {
    int as, s = dot_nibbles<2, true>(q, ld_u32(h + 2), a, &as);
    return ld_f16(h) * ld_f16(a) * (float)(s - 16 * as);
}
__device__ float dot_q5_1(const u8* q, const u8* h, const u8* a) {
    int as, s = dot_nibbles<4, true>(q, ld_u32(h + 4), a, &as);
    return ld_f16(h) * ld_f16(a) * (float)s + ld_f16(h + 2) * ld_f16(a + 2);
}
__device__ float dot_q8_0(const u8* q, const u8* h, const u8* a) {
    int s = 0;
#pragma unroll
    for (int g = 0; g < 8; g++) s = dp4a(*(const int*)(q + 4 * g), ld_i32(a + 2 + 4 * g), s);
    return ld_f16(h) * ld_f16(a) * (float)s;
}

MATVEC(q4_0, 34, dot_q4_0)
MATVEC(q4_1, 36, dot_q4_1)
MATVEC(q5_0, 34, dot_q5_0)
MATVEC(q5_1, 36, dot_q5_1)
MATVEC(q8_0, 34, dot_q8_0)

// ---- decode: thread s of a block's threads against the split q8 activation (ad: d, s)

// Q4/Q5: two threads a block; thread s takes quant bytes 8s..8s+8, whose low nibbles are
// elements 8s..8s+8 and high nibbles elements 16+8s..16+8s+8. Returns Σw·a and Σa.
template <bool Q5>
__device__ __forceinline__ int part_nibbles(const u8* q, u32 qh, const i8* a, int s, int* asum) {
    uint2 w = ld8(q + 8 * s), lo = nib_lo(w), hi = nib_hi(w);
    if (Q5) {
        lo.x |= high_bits(qh, 8 * s);
        lo.y |= high_bits(qh, 8 * s + 4);
        hi.x |= high_bits(qh, 16 + 8 * s);
        hi.y |= high_bits(qh, 20 + 8 * s);
    }
    uint2 a0 = ld8(a + 8 * s), a1 = ld8(a + 16 + 8 * s);
    *asum = sum8(a1, sum8(a0, 0));
    return dot8(hi, a1, dot8(lo, a0, 0));
}

__device__ float part_q4_0(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<false>(q, 0, a, s, &as);
    return ld_f16(h) * ad[0] * (float)(v - 8 * as);
}
__device__ float part_q4_1(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<false>(q, 0, a, s, &as);
    float r = ld_f16(h) * ad[0] * (float)v;
    return s == 0 ? r + ld_f16(h + 2) * ad[1] : r;
}
__device__ float part_q5_0(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<true>(q, ld_u32(h + 2), a, s, &as);
    return ld_f16(h) * ad[0] * (float)(v - 16 * as);
}
__device__ float part_q5_1(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<true>(q, ld_u32(h + 4), a, s, &as);
    float r = ld_f16(h) * ad[0] * (float)v;
    return s == 0 ? r + ld_f16(h + 2) * ad[1] : r;
}
// Q8_0: four threads a block, 8 quants each.
__device__ float part_q8_0(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    return ld_f16(h) * ad[0] * (float)dot8(ld8(q + 8 * s), ld8(a + 8 * s), 0);
}

MMV(q4_0, 2, 2, part_q4_0)
MMV(q4_1, 2, 2, part_q4_1)
MMV(q5_0, 2, 2, part_q5_0)
MMV(q5_1, 2, 2, part_q5_1)
MMV(q8_0, 4, 2, part_q8_0)
