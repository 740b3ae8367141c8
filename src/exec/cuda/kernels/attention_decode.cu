// Decode attention on the tensor cores, split along the keys (flash-decoding with mma.sync,
// sm_80 and later; heads of 64 and 128).
//
// The grid, the chunks, the parameters, the partial results and their combination are
// attention_split.cu's (split_chunk, finish_chunk): a block takes one query row, one KV head,
// the GB (at most 8) query heads that share it, and a chunk of the row's keys. Unlike the split
// kernel, whose lanes each dot one key row with every head in f32 (a key row per lane, so every
// load instruction touches 32 cache lines), this one hands the products to the tensor cores and
// the loads to cp.async:
// - Each of the four warps streams its own tiles of AD_BK = 16 keys (warp w takes tiles w,
//   w + 4, w + 8, ... of the chunk) through a private ring of AD_STAGES stages of dynamic shared
//   memory, a key tile and a value tile a stage, copied 16 bytes a lane, two whole rows an
//   instruction. AD_STAGES − 1 tiles a warp are in flight while it computes one, and the loop
//   needs no barrier of the block (the ring is the warp's own).
// - Per tile: S = Q·Kᵀ with the GB heads as M-rows 0 .. GB − 1 of mma.m16n8k16 (rows GB .. 15
//   zero) and the 16 keys as two n-tiles; an online softmax in the log2 domain (running max and
//   sum a head); P rounded to f16 as the A-fragment of O += P·V, the value tile read transposed
//   by ldmatrix.
// Per token and KV head every key and value row is read once; the tensor cores do 4 · HD
// multiply-adds a key and head row (most of them on the zero rows), far below what they can,
// so the copies bound it.
//
// Numerics: as the flash prefill kernel: the query and P rounded to f16; scores, softmax and
// sums in f32.
//
// Dynamic shared memory: 4 · AD_STAGES · 2 · AD_BK · (HD + 8) halves (`Kernel::dynamic_smem`
// computes the same figure), reused for the warps' outputs once their loops are done.

#ifndef AD_STAGES
#define AD_STAGES 3
#endif
#define AD_BK 16
#define AD_LN2 0.6931471805599453f

// Wait until at most N of this thread's cp.async groups are pending.
template <int N>
__device__ __forceinline__ void ad_cp_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// HD: the head size (64 or 128); GB: query heads a block (1, 2, 4 or 8).
template <int HD, int GB>
__device__ __forceinline__ void attention_decode_t(const AttentionSplitParams& p) {
    constexpr int STRIDE = HD + 8;             // halves a shared row: ldmatrix without bank conflicts
    constexpr int STAGE = 2 * AD_BK * STRIDE;  // halves a stage: the key tile, then the value tile
    constexpr int KS = HD / 16;                // k-steps of Q·Kᵀ
    constexpr int NT = HD / 8;                 // n-tiles of the output
    static_assert(GB <= 8 && KV_BLOCK % AD_BK == 0, "eight heads at most; a tile in one cache block");
    static_assert(GB * HD * 4 <= AD_STAGES * STAGE * 2, "a warp's outputs fit its ring");
    extern __shared__ __align__(16) u16 ad_smem[];
    __shared__ float wm[4][GB], wl[4][GB];
    __shared__ u32 tbl[AS_TBL];
    pdl_trigger();
    pdl_wait();
    SplitChunk c;
    if (!split_chunk(p, GB, &c)) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gi = lane / 4, ti = lane % 4;
    load_chunk_table(c, tbl);
    __syncthreads();
    u16* ring = ad_smem + warp * AD_STAGES * STAGE;
    const u16* kb = p.kc + c.kvh * HD;
    const u16* vb = p.vc + c.kvh * HD;
    // This warp's tiles: tile t holds keys j0 + AD_BK · (warp + 4t) ..; keys outside
    // [start, j1) are copied as zeros (the cache may hold anything there) and masked.
    const int n_tiles = (c.j1 - c.j0 + AD_BK - 1) / AD_BK;
    const int my_tiles = n_tiles > warp ? (n_tiles - warp + 3) / 4 : 0;
    auto load = [&](int t) {
        u16* st = ring + (t % AD_STAGES) * STAGE;
        const int jt = c.j0 + AD_BK * (warp + 4 * t);
        const long long row0 = chunk_row(c, tbl, jt);
#pragma unroll
        for (int q = 0; q < AD_BK * HD / 8 / 32; q++) {
            const int i = 32 * q + lane, rr = i / (HD / 8), cc = i % (HD / 8), j = jt + rr;
            const bool valid = j >= c.start && j < c.j1;
            const long long row = row0 + (valid ? rr : 0);
            fa_cp16(st + rr * STRIDE + cc * 8, kb + row * p.k_dim + cc * 8, valid);
            fa_cp16(st + (AD_BK + rr) * STRIDE + cc * 8, vb + row * p.v_dim + cc * 8, valid);
        }
    };
#pragma unroll
    for (int t = 0; t < AD_STAGES - 1; t++) {
        if (t < my_tiles) load(t);
        fa_cp_commit();  // empty groups too: the count of groups stays the tile count
    }
    // Query A-fragments of M-row gi (head g0 + gi): a0 dims 16k + 2ti .., a2 eight dims on;
    // a1, a3 (M-row gi + 8) zero.
    u32 qa[KS][4];
    const long long qrow = gi < c.ng ? ((long long)c.r * p.n_heads + c.h0 + gi) * HD : -1;
#pragma unroll
    for (int k = 0; k < KS; k++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float2 v = make_float2(0.0f, 0.0f);
            if (qrow >= 0) v = *(const float2*)(p.q + qrow + 16 * k + 8 * h + 2 * ti);
            qa[k][2 * h] = fa_pack(v.x, v.y);
            qa[k][2 * h + 1] = 0u;
        }
    }
    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    const float scale2 = p.scale * FA_LOG2E;
    for (int t = 0; t < my_tiles; t++) {
        __syncwarp();  // every lane is done with the stage the next copy refills
        if (t + AD_STAGES - 1 < my_tiles) load(t + AD_STAGES - 1);
        fa_cp_commit();
        ad_cp_wait<AD_STAGES - 1>();
        __syncwarp();  // tile t is in, every lane's part of it
        const u16* ks = ring + (t % AD_STAGES) * STAGE;
        const u16* vs = ks + AD_BK * STRIDE;
        const int jt = c.j0 + AD_BK * (warp + 4 * t);
        // S = Q·Kᵀ: n-tile n holds keys jt + 8n ..; c0, c1 are M-row gi, keys 2ti, 2ti + 1.
        float s[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < KS; k += 2) {
#pragma unroll
            for (int n = 0; n < 2; n++) {
                u32 b[4];
                fa_ldsm(b, ks + (8 * n + (lane & 7)) * STRIDE + 16 * k + (lane >> 3) * 8);
                fa_mma(s[n], qa[k], b[0], b[1]);
                fa_mma(s[n], qa[k + 1], b[2], b[3]);
            }
        }
        // Scale, cap, mask; the tile's maximum of the row (its four threads are one quad).
        float tmax = -INFINITY;
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int j = jt + 8 * n + 2 * ti + e;
                float v = s[n][e];
                if (p.softcap > 0.0f) {
                    v = tanhf(v * p.scale / p.softcap) * p.softcap * FA_LOG2E;
                } else {
                    v *= scale2;
                }
                v = j >= c.start && j < c.j1 ? v : -INFINITY;
                s[n][e] = v;
                tmax = fmaxf(tmax, v);
            }
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        const float mn = fmaxf(mx, tmax);
        // No key seen yet (mn = -inf): nothing to rescale, every probability 2^-inf = 0.
        const float corr = mn == -INFINITY ? 1.0f : fa_exp2(mx - mn);
        const float mref = mn == -INFINITY ? 0.0f : mn;
        mx = mn;
        sum *= corr;
        // P (f16) as the A-fragment of P·V: keys 2ti .. from n-tile 0, 8 + 2ti .. from n-tile 1.
        u32 pa[4];
#pragma unroll
        for (int n = 0; n < 2; n++) {
            const float p0 = fa_exp2(s[n][0] - mref), p1 = fa_exp2(s[n][1] - mref);
            sum += p0 + p1;
            pa[2 * n] = fa_pack(p0, p1);
            pa[2 * n + 1] = 0u;
        }
        // Deep in a row the maximum rarely moves: the warp skips the rescale when no row's did.
        if (__any_sync(0xffffffffu, corr != 1.0f)) {
#pragma unroll
            for (int n = 0; n < NT; n++) o[n][0] *= corr, o[n][1] *= corr;
        }
        // O += P·V: the value tile read transposed (rows are keys, the k of this product).
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            u32 b[4];
            fa_ldsm_t(b, vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE + 8 * n + (lane >> 4) * 8);
            fa_mma(o[n], pa, b[0], b[1]);
            fa_mma(o[n + 1], pa, b[2], b[3]);
        }
    }
    // The quad's sums; then this warp's (m, l) and outputs of its heads, the outputs over its
    // own ring (every copy is done: only empty groups can be pending).
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    ad_cp_wait<0>();
    __syncwarp();
    float* wo = (float*)ring;
    if (gi < GB) {
#pragma unroll
        for (int n = 0; n < NT; n++) *(float2*)(wo + gi * HD + 8 * n + 2 * ti) = make_float2(o[n][0], o[n][1]);
        if (ti == 0) wm[warp][gi] = mx == -INFINITY ? -INFINITY : mx * AD_LN2, wl[warp][gi] = sum;
    }
    __syncthreads();
    finish_chunk<HD, GB>(p, c.y, c.r, c.h0, c.ng, c.s, c.n_used, wm, wl, (const float*)ad_smem, AD_STAGES * STAGE / 2);
}

#define ATTENTION_DECODE(HD, GB)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) attention_decode_##HD##_##GB(const AttentionSplitParams p) { \
        attention_decode_t<HD, GB>(p);                                                                           \
    }
#ifdef MOD_attention_decode_64_1
ATTENTION_DECODE(64, 1)
#endif
#ifdef MOD_attention_decode_64_2
ATTENTION_DECODE(64, 2)
#endif
#ifdef MOD_attention_decode_64_4
ATTENTION_DECODE(64, 4)
#endif
#ifdef MOD_attention_decode_64_8
ATTENTION_DECODE(64, 8)
#endif
#ifdef MOD_attention_decode_128_1
ATTENTION_DECODE(128, 1)
#endif
#ifdef MOD_attention_decode_128_2
ATTENTION_DECODE(128, 2)
#endif
#ifdef MOD_attention_decode_128_4
ATTENTION_DECODE(128, 4)
#endif
#ifdef MOD_attention_decode_128_8
ATTENTION_DECODE(128, 8)
#endif
