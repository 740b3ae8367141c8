// RMSNorm: over groups of a row (rms_norm), and over whole rows fused with the q8 conversion
// the next matrix product needs (rms_norm_q8s; stores of q8.cuh). Squares in f32, sums in f64,
// as ggml's CPU backend (and the CPU executor) do.

// RMSNorm over each group of `group` elements (one block per group), times w[i % group].
extern "C" __global__ void rms_norm(const RmsNormParams p) {
    int group = p.group;
    long long base = (long long)blockIdx.x * group;
    double s = 0.0;
    for (int i = threadIdx.x; i < group; i += blockDim.x) {
        float v = p.x[base + i];
        s += (double)(v * v);
    }
    s = block_sum_d(s);
    float mean = (float)(s / (double)group);
    float scale = 1.0f / sqrtf(mean + p.eps);
    for (int i = threadIdx.x; i < group; i += blockDim.x)
        p.dst[base + i] = (p.x[base + i] * scale) * deq(p.wtype, p.w, group, i);
}

// RMSNorm of one row of k values (as rms_norm computes it) into dst, and dst converted for the
// next matrix product: kind 0 = q8_0, 1 = q8_1, 2 = q8_K (k a multiple of 256).
// ceil(k / 256) blocks of 256 threads: every block sums the squares of the whole row (a few
// KB from L2; the sum in f64 comes out the same in every block) and normalizes and converts
// its own 256 values, so the row is spread over many SMs instead of waiting on one.
// Several rows (the tokens of a decode step of several sequences): blockIdx.y is the row, and
// the rows go to the split q8 layout of all of them (k a multiple of the format's block).
extern "C" __global__ void __launch_bounds__(256) rms_norm_q8s(const RmsNormQ8Params p) {
    int k = p.k, kind = p.kind;
    const float* x = p.x + (long long)blockIdx.y * k;
    float* dst = p.dst + (long long)blockIdx.y * k;
    int t = threadIdx.x, base = blockIdx.x * 256, i = base + t;
    // Blocks of the rows before this one.
    int b0 = blockIdx.y * (kind == 2 ? k / 256 : k / 32);
    pdl_trigger();
    // The norm's weight first: before the previous kernel has finished.
    float wv = i >= k ? 0.0f : p.wtype == T_F32 ? ((const float*)p.w)[i] : deq(p.wtype, p.w, k, i);
    pdl_wait();
    double s = 0.0;
    for (int j = t; j < k; j += 256) {
        float v = x[j];
        s += (double)(v * v);
    }
    s = block_sum_d(s);
    float mean = (float)(s / (double)k);
    float scale = 1.0f / sqrtf(mean + p.eps);
    float y = i < k ? (x[i] * scale) * wv : 0.0f;
    if (i < k) dst[i] = y;
    if (kind == 2) {
        q8_k_store(y, b0 + i / 256, p.qs, p.ds, base < k);
    } else if (base + (t & ~31) < k) {
        q8_0_store(y, b0 + i / 32, p.qs, p.ds, kind);
    }
}
