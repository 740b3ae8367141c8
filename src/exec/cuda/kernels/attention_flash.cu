// Prefill attention on the f16 tensor cores (flash attention; mma.sync m16n8k16, sm_80 and
// later): no scores in memory, whatever the prompt and context lengths.
//
// A block of 4 warps takes 64 "M-rows": M-row m is query row r0 + m / gb of query head
// h0 + m % gb, where the gb heads (at most 8) share one KV head, so one read of a key or value
// tile serves them all. Each warp owns 16 M-rows: their queries sit in registers as mma
// A-fragments (rounded to f16, as ggml converts them for the product with the f16 cache), and
// their outputs as f32 accumulators. The block walks the keys in tiles (64 keys; 32 for heads
// of 256), staged in shared memory by cp.async (the value tile loads while the scores are
// computed, the next key tile while the values are summed). Per tile: S = Q·Kᵀ on the tensor cores (f32 sums),
// scaled (and soft-capped), masked (causal, sliding window), an online softmax in f32 (running
// max and sum per M-row, in the log2 domain), P rounded to f16 and O += P·V on the tensor
// cores. Tiles that no M-row of the block can see are never visited; tiles that every M-row
// sees whole skip the mask.
//
// Deep in the cache a block's keys are split into up to n_split chunks (the grid's z) of at
// least FA_MIN_TILES tiles, so that long contexts keep every multiprocessor busy: each chunk
// writes its unnormalized outputs with their (max, sum) to `part`, and the last block of the
// (x, y) tile to finish (counted in `counters`, left at zero again) combines them, as
// attention_split.cu does. The chunk count is fixed at launch; each block derives its chunk
// from the position in device memory, so a recorded graph serves every depth.
//
// Several sequences: a block's query positions are consecutive rows of ONE sequence, its key
// and value tiles read through that sequence's block table (a tile of 64 or 32 keys lies in one
// block of KV_BLOCK: one look-up a tile). Blocks are tiles of 64 / gb rows counted sequence by
// sequence (seq_tile, common.cuh); the surplus of the grid returns at once.
//
// Grid: (⌈n_rows / (64 / gb)⌉ + n_seqs − 1, n_kv_heads · ⌈G / gb⌉, n_split), G = n_heads /
// n_kv_heads; the blocks of the last query positions (the most keys) are scheduled first.

#define FA_WARPS 4
#define FA_M (16 * FA_WARPS)
#define FA_LOG2E 1.4426950408889634f
#define FA_MIN_TILES 8
// Resident blocks a multiprocessor the compiler keeps registers for (a knob for experiments:
// WICK_CUDA_FLASH_MIN_BLOCKS).
#ifndef FA_MIN_BLOCKS
#define FA_MIN_BLOCKS 1
#endif

// 2^x (ex2.approx: 2 ulp; 2^-inf = 0).
__device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ u32 fa_pack(float lo, float hi) { return (u32)f2h(lo) | ((u32)f2h(hi) << 16); }

__device__ __forceinline__ u32 fa_smem(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// c (16×8, f32) += a (16×16, f16, row-major) · b (16×8, f16, column-major).
__device__ __forceinline__ void fa_mma(float* c, const u32* a, u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Four 8×8 f16 matrices from shared memory, lanes 8i..8i+7 giving the row addresses of the
// i-th; `trans`: each transposed.
__device__ __forceinline__ void fa_ldsm(u32* r, const u16* p) {
#if __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p)));
#endif
}
__device__ __forceinline__ void fa_ldsm_t(u32* r, const u16* p) {
#if __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p)));
#endif
}

// 16 bytes global -> shared without a register round trip; zeros when !valid (src unread).
__device__ __forceinline__ void fa_cp16(u16* dst, const u16* src, bool valid) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(fa_smem(dst)), "l"(src), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void fa_cp_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;");
#endif
}
__device__ __forceinline__ void fa_cp_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}

// Keys j0 .. j0 + BK of one KV head (cache rows row0 .. row0 + BK: a tile lies in one block)
// into a shared tile; keys past `last` (>= j0) are zeros. Each thread copies 16 bytes of one
// column in every RPP-th row: its addresses are a base and a fixed step (the per-copy index
// arithmetic and 64-bit products had made this the kernel's largest share of instructions).
template <int HD, int BK, int STRIDE>
__device__ __forceinline__ void fa_load_tile(u16* tile, const u16* cache, int row_len, long long row0, int j0,
                                             int last) {
    constexpr int CPR = HD / 8;               // 16-byte copies a row
    constexpr int RPP = 32 * FA_WARPS / CPR;  // rows a pass of the block
    static_assert(BK % RPP == 0, "a tile is whole passes");
    const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
    const long long step = (long long)RPP * row_len;
    const u16* src = cache + (row0 + r0) * row_len + c * 8;
    u16* dst = tile + r0 * STRIDE + c * 8;
    if (j0 + BK - 1 <= last) {
#pragma unroll
        for (int r = 0; r < BK; r += RPP, src += step) fa_cp16(dst + r * STRIDE, src, true);
    } else {
        // Rows past `last` are zeros, their source unread (the tile's first row stands in).
        const u16* first = cache + row0 * row_len + c * 8;
#pragma unroll
        for (int r = 0; r < BK; r += RPP, src += step) {
            const bool valid = j0 + r0 + r <= last;
            fa_cp16(dst + r * STRIDE, valid ? src : first, valid);
        }
    }
    fa_cp_commit();
}

// HD: the head size (64, 128 or 256).
template <int HD>
__device__ __forceinline__ void attention_flash_t(const AttentionFlashParams& p) {
    constexpr int BK = HD > 128 ? 32 : 64;  // keys a tile (registers: 256-wide rows hold 128 outputs a thread)
    constexpr int STRIDE = HD + 8;  // halves a shared row: 16-byte aligned, ldmatrix without bank conflicts
    constexpr int KS = HD / 16;     // k-steps of Q·Kᵀ
    constexpr int NT = HD / 8;      // n-tiles of the output
    constexpr int ST = BK / 8;      // n-tiles of the scores
    __shared__ __align__(16) u16 ks[BK * STRIDE];
    __shared__ __align__(16) u16 vs[BK * STRIDE];
    static_assert(KV_BLOCK % BK == 0, "a key tile must lie in one block");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gi = lane / 4, ti = lane % 4;
    const int G = p.n_heads / p.n_kv_heads, n_groups = (G + p.gb - 1) / p.gb;
    const int kvh = blockIdx.y / n_groups, g0 = (blockIdx.y % n_groups) * p.gb;
    const int ng = min(p.gb, G - g0), q_pos = FA_M / p.gb;
    // The block's rows r0 .. r0 + nq of one sequence (the last tiles first), row r at
    // position pos0 + r (consecutive in the sequence); surplus tiles return.
    int r0, nq, seq;
    if (!seq_tile(p.seq_start, p.n_seqs, gridDim.x - 1 - blockIdx.x, q_pos, &r0, &nq, &seq)) return;
    const u32* table = p.tables + (long long)seq * p.tstride;
    const int pos0 = p.pos[r0] - r0;
    // This thread's two M-rows (gi and gi + 8 of the warp): position, first key, query head.
    int pe[2], st[2];
    long long qrow[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int m = warp * 16 + gi + 8 * i, r = m / p.gb, g = m % p.gb;
        const bool valid = r < nq && g < ng;
        pe[i] = valid ? pos0 + r0 + r : -1;
        st[i] = valid && p.window > 0 ? max(pe[i] + 1 - p.window, 0) : 0;
        qrow[i] = valid ? ((long long)(r0 + r) * p.n_heads + kvh * G + g0 + g) * HD : -1;
    }
    // Keys any M-row of the block sees: from the first position's window start to the last;
    // this block's chunk of those tiles.
    int last = pos0 + r0 + nq - 1;
    const int first = p.window > 0 ? max(pos0 + r0 + 1 - p.window, 0) : 0;
    const int tile0 = first / BK, n_tiles = last / BK - tile0 + 1;
    const int chunk = max(FA_MIN_TILES, (n_tiles + p.n_split - 1) / p.n_split);
    const int n_used = (n_tiles + chunk - 1) / chunk, split = blockIdx.z;
    if (split >= n_used) return;
    int jt = (tile0 + split * chunk) * BK;
    const int jend = min(last, (tile0 + (split + 1) * chunk) * BK - 1);
    // Keys every M-row sees: no mask needed on a tile inside [all_from, all_to].
    const int all_from = p.window > 0 ? max(last + 1 - p.window, 0) : 0, all_to = pos0 + r0;
    last = jend;
    const u16* kb = p.kc + kvh * HD;
    const u16* vb = p.vc + kvh * HD;
    // The cache row of key jt (a tile lies in one block): one table look-up a tile.
    long long row = kv_row(table, jt);
    fa_load_tile<HD, BK, STRIDE>(ks, kb, p.k_dim, row, jt, last);
    // Query A-fragments: a0 (row gi, dims 2ti..), a1 (row gi + 8), a2 / a3 the same 8 dims on.
    u32 qa[KS][4];
#pragma unroll
    for (int k = 0; k < KS; k++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float2 v = make_float2(0.0f, 0.0f);
                if (qrow[i] >= 0) v = *(const float2*)(p.q + qrow[i] + 16 * k + 8 * h + 2 * ti);
                qa[k][2 * h + i] = fa_pack(v.x, v.y);
            }
        }
    }
    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
    const float scale2 = p.scale * FA_LOG2E;
    for (; jt <= last; jt += BK) {
        const long long row_next = jt + BK <= last ? kv_row(table, jt + BK) : 0;
        fa_cp_wait();
        __syncthreads();  // the key tile is in; every warp is done with the value tile
        fa_load_tile<HD, BK, STRIDE>(vs, vb, p.v_dim, row, jt, last);
        // S = Q·Kᵀ: n-tile n holds keys jt + 8n ..; c0, c1 row gi, keys 2ti, 2ti + 1; c2, c3 row gi + 8.
        float s[ST][4];
#pragma unroll
        for (int n = 0; n < ST; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < KS; k += 2) {
#pragma unroll
            for (int n = 0; n < ST; n++) {
                u32 b[4];
                fa_ldsm(b, ks + (8 * n + (lane & 7)) * STRIDE + 16 * k + (lane >> 3) * 8);
                fa_mma(s[n], qa[k], b[0], b[1]);
                fa_mma(s[n], qa[k + 1], b[2], b[3]);
            }
        }
        // Scale, cap, mask; the tile's row maxima (a row's four threads are one quad).
        float tmax[2] = {-INFINITY, -INFINITY};
        const bool whole = jt >= all_from && jt + BK - 1 <= all_to;
#pragma unroll
        for (int n = 0; n < ST; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e >> 1, j = jt + 8 * n + 2 * ti + (e & 1);
                float v = s[n][e];
                if (p.softcap > 0.0f) {
                    v = tanhf(v * p.scale / p.softcap) * p.softcap * FA_LOG2E;
                } else {
                    v *= scale2;
                }
                if (!whole) v = j >= st[i] && j <= pe[i] ? v : -INFINITY;
                s[n][e] = v;
                tmax[i] = fmaxf(tmax[i], v);
            }
        }
        float corr[2], mref[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 1));
            tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 2));
            const float mn = fmaxf(mx[i], tmax[i]);
            // No key seen yet (mn = -inf): nothing to rescale, every probability 2^-inf = 0.
            corr[i] = mn == -INFINITY ? 1.0f : fa_exp2(mx[i] - mn);
            mref[i] = mn == -INFINITY ? 0.0f : mn;
            mx[i] = mn;
            sum[i] *= corr[i];
        }
        // P (f16) as the A-fragments of P·V: k-step c takes score n-tiles 2c and 2c + 1.
        u32 pa[BK / 16][4];
#pragma unroll
        for (int n = 0; n < ST; n++) {
            float pr[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e >> 1;
                pr[e] = fa_exp2(s[n][e] - mref[i]);
                sum[i] += pr[e];
            }
            pa[n / 2][2 * (n % 2)] = fa_pack(pr[0], pr[1]);
            pa[n / 2][2 * (n % 2) + 1] = fa_pack(pr[2], pr[3]);
        }
        // Deep in a row the maximum rarely moves: the warp skips the rescale when no row's did.
        if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
            for (int n = 0; n < NT; n++) {
                o[n][0] *= corr[0], o[n][1] *= corr[0];
                o[n][2] *= corr[1], o[n][3] *= corr[1];
            }
        }
        fa_cp_wait();
        __syncthreads();  // the value tile is in; every warp is done with the key tile
        if (jt + BK <= last) fa_load_tile<HD, BK, STRIDE>(ks, kb, p.k_dim, row_next, jt + BK, last);
        // O += P·V: the value tile read transposed (rows are keys, the k of this product).
#pragma unroll
        for (int c = 0; c < BK / 16; c++) {
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                u32 b[4];
                fa_ldsm_t(b, vs + (16 * c + (lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE + 8 * n + (lane >> 4) * 8);
                fa_mma(o[n], pa[c], b[0], b[1]);
                fa_mma(o[n + 1], pa[c], b[2], b[3]);
            }
        }
        row = row_next;
    }
    // The row sums of the quad; then the outputs, c0 c1 of row gi and c2 c3 of row gi + 8.
#pragma unroll
    for (int i = 0; i < 2; i++) {
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
    }
    if (n_used == 1) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if (qrow[i] < 0) continue;
            const float inv = 1.0f / sum[i];
            float* out = p.dst + qrow[i] + 2 * ti;
#pragma unroll
            for (int n = 0; n < NT; n++) *(float2*)(out + 8 * n) = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
        }
        return;
    }
    // Partials: row qrow / HD (query row × heads + head) of chunk `split`.
    float* part_o = p.part;
    float* part_ml = p.part + (long long)p.part_rows * HD;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (qrow[i] < 0) continue;
        const long long row = qrow[i] / HD * p.n_split + split;
        float* out = part_o + row * HD + 2 * ti;
#pragma unroll
        for (int n = 0; n < NT; n++) *(float2*)(out + 8 * n) = make_float2(o[n][2 * i], o[n][2 * i + 1]);
        if (ti == 0) part_ml[2 * row] = mx[i], part_ml[2 * row + 1] = sum[i];
    }
    // The last chunk of this (x, y) tile to finish combines them (last_to_finish:
    // attention_split.cu, earlier in the module).
    if (!last_to_finish(&p.counters[blockIdx.y * gridDim.x + blockIdx.x], n_used)) return;
    for (int i = threadIdx.x; i < FA_M * HD; i += 32 * FA_WARPS) {
        const int m = i / HD, d = i % HD, r = m / p.gb, g = m % p.gb;
        if (r >= nq || g >= ng) continue;
        const long long row0 = ((long long)(r0 + r) * p.n_heads + kvh * G + g0 + g) * p.n_split;
        float mm = -INFINITY;
        for (int c = 0; c < n_used; c++) mm = fmaxf(mm, __ldcg(&part_ml[2 * (row0 + c)]));
        float l = 0.0f, out = 0.0f;
        for (int c = 0; c < n_used; c++) {
            // A chunk with no key of this row: max -inf, sum 0, outputs 0.
            const float f = fa_exp2(__ldcg(&part_ml[2 * (row0 + c)]) - mm);
            l += __ldcg(&part_ml[2 * (row0 + c) + 1]) * f;
            out += __ldcg(&part_o[(row0 + c) * HD + d]) * f;
        }
        p.dst[row0 / p.n_split * HD + d] = out / l;
    }
}

#define ATTENTION_FLASH(HD)                                                                                      \
    extern "C" __global__ void __launch_bounds__(32 * FA_WARPS, FA_MIN_BLOCKS) attention_flash_##HD(const AttentionFlashParams p) { \
        attention_flash_t<HD>(p);                                                                                \
    }
#ifdef MOD_attention_flash_64
ATTENTION_FLASH(64)
#endif
#ifdef MOD_attention_flash_128
ATTENTION_FLASH(128)
#endif
#ifdef MOD_attention_flash_256
ATTENTION_FLASH(256)
#endif
