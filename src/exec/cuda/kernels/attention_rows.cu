// Causal attention for many query rows at once (prefill): a block of 128 threads takes
// ATR_Q consecutive query rows of one head and walks the keys in chunks (32 positions; 16 for
// head sizes above 128) staged in shared memory, so each key and value row is read once per ATR_Q queries (the
// one-row kernel of attention.cu reads it once per query). Same arithmetic as attention.cu:
// the query rounded to f16, scores scaled (and soft-capped), softmax with the sum in double,
// probabilities rounded to f16 before the product with V, which is summed position by
// position. Scores go through `scores` (n_ctx floats per (row, head), as attention.cu).
// head_dim at most 256. Entry points attention_rows_HD for HD = 64, 128, 256 (the smallest at
// least head_dim). Arguments: those of `attention`, then the number of query rows.
//
// Several sequences: a block's rows are consecutive rows of ONE sequence (consecutive
// positions), its keys and values read through that sequence's block table, one look-up per
// chunk (a chunk of KC keys never straddles a block of KV_BLOCK). Blocks are tiles counted
// sequence by sequence (seq_tile, common.cuh): a grid of (⌈n_rows / ATR_Q⌉ + n_seqs − 1,
// n_heads) blocks, the surplus returning at once.
#define ATR_Q 16

// HD: head_dim rounded up to 64, 128 or 256 (the loops over dimensions are unrolled to it).
template <int HD>
__device__ __forceinline__ void attention_rows_t(const float* q, float* dst, const u16* kc, const u16* vc,
                                                 float* scores, const int* posv, const int* seq_start,
                                                 const u32* tables, int tstride, int n_seqs, int n_ctx, int n_heads,
                                                 int n_kv_heads, int head_dim, int k_dim, int v_dim, float scale,
                                                 int window, float softcap, int n_rows) {
    constexpr int KC = HD > 128 ? 16 : 32;  // key positions a chunk
    __shared__ float qs[ATR_Q][HD + 1];
    __shared__ float ks[KC][HD + 1];
    __shared__ float ps[ATR_Q][KC + 1];
    __shared__ float inv[ATR_Q];
    static_assert(KV_BLOCK % KC == 0, "a chunk of keys must lie in one block");
    int h = blockIdx.y, kvh = h / (n_heads / n_kv_heads);
    int r0, nq, seq;
    if (!seq_tile(seq_start, n_seqs, blockIdx.x, ATR_Q, &r0, &nq, &seq)) return;
    const u32* table = tables + (long long)seq * tstride;
    // Row r0 + r (r < nq) is at position pos0 + r of the sequence.
    int pos0 = posv[r0], t = threadIdx.x, warp = t / 32, lane = t % 32;
    // Row r (0..nq) sees positions start(r) ..= pos0 + r.
    int last = pos0 + nq - 1;
    int first = window > 0 ? max(pos0 + 1 - window, 0) : 0;
    int j0 = first / KC * KC;
    for (int i = t; i < ATR_Q * HD; i += 128) {
        int r = i / HD, d = i % HD;
        qs[r][d] = r < nq && d < head_dim ? f16r(q[((long long)(r0 + r) * n_heads + h) * head_dim + d]) : 0.0f;
    }
    // Scores: thread t takes query t / 8 and keys t % 8 + 8e of each chunk.
    {
        int qi = t / 8, k0 = t % 8;
        int p = pos0 + qi;
        int start = window > 0 ? max(p + 1 - window, 0) : 0;
        float* sc = scores + ((long long)(r0 + qi) * n_heads + h) * n_ctx;
        for (int jc = j0; jc <= last; jc += KC) {
            const long long krow = kv_row(table, jc);  // keys jc .. jc + KC - 1: rows krow ..
            __syncthreads();
            for (int i = t; i < KC * HD; i += 128) {
                int j = i / HD, d = i % HD;
                ks[j][d] = jc + j <= last && d < head_dim
                               ? h2f(kc[(krow + j) * k_dim + kvh * head_dim + d])
                               : 0.0f;
            }
            __syncthreads();
            float s[KC / 8];
#pragma unroll
            for (int e = 0; e < KC / 8; e++) s[e] = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++) {
                float x = qs[qi][d];
#pragma unroll
                for (int e = 0; e < KC / 8; e++) s[e] += ks[k0 + 8 * e][d] * x;
            }
#pragma unroll
            for (int e = 0; e < KC / 8; e++) {
                int j = jc + k0 + 8 * e;
                float v = s[e] * scale;
                if (softcap > 0.0f) v = tanhf(v / softcap) * softcap;
                if (qi < nq && j >= start && j <= p) sc[j] = v;
            }
        }
    }
    __syncthreads();
    // Softmax: warp w takes rows w, w + 4, ...; its lanes the positions.
    for (int qi = warp; qi < nq; qi += 4) {
        int p = pos0 + qi;
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
    // Values: thread t takes query t / 8 and dimensions t % 8 + 8m, summing position by position.
    int qi = t / 8, d0 = t % 8;
    float acc[HD / 8];
#pragma unroll
    for (int m = 0; m < HD / 8; m++) acc[m] = 0.0f;
    for (int jc = j0; jc <= last; jc += KC) {
        const long long vrow = kv_row(table, jc);  // values jc .. jc + KC - 1: rows vrow ..
        __syncthreads();
        for (int i = t; i < KC * HD; i += 128) {
            int j = i / HD, d = i % HD;
            ks[j][d] = jc + j <= last && d < head_dim
                           ? h2f(vc[(vrow + j) * v_dim + kvh * head_dim + d])
                           : 0.0f;
        }
        for (int i = t; i < ATR_Q * KC; i += 128) {
            int r = i / KC, jj = i % KC, j = jc + jj;
            int pr = pos0 + r;
            int st = window > 0 ? max(pr + 1 - window, 0) : 0;
            const float* s = scores + ((long long)(r0 + r) * n_heads + h) * n_ctx;
            ps[r][jj] = r < nq && j >= st && j <= pr ? f16r(s[j] * inv[r]) : 0.0f;
        }
        __syncthreads();
        // Masked positions have probability 0 and add nothing; they are skipped for the
        // CPU's order of sums (position by position over the row's own range).
        int p = pos0 + qi;
        int start = window > 0 ? max(p + 1 - window, 0) : 0;
        int ja = max(start - jc, 0), jb = min(KC, p + 1 - jc);
        for (int jj = ja; jj < jb; jj++) {
            float pr = ps[qi][jj];
#pragma unroll
            for (int m = 0; m < HD / 8; m++) acc[m] += pr * ks[jj][8 * m + d0];
        }
    }
    if (qi < nq) {
        float* o = dst + ((long long)(r0 + qi) * n_heads + h) * head_dim;
#pragma unroll
        for (int m = 0; m < HD / 8; m++)
            if (8 * m + d0 < head_dim) o[8 * m + d0] = acc[m];
    }
}

#define ATTENTION_ROWS(HD)                                                                                     \
    extern "C" __global__ void __launch_bounds__(128) attention_rows_##HD(const AttentionParams p) {           \
        attention_rows_t<HD>(p.q, p.dst, p.kc, p.vc, p.scores, p.pos, p.seq_start, p.tables, p.tstride, p.n_seqs, \
                             p.n_ctx, p.n_heads, p.n_kv_heads,                                                 \
                             p.head_dim, p.k_dim, p.v_dim, p.scale, p.window, p.softcap, p.n_rows);            \
    }
#ifdef MOD_attention_rows_64
ATTENTION_ROWS(64)
#endif
#ifdef MOD_attention_rows_128
ATTENTION_ROWS(128)
#endif
#ifdef MOD_attention_rows_256
ATTENTION_ROWS(256)
#endif
