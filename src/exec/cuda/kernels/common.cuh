// Shared helpers of every wick CUDA kernel (prepended to every module, before the generated
// parameter header): integer types, f16 conversion without headers
// (NVRTC compiles these with no include path), little-endian loads from unaligned GGUF
// blocks, warp and block reductions, and per-element dequantization of every supported
// weight type. The block layouts mirror src/quant/blocks.rs (llama.cpp's ggml-common.h).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef unsigned int u32;
typedef unsigned long long u64;

// No <math.h> under NVRTC.
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)

// ggml type ids (src/quant/types.rs).
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_BF16 30

// Programmatic dependent launch (sm_90 and later; no-ops before, and when a kernel is launched
// without the attribute). The executor launches the decode kernels that call these with
// programmatic stream serialization: a kernel's blocks may then start while the previous
// kernel still runs. `pdl_trigger` lets the next kernel start; `pdl_wait` waits until the
// previous kernel has finished and its writes are visible. Before `pdl_wait` a kernel may only
// read what no kernel of the step writes (the weights), and must write nothing.
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
// Round to the nearest f16 and back, as ggml does where it stores f16.
__device__ __forceinline__ float f16r(float f) { return h2f(f2h(f)); }

// Loads from 2-byte aligned addresses: every multi-byte field of the block formats (and of
// the q8 activation blocks of the prefill kernels) sits at an even offset inside blocks of
// even size, and buffers start 256-byte aligned (4-byte loads are not safe: Q4_0 blocks are
// 18 bytes, their headers 2).
__device__ __forceinline__ u32 ld_u16(const u8* p) { return *(const u16*)p; }
__device__ __forceinline__ u32 ld_u32(const u8* p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }
__device__ __forceinline__ int ld_i32(const u8* p) { return (int)ld_u32(p); }
__device__ __forceinline__ float ld_f16(const u8* p) { return h2f((u16)ld_u16(p)); }
__device__ __forceinline__ float ld_f32(const u8* p) { return __int_as_float(ld_i32(p)); }

// Four signed byte products summed into c.
__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ double block_sum_d(double v) {
    __shared__ double part[32];
    v = warp_sum_d(v);
    int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0) part[w] = v;
    __syncthreads();
    v = l < nw ? part[l] : 0.0;
    return warp_sum_d(v);
}
__device__ float block_max(float v) {
    __shared__ float part[32];
    v = warp_max(v);
    int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0) part[w] = v;
    __syncthreads();
    v = l < nw ? part[l] : -INFINITY;
    return warp_max(v);
}

__device__ float block_sum_f(float v) {
    __shared__ float part[32];
    v = warp_sum(v);
    int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0) part[w] = v;
    __syncthreads();
    v = l < nw ? part[l] : 0.0f;
    return warp_sum(v);
}

// ggml's GELU (tanh approximation), evaluated as its f16 lookup table does.
__device__ float gelu_f16(float x) {
    const float SQRT_2_OVER_PI = 0.7978846f, COEF_A = 0.044715f;
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    x = f16r(x);
    float y = 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * (1.0f + COEF_A * x * x)));
    return f16r(y);
}

// Scale and min of sub-block j (0..8) of Q4_K/Q5_K from their 12 packed bytes.
__device__ __forceinline__ void k4_scale_min(int j, const u8* s, int* sc, int* mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// The device layout of quantized weights (src/exec/cuda/layout.rs): every block split into
// its packed quants (Q bytes, an array at the start of the buffer, 16-byte aligned blocks)
// and its header (H bytes: scales, mins, high bits; an array from the next multiple of 16).
// QB elements per block. Quants of Q5_K: qh[32] then qs[128]; of Q6_K: ql[128] then qh[64].
// Headers: Q4_0, Q8_0: d; Q4_1: d, m; Q5_0: d, qh[4]; Q5_1: d, m, qh[4];
// Q4_K, Q5_K: d, dmin, scales[12]; Q6_K: scales[16], d.
#define QB_q4_0 32
#define Q_q4_0 16
#define H_q4_0 2
#define QB_q4_1 32
#define Q_q4_1 16
#define H_q4_1 4
#define QB_q5_0 32
#define Q_q5_0 16
#define H_q5_0 6
#define QB_q5_1 32
#define Q_q5_1 16
#define H_q5_1 8
#define QB_q8_0 32
#define Q_q8_0 32
#define H_q8_0 2
#define QB_q4_k 256
#define Q_q4_k 128
#define H_q4_k 16
#define QB_q5_k 256
#define Q_q5_k 160
#define H_q5_k 16
#define QB_q6_k 256
#define Q_q6_k 192
#define H_q6_k 18

// Byte offset of the header array of a tensor of `blocks` blocks of Q quant bytes.
__device__ __forceinline__ long long header_offset(long long blocks, int q) { return (blocks * q + 15) / 16 * 16; }

// Elements per block, quant bytes and header bytes of type t (0 for float types).
__device__ __forceinline__ void split_of(int t, int* qb, int* q, int* h) {
    switch (t) {
    case T_Q4_0: *qb = QB_q4_0; *q = Q_q4_0; *h = H_q4_0; return;
    case T_Q4_1: *qb = QB_q4_1; *q = Q_q4_1; *h = H_q4_1; return;
    case T_Q5_0: *qb = QB_q5_0; *q = Q_q5_0; *h = H_q5_0; return;
    case T_Q5_1: *qb = QB_q5_1; *q = Q_q5_1; *h = H_q5_1; return;
    case T_Q8_0: *qb = QB_q8_0; *q = Q_q8_0; *h = H_q8_0; return;
    case T_Q4_K: *qb = QB_q4_k; *q = Q_q4_k; *h = H_q4_k; return;
    case T_Q5_K: *qb = QB_q5_k; *q = Q_q5_k; *h = H_q5_k; return;
    case T_Q6_K: *qb = QB_q6_k; *q = Q_q6_k; *h = H_q6_k; return;
    }
    *qb = 1; *q = 0; *h = 0;
}

// Element i of a tensor of n elements of type t, in the device layout.
__device__ float deq(int t, const u8* base, long long n, long long i) {
    switch (t) {
    case T_F32: return ld_f32(base + 4 * i);
    case T_F16: return ld_f16(base + 2 * i);
    case T_BF16: return __int_as_float(ld_u16(base + 2 * i) << 16);
    }
    int qb, qn, hn;
    split_of(t, &qb, &qn, &hn);
    long long b = i / qb;
    int j = (int)(i % qb);
    const u8* qs = base + b * qn;
    const u8* h = base + header_offset(n / qb, qn) + b * hn;
    switch (t) {
    case T_Q4_0: case T_Q4_1: {
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        return t == T_Q4_0 ? ld_f16(h) * (float)(q - 8) : ld_f16(h) * (float)q + ld_f16(h + 2);
    }
    case T_Q5_0: case T_Q5_1: {
        u32 qh = ld_u32(h + (t == T_Q5_0 ? 2 : 4));
        int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        int q = lo | (((qh >> j) & 1) << 4);
        return t == T_Q5_0 ? ld_f16(h) * (float)(q - 16) : ld_f16(h) * (float)q + ld_f16(h + 2);
    }
    case T_Q8_0: return ld_f16(h) * (float)(i8)qs[j];
    case T_Q4_K: case T_Q5_K: {
        int c = j / 32, l = j % 32, sc, mn;
        k4_scale_min(c, h + 4, &sc, &mn);
        const u8* q4 = t == T_Q4_K ? qs : qs + 32;
        int q = (q4[32 * (c / 2) + l] >> (4 * (c % 2))) & 0xF;
        if (t == T_Q5_K) q |= ((qs[l] >> c) & 1) << 4;
        return ld_f16(h) * (float)(sc * q) - ld_f16(h + 2) * (float)mn;
    }
    case T_Q6_K: {
        int hh = j / 128, c = (j % 128) / 32, l = j % 32;
        int lo = (qs[64 * hh + 32 * (c % 2) + l] >> (4 * (c / 2))) & 0xF;
        int hi = (qs[128 + 32 * hh + l] >> (2 * c)) & 3;
        int q = (lo | (hi << 4)) - 32;
        return ld_f16(h + 16) * (float)((i8)h[j / 16] * q);
    }
    }
    return 0.0f;
}

// ---- The step's inputs (exec/step.rs StepLayout: token ids, positions, sequences, block tables)
// and the blocked KV cache: position p of a sequence with block table `table` is cache row
// table[p / KV_BLOCK] · KV_BLOCK + p % KV_BLOCK.
#define KV_BLOCK 64

__device__ __forceinline__ long long kv_row(const u32* table, int p) {
    return (long long)table[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK;
}

// Tile `t` of a kernel whose blocks take up to `per` consecutive query rows of ONE sequence:
// the tiles are counted sequence by sequence (⌈rows / per⌉ each, from each sequence's first
// row, seq_start[0..=n_seqs]), so a grid of ⌈n_tokens / per⌉ + n_seqs − 1 tiles covers every
// step. Gives the tile's first row, its row count and its sequence; false for a surplus tile
// (nothing to do). Block-uniform; n_seqs is small (the graph's sequences), so a scan.
__device__ __forceinline__ bool seq_tile(const int* seq_start, int n_seqs, int t, int per, int* r0, int* nq,
                                         int* seq) {
    for (int s = 0; s < n_seqs; s++) {
        const int a = seq_start[s], n = seq_start[s + 1] - a, tiles = (n + per - 1) / per;
        if (t < tiles) {
            *r0 = a + t * per;
            *nq = min(per, n - t * per);
            *seq = s;
            return true;
        }
        t -= tiles;
    }
    return false;
}
