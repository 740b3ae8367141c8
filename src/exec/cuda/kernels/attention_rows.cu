// Causal attention for many query rows at once (prefill): a block of 128 threads takes
// ATR_Q consecutive query rows of one head and walks the keys in chunks of ATR_K positions
// staged in shared memory, so each key and value row is read once per ATR_Q queries (the
// one-row kernel of attention.cu reads it once per query). Same arithmetic as attention.cu:
// the query rounded to f16, scores scaled (and soft-capped), softmax with the sum in double,
// probabilities rounded to f16 before the product with V, which is summed position by
// position. Scores go through `scores` (n_ctx floats per (row, head), as attention.cu).
// head_dim at most ATR_MAXD. Arguments: those of `attention`, then the number of query rows;
// a grid of (⌈n_rows / ATR_Q⌉, n_heads) blocks.
#define ATR_Q 16
#define ATR_K 16
#define ATR_MAXD 256

extern "C" __global__ void __launch_bounds__(128)
    attention_rows(const float* q, float* dst, const u16* kc, const u16* vc, float* scores, const int* posp,
                   int n_ctx, int n_heads, int n_kv_heads, int head_dim, int k_dim, int v_dim, float scale,
                   int window, float softcap, int n_rows) {
    __shared__ float qs[ATR_Q][ATR_MAXD + 1];
    __shared__ float ks[ATR_K][ATR_MAXD + 1];
    __shared__ float ps[ATR_Q][ATR_K + 1];
    __shared__ float inv[ATR_Q];
    int h = blockIdx.y, kvh = h / (n_heads / n_kv_heads);
    int r0 = blockIdx.x * ATR_Q, nq = min(ATR_Q, n_rows - r0);
    int pos0 = *posp, t = threadIdx.x, warp = t / 32, lane = t % 32;
    // Row r (0..nq) sees positions start(r) ..= pos0 + r0 + r.
    int last = pos0 + r0 + nq - 1;
    int first = window > 0 ? max(pos0 + r0 + 1 - window, 0) : 0;
    int j0 = first / ATR_K * ATR_K;
    for (int i = t; i < ATR_Q * head_dim; i += 128) {
        int r = i / head_dim, d = i % head_dim;
        qs[r][d] = r < nq ? f16r(q[((long long)(r0 + r) * n_heads + h) * head_dim + d]) : 0.0f;
    }
    // Scores: thread t takes query t / 8 and keys 2 (t % 8), 2 (t % 8) + 1 of each chunk.
    {
        int qi = t / 8, kj = 2 * (t % 8);
        int p = pos0 + r0 + qi;
        int start = window > 0 ? max(p + 1 - window, 0) : 0;
        float* sc = scores + ((long long)(r0 + qi) * n_heads + h) * n_ctx;
        for (int jc = j0; jc <= last; jc += ATR_K) {
            __syncthreads();
            for (int i = t; i < ATR_K * head_dim; i += 128) {
                int j = i / head_dim, d = i % head_dim;
                ks[j][d] = jc + j <= last ? h2f(kc[(long long)(jc + j) * k_dim + kvh * head_dim + d]) : 0.0f;
            }
            __syncthreads();
            float s0 = 0.0f, s1 = 0.0f;
            for (int d = 0; d < head_dim; d++) {
                float x = qs[qi][d];
                s0 += ks[kj][d] * x;
                s1 += ks[kj + 1][d] * x;
            }
            for (int e = 0; e < 2; e++) {
                int j = jc + kj + e;
                float v = (e == 0 ? s0 : s1) * scale;
                if (softcap > 0.0f) v = tanhf(v / softcap) * softcap;
                if (qi < nq && j >= start && j <= p) sc[j] = v;
            }
        }
    }
    __syncthreads();
    // Softmax: warp w takes rows w, w + 4, ...; its lanes the positions.
    for (int qi = warp; qi < nq; qi += 4) {
        int p = pos0 + r0 + qi;
        int start = window > 0 ? max(p + 1 - window, 0) : 0;
        float* sc = scores + ((long long)(r0 + qi) * n_heads + h) * n_ctx;
        float mx = -INFINITY;
        for (int j = start + lane; j <= p; j += 32) mx = fmaxf(mx, sc[j]);
        mx = warp_max(mx);
        double sum = 0.0;
        for (int j = start + lane; j <= p; j += 32) {
            float e = expf(sc[j] - mx);
            sc[j] = e;
            sum += (double)e;
        }
        sum = warp_sum_d(sum);
        if (lane == 0) inv[qi] = (float)(1.0 / sum);
    }
    __syncthreads();
    // Values: thread t takes query t / 8 and dimensions t % 8 + 8m.
    int qi = t / 8, d0 = t % 8;
    int p = pos0 + r0 + qi;
    int start = window > 0 ? max(p + 1 - window, 0) : 0;
    float acc[ATR_MAXD / 8];
#pragma unroll
    for (int m = 0; m < ATR_MAXD / 8; m++) acc[m] = 0.0f;
    for (int jc = j0; jc <= last; jc += ATR_K) {
        __syncthreads();
        for (int i = t; i < ATR_K * head_dim; i += 128) {
            int j = i / head_dim, d = i % head_dim;
            ks[j][d] = jc + j <= last ? h2f(vc[(long long)(jc + j) * v_dim + kvh * head_dim + d]) : 0.0f;
        }
        for (int i = t; i < ATR_Q * ATR_K; i += 128) {
            int r = i / ATR_K, jj = i % ATR_K, j = jc + jj;
            int pr = pos0 + r0 + r;
            int st = window > 0 ? max(pr + 1 - window, 0) : 0;
            const float* s = scores + ((long long)(r0 + r) * n_heads + h) * n_ctx;
            ps[r][jj] = r < nq && j >= st && j <= pr ? f16r(s[j] * inv[r]) : 0.0f;
        }
        __syncthreads();
        int jn = min(ATR_K, p + 1 - jc);
        if (jc + ATR_K <= start) jn = 0;
        for (int jj = 0; jj < jn; jj++) {
            if (jc + jj < start) continue;
            float pr = ps[qi][jj];
#pragma unroll
            for (int m = 0; m < ATR_MAXD / 8; m++)
                if (8 * m + d0 < head_dim) acc[m] += pr * ks[jj][8 * m + d0];
        }
    }
    if (qi < nq) {
        float* o = dst + ((long long)(r0 + qi) * n_heads + h) * head_dim;
#pragma unroll
        for (int m = 0; m < ATR_MAXD / 8; m++)
            if (8 * m + d0 < head_dim) o[8 * m + d0] = acc[m];
    }
}
