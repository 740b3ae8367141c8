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

extern "C" __global__ void argmax(const ArgmaxParams p) {
    __shared__ float sv[1024];
    __shared__ int si[1024];
    const float* x = p.x + (long long)blockIdx.x * p.n;
    const u32* mask = p.mask ? p.mask + (long long)blockIdx.x * ((p.n + 31) / 32) : nullptr;
    float bv = NAN;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
        float v = x[i];
        if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) v = -INFINITY;
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
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
