// Legacy 32-element weight blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) times q8_0 (Q4_0, Q5_0,
// Q8_0) or q8_1 (Q4_1, Q5_1) activations. Weights in the device layout of common.cuh.

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

#ifdef MOD_matvec_q4_0
MATVEC(q4_0, 34, dot_q4_0)
#endif
#ifdef MOD_matvec_q4_1
MATVEC(q4_1, 36, dot_q4_1)
#endif
#ifdef MOD_matvec_q5_0
MATVEC(q5_0, 34, dot_q5_0)
#endif
#ifdef MOD_matvec_q5_1
MATVEC(q5_1, 36, dot_q5_1)
#endif
#ifdef MOD_matvec_q8_0
MATVEC(q8_0, 34, dot_q8_0)
#endif

// ---- decode: part s of a block against the split q8 activation (ad: d, s)

// Q4/Q5: one lane a block: its 16 quant bytes in one load; low nibbles are elements 0..16,
// high nibbles 16..32. Returns Σw·a and Σa.
template <bool Q5>
__device__ __forceinline__ int part_nibbles(const u8* q, u32 qh, const i8* a, int* asum) {
    uint4 w = ld16(q), lo = nib_lo16(w), hi = nib_hi16(w);
    if (Q5) {
        lo.x |= high_bits(qh, 0);
        lo.y |= high_bits(qh, 4);
        lo.z |= high_bits(qh, 8);
        lo.w |= high_bits(qh, 12);
        hi.x |= high_bits(qh, 16);
        hi.y |= high_bits(qh, 20);
        hi.z |= high_bits(qh, 24);
        hi.w |= high_bits(qh, 28);
    }
    uint4 a0 = ld16(a), a1 = ld16(a + 16);
    *asum = sum16(a1, sum16(a0, 0));
    return dot16(hi, a1, dot16(lo, a0, 0));
}

__device__ float part_q4_0(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<false>(q, 0, a, &as);
    return ld_f16(h) * ad[0] * (float)(v - 8 * as);
}
__device__ float part_q4_1(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<false>(q, 0, a, &as);
    return ld_f16(h) * ad[0] * (float)v + ld_f16(h + 2) * ad[1];
}
__device__ float part_q5_0(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<true>(q, ld_u32(h + 2), a, &as);
    return ld_f16(h) * ad[0] * (float)(v - 16 * as);
}
__device__ float part_q5_1(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int as, v = part_nibbles<true>(q, ld_u32(h + 4), a, &as);
    return ld_f16(h) * ad[0] * (float)v + ld_f16(h + 2) * ad[1];
}
// Q8_0: two lanes a block, 16 quants each.
__device__ float part_q8_0(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    return ld_f16(h) * ad[0] * (float)dot16(ld16(q + 16 * s), ld16(a + 16 * s), 0);
}

#ifdef MOD_mmv_q4_0
MMV(q4_0, 1, 2, part_q4_0)
#endif
#ifdef MOD_mmv_q4_1
MMV(q4_1, 1, 2, part_q4_1)
#endif
#ifdef MOD_mmv_q5_0
MMV(q5_0, 1, 2, part_q5_0)
#endif
#ifdef MOD_mmv_q5_1
MMV(q5_1, 1, 2, part_q5_1)
#endif
#ifdef MOD_mmv_q8_0
MMV(q8_0, 2, 2, part_q8_0)
#endif
#ifdef MOD_mmvn_q4_0
MMVN(q4_0, 1, 2, part_q4_0)
#endif
#ifdef MOD_mmvn_q4_1
MMVN(q4_1, 1, 2, part_q4_1)
#endif
#ifdef MOD_mmvn_q5_0
MMVN(q5_0, 1, 2, part_q5_0)
#endif
#ifdef MOD_mmvn_q5_1
MMVN(q5_1, 1, 2, part_q5_1)
#endif
#ifdef MOD_mmvn_q8_0
MMVN(q8_0, 2, 2, part_q8_0)
#endif
