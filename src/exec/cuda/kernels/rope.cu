// Rotary embedding in place (the step's first position read from device memory, so that a
// captured CUDA graph replays at any position): one block per (row, head), one thread per rotated pair.
// Angles as ggml computes them: position times theta_scale^i by repeated multiplication.
extern "C" __global__ void rope(float* x, const int* posp, int n_heads, int head_dim, int n_rot, float theta_scale,
                                float freq_scale, int neox) {
    int r = blockIdx.x / n_heads, h = blockIdx.x % n_heads, pos = *posp;
    float* head = x + ((long long)r * n_heads + h) * head_dim;
    for (int i = threadIdx.x; i < n_rot / 2; i += blockDim.x) {
        float theta = (float)(pos + r);
        for (int c = 0; c < i; c++) theta *= theta_scale;
        float t = freq_scale * theta;
        float cs = cosf(t), sn = sinf(t);
        int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
        float x0 = head[a], x1 = head[b];
        head[a] = x0 * cs - x1 * sn;
        head[b] = x0 * sn + x1 * cs;
    }
}
