// Activations converted to the weight type's dot-product partner, byte for byte as the CPU
// executor does (src/quant/quantize.rs): q8_0/q8_1 blocks for the legacy types, q8_K
// super-blocks for the K-quants, f16-rounded values for f16 weights.

#ifdef MOD_quantize
// One warp per 32-element block: d = amax/127 (as f16), q = round-half-even(x·127/amax).
// with_sum: q8_1 (d, s = d·Σq, qs), else q8_0 (d, qs).
extern "C" __global__ void quantize_q8_0(const QuantizeParams p) {
    int k = p.k, with_sum = p.with_sum;
    int nb = k / 32, b = blockIdx.x, r = blockIdx.y, l = threadIdx.x;
    float v = p.x[(long long)r * k + 32 * b + l];
    float amax = warp_max(fabsf(v));
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int q = (int)rintf(v * id);
    q = max(-128, min(127, q));
    int bytes = with_sum ? 36 : 34;
    u8* o = p.out + ((long long)r * nb + b) * bytes;
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
// (`with_sum` is not read.)
extern "C" __global__ void quantize_q8_k(const QuantizeParams p) {
    __shared__ float sa[256];
    __shared__ int si[256];
    int k = p.k;
    int nb = k / 256, b = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
    const float* xb = p.x + (long long)r * k + 256 * b;
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
    u8* o = p.out + ((long long)r * nb + b) * 292;
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
extern "C" __global__ void round_f16(const RoundF16Params p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.out[i] = f16r(p.x[i]);
}

// ---- The split layout of the decode kernels (matmul.cuh): one row of k values as qs[k]
// (int8) and AF floats a block (q8_0/q8_1: d and s, f16-rounded as the file layout stores
// them; q8_K: d). Same values as the file-layout kernels above. Stores: q8.cuh.

// Eight warps a block, a warp per 32-value block, `nb` blocks in all (a block of 32 threads
// per 32 values made a prompt's conversion launch-bound: 131,072 blocks for 4M values).
extern "C" __global__ void quantize_q8s(const QuantizeSplitParams p) {
    pdl_trigger();
    pdl_wait();
    int b = blockIdx.x * 8 + threadIdx.x / 32;
    if (b >= p.nb) return;  // a whole warp: q8_0_store's shuffles stay within live warps
    q8_0_store(p.x[32 * b + threadIdx.x % 32], b, p.qs, p.ds, p.with_sum);
}

// 256 threads per 256-value block (`with_sum` and `nb` are not read).
extern "C" __global__ void quantize_q8ks(const QuantizeSplitParams p) {
    pdl_trigger();
    pdl_wait();
    int b = blockIdx.x;
    q8_k_store(p.x[256 * b + threadIdx.x], b, p.qs, p.ds);
}
#endif
