// The split q8 layout of the decode kernels (matmul.cuh), stored by the threads that hold the
// values: shared by the q8 conversion (matmul_quantize.cu) and the fused RMSNorm (norm.cu).

// q8_0 of the 32 values of a warp (lane l holds value l): returns q, sets d (unrounded).
__device__ __forceinline__ int q8_0_value(float v, float* d) {
    float amax = warp_max(fabsf(v));
    *d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    return max(-128, min(127, (int)rintf(v * id)));
}

// Store a warp's block b: qs and (d, s).
__device__ __forceinline__ void q8_0_store(float v, int b, i8* qs, float* ds, int with_sum) {
    int l = threadIdx.x % 32;
    float d;
    int q = q8_0_value(v, &d);
    qs[32 * b + l] = (i8)q;
    int s = q;
    for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
    if (l == 0) {
        ds[2 * b] = f16r(d);
        ds[2 * b + 1] = with_sum ? f16r((float)s * d) : 0.0f;
    }
}

// q8_K of 256 values held by 8 consecutive warps (thread t holds value t % 256 of its group
// of 256 threads; blockDim.x a multiple of 256): the value of largest magnitude (the first
// one), with its sign, maps to -127. Returns q and sets d. All threads of the block must call
// it (it synchronizes). Largest-first is one 64-bit max: |v|'s bits, then 255 − j (the first
// index wins ties), then the sign.
__device__ int q8_k_value(float v, float* dout) {
    __shared__ u64 best[32];
    int t = threadIdx.x, j = t % 256, warp = t / 32, g0 = warp / 8 * 8;
    u64 key = ((u64)__float_as_uint(fabsf(v)) << 32) | ((u64)(255 - j) << 1) | (v < 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        u64 other = __shfl_xor_sync(0xffffffffu, key, o);
        key = other > key ? other : key;
    }
    if (t % 32 == 0) best[warp] = key;
    __syncthreads();
    key = best[g0];
    for (int w = 1; w < 8; w++) key = best[g0 + w] > key ? best[g0 + w] : key;
    __syncthreads();
    float amax = __uint_as_float((u32)(key >> 32)), mx = (key & 1) ? -amax : amax;
    int q = 0;
    float d = 0.0f;
    if (amax != 0.0f) {
        float iscale = -127.0f / mx;
        q = min((int)rintf(iscale * v), 127);
        d = 1.0f / iscale;
    }
    *dout = d;
    return q;
}

// q8_k_value's q and d of block b stored (all threads call it; only those with `store` write).
__device__ void q8_k_store(float v, int b, i8* qs, float* ds, bool store = true) {
    int j = threadIdx.x % 256;
    float d;
    int q = q8_k_value(v, &d);
    if (!store) return;
    qs[256 * b + j] = (i8)q;
    if (j == 0) ds[b] = d;
}
