// Sampling on the device: the argmax of a row of logits (greedy decoding).

// Index of the largest of n values (the first on ties; NaN never wins), one block a row:
// block b takes row b of x (n values) and writes out[b]. With a token mask (p.mask not null:
// ceil(n / 32) words a row, bit i % 32 of word i / 32 for id i), an id it leaves out counts as
// -inf, as the host's masking sets it (constrained decoding).
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) {
    if (isnan(a)) return false;
    if (isnan(b)) return true;
    return a > b || (a == b && ia < ib);
}

// Keep value v of id i as the running best (bv, bi), -inf where the mask leaves i out.
__device__ __forceinline__ void consider(float v, int i, const u32* mask, float& bv, int& bi) {
    if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) v = -INFINITY;
    if (better(v, i, bv, bi)) { bv = v; bi = i; }
}

extern "C" __global__ void argmax(const ArgmaxParams p) {
    __shared__ float sv[1024];
    __shared__ int si[1024];
    const float* __restrict__ x = p.x + (long long)blockIdx.x * p.n;
    const u32* mask = p.mask ? p.mask + (long long)blockIdx.x * ((p.n + 31) / 32) : nullptr;
    float bv = NAN;
    int bi = 0x7fffffff;
    // A row is read four values a load with several loads in flight a thread: one block then
    // streams a 128k-entry row in a few microseconds (a load at a time took tens of them, on
    // the critical path of every constrained greedy token). `better` is a total order (value,
    // then the lower id), so the order of visits does not change the answer.
    int tail = 0;
    if (((unsigned long long)x & 15) == 0) {
        const float4* __restrict__ x4 = (const float4*)x;
        const int n4 = p.n / 4;
        tail = 4 * n4;
#pragma unroll 8
        for (int j = threadIdx.x; j < n4; j += blockDim.x) {
            const float4 v = x4[j];
            consider(v.x, 4 * j, mask, bv, bi);
            consider(v.y, 4 * j + 1, mask, bv, bi);
            consider(v.z, 4 * j + 2, mask, bv, bi);
            consider(v.w, 4 * j + 3, mask, bv, bi);
        }
    }
#pragma unroll 4
    for (int i = tail + threadIdx.x; i < p.n; i += blockDim.x) consider(x[i], i, mask, bv, bi);
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + s];
            si[threadIdx.x] = si[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) p.out[blockIdx.x] = si[0] == 0x7fffffff ? 0u : (u32)si[0];
}
