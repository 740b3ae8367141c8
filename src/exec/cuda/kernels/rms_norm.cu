// RMSNorm over each group of `group` elements (one block per group), times w[i % group].
// Squares in f32, sums in f64, as ggml's CPU backend (and the CPU executor) do.
extern "C" __global__ void rms_norm(const float* x, float* dst, const u8* w, int wtype, int group, float eps) {
    long long base = (long long)blockIdx.x * group;
    double s = 0.0;
    for (int i = threadIdx.x; i < group; i += blockDim.x) {
        float v = x[base + i];
        s += (double)(v * v);
    }
    s = block_sum_d(s);
    float mean = (float)(s / (double)group);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < group; i += blockDim.x) dst[base + i] = (x[base + i] * scale) * deq(wtype, w, group, i);
}
