// Products of a few tokens (7 to 32: the decode steps of several sequences) on the int8 tensor
// cores, for Q4_K and Q6_K weights (`mmqs_q4_k`, `mmqs_q6_k`): out[t][r] = W[r] · x[t].
//
// mmq_T_n32 stages a tile of unpacked weights in shared memory and reads it back with
// ldmatrix; with a few tokens a weight value is used by a few products only, so that traffic
// (and the barrier between the stores and the reads) bounds it: an ncu profile of a decode step
// of 16 sequences had its L1/shared pipe 72% busy and DRAM 15%. Here each thread loads, straight
// from global memory, the words of the mma fragments it holds (rows g and g + 8 of its warp's
// 16 rows, bytes 4·t4.. and 16 + 4·t4.. of each 32-value chunk), all of a stage's at once, and
// only the activations (a few tokens, shared by the block's four warps) pass through shared
// memory, double-buffered so that one barrier a stage suffices.
//
// A block: MMQ_THREADS (four warps) × MMQ_BM = 64 weight rows × up to MMQS_TOK tokens; a stage
// is one 256-value block of every row. Grid (⌈n / 64⌉, 1, splits): the split-K runs and
// partial sums of mmq_T (`mmq_reduce` adds them). Activations: the q8_K layout of
// `quantize_q8ks` (int8 quants, one d per 256 values). The integer sums are the CPU's; the
// floats are folded once a stage, acc += d_act·(d·Σ sc·isum − dmin·Σ mn·Σq) (Q4_K) or
// acc += d·d_act·Σ sc·isum (Q6_K).

#define MMQS_TOK 32

template <bool Q6>
__device__ __forceinline__ void mmqs_tile(const MmqParams& p) {
    constexpr int QBYTES = Q6 ? Q_q6_k : Q_q4_k;
    __shared__ __align__(16) u8 sa[2][MMQS_TOK * MMQ_STRIDE];
    __shared__ float sad[2][MMQS_TOK];
    // Q4_K: Σq of each token's 32-value chunk (for the min terms).
    __shared__ int ssum[2][Q6 ? 1 : MMQS_TOK][8];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const int k = p.k, n = p.n, rows = p.rows, nb = k / 256;
    const long long hoff = header_offset((long long)n * nb, QBYTES);
    const int ra = blockIdx.x * MMQ_BM + 16 * warp + g, rb = ra + 8;
    // Rows past n load row n − 1 (their sums are not written).
    const long long rowa = min(ra, n - 1), rowb = min(rb, n - 1);
    const int nt = min(4, (rows + 7) / 8);  // token tiles in use: the same for the whole block
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
    // ldmatrix row addresses of this lane in a token tile pair (as mmq_tile's).
    int brow[2];
#pragma unroll
    for (int jj = 0; jj < 2; jj++) brow[jj] = (16 * jj + (lane & 7) + 8 * (lane >> 4)) * MMQ_STRIDE + 16 * ((lane >> 3) & 1);

    const int per = (nb + gridDim.z - 1) / gridDim.z;
    const int s_begin = blockIdx.z * per, s_end = min(nb, (blockIdx.z + 1) * per);
    float* out = p.out;
    const u8* bias = p.bias;
    if (gridDim.z > 1) {
        out = p.part + (long long)blockIdx.z * rows * n;
        bias = nullptr;
    }
    const u8* W = p.w;
    int buf = 0;
    for (int s = s_begin; s < s_end; s++, buf ^= 1) {
        // 1. This stage's weight words, all loads issued before anything waits on them.
        const long long ba = rowa * nb + s, bb = rowb * nb + s;
        const u8* qa = W + ba * QBYTES;
        const u8* qb = W + bb * QBYTES;
        // Q4_K: w[row][pair][half]: bytes 4·t4 (half 0) and 16 + 4·t4 (half 1) of qs[32·pair..];
        // Q6_K: w[row][hh·2 + seg][half] of ql's 32-byte segments, h[row][hh][half] of qh's.
        u32 wa[4][2], wb[4][2], qha[2][2], qhb[2][2];
        uint4 hda = make_uint4(0, 0, 0, 0), hdb = hda;
        u32 sca[8], scb[8];
        float da6 = 0.0f, db6 = 0.0f;
        if (!Q6) {
#pragma unroll
            for (int pp = 0; pp < 4; pp++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    wa[pp][h] = *(const u32*)(qa + 32 * pp + 16 * h + 4 * t4);
                    wb[pp][h] = *(const u32*)(qb + 32 * pp + 16 * h + 4 * t4);
                }
            hda = ld16(W + hoff + ba * H_q4_k);
            hdb = ld16(W + hoff + bb * H_q4_k);
        } else {
#pragma unroll
            for (int hs = 0; hs < 4; hs++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    wa[hs][h] = *(const u32*)(qa + 64 * (hs / 2) + 32 * (hs % 2) + 16 * h + 4 * t4);
                    wb[hs][h] = *(const u32*)(qb + 64 * (hs / 2) + 32 * (hs % 2) + 16 * h + 4 * t4);
                }
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    qha[hh][h] = *(const u32*)(qa + 128 + 32 * hh + 16 * h + 4 * t4);
                    qhb[hh][h] = *(const u32*)(qb + 128 + 32 * hh + 16 * h + 4 * t4);
                }
            const u8* ha = W + hoff + ba * H_q6_k;
            const u8* hb = W + hoff + bb * H_q6_k;
#pragma unroll
            for (int c = 0; c < 8; c++) {
                sca[c] = ld_u16(ha + 2 * c);
                scb[c] = ld_u16(hb + 2 * c);
            }
            da6 = ld_f16(ha + 16);
            db6 = ld_f16(hb + 16);
        }
        // 2. The activations of this stage: item i is (token i / 8, chunk i % 8).
#pragma unroll
        for (int it = 0; it < MMQS_TOK * 8 / MMQ_THREADS; it++) {
            int i = tid + MMQ_THREADS * it, t = i / 8, c = i % 8;
            if (t < rows) {
                const i8* src = p.aq + (long long)t * k + 256 * s + 32 * c;
                uint4 x0 = ld16(src), x1 = ld16(src + 16);
                uint4* dst = (uint4*)(sa[buf] + t * MMQ_STRIDE + 32 * c);
                dst[0] = x0;
                dst[1] = x1;
                if (c == 0) sad[buf][t] = p.ad[(long long)t * nb + s];
                if (!Q6) ssum[buf][t][c] = sum16(x1, sum16(x0, 0));
            }
        }
        __syncthreads();
        // 3. The products, chunk by chunk, in integers.
        int isum[4][4], msum[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) isum[j][e] = msum[j][e] = 0;
#pragma unroll
        for (int c = 0; c < 8; c++) {
            u32 a[4];
            if (!Q6) {
                const int sh = 4 * (c % 2);
                a[0] = (wa[c / 2][0] >> sh) & 0x0f0f0f0fu;
                a[1] = (wb[c / 2][0] >> sh) & 0x0f0f0f0fu;
                a[2] = (wa[c / 2][1] >> sh) & 0x0f0f0f0fu;
                a[3] = (wb[c / 2][1] >> sh) & 0x0f0f0f0fu;
            } else {
                const int hh = c / 4, cc = c % 4, hs = 2 * hh + cc % 2;
                const int sl = 4 * (cc / 2), shh = 2 * cc;
                a[0] = sub_bytes(((wa[hs][0] >> sl) & 0x0f0f0f0fu) | (((qha[hh][0] >> shh) & 0x03030303u) << 4), 32);
                a[1] = sub_bytes(((wb[hs][0] >> sl) & 0x0f0f0f0fu) | (((qhb[hh][0] >> shh) & 0x03030303u) << 4), 32);
                a[2] = sub_bytes(((wa[hs][1] >> sl) & 0x0f0f0f0fu) | (((qha[hh][1] >> shh) & 0x03030303u) << 4), 32);
                a[3] = sub_bytes(((wb[hs][1] >> sl) & 0x0f0f0f0fu) | (((qhb[hh][1] >> shh) & 0x03030303u) << 4), 32);
            }
            u32 b[4][2];
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                if (2 * jj < nt) {
                    u32 r4[4];
                    ldsm4(r4, sa[buf] + brow[jj] + 32 * c);
                    b[2 * jj][0] = r4[0];
                    b[2 * jj][1] = r4[1];
                    b[2 * jj + 1][0] = r4[2];
                    b[2 * jj + 1][1] = r4[3];
                }
            }
            if (!Q6) {
                // The chunk's 6-bit scale and min of rows ra and rb.
                int sa0, ma0, sb0, mb0;
                k4_header_scale_min(hda, c, &sa0, &ma0);
                k4_header_scale_min(hdb, c, &sb0, &mb0);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (j < nt) {
                        int ci[4];
                        mma_k32_0(ci, a, b[j]);
                        isum[j][0] += sa0 * ci[0];
                        isum[j][1] += sa0 * ci[1];
                        isum[j][2] += sb0 * ci[2];
                        isum[j][3] += sb0 * ci[3];
                        const int t0 = 8 * j + 2 * t4;
                        const int q0 = ssum[buf][t0][c], q1 = ssum[buf][t0 + 1][c];
                        msum[j][0] += ma0 * q0;
                        msum[j][1] += ma0 * q1;
                        msum[j][2] += mb0 * q0;
                        msum[j][3] += mb0 * q1;
                    }
                }
            } else {
                // Two 16-value halves, each with its own scale.
                const int s0 = (i8)(sca[c] & 0xff), u0 = (i8)(sca[c] >> 8);
                const int s1 = (i8)(scb[c] & 0xff), u1 = (i8)(scb[c] >> 8);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (j < nt) {
                        int ci[4], cu[4];
                        mma_k16_0(ci, a[0], a[1], b[j][0]);
                        mma_k16_0(cu, a[2], a[3], b[j][1]);
                        isum[j][0] += s0 * ci[0] + u0 * cu[0];
                        isum[j][1] += s0 * ci[1] + u0 * cu[1];
                        isum[j][2] += s1 * ci[2] + u1 * cu[2];
                        isum[j][3] += s1 * ci[3] + u1 * cu[3];
                    }
                }
            }
        }
        // 4. The stage's floats.
        float dwa, dwb, mwa = 0.0f, mwb = 0.0f;
        if (!Q6) {
            dwa = h2f((u16)(hda.x & 0xffff));
            dwb = h2f((u16)(hdb.x & 0xffff));
            mwa = h2f((u16)(hda.x >> 16));
            mwb = h2f((u16)(hdb.x >> 16));
        } else {
            dwa = da6;
            dwb = db6;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (j < nt) {
                const int t0 = 8 * j + 2 * t4;
                const float d0 = sad[buf][t0], d1 = sad[buf][t0 + 1];
                if (!Q6) {
                    acc[j][0] = __fmaf_rn(d0, __fmaf_rn(-mwa, (float)msum[j][0], dwa * (float)isum[j][0]), acc[j][0]);
                    acc[j][1] = __fmaf_rn(d1, __fmaf_rn(-mwa, (float)msum[j][1], dwa * (float)isum[j][1]), acc[j][1]);
                    acc[j][2] = __fmaf_rn(d0, __fmaf_rn(-mwb, (float)msum[j][2], dwb * (float)isum[j][2]), acc[j][2]);
                    acc[j][3] = __fmaf_rn(d1, __fmaf_rn(-mwb, (float)msum[j][3], dwb * (float)isum[j][3]), acc[j][3]);
                } else {
                    acc[j][0] = __fmaf_rn(dwa * d0, (float)isum[j][0], acc[j][0]);
                    acc[j][1] = __fmaf_rn(dwa * d1, (float)isum[j][1], acc[j][1]);
                    acc[j][2] = __fmaf_rn(dwb * d0, (float)isum[j][2], acc[j][2]);
                    acc[j][3] = __fmaf_rn(dwb * d1, (float)isum[j][3], acc[j][3]);
                }
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = h ? rb : ra;
        if (row >= n) continue;
        const float bv = bias ? deq(p.btype, bias, n, row) : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int t = 8 * j + 2 * t4 + e;
                if (j < nt && t < rows) out[(long long)t * n + row] = acc[j][2 * h + e] + bv;
            }
        }
    }
}

#ifdef MOD_mmq_q4_k
extern "C" __global__ void __launch_bounds__(MMQ_THREADS) mmqs_q4_k(const MmqParams p) { mmqs_tile<false>(p); }
#endif
#ifdef MOD_mmq_q6_k
extern "C" __global__ void __launch_bounds__(MMQ_THREADS) mmqs_q6_k(const MmqParams p) { mmqs_tile<true>(p); }
#endif
