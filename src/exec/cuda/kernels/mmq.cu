// Prefill matrix products on the int8 tensor cores (mma.sync, sm_80 and later): out[t][r] =
// W[r] · x[t] for many tokens t at once. Weights in the device layout of common.cuh;
// activations in the split q8 layout of matmul_quantize.cu (`quantize_q8s` / `quantize_q8ks` over all
// rows: qs[rows][k] int8, then floats: q8_0/q8_1 (d, s) per 32 values, q8_K d per 256).
//
// A block of MMQ_THREADS computes MMQ_BM (or 128) weight rows × 64 (or 32) tokens. Per MMQ_KS values of k
// it stages both sides as int8 in shared memory (weights unpacked from their 4/5/6/8-bit
// quants, with offsets applied: Q4_0 q − 8, Q5_0 q − 16, Q6_K q − 32) together with one float
// scale per sub-block (32 values; Q6_K 16) and, for the types with a min, one min term. The
// tensor cores give each (row, token, sub-block) its exact integer dot product, which is
// folded into a float accumulator: acc += ws·ad·isum (+ wm·as), where
//   legacy types: ws = d, ad = d_act, wm = m (Q4_1/Q5_1), as = s_act (d_act·Σq, as stored);
//   Q4_K/Q5_K: ws = d·sc, ad = d_act, wm = −dmin·mn, as = d_act·Σq (the sub-block's sum);
//   Q6_K: ws = d·sc (per 16 values), ad = d_act.
// The integers are the CPU's; only the float sums are taken per sub-block instead of per block.

#define MMQ_BM 64
#define MMQ_KS 256
// Warps a block (8 was slower on an H200: 0.81-0.93x), and the register cap's blocks a
// multiprocessor: 5 (122 registers a thread → 102) made 8b pp512 on an H200 1.30x (Q4_K_M),
// 1.08x (Q8_0) and 1.04x (Q4_0) faster than no cap; `WICK_CUDA_MMQ_MIN_BLOCKS` overrides it.
#define MMQ_WARPS 4
#define MMQ_THREADS (32 * MMQ_WARPS)
#ifndef MMQ_MIN_BLOCKS
#define MMQ_MIN_BLOCKS 5
#endif
// Weight items (32 values each, of MMQ_BM·8 / MMQ_THREADS = 4 a stage) a thread loads before
// it stores any (`WICK_CUDA_MMQ_LOADS`: 1, 2 or 4). On an H100, 8b Q4_K_M, tok/s of decode
// of 16 / 32 / 64 sequences, and pp512 (split-K fill: blocks a multiprocessor, ops/matmul_mmq.rs):
//   1 (as before), fill 2: 1,490 / 2,836 / 4,609, pp512 8,152
//   4, fill 2: 1,463 / 2,803 / 4,542, pp512 7,983;  fill 4: 1,575 / 2,983 / 4,691;  fill 6: 1,552 / 2,914 / 4,542
//   2, fill 4: 1,608 / 3,047 / 4,778, pp512 8,270 (fill 2)
#ifndef MMQ_LOADS
#define MMQ_LOADS 2
#endif
// Bytes per row of a shared tile of MMQ_KS values: 256 + 16, so the eight rows of a fragment
// load fall in different banks (mmq_small.cu; mmq_tile's STRIDE, by its stage).
#define MMQ_STRIDE 272

// Each byte of v (every byte below 128) minus c, as signed bytes.
__device__ __forceinline__ u32 sub_bytes(u32 v, u32 c) { return ((v | 0x80808080u) - c * 0x01010101u) ^ 0x80808080u; }
__device__ __forceinline__ void put4(u32* v, uint4 a) {
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
}

// Unpack 32 values (chunk c of block b) into v[8] as signed bytes, with the chunk's scales:
//   legacy types: ws[0] = d, *wm = m (Q4_1/Q5_1);
//   K-quants: ws[0] = the block's d, isc[0] the chunk's integer scale (Q6_K: isc[0], isc[1]
//   for its two halves of 16), *wm = −dmin·mn (Q4_K/Q5_K).
// hoff: byte offset of the header array.
typedef void (*mmq_unpack)(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc);

__device__ void unpack_q4_0(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    uint4 w = ld16(W + b * Q_q4_0);
    put4(v, nib_lo16(w));
    put4(v + 4, nib_hi16(w));
    for (int i = 0; i < 8; i++) v[i] = sub_bytes(v[i], 8);
    ws[0] = ld_f16(W + hoff + b * H_q4_0);
}
__device__ void unpack_q4_1(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    uint4 w = ld16(W + b * Q_q4_1);
    put4(v, nib_lo16(w));
    put4(v + 4, nib_hi16(w));
    const u8* h = W + hoff + b * H_q4_1;
    ws[0] = ld_f16(h);
    *wm = ld_f16(h + 2);
}
template <bool ONE>
__device__ __forceinline__ void unpack_q5(const u8* W, long long hoff, long long b, u32* v, float* ws, float* wm) {
    uint4 w = ld16(W + b * 16);
    const u8* h = W + hoff + b * (ONE ? H_q5_1 : H_q5_0);
    u32 qh = ld_u32(h + (ONE ? 4 : 2));
    put4(v, nib_lo16(w));
    put4(v + 4, nib_hi16(w));
    for (int i = 0; i < 8; i++) {
        v[i] |= high_bits(qh, 4 * i);
        if (!ONE) v[i] = sub_bytes(v[i], 16);
    }
    ws[0] = ld_f16(h);
    if (ONE) *wm = ld_f16(h + 2);
}
__device__ void unpack_q5_0(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    unpack_q5<false>(W, hoff, b, v, ws, wm);
}
__device__ void unpack_q5_1(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    unpack_q5<true>(W, hoff, b, v, ws, wm);
}
__device__ void unpack_q8_0(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    put4(v, ld16(W + b * Q_q8_0));
    put4(v + 4, ld16(W + b * Q_q8_0 + 16));
    ws[0] = ld_f16(W + hoff + b * H_q8_0);
}
// Chunk c's 6-bit scale and min from a Q4_K/Q5_K header held as words (d, dmin, then the 12
// bytes of scales and mins), as k4_scale_min takes them from bytes: byte j of the scales is
// byte j % 4 of word 1 + j / 4.
__device__ __forceinline__ void k4_header_scale_min(uint4 hd, int c, int* sc, int* mn) {
    int sh = 8 * (c & 3);
    u32 b1 = (hd.y >> sh) & 0xff, b2 = (hd.z >> sh) & 0xff, b3 = (hd.w >> sh) & 0xff;
    *sc = c < 4 ? b1 & 63 : (b3 & 0xf) | ((b1 >> 6) << 4);
    *mn = c < 4 ? b2 & 63 : (b3 >> 4) | ((b2 >> 6) << 4);
}
template <bool Q5>
__device__ __forceinline__ void unpack_q45_k(const u8* W, long long hoff, long long b, int c, u32* v, float* ws,
                                             float* wm, int* isc) {
    const u8* q = W + b * (Q5 ? Q_q5_k : Q_q4_k);
    const u8* qs = q + (Q5 ? 32 : 0) + 32 * (c / 2);
    uint4 w0 = ld16(qs), w1 = ld16(qs + 16);
    if (c % 2) {
        put4(v, nib_hi16(w0));
        put4(v + 4, nib_hi16(w1));
    } else {
        put4(v, nib_lo16(w0));
        put4(v + 4, nib_lo16(w1));
    }
    if (Q5) {
        uint4 h0 = bit4_16(ld16(q), c), h1 = bit4_16(ld16(q + 16), c);
        v[0] |= h0.x; v[1] |= h0.y; v[2] |= h0.z; v[3] |= h0.w;
        v[4] |= h1.x; v[5] |= h1.y; v[6] |= h1.z; v[7] |= h1.w;
    }
    // The 16-byte header in one load.
    uint4 hd = ld16(W + hoff + b * H_q4_k);
    int sc, mn;
    k4_header_scale_min(hd, c, &sc, &mn);
    ws[0] = h2f((u16)(hd.x & 0xffff));
    isc[0] = sc;
    *wm = -(h2f((u16)(hd.x >> 16)) * (float)mn);
}
__device__ void unpack_q4_k(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    unpack_q45_k<false>(W, hoff, b, c, v, ws, wm, isc);
}
__device__ void unpack_q5_k(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    unpack_q45_k<true>(W, hoff, b, c, v, ws, wm, isc);
}
// Q6_K chunk c (0..8): half hh = c / 4, chunk cc = c % 4 of it (see matmul_k.cu).
__device__ void unpack_q6_k(const u8* W, long long hoff, long long b, int c, u32* v, float* ws, float* wm, int* isc) {
    const u8* q = W + b * Q_q6_k;
    int hh = c / 4, cc = c % 4;
    const u8* ql = q + 64 * hh + 32 * (cc % 2);
    const u8* qh = q + 128 + 32 * hh;
    uint4 l0 = ld16(ql), l1 = ld16(ql + 16), h0 = ld16(qh), h1 = ld16(qh + 16);
    u32 lo[8], hi[8];
    put4(lo, l0);
    put4(lo + 4, l1);
    put4(hi, h0);
    put4(hi + 4, h1);
    for (int i = 0; i < 8; i++) {
        u32 x = ((lo[i] >> (4 * (cc / 2))) & 0x0f0f0f0fu) | (((hi[i] >> (2 * cc)) & 0x03030303u) << 4);
        v[i] = sub_bytes(x, 32);
    }
    const u8* h = W + hoff + b * H_q6_k;
    ws[0] = ld_f16(h + 16);
    isc[0] = (i8)h[2 * c];
    isc[1] = (i8)h[2 * c + 1];
}

// Four 8×8 matrices of 16-bit elements (here: 8 rows × 16 bytes each) from shared memory, a
// row address from each lane: lanes 8i..8i+7 give matrix i's rows, whose words land in reg i.
__device__ __forceinline__ void ldsm4(u32* r, const u8* p) {
#if __CUDA_ARCH__ >= 750
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}
// c = a·b (no accumulator in): the exact integer sums of one 32- (k32) or 16-value (k16) chunk.
__device__ __forceinline__ void mma_k32_0(int* c, const u32* a, const u32* b) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
#endif
}
__device__ __forceinline__ void mma_k16_0(int* c, u32 a0, u32 a1, u32 b) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(0));
#endif
}

// KSUB: values per scale (32, or 16 for Q6_K); MIN: the type has a min term; KACT: q8_K
// activations (one d per 256 values) and a K-quant's integer sub-block scales.
// BN: tokens a block, 64 (four warps of BM/2 rows × 32 tokens), 32 (four warps of BM/4 rows × 32
// tokens: twice the blocks, for products too small to fill the device otherwise) or 128 (four
// warps of BM/2 rows × 64 tokens).
//
// The fold of the tensor cores' integer sums is most of the kernel's instructions, so it is
// kept short:
//   K-quants: a stage of MMQ_KS = 256 values is one weight block and one activation scale, so
//     each sub-block's sums are multiplied by its integer scale and added as integers; the
//     floats come in once a stage: acc += d·d_act·Σ sc·isum (as the CPU's dot products do),
//     plus, for Q4_K/Q5_K, the min terms (−dmin·mn)·(d_act·Σq) per sub-block;
//   legacy types: acc += (d·d_act)·isum per 32 values (+ m·s_act for Q4_1/Q5_1).
// Fragments come from shared memory by ldmatrix (four 8 × 16-byte matrices at once).
//
// Split-K: with gridDim.z > 1, block z takes the z-th of gridDim.z equal runs of MMQ_KS
// chunks of k and writes its partial sums, without the bias, to part[z][token][row];
// `mmq_reduce` then adds the runs in order (products of few tokens have too few tiles to
// fill the device otherwise).
template <int QB, int Q, int KSUB, bool MIN, bool KACT, mmq_unpack UNPACK, int BN, int BM = MMQ_BM, int KS = MMQ_KS>
__device__ __forceinline__ void mmq_tile(const u8* W, const i8* aq, const float* ad, float* out, const u8* bias,
                                         int btype, int k, int n, int rows, float* part) {
    // A stage: KS values of k, CH chunks of 32; K-quants stage one block (KS = 256).
    static_assert(!KACT || KS == 256, "a K-quant stage is one block");
    constexpr int CH = KS / 32, NSUB = KS / KSUB, STRIDE = KS + 16;
    constexpr int CPB = QB / 32;
    // Warps along the rows (WM) and the tokens (WN); a warp's 16-row (MT) and 8-token (NT) tiles.
    constexpr int WM = BN == 32 ? 4 : 2, WN = MMQ_WARPS / WM;
    constexpr int MT = BM / WM / 16, NT = BN / WN / 8;
    __shared__ __align__(16) u8 sw[BM * STRIDE];
    __shared__ __align__(16) u8 sa[BN * STRIDE];
    // Weight scales: per chunk (legacy), or the block's d in [r][0] (K-quants).
    __shared__ float sws[BM][KACT ? 1 : CH + 1];
    __shared__ int ssc[KACT ? BM : 1][NSUB + 1];
    __shared__ float swm[MIN ? BM : 1][CH + 1];
    // Activation scales: per chunk (legacy), or the stage's one d in [t][0] (K-quants).
    __shared__ float sad[BN][KACT ? 1 : CH + 1];
    __shared__ float sas[MIN ? BN : 1][CH + 1];
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    int r0 = blockIdx.x * BM, c0 = blockIdx.y * BN;
    int wr = (warp % WM) * (BM / WM), wc = (warp / WM) * (BN / WN);
    int nb = k / QB, nbk = k / 32;
    long long hoff = header_offset((long long)n * nb, Q);
    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    // This lane's ldmatrix row addresses (byte offsets in sw / sa; a chunk adds 32·c).
    int arow[MT], brow[NT / 2];
#pragma unroll
    for (int i = 0; i < MT; i++) arow[i] = (wr + 16 * i + (lane & 7) + 8 * ((lane >> 3) & 1)) * STRIDE + 16 * (lane >> 4);
#pragma unroll
    for (int jj = 0; jj < NT / 2; jj++) brow[jj] = (wc + 16 * jj + (lane & 7) + 8 * (lane >> 4)) * STRIDE + 16 * ((lane >> 3) & 1);

    int nks = (k + KS - 1) / KS, per = (nks + gridDim.z - 1) / gridDim.z;
    int k_begin = blockIdx.z * per * KS, k_end = min(k, (blockIdx.z + 1) * per * KS);
    if (gridDim.z > 1) {
        out = part + (long long)blockIdx.z * rows * n;
        bias = nullptr;
    }
    for (int k0 = k_begin; k0 < k_end; k0 += KS) {
        int nch = min(CH, (k - k0) / 32);
        // Weights: item i is (row i / CH, chunk i % CH), a row's chunks neighbours; thread tid
        // takes items tid + MMQ_THREADS·j, MMQ_LOADS of them at once: all their loads are
        // issued before the first store to shared memory (a generic load may alias it, so
        // the compiler keeps loads behind earlier stores), so a few tokens' products, whose
        // blocks are few, keep more bytes in flight.
#pragma unroll
        for (int j0 = 0; j0 < BM * CH / MMQ_THREADS; j0 += MMQ_LOADS) {
            u32 v[MMQ_LOADS][8];
            float ws[MMQ_LOADS], wm[MMQ_LOADS];
            int isc[MMQ_LOADS][2];
#pragma unroll
            for (int j = 0; j < MMQ_LOADS; j++) {
                int i = tid + MMQ_THREADS * (j0 + j), r = i / CH, c = i % CH;
                ws[j] = 0.0f;
                wm[j] = 0.0f;
                isc[j][0] = isc[j][1] = 0;
                if (c < nch && r0 + r < n) {
                    int kc = k0 / 32 + c;
                    UNPACK(W, hoff, (long long)(r0 + r) * nb + kc / CPB, kc % CPB, v[j], ws + j, wm + j, isc[j]);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; e++) v[j][e] = 0;
                }
            }
#pragma unroll
            for (int j = 0; j < MMQ_LOADS; j++) {
                int i = tid + MMQ_THREADS * (j0 + j), r = i / CH, c = i % CH;
                uint4* dst = (uint4*)(sw + r * STRIDE + 32 * c);
                dst[0] = make_uint4(v[j][0], v[j][1], v[j][2], v[j][3]);
                dst[1] = make_uint4(v[j][4], v[j][5], v[j][6], v[j][7]);
                if (KACT) {
                    if (c == 0) sws[r][0] = ws[j];
                    if (KSUB == 32) {
                        ssc[r][c] = isc[j][0];
                    } else {
                        ssc[r][2 * c] = isc[j][0];
                        ssc[r][2 * c + 1] = isc[j][1];
                    }
                } else {
                    sws[r][c] = ws[j];
                }
                if (MIN) swm[r][c] = wm[j];
            }
        }
        // Activations: item i is (token i / CH, chunk i % CH); all of a thread's loads first.
        {
            constexpr int NA = BN * CH / MMQ_THREADS;
            uint4 x0[NA], x1[NA];
            float d[NA], s[NA];
#pragma unroll
            for (int j = 0; j < NA; j++) {
                int i = tid + MMQ_THREADS * j, r = i / CH, c = i % CH, tok = c0 + r;
                x0[j] = x1[j] = make_uint4(0, 0, 0, 0);
                d[j] = s[j] = 0.0f;
                if (c < nch && tok < rows) {
                    const i8* p = aq + (long long)tok * k + k0 + 32 * c;
                    x0[j] = ld16(p);
                    x1[j] = ld16(p + 16);
                    if (KACT) {
                        d[j] = ad[(long long)tok * (k / 256) + k0 / 256];
                    } else {
                        long long bi = (long long)tok * nbk + k0 / 32 + c;
                        d[j] = ad[2 * bi];
                        if (MIN) s[j] = ad[2 * bi + 1];
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NA; j++) {
                int i = tid + MMQ_THREADS * j, r = i / CH, c = i % CH;
                if (KACT && MIN) s[j] = d[j] * (float)sum16(x1[j], sum16(x0[j], 0));
                uint4* dst = (uint4*)(sa + r * STRIDE + 32 * c);
                dst[0] = x0[j];
                dst[1] = x1[j];
                if (KACT) {
                    if (c == 0) sad[r][0] = d[j];
                } else {
                    sad[r][c] = d[j];
                }
                if (MIN) sas[r][c] = s[j];
            }
        }
        __syncthreads();
        int isum[MT][NT][4];
        if (KACT) {
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) isum[i][j][e] = 0;
        }
        for (int c = 0; c < nch; c++) {
            u32 a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) ldsm4(a[i], sw + arow[i] + 32 * c);
#pragma unroll
            for (int jj = 0; jj < NT / 2; jj++) {
                u32 r4[4];
                ldsm4(r4, sa + brow[jj] + 32 * c);
                b[2 * jj][0] = r4[0];
                b[2 * jj][1] = r4[1];
                b[2 * jj + 1][0] = r4[2];
                b[2 * jj + 1][1] = r4[3];
            }
            // c[0], c[1]: row g, tokens 2·t4, 2·t4 + 1; c[2], c[3]: the same tokens of row g + 8.
            // The legacy types' activation scales of this lane's tokens, loaded once for all MT
            // row tiles.
            float dj[KACT ? 1 : NT][2];
            if (!KACT) {
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    int ta = wc + 8 * j + 2 * t4;
                    dj[j][0] = sad[ta][c];
                    dj[j][1] = sad[ta + 1][c];
                }
            }
#pragma unroll
            for (int i = 0; i < MT; i++) {
                int ra = wr + 16 * i + g;
                if (KACT) {
                    if (KSUB == 32) {
                        int s0 = ssc[ra][c], s1 = ssc[ra + 8][c];
#pragma unroll
                        for (int j = 0; j < NT; j++) {
                            int ci[4];
                            mma_k32_0(ci, a[i], b[j]);
                            isum[i][j][0] += s0 * ci[0];
                            isum[i][j][1] += s0 * ci[1];
                            isum[i][j][2] += s1 * ci[2];
                            isum[i][j][3] += s1 * ci[3];
                        }
                    } else {
                        int s0 = ssc[ra][2 * c], s1 = ssc[ra + 8][2 * c];
                        int u0 = ssc[ra][2 * c + 1], u1 = ssc[ra + 8][2 * c + 1];
#pragma unroll
                        for (int j = 0; j < NT; j++) {
                            int ci[4], cu[4];
                            mma_k16_0(ci, a[i][0], a[i][1], b[j][0]);
                            mma_k16_0(cu, a[i][2], a[i][3], b[j][1]);
                            isum[i][j][0] += s0 * ci[0] + u0 * cu[0];
                            isum[i][j][1] += s0 * ci[1] + u0 * cu[1];
                            isum[i][j][2] += s1 * ci[2] + u1 * cu[2];
                            isum[i][j][3] += s1 * ci[3] + u1 * cu[3];
                        }
                    }
                } else {
                    float w0 = sws[ra][c], w1 = sws[ra + 8][c];
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        int ci[4];
                        mma_k32_0(ci, a[i], b[j]);
                        acc[i][j][0] = __fmaf_rn(w0 * dj[j][0], (float)ci[0], acc[i][j][0]);
                        acc[i][j][1] = __fmaf_rn(w0 * dj[j][1], (float)ci[1], acc[i][j][1]);
                        acc[i][j][2] = __fmaf_rn(w1 * dj[j][0], (float)ci[2], acc[i][j][2]);
                        acc[i][j][3] = __fmaf_rn(w1 * dj[j][1], (float)ci[3], acc[i][j][3]);
                    }
                }
                if (MIN) {
                    float m0 = swm[ra][c], m1 = swm[ra + 8][c];
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        int ta = wc + 8 * j + 2 * t4;
                        float s0 = sas[ta][c], s1 = sas[ta + 1][c];
                        acc[i][j][0] = __fmaf_rn(m0, s0, acc[i][j][0]);
                        acc[i][j][1] = __fmaf_rn(m0, s1, acc[i][j][1]);
                        acc[i][j][2] = __fmaf_rn(m1, s0, acc[i][j][2]);
                        acc[i][j][3] = __fmaf_rn(m1, s1, acc[i][j][3]);
                    }
                }
            }
        }
        if (KACT) {
#pragma unroll
            for (int i = 0; i < MT; i++) {
                int ra = wr + 16 * i + g;
                float w0 = sws[ra][0], w1 = sws[ra + 8][0];
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    int ta = wc + 8 * j + 2 * t4;
                    float d0 = sad[ta][0], d1 = sad[ta + 1][0];
                    acc[i][j][0] = __fmaf_rn(w0 * d0, (float)isum[i][j][0], acc[i][j][0]);
                    acc[i][j][1] = __fmaf_rn(w0 * d1, (float)isum[i][j][1], acc[i][j][1]);
                    acc[i][j][2] = __fmaf_rn(w1 * d0, (float)isum[i][j][2], acc[i][j][2]);
                    acc[i][j][3] = __fmaf_rn(w1 * d1, (float)isum[i][j][3], acc[i][j][3]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < MT; i++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = r0 + wr + 16 * i + g + 8 * h;
            if (row >= n) continue;
            float bv = bias ? deq(btype, bias, n, row) : 0.0f;
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int tok = c0 + wc + 8 * j + 2 * t4 + e;
                    if (tok < rows) out[(long long)tok * n + row] = acc[i][j][2 * h + e] + bv;
                }
            }
        }
    }
}

// Two entry points per type: `mmq_T`, a grid of (⌈n / MMQ_BM⌉, ⌈rows / 64⌉) blocks of
// MMQ_THREADS, and `mmq_T_n32`, the same for (⌈n / MMQ_BM⌉, ⌈rows / 32⌉).
#define MMQ(T, KSUB, MIN, KACT)                                                                                \
    extern "C" __global__ void __launch_bounds__(MMQ_THREADS, MMQ_MIN_BLOCKS) mmq_##T(const MmqParams p) {                     \
        mmq_tile<QB_##T, Q_##T, KSUB, MIN, KACT, unpack_##T, 64>(p.w, p.aq, p.ad, p.out, p.bias, p.btype, p.k,  \
                                                                  p.n, p.rows, p.part);                        \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(MMQ_THREADS, MMQ_MIN_BLOCKS) mmq_##T##_n32(const MmqParams p) {               \
        mmq_tile<QB_##T, Q_##T, KSUB, MIN, KACT, unpack_##T, 32>(p.w, p.aq, p.ad, p.out, p.bias, p.btype, p.k,  \
                                                                  p.n, p.rows, p.part);                        \
    }

// `mmq_T_l`: tiles of 128 rows × 128 tokens, each warp 64 × 64, in stages of 128 values (both
// tiles and the legacy types' scales fit in 48 KB of static shared memory): half the fragment
// loads a tensor-core product of the 64 × 64 tiles (whose kernels ncu found bound by shared
// memory: L1 throughput 78-87%, the SMs' issue slots 41-49% busy), and half their staging
// stores an output. Legacy types only: a K-quant stage is a block of 256 values, and its
// integer sums would double the 128 accumulators a thread holds. At most MMQ_MIN_BLOCKS_LARGE
// blocks a multiprocessor (254 registers a thread, no spills). For products with enough
// tiles (ops/matmul_mmq.rs), where cuBLAS does not take them (ops/matmul_blas.rs): on an
// H200, 8b Q8_0 pp1024 / pp2048 ran 1.04x the 128 × 64 tiles of stop 41 (which these
// replace), Q4_0 1.01x, 1b 1.02-1.04x.
#ifndef MMQ_MIN_BLOCKS_LARGE
#define MMQ_MIN_BLOCKS_LARGE 2
#endif
#define MMQ_LARGE(T, MIN)                                                                                      \
    extern "C" __global__ void __launch_bounds__(MMQ_THREADS, MMQ_MIN_BLOCKS_LARGE) mmq_##T##_l(const MmqParams p) { \
        mmq_tile<QB_##T, Q_##T, 32, MIN, false, unpack_##T, 128, 128, 128>(p.w, p.aq, p.ad, p.out, p.bias,     \
                                                                           p.btype, p.k, p.n, p.rows, p.part); \
    }

// `dequant_T`: weight rows r0 .. r0 + rows to f16 (out[r − r0][k]), a thread a chunk of 32
// values, by the tiles' own unpacking: legacy d·q (+ m), Q4_K/Q5_K d·sc·q − dmin·mn, Q6_K d·sc·q,
// in f32, then rounded to nearest f16. For cuBLAS's f16 products of many tokens
// (ops/matmul_blas.rs).
template <int QB, int Q, int KSUB, bool KACT, mmq_unpack UNPACK>
__device__ __forceinline__ void dequant_rows(const DequantParams& p) {
    int nbk = p.k / 32;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)p.rows * nbk) return;
    int r = (int)(i / nbk), kc = (int)(i % nbk), nb = p.k / QB;
    long long hoff = header_offset((long long)p.n * nb, Q);
    u32 v[8];
    float ws = 0.0f, wm = 0.0f;
    int isc[2] = {1, 1};
    UNPACK(p.w, hoff, (long long)(p.r0 + r) * nb + kc / (QB / 32), kc % (QB / 32), v, &ws, &wm, isc);
    u32 h[16];
#pragma unroll
    for (int e = 0; e < 16; e++) {
        float f[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int j = 2 * e + u;
            float q = (float)(i8)(v[j / 4] >> (8 * (j % 4)));
            float s = KACT ? ws * (float)isc[KSUB == 16 ? j / 16 : 0] : ws;
            f[u] = __fmaf_rn(s, q, wm);
        }
        h[e] = (u32)f2h(f[0]) | ((u32)f2h(f[1]) << 16);
    }
    uint4* dst = (uint4*)((u16*)p.out + (long long)r * p.k + 32 * kc);
#pragma unroll
    for (int e = 0; e < 4; e++) dst[e] = make_uint4(h[4 * e], h[4 * e + 1], h[4 * e + 2], h[4 * e + 3]);
}
#define DEQUANT(T, KSUB, KACT)                                                                                 \
    extern "C" __global__ void dequant_##T(const DequantParams p) {                                           \
        dequant_rows<QB_##T, Q_##T, KSUB, KACT, unpack_##T>(p);                                               \
    }

// The split-K sum: out[t][r] = part[0][t][r] + ... + part[splits − 1][t][r] (+ bias[r]), a
// thread an output, the runs in order.
#ifdef MOD_mmq_reduce
extern "C" __global__ void mmq_reduce(const MmqParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, total = (long long)p.rows * p.n;
    if (i >= total) return;
    float v = p.part[i];
    for (int z = 1; z < p.splits; z++) v += p.part[z * total + i];
    int row = (int)(i % p.n);
    p.out[i] = p.bias ? v + deq(p.btype, p.bias, p.n, row) : v;
}
#endif

#ifdef MOD_mmq_q4_0
DEQUANT(q4_0, 32, false)
MMQ(q4_0, 32, false, false)
MMQ_LARGE(q4_0, false)
#endif
#ifdef MOD_mmq_q4_1
DEQUANT(q4_1, 32, false)
MMQ(q4_1, 32, true, false)
MMQ_LARGE(q4_1, true)
#endif
#ifdef MOD_mmq_q5_0
DEQUANT(q5_0, 32, false)
MMQ(q5_0, 32, false, false)
MMQ_LARGE(q5_0, false)
#endif
#ifdef MOD_mmq_q5_1
DEQUANT(q5_1, 32, false)
MMQ(q5_1, 32, true, false)
MMQ_LARGE(q5_1, true)
#endif
#ifdef MOD_mmq_q8_0
DEQUANT(q8_0, 32, false)
MMQ(q8_0, 32, false, false)
MMQ_LARGE(q8_0, false)
#endif
#ifdef MOD_mmq_q4_k
DEQUANT(q4_k, 32, true)
MMQ(q4_k, 32, true, true)
#endif
#ifdef MOD_mmq_q5_k
DEQUANT(q5_k, 32, true)
MMQ(q5_k, 32, true, true)
#endif
#ifdef MOD_mmq_q6_k
DEQUANT(q6_k, 16, true)
MMQ(q6_k, 16, false, true)
#endif
