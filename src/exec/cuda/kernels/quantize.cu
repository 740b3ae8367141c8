// Activations converted to the weight type's dot-product partner, byte for byte as the CPU
// executor does (src/quant/quantize.rs): q8_0/q8_1 blocks for the legacy types, q8_K
// super-blocks for the K-quants, f16-rounded values for f16 weights.

// One warp per 32-element block: d = amax/127 (as f16), q = round-half-even(x·127/amax).
// with_sum: q8_1 (d, s = d·Σq, qs), else q8_0 (d, qs).
extern "C" __global__ void quantize_q8_0(const float* x, u8* out, int k, int with_sum) {
    int nb = k / 32, b = blockIdx.x, r = blockIdx.y, l = threadIdx.x;
    float v = x[(long long)r * k + 32 * b + l];
    float amax = warp_max(fabsf(v));
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int q = (int)rintf(v * id);
    q = max(-128, min(127, q));
    int bytes = with_sum ? 36 : 34;
    u8* o = out + ((long long)r * nb + b) * bytes;
    o[bytes - 32 + l] = (u8)(i8)q;
    int s = q;
    for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
    // Blocks are 34 or 36 bytes, so d and s are 2-byte aligned: store them as u16. (Storing
    // the low byte of an f16 register with a byte store lost it on sm_90: seen as d = 0x1f00.)
    if (l == 0) {
        *(u16*)o = f2h(d);
        if (with_sum) *(u16*)(o + 2) = f2h((float)s * d);
    }
}

// One block of 256 threads per super-block: the element of largest magnitude (the first
// one), with its sign, maps to -127; d (f32), qs[256], bsums[16] (i16). 292 bytes.
extern "C" __global__ void quantize_q8_k(const float* x, u8* out, int k) {
    __shared__ float sa[256];
    __shared__ int si[256];
    int nb = k / 256, b = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
    const float* xb = x + (long long)r * k + 256 * b;
    float v = xb[t];
    sa[t] = fabsf(v);
    si[t] = t;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s && (sa[t + s] > sa[t] || (sa[t + s] == sa[t] && si[t + s] < si[t]))) {
            sa[t] = sa[t + s];
            si[t] = si[t + s];
        }
        __syncthreads();
    }
    float amax = sa[0], mx = xb[si[0]];
    u8* o = out + ((long long)r * nb + b) * 292;
    int q = 0;
    float d = 0.0f;
    if (amax != 0.0f) {
        float iscale = -127.0f / mx;
        q = min((int)rintf(iscale * v), 127);
        d = 1.0f / iscale;
    }
    o[4 + t] = (u8)(i8)q;
    int s = q;
    for (int w = 8; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
    if (t % 16 == 0) *(i16*)(o + 260 + 2 * (t / 16)) = (i16)s;
    if (t == 0) *(float*)o = d;
}

// f16 weights: activations rounded to f16 (kept as f32).
extern "C" __global__ void round_f16(const float* x, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f16r(x[i]);
}

// ---- The split layout of the decode kernels (matvec.cuh): one row of k values as qs[k]
// (int8) and AF floats a block (q8_0/q8_1: d and s, f16-rounded as the file layout stores
// them; q8_K: d). Same values as the file-layout kernels above.

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
// one), with its sign, maps to -127. Stores qs and d of block b. All threads of the block
// must call it (it synchronizes); only those with `store` write. Largest-first is one 64-bit max: |v|'s bits, then 255 − j
// (the first index wins ties), then the sign.
__device__ void q8_k_store(float v, int b, i8* qs, float* ds, bool store = true) {
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
    if (!store) return;
    qs[256 * b + j] = (i8)q;
    if (j == 0) ds[b] = d;
}

// One warp per 32-value block.
extern "C" __global__ void quantize_q8s(const float* x, i8* qs, float* ds, int with_sum) {
    pdl_trigger();
    pdl_wait();
    int b = blockIdx.x;
    q8_0_store(x[32 * b + threadIdx.x], b, qs, ds, with_sum);
}

// 256 threads per 256-value block.
extern "C" __global__ void quantize_q8ks(const float* x, i8* qs, float* ds) {
    pdl_trigger();
    pdl_wait();
    int b = blockIdx.x;
    q8_k_store(x[256 * b + threadIdx.x], b, qs, ds);
}

// RMSNorm of one row of k values (as rms_norm.cu computes it) into dst, and dst converted
// for the next matrix product: kind 0 = q8_0, 1 = q8_1, 2 = q8_K (k a multiple of 256).
// ceil(k / 256) blocks of 256 threads: every block sums the squares of the whole row (a few
// KB from L2; the sum in f64 comes out the same in every block) and normalizes and converts
// its own 256 values, so the row is spread over many SMs instead of waiting on one.
extern "C" __global__ void __launch_bounds__(256) rms_norm_q8s(const float* x, float* dst, const u8* w, int wtype,
                                                             int k, float eps, i8* qs, float* ds, int kind) {
    int t = threadIdx.x, base = blockIdx.x * 256, i = base + t;
    pdl_trigger();
    // The norm's weight first: before the previous kernel has finished.
    float wv = i >= k ? 0.0f : wtype == T_F32 ? ((const float*)w)[i] : deq(wtype, w, k, i);
    pdl_wait();
    double s = 0.0;
    for (int j = t; j < k; j += 256) {
        float v = x[j];
        s += (double)(v * v);
    }
    s = block_sum_d(s);
    float mean = (float)(s / (double)k);
    float scale = 1.0f / sqrtf(mean + eps);
    float y = i < k ? (x[i] * scale) * wv : 0.0f;
    if (i < k) dst[i] = y;
    if (kind == 2) {
        q8_k_store(y, i / 256, qs, ds, base < k);
    } else if (base + (t & ~31) < k) {
        q8_0_store(y, i / 32, qs, ds, kind);
    }
}
