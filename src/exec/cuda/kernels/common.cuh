// Shared helpers of every wick CUDA kernel: integer types, f16 conversion without headers
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

// Every multi-byte field of every block format (and of the q8 activation blocks) sits at an
// even offset inside blocks of even size, and buffers start 256-byte aligned: 2-byte loads
// are always aligned (4-byte loads are not: Q4_0 blocks are 18 bytes).
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

// Element i of a row of type t (the row starts at `row`).
__device__ float deq(int t, const u8* row, long long i) {
    switch (t) {
    case T_F32: return ld_f32(row + 4 * i);
    case T_F16: return ld_f16(row + 2 * i);
    case T_BF16: return __int_as_float(ld_u16(row + 2 * i) << 16);
    case T_Q4_0: case T_Q4_1: {
        int bytes = t == T_Q4_0 ? 18 : 20, off = t == T_Q4_0 ? 2 : 4;
        const u8* b = row + (i / 32) * bytes;
        int j = i % 32;
        int q = j < 16 ? (b[off + j] & 0xF) : (b[off + j - 16] >> 4);
        return t == T_Q4_0 ? ld_f16(b) * (float)(q - 8) : ld_f16(b) * (float)q + ld_f16(b + 2);
    }
    case T_Q5_0: case T_Q5_1: {
        int bytes = t == T_Q5_0 ? 22 : 24, hoff = t == T_Q5_0 ? 2 : 4;
        const u8* b = row + (i / 32) * bytes;
        int j = i % 32;
        u32 qh = ld_u32(b + hoff);
        int lo = j < 16 ? (b[hoff + 4 + j] & 0xF) : (b[hoff + 4 + j - 16] >> 4);
        int q = lo | (((qh >> j) & 1) << 4);
        return t == T_Q5_0 ? ld_f16(b) * (float)(q - 16) : ld_f16(b) * (float)q + ld_f16(b + 2);
    }
    case T_Q8_0: {
        const u8* b = row + (i / 32) * 34;
        return ld_f16(b) * (float)(i8)b[2 + i % 32];
    }
    case T_Q4_K: case T_Q5_K: {
        const u8* b = row + (i / 256) * (t == T_Q4_K ? 144 : 176);
        int j = i % 256, c = j / 32, l = j % 32, sc, mn;
        k4_scale_min(c, b + 4, &sc, &mn);
        const u8* qs = b + (t == T_Q4_K ? 16 : 48);
        int q = (qs[32 * (c / 2) + l] >> (4 * (c % 2))) & 0xF;
        if (t == T_Q5_K) q |= ((b[16 + l] >> c) & 1) << 4;
        return ld_f16(b) * (float)(sc * q) - ld_f16(b + 2) * (float)mn;
    }
    case T_Q6_K: {
        const u8* b = row + (i / 256) * 210;
        int j = i % 256, h = j / 128, c = (j % 128) / 32, l = j % 32;
        int lo = (b[64 * h + 32 * (c % 2) + l] >> (4 * (c / 2))) & 0xF;
        int hi = (b[128 + 32 * h + l] >> (2 * c)) & 3;
        int q = (lo | (hi << 4)) - 32;
        return ld_f16(b + 208) * (float)((i8)b[192 + j / 16] * q);
    }
    }
    return 0.0f;
}
