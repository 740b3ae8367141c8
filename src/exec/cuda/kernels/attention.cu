// Causal attention over the f16 KV cache: one block of 128 threads (4 warps) per (query row, head).
// As ggml does: the query is rounded to f16 before the K·Q products, the softmax
// probabilities are rounded to f16 before the product with V. Scores go through `scores`
// (n_ctx floats per (row, head), indexed by position) so the softmax sees them all, in the
// CPU's order. Row r is at position pos[r] of sequence seq[r], whose keys and values are read
// through its block table (`tables`, rows of tstride entries).
__device__ __forceinline__ void attention_one(const float* q, float* dst, const u16* kc, const u16* vc,
                                              float* scores, const int* posv, const int* seqv, const u32* tables,
                                              int tstride, int n_ctx, int n_heads, int n_kv_heads,
                                              int head_dim, int k_dim, int v_dim, float scale, int window,
                                              float softcap) {
    __shared__ float qh[512];
    pdl_trigger();
    pdl_wait();
    int r = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
    int kvh = h / (n_heads / n_kv_heads);
    const int p = posv[r];
    const u32* table = tables + (long long)seqv[r] * tstride;
    int start = window > 0 ? max(p + 1 - window, 0) : 0;
    const float* qrow = q + ((long long)r * n_heads + h) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) qh[d] = f16r(qrow[d]);
    __syncthreads();
    float* sc = scores + (long long)blockIdx.x * n_ctx;
    // Scores: a thread per position, so that the key rows' loads are all in flight at once
    // (a warp per position waited for each row in turn); the row read 16 bytes at a time
    // where the cache layout allows it.
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    bool vec = head_dim % 8 == 0 && k_dim % 8 == 0;
    float mx = -INFINITY;
    for (int j = start + threadIdx.x; j <= p; j += blockDim.x) {
        const u16* kr = kc + kv_row(table, j) * k_dim + kvh * head_dim;
        float s = 0.0f;
        if (vec) {
#pragma unroll 8
            for (int d = 0; d < head_dim; d += 8) {
                uint4 w = *(const uint4*)(kr + d);
                u32 x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s += h2f((u16)(x[e] & 0xffffu)) * qh[d + 2 * e];
                    s += h2f((u16)(x[e] >> 16)) * qh[d + 2 * e + 1];
                }
            }
        } else {
            for (int d = 0; d < head_dim; d++) s += h2f(kr[d]) * qh[d];
        }
        float v = s * scale;
        if (softcap > 0.0f) v = tanhf(v / softcap) * softcap;
        sc[j] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx);
    __syncthreads();
    double sum = 0.0;
    for (int j = start + threadIdx.x; j <= p; j += blockDim.x) {
        float e = expf(sc[j] - mx);
        sc[j] = e;
        sum += (double)e;
    }
    sum = block_sum_d(sum);
    float inv = (float)(1.0 / sum);
    __syncthreads();
    // Values: each warp takes positions in turn, its lanes the dimensions
    // (coalesced reads of the value row); the warps' partial sums meet in shared memory.
    __shared__ float part[4][512];
    float acc[16];
#pragma unroll
    for (int m = 0; m < 16; m++) acc[m] = 0.0f;
#pragma unroll 4
    for (int j = start + warp; j <= p; j += nw) {
        float pr = f16r(sc[j] * inv);
        const u16* vr = vc + kv_row(table, j) * v_dim + kvh * head_dim;
#pragma unroll
        for (int m = 0; m < 16; m++) {
            int d = lane + 32 * m;
            if (d < head_dim) acc[m] += pr * h2f(vr[d]);
        }
    }
#pragma unroll
    for (int m = 0; m < 16; m++) {
        int d = lane + 32 * m;
        if (d < head_dim) part[warp][d] = acc[m];
    }
    __syncthreads();
    float* o = dst + ((long long)r * n_heads + h) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < nw; w++) v += part[w][d];
        o[d] = v;
    }
}

#ifdef MOD_attention
extern "C" __global__ void attention(const AttentionParams p) {
    attention_one(p.q, p.dst, p.kc, p.vc, p.scores, p.pos, p.seq, p.tables, p.tstride, p.n_ctx, p.n_heads,
                  p.n_kv_heads, p.head_dim, p.k_dim, p.v_dim, p.scale, p.window, p.softcap);
}
#endif
