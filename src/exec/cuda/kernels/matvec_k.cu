// K-quant super-blocks (256 elements) times q8_K activation blocks (d f32, qs[256],
// bsums i16[16]); the mins use the activations' per-16 sums, as on the CPU.

__device__ __forceinline__ int bsum(const u8* a, int i) { return (int)(i16)ld_u16(a + 260 + 2 * i); }

template <bool Q5>
__device__ __forceinline__ float dot_q45_k(const u8* w, const u8* a) {
    const u8* qs = w + (Q5 ? 48 : 16);
    int isum = 0, msum = 0;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        int sc, mn, s = 0;
        k4_scale_min(c, w + 4, &sc, &mn);
        const u8* q = qs + 32 * (c / 2);
        for (int g = 0; g < 8; g++) {
            u32 v = (ld_u32(q + 4 * g) >> (4 * (c % 2))) & 0x0f0f0f0fu;
            if (Q5) v |= ((ld_u32(w + 16 + 4 * g) >> c) & 0x01010101u) << 4;
            s = dp4a((int)v, ld_i32(a + 4 + 32 * c + 4 * g), s);
        }
        isum += sc * s;
        msum += mn * (bsum(a, 2 * c) + bsum(a, 2 * c + 1));
    }
    return ld_f32(a) * (ld_f16(w) * (float)isum - ld_f16(w + 2) * (float)msum);
}
__device__ float dot_q4_k(const u8* w, const u8* a) { return dot_q45_k<false>(w, a); }
__device__ float dot_q5_k(const u8* w, const u8* a) { return dot_q45_k<true>(w, a); }

// Q6_K: ql[128], qh[64], scales i8[16], d. Element j (half h, chunk c, lane l) takes nibble
// c / 2 of ql[64h + 32(c % 2) + l] and bits 2c of qh[32h + l], minus 32.
__device__ float dot_q6_k(const u8* w, const u8* a) {
    int isum = 0;
#pragma unroll 4
    for (int sb = 0; sb < 16; sb++) {
        int j0 = 16 * sb, h = j0 / 128, c = (j0 % 128) / 32, l0 = j0 % 32;
        int s = 0, as = 0;
        for (int g = 0; g < 4; g++) {
            int l = l0 + 4 * g;
            u32 lo = (ld_u32(w + 64 * h + 32 * (c % 2) + l) >> (4 * (c / 2))) & 0x0f0f0f0fu;
            u32 hi = ((ld_u32(w + 128 + 32 * h + l) >> (2 * c)) & 0x03030303u) << 4;
            int a4 = ld_i32(a + 4 + j0 + 4 * g);
            s = dp4a((int)(lo | hi), a4, s);
            as = dp4a(0x01010101, a4, as);
        }
        isum += (int)(i8)w[192 + sb] * (s - 32 * as);
    }
    return ld_f32(a) * (ld_f16(w + 208) * (float)isum);
}

MATVEC(matvec_q4_k, 144, 292, 256, dot_q4_k)
MATVEC(matvec_q5_k, 176, 292, 256, dot_q5_k)
MATVEC(matvec_q6_k, 210, 292, 256, dot_q6_k)
