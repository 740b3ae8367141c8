// F32, F16 and BF16 weights times f32 activations, rounded as the CPU rounds them for the
// weights' dot products (F16: already by round_f16; BF16: here, by RA): one warp per output,
// lanes stride the row. ROWS activation rows per warp, as in matmul.cuh. V8 (16-bit weights,
// rows of a multiple of 8 values): a lane loads 8 weights (16 bytes) and their activations at
// a time (2-byte loads left decode at a third to half of the bandwidth).
template <int ROWS, typename T, float (*LD)(T), float (*RA)(float), bool V8>
__device__ __forceinline__ void matvec_float(const T* W, const float* x, float* out, const u8* bias, int btype,
                                             int k, int n, int rows) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int j = blockIdx.x * (blockDim.x / 32) + warp, r0 = blockIdx.y * ROWS;
    if (j >= n) return;
    int nr = min(ROWS, rows - r0);
    const T* w = W + (long long)j * k;
    const float* a = x + (long long)r0 * k;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
    if (V8) {
        for (int i = 8 * lane; i < k; i += 256) {
            uint4 q = *(const uint4*)(w + i);
            u32 qw[4] = {q.x, q.y, q.z, q.w};
            float wv[8];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                wv[2 * e] = LD((u16)(qw[e] & 0xffffu));
                wv[2 * e + 1] = LD((u16)(qw[e] >> 16));
            }
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r < nr) {
                    const float4* ap = (const float4*)(a + (long long)r * k + i);
                    float4 a0 = ap[0], a1 = ap[1];
                    float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r] += wv[e] * RA(av[e]);
                }
            }
        }
    } else {
        for (int i = lane; i < k; i += 32) {
            float wv = LD(w[i]);
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                if (r < nr) acc[r] += wv * RA(a[(long long)r * k + i]);
        }
    }
    float bv = bias ? deq(btype, bias, n, j) : 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < nr) out[(long long)(r0 + r) * n + j] = bias ? s + bv : s;
    }
}
__device__ __forceinline__ float ld_f(float v) { return v; }
__device__ __forceinline__ float ld_h(u16 v) { return h2f(v); }
__device__ __forceinline__ float ld_b(u16 v) { return __int_as_float((u32)v << 16); }
// f32 to bf16 and back, round to nearest even (NaN: a quiet NaN of the same top bits), as
// half::bf16::from_f32.
__device__ __forceinline__ float bf16r(float v) {
    u32 b = __float_as_uint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(b | 0x400000u);
    return __uint_as_float(((b + 0x7fffu + ((b >> 16) & 1)) >> 16) << 16);
}

// One entry point per row count (1, 8); V8 where the type allows it and k is a multiple of 8.
#define MATVEC_FLOAT(name, T, LD, RA, HALF)                                                                \
    template <int ROWS>                                                                                    \
    __device__ __forceinline__ void name##_rows(const MatVecParams& p) {                                  \
        if (HALF && p.k % 8 == 0)                                                                          \
            matvec_float<ROWS, T, LD, RA, true>((const T*)p.w, (const float*)p.a, p.out, p.bias, p.btype, \
                                                p.k, p.n, p.rows);                                        \
        else                                                                                               \
            matvec_float<ROWS, T, LD, RA, false>((const T*)p.w, (const float*)p.a, p.out, p.bias, p.btype,\
                                                 p.k, p.n, p.rows);                                       \
    }                                                                                                      \
    extern "C" __global__ void name(const MatVecParams p) { name##_rows<1>(p); }                           \
    extern "C" __global__ void name##_r8(const MatVecParams p) { name##_rows<8>(p); }

#ifdef MOD_matvec_f32
MATVEC_FLOAT(matvec_f32, float, ld_f, ld_f, false)
#endif
#ifdef MOD_matvec_f16
MATVEC_FLOAT(matvec_f16, u16, ld_h, ld_f, true)
#endif
#ifdef MOD_matvec_bf16
MATVEC_FLOAT(matvec_bf16, u16, ld_b, bf16r, true)
#endif
