// K-quant super-blocks (256 elements) times q8_K activations. Weights in the device layout
// of common.cuh: Q4_K quants qs[128]; Q5_K qh[32], qs[128]; headers d, dmin, scales[12].
// Q6_K quants ql[128], qh[64]; header scales i8[16], d.

// ---- prefill: against q8_K blocks in the file layout (d f32, qs[256], bsums i16[16]);
// the mins use the activations' per-16 sums, as on the CPU.

__device__ __forceinline__ int bsum(const u8* a, int i) { return (int)(i16)ld_u16(a + 260 + 2 * i); }

template <bool Q5>
__device__ __forceinline__ float dot_q45_k(const u8* q, const u8* h, const u8* a) {
    const u8* qs = q + (Q5 ? 32 : 0);
    int isum = 0, msum = 0;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        int sc, mn, s = 0;
        k4_scale_min(c, h + 4, &sc, &mn);
        const u8* qc = qs + 32 * (c / 2);
        for (int g = 0; g < 8; g++) {
            u32 v = (*(const u32*)(qc + 4 * g) >> (4 * (c % 2))) & 0x0f0f0f0fu;
            if (Q5) v |= ((*(const u32*)(q + 4 * g) >> c) & 0x01010101u) << 4;
            s = dp4a((int)v, ld_i32(a + 4 + 32 * c + 4 * g), s);
        }
        isum += sc * s;
        msum += mn * (bsum(a, 2 * c) + bsum(a, 2 * c + 1));
    }
    return ld_f32(a) * (ld_f16(h) * (float)isum - ld_f16(h + 2) * (float)msum);
}
__device__ float dot_q4_k(const u8* q, const u8* h, const u8* a) { return dot_q45_k<false>(q, h, a); }
__device__ float dot_q5_k(const u8* q, const u8* h, const u8* a) { return dot_q45_k<true>(q, h, a); }

// Q6_K element j (half hh, chunk c, lane l) takes nibble c / 2 of ql[64hh + 32(c % 2) + l]
// and bits 2c of qh[32hh + l], minus 32.
__device__ float dot_q6_k(const u8* q, const u8* h, const u8* a) {
    int isum = 0;
#pragma unroll 4
    for (int sb = 0; sb < 16; sb++) {
        int j0 = 16 * sb, hh = j0 / 128, c = (j0 % 128) / 32, l0 = j0 % 32;
        int s = 0, as = 0;
        for (int g = 0; g < 4; g++) {
            int l = l0 + 4 * g;
            u32 lo = (*(const u32*)(q + 64 * hh + 32 * (c % 2) + l) >> (4 * (c / 2))) & 0x0f0f0f0fu;
            u32 hi = ((*(const u32*)(q + 128 + 32 * hh + l) >> (2 * c)) & 0x03030303u) << 4;
            int a4 = ld_i32(a + 4 + j0 + 4 * g);
            s = dp4a((int)(lo | hi), a4, s);
            as = dp4a(0x01010101, a4, as);
        }
        isum += (int)(i8)h[sb] * (s - 32 * as);
    }
    return ld_f32(a) * (ld_f16(h + 16) * (float)isum);
}

#ifdef MOD_matvec_q4_k
MATVEC(q4_k, 292, dot_q4_k)
#endif
#ifdef MOD_matvec_q5_k
MATVEC(q5_k, 292, dot_q5_k)
#endif
#ifdef MOD_matvec_q6_k
MATVEC(q6_k, 292, dot_q6_k)
#endif

// ---- decode: parts of a super-block against the split q8_K activation (ad: d). The mins
// are taken with the thread's own activation sums: their total is the per-16 sums' total.

// Q4_K/Q5_K: eight parts a super-block; part s takes quant bytes 32p + l0 .. +16 (p = s / 2,
// l0 = 16 (s % 2)): low nibbles are elements l0.. of chunk 2p, high nibbles of chunk 2p + 1.
template <bool Q5>
__device__ __forceinline__ float part_q45_k(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int p = s / 2, l0 = 16 * (s % 2), c0 = 2 * p, c1 = c0 + 1;
    uint4 w = ld16(q + (Q5 ? 32 : 0) + 32 * p + l0), lo = nib_lo16(w), hi = nib_hi16(w);
    if (Q5) {
        uint4 qh = ld16(q + l0);
        lo = or16(lo, bit4_16(qh, c0));
        hi = or16(hi, bit4_16(qh, c1));
    }
    uint4 a0 = ld16(a + 32 * c0 + l0), a1 = ld16(a + 32 * c1 + l0);
    int sc0, mn0, sc1, mn1;
    k4_scale_min(c0, h + 4, &sc0, &mn0);
    k4_scale_min(c1, h + 4, &sc1, &mn1);
    int isum = sc0 * dot16(lo, a0, 0) + sc1 * dot16(hi, a1, 0);
    int msum = mn0 * sum16(a0, 0) + mn1 * sum16(a1, 0);
    return ad[0] * (ld_f16(h) * (float)isum - ld_f16(h + 2) * (float)msum);
}
__device__ float part_q4_k(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    return part_q45_k<false>(q, h, a, ad, s);
}
__device__ float part_q5_k(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    return part_q45_k<true>(q, h, a, ad, s);
}

// Q6_K: eight parts a super-block; part s takes ql bytes 64hh + 32m + l0 .. +16 (hh = s / 4,
// m = s / 2 % 2, l0 = 16 (s % 2)): low nibbles are elements l0.. of chunk m of half hh, high
// nibbles of chunk m + 2; their high bits are bits 2c of qh bytes 32hh + l0 .. +16. Each
// 16 elements share one scale.
__device__ float part_q6_k(const u8* q, const u8* h, const i8* a, const float* ad, int s) {
    int hh = s / 4, m = (s / 2) % 2, l0 = 16 * (s % 2);
    uint4 ql = ld16(q + 64 * hh + 32 * m + l0), qh = ld16(q + 128 + 32 * hh + l0);
    int isum = 0;
#pragma unroll
    for (int t = 0; t < 2; t++) {
        int c = m + 2 * t;
        uint4 v = t == 0 ? nib_lo16(ql) : nib_hi16(ql);
        v.x |= ((qh.x >> (2 * c)) & 0x03030303u) << 4;
        v.y |= ((qh.y >> (2 * c)) & 0x03030303u) << 4;
        v.z |= ((qh.z >> (2 * c)) & 0x03030303u) << 4;
        v.w |= ((qh.w >> (2 * c)) & 0x03030303u) << 4;
        uint4 av = ld16(a + 128 * hh + 32 * c + l0);
        isum += (int)(i8)h[8 * hh + 2 * c + l0 / 16] * (dot16(v, av, 0) - 32 * sum16(av, 0));
    }
    return ad[0] * (ld_f16(h + 16) * (float)isum);
}

#ifdef MOD_mmv_q4_k
MMV(q4_k, 8, 1, part_q4_k)
#endif
#ifdef MOD_mmv_q5_k
MMV(q5_k, 8, 1, part_q5_k)
#endif
#ifdef MOD_mmv_q6_k
MMV_B(q6_k, 8, 1, part_q6_k, MMV_MIN_BLOCKS_Q6K)
#endif
#ifdef MOD_mmvn_q4_k
MMVN(q4_k, 8, 1, part_q4_k)
#endif
#ifdef MOD_mmvn_q5_k
MMVN(q5_k, 8, 1, part_q5_k)
#endif
#ifdef MOD_mmvn_q6_k
MMVN(q6_k, 8, 1, part_q6_k)
#endif

// Q, K and V of mixed K-quant types (llama-quantize's Q4_K_M gives V more bits than Q and
// K): as mmv3_T, each third of the rows with its own type (all take q8_K activations).
template <int T>
__device__ __forceinline__ float mmv_row_k(const u8* W, const i8* aq, const float* ad, int k, int n, int row) {
    if (T == T_Q4_K) return mmv_row<8, 256, Q_q4_k, H_q4_k, 1, part_q4_k>(W, aq, ad, k, n, row);
    if (T == T_Q5_K) return mmv_row<8, 256, Q_q5_k, H_q5_k, 1, part_q5_k>(W, aq, ad, k, n, row);
    return mmv_row<8, 256, Q_q6_k, H_q6_k, 1, part_q6_k>(W, aq, ad, k, n, row);
}
template <int T>
__device__ __forceinline__ void mmv_prefetch_k(const u8* W, int k, int n, int row) {
    if (T == T_Q4_K) mmv_prefetch<256, Q_q4_k, H_q4_k>(W, k, n, row);
    else if (T == T_Q5_K) mmv_prefetch<256, Q_q5_k, H_q5_k>(W, k, n, row);
    else mmv_prefetch<256, Q_q6_k, H_q6_k>(W, k, n, row);
}
__device__ __forceinline__ void mmv3_kmix_body(const u8* W0, const u8* W1, const u8* W2, float* o0, float* o1,
                                               float* o2, const u8* b0, const u8* b1,
                                               const u8* b2, int bt0, int bt1, int bt2, int n0, int n1, int n2,
                                               const i8* aq, const float* ad, int k, int t0, int t1, int t2) {
    pdl_trigger();
    int row = mmv_out_row();
    if (row >= n0 + n1 + n2) return;
    const u8 *W = W0, *bias = b0;
    float* out = o0;
    int n = n0, bt = bt0, t = t0;
    if (row >= n0 + n1) {
        row -= n0 + n1; W = W2; out = o2; bias = b2; n = n2; bt = bt2; t = t2;
    } else if (row >= n0) {
        row -= n0; W = W1; out = o1; bias = b1; n = n1; bt = bt1; t = t1;
    }
    float v;
    if (t == T_Q4_K) {
        mmv_prefetch_k<T_Q4_K>(W, k, n, row);
        pdl_wait();
        v = mmv_row_k<T_Q4_K>(W, aq, ad, k, n, row);
    } else if (t == T_Q5_K) {
        mmv_prefetch_k<T_Q5_K>(W, k, n, row);
        pdl_wait();
        v = mmv_row_k<T_Q5_K>(W, aq, ad, k, n, row);
    } else {
        mmv_prefetch_k<T_Q6_K>(W, k, n, row);
        pdl_wait();
        v = mmv_row_k<T_Q6_K>(W, aq, ad, k, n, row);
    }
    if (threadIdx.x % 32 == 0) out[row] = bias ? v + deq(bt, bias, n, row) : v;
}
#define MMV3_KMIX(SUF, MINB)                                                                                  \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MINB) mmv3_kmix##SUF(const Mmv3Params p) {      \
        mmv3_kmix_body(p.w0, p.w1, p.w2, p.o0, p.o1, p.o2, p.b0, p.b1, p.b2, p.bt0, p.bt1, p.bt2, p.n0, p.n1, \
                       p.n2, p.aq, p.ad, p.k, p.t0, p.t1, p.t2);                                              \
    }
#ifdef MOD_mmv3_kmix
MMV3_KMIX(, MMV_MIN_BLOCKS)
MMV3_KMIX(_o, MMV_OCC_BLOCKS)
#endif
