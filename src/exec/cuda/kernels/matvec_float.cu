// F32 and F16 weights times f32 activations (already rounded to f16 for F16 weights, as the
// CPU does): one warp per output, lanes stride the row.
template <typename T, float (*LD)(T)>
__device__ __forceinline__ void matvec_float(const T* W, const float* x, float* out, const u8* bias, int btype,
                                             int k, int n) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int j = blockIdx.x * (blockDim.x / 32) + warp, r = blockIdx.y;
    if (j >= n) return;
    const T* w = W + (long long)j * k;
    const float* a = x + (long long)r * k;
    float acc = 0.0f;
    for (int i = lane; i < k; i += 32) acc += LD(w[i]) * a[i];
    acc = warp_sum(acc);
    if (lane == 0) {
        if (bias) acc += deq(btype, bias, j);
        out[(long long)r * n + j] = acc;
    }
}
__device__ __forceinline__ float ld_f(float v) { return v; }
__device__ __forceinline__ float ld_h(u16 v) { return h2f(v); }

extern "C" __global__ void matvec_f32(const u8* W, const u8* A, float* out, const u8* bias, int btype, int k, int n) {
    matvec_float<float, ld_f>((const float*)W, (const float*)A, out, bias, btype, k, n);
}
extern "C" __global__ void matvec_f16(const u8* W, const u8* A, float* out, const u8* bias, int btype, int k, int n) {
    matvec_float<u16, ld_h>((const u16*)W, (const float*)A, out, bias, btype, k, n);
}
