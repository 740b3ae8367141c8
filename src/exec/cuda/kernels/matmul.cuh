// The two matrix-vector frames shared by every quantized type. Weights are in the device
// layout of common.cuh (quants and headers split); each block's dot product is exact integer
// arithmetic (dp4a) on q8 activations, scaled once per block (or per part of a block), as on
// the CPU.

// Prefill: one warp per output column j (weight row j) and ROWS activation rows (blockIdx.y
// selects the group); its lanes take the weight row's blocks in turn and dot each with the
// ROWS activation blocks while it is in registers (a weight block is read once per ROWS
// tokens). Activations in the file's q8 block layout (AB bytes a block; matmul_quantize.cu).
template <int ROWS, int QB, int Q, int H, int AB, float (*DOT)(const u8*, const u8*, const u8*)>
__device__ __forceinline__ void matvec_blocks(const u8* W, const u8* A, float* out, const u8* bias, int btype,
                                              int k, int n, int rows) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int j = blockIdx.x * (blockDim.x / 32) + warp, r0 = blockIdx.y * ROWS;
    if (j >= n) return;
    int nr = min(ROWS, rows - r0);
    int nb = k / QB;
    const u8* wq = W + (long long)j * nb * Q;
    const u8* wh = W + header_offset((long long)n * nb, Q) + (long long)j * nb * H;
    const u8* a = A + (long long)r0 * nb * AB;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
    for (int b = lane; b < nb; b += 32) {
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (r < nr) acc[r] += DOT(wq + b * Q, wh + b * H, a + ((long long)r * nb + b) * AB);
    }
    float bv = bias ? deq(btype, bias, n, j) : 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < nr) out[(long long)(r0 + r) * n + j] = bias ? s + bv : s;
    }
}

// Two prefill entry points per type: `matvec_T` (one activation row per warp) and
// `matvec_T_r8` (eight).
#define MATVEC(T, AB, DOT)                                                                                    \
    extern "C" __global__ void matvec_##T(const MatVecParams p) {                                             \
        matvec_blocks<1, QB_##T, Q_##T, H_##T, AB, DOT>(p.w, p.a, p.out, p.bias, p.btype, p.k, p.n, p.rows);  \
    }                                                                                                         \
    extern "C" __global__ void matvec_##T##_r8(const MatVecParams p) {                                        \
        matvec_blocks<8, QB_##T, Q_##T, H_##T, AB, DOT>(p.w, p.a, p.out, p.bias, p.btype, p.k, p.n, p.rows);  \
    }

// Decode (one activation row): a warp per output (MMV_WARPS outputs a block, no block-level
// synchronization). A weight block is cut into TPB parts of 16 bytes of quants (Q6_K: 16 of ql, 16 of qh); the
// warp's lanes take the row's parts in turn, so a warp-wide load reads 32 consecutive 8-byte
// pieces (512 bytes for 16-byte parts, against 64 with the 2-byte loads the file layout allows) and, unrolled,
// each lane has several loads in flight: at 1B-model sizes a whole matrix is requested at
// once. The activation is in the split q8 layout of matmul_quantize.cu: qs (k bytes, 16-byte
// aligned) and AF floats a block (q8_0/q8_1: d and s; q8_K: d). PART returns one part's
// share of its block's product.
#define MMV_WARPS 4
// Blocks per SM the compiler must leave registers for (NVRTC option -DMMV_MIN_BLOCKS=n,
// `WICK_CUDA_MMV_MIN_BLOCKS`). Four (at most 128 registers a thread) keep 16 warps of long
// rows' unrolled loads resident on each SM; with the compiler's free choice fewer warps were
// resident and the memory idled between waves of blocks. Measured on the H200 (tg64, 8b
// Q4_K_M): 351.6 tok/s with 1, 392.5 with 3, 397.7 with 4, 314.1 with 5, 298.4 with 6; 8b
// Q4_0 534 -> 538, Q8_0 387 -> 386, but a file of Q6_K only 323 -> 314: Q6_K has its own knob
// (MMV_MIN_BLOCKS_Q6K, `WICK_CUDA_MMV_MIN_BLOCKS_Q6K`), the same by default, since Q4_K_M files
// (whose output and some down projections are Q6_K) were measured with 4 for every type.
#ifndef MMV_MIN_BLOCKS
#define MMV_MIN_BLOCKS 4
#endif
#ifndef MMV_MIN_BLOCKS_Q6K
#define MMV_MIN_BLOCKS_Q6K MMV_MIN_BLOCKS
#endif
#define MMV_THREADS (32 * MMV_WARPS)
// The unrolling of a warp's loop over its row's parts (loads in flight a lane; 8 was
// measured slower: 8b tg64 351.6 -> 275.1 tok/s; `WICK_CUDA_MMV_UNROLL`).
#ifndef MMV_UNROLL
#define MMV_UNROLL 4
#endif

typedef float (*mmv_part)(const u8* q, const u8* h, const i8* a, const float* ad, int s);

template <int TPB, int QB, int Q, int H, int AF, mmv_part PART>
__device__ __forceinline__ float mmv_row(const u8* W, const i8* aq, const float* ad, int k, int n, int row) {
    int nb = k / QB, parts = nb * TPB;
    const u8* q = W + (long long)row * nb * Q;
    const u8* h = W + header_offset((long long)n * nb, Q) + (long long)row * nb * H;
    float acc = 0.0f;
    constexpr int unroll = MMV_UNROLL;
#pragma unroll unroll
    for (int p = threadIdx.x % 32; p < parts; p += 32) {
        int b = p / TPB, s = p % TPB;
        acc += PART(q + b * Q, h + b * H, aq + b * QB, ad + b * AF, s);
    }
    return warp_sum(acc);
}

// Matrices up to this many bytes are asked into L2 before the previous kernel has finished
// (larger ones would evict each other, and their reads are bandwidth-bound anyway).
#define MMV_PREFETCH_MAX (16 << 20)

// Before `pdl_wait`: ask L2 for this warp's row of W (quants and headers), so that its reads
// overlap the previous kernel. Weights are never written during a step. (Asking L2 for the
// row of a warp a wave of blocks later instead, for larger matrices, was measured slower:
// 8b tg64 351.6 -> 348.4 to 341.5 tok/s with 1,024 to 4,096 rows ahead.)
template <int QB, int Q, int H>
__device__ __forceinline__ void mmv_prefetch(const u8* W, int k, int n, int row) {
#if __CUDA_ARCH__ >= 900
    long long nb = k / QB;
    if ((long long)n * nb * (Q + H) > MMV_PREFETCH_MAX) return;
    const u8* q = W + row * nb * Q;
    const u8* h = W + header_offset((long long)n * nb, Q) + row * nb * H;
    for (long long o = (threadIdx.x % 32) * 128; o < nb * Q; o += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(q + o));
    for (long long o = (threadIdx.x % 32) * 128; o < nb * H; o += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(h + o));
#endif
}

// Two rows of two matrices of the same shape (gate and up) in one pass: each lane has both
// rows' loads in flight at once.
template <int TPB, int QB, int Q, int H, int AF, mmv_part PART>
__device__ __forceinline__ float2 mmv_row2(const u8* W1, const u8* W2, const i8* aq, const float* ad, int k, int n,
                                           int row) {
    int nb = k / QB, parts = nb * TPB;
    long long qo = (long long)row * nb * Q, ho = header_offset((long long)n * nb, Q) + (long long)row * nb * H;
    const u8 *q1 = W1 + qo, *h1 = W1 + ho, *q2 = W2 + qo, *h2 = W2 + ho;
    float a1 = 0.0f, a2 = 0.0f;
    constexpr int unroll = MMV_UNROLL;
#pragma unroll unroll
    for (int p = threadIdx.x % 32; p < parts; p += 32) {
        int b = p / TPB, s = p % TPB;
        a1 += PART(q1 + b * Q, h1 + b * H, aq + b * QB, ad + b * AF, s);
        a2 += PART(q2 + b * Q, h2 + b * H, aq + b * QB, ad + b * AF, s);
    }
    return make_float2(warp_sum(a1), warp_sum(a2));
}

// The output row of this warp.
__device__ __forceinline__ int mmv_out_row() { return blockIdx.x * MMV_WARPS + threadIdx.x / 32; }

// act 0 = SiLU, 1 = GELU (as gated_act in elementwise.cu; gelu_f16 in common.cuh).
__device__ __forceinline__ float gate_act(float g, float u, int act) {
    return act == 0 ? g / (1.0f + expf(-g)) * u : gelu_f16(g) * u;
}

// The argmax of a row of logits as they are computed: one 64-bit atomic max per output of
// (the value's bits made orderable as unsigned, then ~row so the first index wins ties).
// NaN never wins. *best is zeroed before the step.
// The atomic is taken only when the key beats the current best: most rows do not, and
// tens of thousands of atomics on one address would serialize.
__device__ __forceinline__ void argmax_update(u64* best, float v, int row) {
    if (isnan(v)) return;
    u32 b = __float_as_uint(v);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    unsigned long long key = ((unsigned long long)b << 32) | (0xffffffffu - (u32)row);
    if (key > *(volatile unsigned long long*)best) atomicMax((unsigned long long*)best, key);
}

// Three decode entry points per type: `mmv3_T`: three products of the same input (Q, K and
// V) in one launch, blocks taking the rows of W0, then W1, then W2; `mmv_T`: out[row] = W·a (+ bias[row]) (+ add[row]), the
// residual add of the next op fused, and the running argmax kept in *best when best is set; `mmv2_T`: out[row] = act(W1·a) · (W2·a), the gate and
// up projections and their gated activation in one pass over the activations.
#define MMV_VARIANT(T, TPB, AF, PART, SUF, MINB)                                                              \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MINB) mmv_##T##SUF(const MmvParams p) {         \
        pdl_trigger();                                                                                        \
        int row = mmv_out_row(), k = p.k, n = p.n;                                                            \
        if (row >= n) return;                                                                                 \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(p.w, k, n, row);                                                   \
        pdl_wait();                                                                                           \
        float v = mmv_row<TPB, QB_##T, Q_##T, H_##T, AF, PART>(p.w, p.aq, p.ad, k, n, row);                   \
        if (threadIdx.x % 32 == 0) {                                                                          \
            if (p.bias) v += deq(p.btype, p.bias, n, row);                                                    \
            if (p.add) v += p.add[row];                                                                       \
            p.out[row] = v;                                                                                   \
            if (p.best) argmax_update(p.best, v, row);                                                        \
        }                                                                                                     \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MINB) mmv2_##T##SUF(const Mmv2Params p) {       \
        pdl_trigger();                                                                                        \
        int row = mmv_out_row(), k = p.k, n = p.n;                                                            \
        if (row >= n) return;                                                                                 \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(p.w1, k, n, row);                                                  \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(p.w2, k, n, row);                                                  \
        pdl_wait();                                                                                           \
        float2 gu = mmv_row2<TPB, QB_##T, Q_##T, H_##T, AF, PART>(p.w1, p.w2, p.aq, p.ad, k, n, row);         \
        if (threadIdx.x % 32 == 0) p.out[row] = gate_act(gu.x, gu.y, p.act);                                  \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MINB) mmv3_##T##SUF(const Mmv3Params p) {       \
        pdl_trigger();                                                                                        \
        int row = mmv_out_row(), n0 = p.n0, n1 = p.n1;                                                        \
        if (row >= n0 + n1 + p.n2) return;                                                                    \
        const u8 *W = p.w0, *bias = p.b0;                                                                     \
        float* out = p.o0;                                                                                    \
        int n = n0, bt = p.bt0;                                                                               \
        if (row >= n0 + n1) {                                                                                 \
            row -= n0 + n1; W = p.w2; out = p.o2; bias = p.b2; n = p.n2; bt = p.bt2;                          \
        } else if (row >= n0) {                                                                               \
            row -= n0; W = p.w1; out = p.o1; bias = p.b1; n = n1; bt = p.bt1;                                 \
        }                                                                                                     \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(W, p.k, n, row);                                                   \
        pdl_wait();                                                                                           \
        float v = mmv_row<TPB, QB_##T, Q_##T, H_##T, AF, PART>(W, p.aq, p.ad, p.k, n, row);                   \
        if (threadIdx.x % 32 == 0) out[row] = bias ? v + deq(bt, bias, n, row) : v;                           \
    }

// Each decode entry point twice: as many registers as the compiler likes (the better choice
// where a launch has several waves of blocks anyway, e.g. 8b matrices), and `_o`, limited to
// MMV_OCC_BLOCKS blocks' worth per SM, for launches that then fit in one wave (the executor
// picks by row length: `Kernel::decode_variant` in kernels.rs).
#define MMV_OCC_BLOCKS 6
#define MMV_B(T, TPB, AF, PART, MINB) MMV_VARIANT(T, TPB, AF, PART, , MINB) MMV_VARIANT(T, TPB, AF, PART, _o, MMV_OCC_BLOCKS)
#define MMV(T, TPB, AF, PART) MMV_B(T, TPB, AF, PART, MMV_MIN_BLOCKS)

// Decode of a few sequences at once (steps of up to MMVN_ROWS token rows): `mmvn_T`,
// `mmvn2_T` and `mmvn3_T` are `mmv_T`, `mmv2_T` and `mmv3_T` for p.rows activation rows in the
// split q8 layout of all the rows (row r's quants at aq + r·k, its floats, AF a block, from
// ad + r·(k / QB)·AF), row r's outputs at out + r·n. A warp per output as in `mmv_T`, each
// lane's weight part dotted with every row's activations while it is in registers: the
// weights are read once for all rows, and every row's sum is taken in the order of `mmv_row`,
// so each sequence gets the bits its one-row decode would. The row count is a template
// argument (one body per count, picked by `MMVN_SWITCH`): the loop over rows unrolls, and
// each lane keeps MMVN_UNROLL parts' loads in flight.
// Measured on the H200 (8b Q4_K_M, tg64 of 1 / 2 / 4 / 8 / 12 sequences, products op by op):
// one part in flight 397 / 384 / 659 / 830 / 908 tok/s, two 394 / 371 / 646 / 804 / 874,
// four 396 / 325 / 634 / 784 / 853; eight rows a launch instead of four: x8 913, x12 952.
#ifndef MMVN_ROWS
#define MMVN_ROWS 8
#endif
#ifndef MMVN_UNROLL
#define MMVN_UNROLL 1
#endif
#ifndef MMVN_MIN_BLOCKS
#define MMVN_MIN_BLOCKS MMV_MIN_BLOCKS
#endif
// One body per row count: `__VA_ARGS__` (which names the count NR) for rows in
// 1..=MMVN_ROWS (at most 8); other counts do nothing.
#define MMVN_CASE(N, ...)                 \
    case N:                               \
        if constexpr (N <= MMVN_ROWS) {   \
            constexpr int NR = N;         \
            __VA_ARGS__;                  \
        }                                 \
        break;
#define MMVN_SWITCH(ROWS, ...)            \
    switch (ROWS) {                       \
        MMVN_CASE(1, __VA_ARGS__)         \
        MMVN_CASE(2, __VA_ARGS__)         \
        MMVN_CASE(3, __VA_ARGS__)         \
        MMVN_CASE(4, __VA_ARGS__)         \
        MMVN_CASE(5, __VA_ARGS__)         \
        MMVN_CASE(6, __VA_ARGS__)         \
        MMVN_CASE(7, __VA_ARGS__)         \
        MMVN_CASE(8, __VA_ARGS__)         \
        default: break;                   \
    }
// This lane's share of W's row `row` dotted with each of NR activation rows.
template <int NR, int TPB, int QB, int Q, int H, int AF, mmv_part PART>
__device__ __forceinline__ void mmvn_sums(const u8* W, const i8* aq, const float* ad, int k, int n, int row,
                                          float (&acc)[NR]) {
    int nb = k / QB, parts = nb * TPB;
    const u8* q = W + (long long)row * nb * Q;
    const u8* h = W + header_offset((long long)n * nb, Q) + (long long)row * nb * H;
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    constexpr int unroll = MMVN_UNROLL;
#pragma unroll unroll
    for (int i = threadIdx.x % 32; i < parts; i += 32) {
        int b = i / TPB, s = i % TPB;
#pragma unroll
        for (int r = 0; r < NR; r++)
            acc[r] += PART(q + b * Q, h + b * H, aq + (long long)r * k + b * QB, ad + ((long long)r * nb + b) * AF, s);
    }
}
// out[r·n + row] = W·a[r] (+ bias) (+ add[r·n + row]).
// (P is MmvParams, a template argument: this header is also read by modules without it.)
template <int NR, int TPB, int QB, int Q, int H, int AF, mmv_part PART, typename P>
__device__ __forceinline__ void mmvn_one(const P& p, int row) {
    float acc[NR];
    mmvn_sums<NR, TPB, QB, Q, H, AF, PART>(p.w, p.aq, p.ad, p.k, p.n, row, acc);
    float bv = p.bias ? deq(p.btype, p.bias, p.n, row) : 0.0f;
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float v = warp_sum(acc[r]);
        long long o = (long long)r * p.n + row;
        if (threadIdx.x % 32 == 0) {
            if (p.bias) v += bv;
            if (p.add) v += p.add[o];
            p.out[o] = v;
        }
    }
}
// out[r·n + row] = act(W1·a[r]) · (W2·a[r]).
// (P: Mmv2Params.)
template <int NR, int TPB, int QB, int Q, int H, int AF, mmv_part PART, typename P>
__device__ __forceinline__ void mmvn_gated(const P& p, int row) {
    float g[NR], u[NR];
    mmvn_sums<NR, TPB, QB, Q, H, AF, PART>(p.w1, p.aq, p.ad, p.k, p.n, row, g);
    mmvn_sums<NR, TPB, QB, Q, H, AF, PART>(p.w2, p.aq, p.ad, p.k, p.n, row, u);
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float gv = warp_sum(g[r]), uv = warp_sum(u[r]);
        if (threadIdx.x % 32 == 0) p.out[(long long)r * p.n + row] = gate_act(gv, uv, p.act);
    }
}
// out[r·n + row] = W·a[r] (+ bias), for one of the three matrices of `mmvn3_T`.
template <int NR, int TPB, int QB, int Q, int H, int AF, mmv_part PART>
__device__ __forceinline__ void mmvn_three(const u8* W, const u8* bias, int bt, float* out, const i8* aq,
                                           const float* ad, int k, int n, int row) {
    float acc[NR];
    mmvn_sums<NR, TPB, QB, Q, H, AF, PART>(W, aq, ad, k, n, row, acc);
    float bv = bias ? deq(bt, bias, n, row) : 0.0f;
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float v = warp_sum(acc[r]);
        if (threadIdx.x % 32 == 0) out[(long long)r * n + row] = bias ? v + bv : v;
    }
}
#define MMVN_ONE(T, TPB, AF, PART)                                                                            \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMVN_MIN_BLOCKS) mmvn_##T(const MmvParams p) {  \
        pdl_trigger();                                                                                        \
        int row = mmv_out_row();                                                                              \
        if (row >= p.n) return;                                                                               \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(p.w, p.k, p.n, row);                                               \
        pdl_wait();                                                                                           \
        MMVN_SWITCH(p.rows, mmvn_one<NR, TPB, QB_##T, Q_##T, H_##T, AF, PART>(p, row))                        \
    }
#define MMVN_GATED(T, TPB, AF, PART)                                                                          \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMVN_MIN_BLOCKS) mmvn2_##T(const Mmv2Params p) { \
        pdl_trigger();                                                                                        \
        int row = mmv_out_row();                                                                              \
        if (row >= p.n) return;                                                                               \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(p.w1, p.k, p.n, row);                                              \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(p.w2, p.k, p.n, row);                                              \
        pdl_wait();                                                                                           \
        MMVN_SWITCH(p.rows, mmvn_gated<NR, TPB, QB_##T, Q_##T, H_##T, AF, PART>(p, row))                      \
    }
#define MMVN_THREE(T, TPB, AF, PART)                                                                          \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMVN_MIN_BLOCKS) mmvn3_##T(const Mmv3Params p) { \
        pdl_trigger();                                                                                        \
        int row = mmv_out_row(), n0 = p.n0, n1 = p.n1;                                                        \
        if (row >= n0 + n1 + p.n2) return;                                                                    \
        const u8 *W = p.w0, *bias = p.b0;                                                                     \
        float* out = p.o0;                                                                                    \
        int n = n0, bt = p.bt0;                                                                               \
        if (row >= n0 + n1) {                                                                                 \
            row -= n0 + n1; W = p.w2; out = p.o2; bias = p.b2; n = p.n2; bt = p.bt2;                          \
        } else if (row >= n0) {                                                                               \
            row -= n0; W = p.w1; out = p.o1; bias = p.b1; n = n1; bt = p.bt1;                                 \
        }                                                                                                     \
        mmv_prefetch<QB_##T, Q_##T, H_##T>(W, p.k, n, row);                                                   \
        pdl_wait();                                                                                           \
        MMVN_SWITCH(p.rows, mmvn_three<NR, TPB, QB_##T, Q_##T, H_##T, AF, PART>(W, bias, bt, out, p.aq, p.ad, p.k, n, row)) \
    }
// A module holds one form of one type's `mmvn` kernels (kernels.rs defines MMVN_FORM: 1
// `mmvn_T`, 2 `mmvn2_T`, 3 `mmvn3_T`): with a body per row count they are the slowest
// kernels to compile, and a module of the three took 4 s of NVRTC and ptxas (Q4_K).
#if MMVN_FORM == 1
#define MMVN(T, TPB, AF, PART) MMVN_ONE(T, TPB, AF, PART)
#elif MMVN_FORM == 2
#define MMVN(T, TPB, AF, PART) MMVN_GATED(T, TPB, AF, PART)
#else
#define MMVN(T, TPB, AF, PART) MMVN_THREE(T, TPB, AF, PART)
#endif

// 16-byte loads (16-byte aligned addresses) and dot products of 16 int8 pairs.
__device__ __forceinline__ uint4 ld16(const void* p) { return *(const uint4*)p; }
__device__ __forceinline__ int dot16(uint4 w, uint4 a, int c) {
    return dp4a((int)w.x, (int)a.x, dp4a((int)w.y, (int)a.y, dp4a((int)w.z, (int)a.z, dp4a((int)w.w, (int)a.w, c))));
}
__device__ __forceinline__ int sum16(uint4 a, int c) {
    return dp4a(0x01010101, (int)a.x, dp4a(0x01010101, (int)a.y, dp4a(0x01010101, (int)a.z, dp4a(0x01010101, (int)a.w, c))));
}
__device__ __forceinline__ uint4 nib_lo16(uint4 w) {
    return make_uint4(w.x & 0x0f0f0f0fu, w.y & 0x0f0f0f0fu, w.z & 0x0f0f0f0fu, w.w & 0x0f0f0f0fu);
}
__device__ __forceinline__ uint4 nib_hi16(uint4 w) {
    return make_uint4((w.x >> 4) & 0x0f0f0f0fu, (w.y >> 4) & 0x0f0f0f0fu, (w.z >> 4) & 0x0f0f0f0fu, (w.w >> 4) & 0x0f0f0f0fu);
}
// The fifth bits of four elements (bit `first + t` of qh for byte t) moved to bit 4 of each byte.
__device__ __forceinline__ u32 high_bits(u32 qh, int first) {
    u32 h = 0;
    for (int t = 0; t < 4; t++) h |= ((qh >> (first + t)) & 1u) << (8 * t + 4);
    return h;
}
// Bit `bit` of each byte of the 16 bytes of qh, moved to bit 4.
__device__ __forceinline__ uint4 bit4_16(uint4 qh, int bit) {
    return make_uint4(((qh.x >> bit) & 0x01010101u) << 4, ((qh.y >> bit) & 0x01010101u) << 4,
                      ((qh.z >> bit) & 0x01010101u) << 4, ((qh.w >> bit) & 0x01010101u) << 4);
}
__device__ __forceinline__ uint4 or16(uint4 a, uint4 b) { return make_uint4(a.x | b.x, a.y | b.y, a.z | b.z, a.w | b.w); }

// 8-byte loads (the address must be 8-byte aligned) and dot products of 8 int8 pairs.
__device__ __forceinline__ uint2 ld8(const void* p) { return *(const uint2*)p; }
__device__ __forceinline__ int dot8(uint2 w, uint2 a, int c) {
    return dp4a((int)w.x, (int)a.x, dp4a((int)w.y, (int)a.y, c));
}
__device__ __forceinline__ int sum8(uint2 a, int c) { return dp4a(0x01010101, (int)a.x, dp4a(0x01010101, (int)a.y, c)); }
__device__ __forceinline__ uint2 nib_lo(uint2 w) { return make_uint2(w.x & 0x0f0f0f0fu, w.y & 0x0f0f0f0fu); }
__device__ __forceinline__ uint2 nib_hi(uint2 w) {
    return make_uint2((w.x >> 4) & 0x0f0f0f0fu, (w.y >> 4) & 0x0f0f0f0fu);
}
