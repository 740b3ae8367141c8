// Decode attention split along the KV length (flash-decoding).
//
// A block of 128 threads (4 warps) takes one query row, one KV head and GB of the query heads
// that share it, and a chunk of the row's keys: every key and value row is read once for all
// GB heads, 16 bytes a load. Each warp walks 32 keys at a time with an online softmax (running
// max m, running sum l, unnormalized output o); the four warps meet in shared memory. With one
// chunk the block writes the output; otherwise it writes its (m, l, o) to `part`, and the last
// block of the (row, KV head, head group) to finish (counted in `counters`, which it leaves at
// zero again) combines the chunks.
//
// The CUDA graph of a decode step is recorded once for every position: the number of chunks
// is fixed at launch (`n_split`, the grid's x), and each block derives its chunk from its
// row's own valid length, read from device memory (pos[r]): a chunk is at least AS_MIN_CHUNK
// keys, so a short context uses few chunks, and blocks past the last chunk return at once.
//
// Blocked KV cache: the row's keys are read through its sequence's block table (seq[r]). The
// chunks are counted from the window's start rounded down to 32 keys (keys before the start
// masked), so a warp's 32 keys always lie in one block of KV_BLOCK: one table look-up per
// warp and 32 keys.
//
// Numerics: the query rounded to f16 (as ggml), scores, softmax and sums in f32.
// Grid: (n_split, rows · n_kv_heads · ⌈G / GB⌉), G = n_heads / n_kv_heads.

// Tunable for experiments (WICK_CUDA_SPLIT_MIN_CHUNK, a multiple of 32).
// Block-table entries of a chunk kept in shared memory (chunks up to AS_TBL · KV_BLOCK keys).
#define AS_TBL 64
#ifndef AS_MIN_CHUNK
#define AS_MIN_CHUNK 128
#endif

__device__ __forceinline__ float2 h2f2(u32 x) { return make_float2(h2f((u16)(x & 0xffffu)), h2f((u16)(x >> 16))); }

// Eight f16 of a 16-byte load as floats.
__device__ __forceinline__ void unpack8(uint4 w, float* f) {
    float2 a = h2f2(w.x), b = h2f2(w.y), c = h2f2(w.z), d = h2f2(w.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

// o[g] += P[g][jj] · (the eight values of w), for the GB heads of a block: one value row's
// share of a lane.
template <int GB>
__device__ __forceinline__ void add_value_row(float (&o)[GB][8], const float (&pw)[GB][32], int jj, uint4 w) {
    float v[8];
    unpack8(w, v);
#pragma unroll
    for (int g = 0; g < GB; g++) {
        const float pg = pw[g][jj];
#pragma unroll
        for (int e = 0; e < 8; e++) o[g][e] = fmaf(pg, v[e], o[g][e]);
    }
}

// Whether this block is the last of the n_used blocks counted in *counter to get here (that
// block sets the counter back to zero); called by every thread after the block's partial
// results are written, block-uniform. The last block then sees every block's writes.
__device__ __forceinline__ bool last_to_finish(int* counter, int n_used) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1) == n_used - 1;
        if (last) *counter = 0;
    }
    __syncthreads();
    const bool is_last = last;
    if (is_last) __threadfence();
    return is_last;
}

// Chunks a row may be split into (the launcher's SPLIT_MAX).
#define AS_MAX_SPLIT 64

// The last block's combination of the n_used chunks of heads h0 .. h0 + ng of row r. Every
// load of the chunks' results is independent of the others, so many are in flight at once
// (read one after another, 33 chunks of 4 heads cost ~70 dependent L2 round trips a block):
// first each warp takes heads g = warp, warp + 4, ..., its lanes reading the chunks' (m, l)
// and leaving each chunk's weight exp(m_c - m) / Σ l_c' exp(m_c' - m) in shared memory; then
// each thread sums four dimensions of one head over the chunks, 16-byte loads, unrolled.
template <int HD, int GB>
__device__ __forceinline__ void combine_chunks(const AttentionSplitParams& p, int r, int h0, int ng, int n_used) {
    __shared__ float cw[GB][AS_MAX_SPLIT];
    const float* part_o = p.part;
    const float* part_ml = p.part + (long long)p.part_rows * HD;
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    for (int g = warp; g < ng; g += 4) {
        const long long row0 = ((long long)r * p.n_heads + h0 + g) * p.n_split;
        float mc[AS_MAX_SPLIT / 32], lc[AS_MAX_SPLIT / 32], mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < AS_MAX_SPLIT / 32; i++) {
            const int c = lane + 32 * i;
            mc[i] = c < n_used ? __ldcg(&part_ml[2 * (row0 + c)]) : -INFINITY;
            lc[i] = c < n_used ? __ldcg(&part_ml[2 * (row0 + c) + 1]) : 0.0f;
            mx = fmaxf(mx, mc[i]);
        }
        mx = warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < AS_MAX_SPLIT / 32; i++) {
            mc[i] = lane + 32 * i < n_used ? expf(mc[i] - mx) : 0.0f;
            sum += lc[i] * mc[i];
        }
        sum = warp_sum(sum);
#pragma unroll
        for (int i = 0; i < AS_MAX_SPLIT / 32; i++)
            if (lane + 32 * i < n_used) cw[g][lane + 32 * i] = mc[i] / sum;
    }
    __syncthreads();
    for (int i = 4 * t; i < ng * HD; i += 4 * 128) {
        const int g = i / HD, d = i % HD;
        const long long row0 = ((long long)r * p.n_heads + h0 + g) * p.n_split;
        const float4* po = (const float4*)(part_o + row0 * HD + d);
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
        for (int c = 0; c < n_used; c++) {
            const float4 v = __ldcg(po + (long long)c * (HD / 4));
            const float w = cw[g][c];
            acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
        }
        *(float4*)(p.dst + ((long long)r * p.n_heads + h0 + g) * HD + d) = acc;
    }
}

// Which chunk of which (row, KV head, head group) a block of the split kernels takes: block
// (blockIdx.x = s, blockIdx.y = y) of a grid of (n_split, rows · n_kv_heads · ⌈G / gb⌉).
struct SplitChunk {
    int y, r, kvh, ng, h0;
    int start;        // the row's first visible key (sliding window), keys before it masked
    int n_used, s;    // chunks the row's keys take, and this block's
    int j0, j1;       // this chunk's keys, j0 a multiple of 32
    int b0;           // the cache block of key j0
    const u32* table; // the row's sequence's block table
};

// The chunk of this block; false when the row's keys take fewer chunks than s + 1. A chunk is
// at least AS_MIN_CHUNK keys, counted from the window's start rounded down to 32 keys.
__device__ __forceinline__ bool split_chunk(const AttentionSplitParams& p, int gb, SplitChunk* c) {
    const int G = p.n_heads / p.n_kv_heads, n_groups = (G + gb - 1) / gb;
    const int y = blockIdx.y, per_row = p.n_kv_heads * n_groups;
    c->y = y;
    c->r = y / per_row;
    c->kvh = (y % per_row) / n_groups;
    const int g0 = (y % n_groups) * gb;
    c->ng = min(gb, G - g0);
    c->h0 = c->kvh * G + g0;
    const int pos = p.pos[c->r];
    c->table = p.tables + (long long)p.seq[c->r] * p.tstride;
    c->start = p.window > 0 ? max(pos + 1 - p.window, 0) : 0;
    const int base = c->start & ~31;
    const int len = pos + 1 - base;
    int chunk = (len + p.n_split - 1) / p.n_split;
    chunk = max(AS_MIN_CHUNK, (chunk + 31) / 32 * 32);
    c->n_used = (len + chunk - 1) / chunk;
    c->s = blockIdx.x;
    if (c->s >= c->n_used) return false;
    c->j0 = base + c->s * chunk;
    c->j1 = min(c->j0 + chunk, pos + 1);
    c->b0 = (unsigned)c->j0 / KV_BLOCK;
    return true;
}

// The chunk's block-table entries into tbl (the first AS_TBL; a longer chunk reads the rest
// from global memory), so a key group's cache row is a shared-memory read away. The caller
// synchronizes the block before reading them.
__device__ __forceinline__ void load_chunk_table(const SplitChunk& c, u32* tbl) {
    const int nb = (unsigned)(c.j1 - 1) / KV_BLOCK - c.b0 + 1;
    for (int i = threadIdx.x; i < min(nb, AS_TBL); i += blockDim.x) tbl[i] = c.table[c.b0 + i];
}

// The cache row of key j (tbl as load_chunk_table left it).
__device__ __forceinline__ long long chunk_row(const SplitChunk& c, const u32* tbl, int j) {
    const int bi = (unsigned)j / KV_BLOCK - c.b0;
    return (long long)(bi < AS_TBL ? tbl[bi] : c.table[c.b0 + bi]) * KV_BLOCK + (j & (KV_BLOCK - 1));
}

// The block's chunk s of (row r, heads h0 .. h0 + ng), once each warp w has left its (max m,
// sum l) of head g in wm[w][g], wl[w][g] (natural-log domain; a warp with no keys: -inf and 0)
// and its unnormalized outputs at wo[w · wo_stride + g · HD + d]: the four warps meet, and the
// chunk's result goes to dst (one chunk) or to `part`, where the last block of the (row, KV
// head, head group) y to finish combines the chunks. Called by every thread of the block.
template <int HD, int GB>
__device__ __forceinline__ void finish_chunk(const AttentionSplitParams& p, int y, int r, int h0, int ng, int s,
                                             int n_used, const float (&wm)[4][GB], const float (&wl)[4][GB],
                                             const float* wo, int wo_stride) {
    float* part_o = p.part;
    float* part_ml = p.part + (long long)p.part_rows * HD;
    // Thread (g, d) for i = g · HD + d: this chunk's (m, l, o[d]) of head g.
    for (int i = threadIdx.x; i < ng * HD; i += 128) {
        const int g = i / HD, d = i % HD;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) mx = fmaxf(mx, wm[w][g]);
        float sum = 0.0f, out = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            // A warp with no keys has m = -inf, l = 0 and o = 0.
            const float f = wm[w][g] == -INFINITY ? 0.0f : expf(wm[w][g] - mx);
            sum += wl[w][g] * f;
            out += wo[w * wo_stride + g * HD + d] * f;
        }
        const long long head = (long long)r * p.n_heads + h0 + g;
        if (n_used == 1) {
            p.dst[head * HD + d] = out / sum;
        } else {
            const long long row = head * p.n_split + s;
            part_o[row * HD + d] = out;
            if (d == 0) part_ml[2 * row] = mx, part_ml[2 * row + 1] = sum;
        }
    }
    if (n_used == 1) return;
    if (!last_to_finish(&p.counters[y], n_used)) return;
    combine_chunks<HD, GB>(p, r, h0, ng, n_used);
}

// HD: the head size (64, 128 or 256); GB: query heads a block (1, 2, 4 or 8; GB · HD <= 1024).
template <int HD, int GB>
__device__ __forceinline__ void attention_split_t(const AttentionSplitParams& p) {
    constexpr int LPR = HD / 8;     // lanes that read one value row, 8 dimensions each
    constexpr int RPI = 32 / LPR;   // value rows a warp reads at once
    constexpr int VN = 32 / RPI;    // value loads of a lane for 32 keys
    // Whether a lane loads its value rows together with the key rows (registers permitting), so
    // both are in flight at once instead of the values waiting for the softmax.
    constexpr bool PREFETCH = HD <= 128 && GB * 8 + 4 * VN <= 128;
    __shared__ __align__(16) float qs[GB][HD];
    __shared__ float ps[4][GB][32];
    __shared__ float wm[4][GB], wl[4][GB];
    __shared__ __align__(16) float wo[4][GB][HD];
    __shared__ u32 tbl[AS_TBL];  // load_chunk_table
    pdl_trigger();
    pdl_wait();
    SplitChunk c;
    if (!split_chunk(p, GB, &c)) return;
    const int y = c.y, r = c.r, kvh = c.kvh, ng = c.ng, h0 = c.h0, start = c.start, n_used = c.n_used, s = c.s;
    const int j0 = c.j0, j1 = c.j1;
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    for (int i = t; i < GB * HD; i += 128) {
        int g = i / HD, d = i % HD;
        qs[g][d] = g < ng ? f16r(p.q[((long long)r * p.n_heads + h0 + g) * HD + d]) : 0.0f;
    }
    load_chunk_table(c, tbl);
    __syncthreads();
    const u16* kb = p.kc + kvh * HD;
    const u16* vb = p.vc + kvh * HD + (lane % LPR) * 8;
    static_assert(KV_BLOCK % 32 == 0, "a warp's 32 keys must lie in one block");
    float m[GB], l[GB], o[GB][8];
#pragma unroll
    for (int g = 0; g < GB; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) o[g][e] = 0.0f;
    }
    for (int jt = j0 + warp * 32; jt < j1; jt += 128) {
        // The cache row of key jt (a multiple of 32: keys jt .. jt + 31 are rows krow .. krow
        // + 31 of one block).
        const int krow = (int)chunk_row(c, tbl, jt);
        // Scores: lane = key, all GB heads from one read of the key row.
        const int j = jt + lane;
        const bool valid = j >= start && j < j1;
        uint4 vr[PREFETCH ? VN : 1];
        if (PREFETCH) {
#pragma unroll
            for (int i = 0; i < VN; i++) {
                const int jj = lane / LPR + i * RPI, jv = jt + jj;
                vr[i] = jv >= start && jv < j1 ? *(const uint4*)(vb + (long long)(krow + jj) * p.v_dim) : make_uint4(0, 0, 0, 0);
            }
        }
        float sc[GB];
#pragma unroll
        for (int g = 0; g < GB; g++) sc[g] = 0.0f;
        if (valid) {
            const uint4* kr = (const uint4*)(kb + (long long)(krow + lane) * p.k_dim);
#pragma unroll
            for (int c = 0; c < HD / 8; c++) {
                float k[8];
                unpack8(kr[c], k);
#pragma unroll
                for (int g = 0; g < GB; g++) {
                    const float4 qa = *(const float4*)&qs[g][8 * c];
                    const float4 qb = *(const float4*)&qs[g][8 * c + 4];
                    sc[g] = fmaf(k[0], qa.x, sc[g]);
                    sc[g] = fmaf(k[1], qa.y, sc[g]);
                    sc[g] = fmaf(k[2], qa.z, sc[g]);
                    sc[g] = fmaf(k[3], qa.w, sc[g]);
                    sc[g] = fmaf(k[4], qb.x, sc[g]);
                    sc[g] = fmaf(k[5], qb.y, sc[g]);
                    sc[g] = fmaf(k[6], qb.z, sc[g]);
                    sc[g] = fmaf(k[7], qb.w, sc[g]);
                }
            }
        }
        // Online softmax over the warp's 32 keys (one at least is valid: jt < j1, and the first
        // group, the only one that starts before `start`, holds key start <= pos).
#pragma unroll
        for (int g = 0; g < GB; g++) {
            float v = sc[g] * p.scale;
            if (p.softcap > 0.0f) v = tanhf(v / p.softcap) * p.softcap;
            v = valid ? v : -INFINITY;
            const float mn = fmaxf(m[g], warp_max(v));
            const float corr = expf(m[g] - mn);
            const float pr = valid ? expf(v - mn) : 0.0f;
            l[g] = l[g] * corr + pr;
            m[g] = mn;
#pragma unroll
            for (int e = 0; e < 8; e++) o[g][e] *= corr;
            ps[warp][g][lane] = pr;
        }
        __syncwarp();
        // Values: RPI rows at once, LPR lanes a row, 8 dimensions a lane.
        if (PREFETCH) {
            // Keys outside [start, j1) have probability 0 and value rows of zeros.
#pragma unroll
            for (int i = 0; i < VN; i++) add_value_row<GB>(o, ps[warp], lane / LPR + i * RPI, vr[i]);
            __syncwarp();
            continue;
        }
        const int nk = min(32, j1 - jt);
        // The first value row of this lane at or after `start` (keys before it are masked).
        int jj0 = lane / LPR;
        if (jt + jj0 < start) jj0 += (start - jt - jj0 + RPI - 1) / RPI * RPI;
#pragma unroll 4
        for (int jj = jj0; jj < nk; jj += RPI)
            add_value_row<GB>(o, ps[warp], jj, *(const uint4*)(vb + (long long)(krow + jj) * p.v_dim));
        __syncwarp();
    }
    // The warp's lanes of one dimension group meet; then the four warps.
#pragma unroll
    for (int g = 0; g < GB; g++) {
        float lw = warp_sum(l[g]);
#pragma unroll
        for (int e = 0; e < 8; e++)
            for (int off = LPR; off < 32; off <<= 1) o[g][e] += __shfl_xor_sync(0xffffffffu, o[g][e], off);
        if (lane == 0) wm[warp][g] = m[g], wl[warp][g] = lw;
        if (lane < LPR) {
#pragma unroll
            for (int e = 0; e < 8; e++) wo[warp][g][lane * 8 + e] = o[g][e];
        }
    }
    __syncthreads();
    finish_chunk<HD, GB>(p, y, r, h0, ng, s, n_used, wm, wl, &wo[0][0][0], GB * HD);
}

#define ATTENTION_SPLIT(HD, GB)                                                                                \
    extern "C" __global__ void __launch_bounds__(128) attention_split_##HD##_##GB(const AttentionSplitParams p) { \
        attention_split_t<HD, GB>(p);                                                                          \
    }
#ifdef MOD_attention_split_64_1
ATTENTION_SPLIT(64, 1)
#endif
#ifdef MOD_attention_split_64_2
ATTENTION_SPLIT(64, 2)
#endif
#ifdef MOD_attention_split_64_4
ATTENTION_SPLIT(64, 4)
#endif
#ifdef MOD_attention_split_64_8
ATTENTION_SPLIT(64, 8)
#endif
#ifdef MOD_attention_split_128_1
ATTENTION_SPLIT(128, 1)
#endif
#ifdef MOD_attention_split_128_2
ATTENTION_SPLIT(128, 2)
#endif
#ifdef MOD_attention_split_128_4
ATTENTION_SPLIT(128, 4)
#endif
#ifdef MOD_attention_split_128_8
ATTENTION_SPLIT(128, 8)
#endif
#ifdef MOD_attention_split_256_1
ATTENTION_SPLIT(256, 1)
#endif
#ifdef MOD_attention_split_256_2
ATTENTION_SPLIT(256, 2)
#endif
#ifdef MOD_attention_split_256_4
ATTENTION_SPLIT(256, 4)
#endif
