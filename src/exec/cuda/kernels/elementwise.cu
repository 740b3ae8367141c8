// Elementwise ops: gated activations, addition, copy.

// ggml's GELU (tanh approximation), evaluated as its f16 lookup table does.
__device__ float gelu_f16(float x) {
    const float SQRT_2_OVER_PI = 0.7978846f, COEF_A = 0.044715f;
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    x = f16r(x);
    float y = 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * (1.0f + COEF_A * x * x)));
    return f16r(y);
}

// gate = act(gate) * up; act 0 = SiLU, 1 = GELU.
extern "C" __global__ void gated_act(float* gate, const float* up, int act, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    gate[i] = act == 0 ? g / (1.0f + expf(-g)) * up[i] : gelu_f16(g) * up[i];
}

extern "C" __global__ void add(const float* a, const float* b, float* dst, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = a[i] + b[i];
}

extern "C" __global__ void copy(const float* src, float* dst, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
