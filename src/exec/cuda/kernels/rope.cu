// Rotary embedding in place (the step's first position read from device memory, so that a
// captured CUDA graph replays at any position). Angles as ggml computes them: position times
// theta_scale^i by repeated multiplication.

// Rotate one head at position pos: the block's threads take the rotated pairs in turn.
__device__ __forceinline__ void rope_head(float* head, int pos, int n_rot, float theta_scale, float freq_scale,
                                          int neox) {
    for (int i = threadIdx.x; i < n_rot / 2; i += blockDim.x) {
        float theta = (float)pos;
        for (int c = 0; c < i; c++) theta *= theta_scale;
        float t = freq_scale * theta;
        float cs = cosf(t), sn = sinf(t);
        int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
        float x0 = head[a], x1 = head[b];
        head[a] = x0 * cs - x1 * sn;
        head[b] = x0 * sn + x1 * cs;
    }
}

// One block per (row, head).
extern "C" __global__ void rope(float* x, const int* posp, int n_heads, int head_dim, int n_rot, float theta_scale,
                                float freq_scale, int neox) {
    int r = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
    rope_head(x + ((long long)r * n_heads + h) * head_dim, *posp + r, n_rot, theta_scale, freq_scale, neox);
}

// Decode (one row): RoPE on the query heads and the key heads, and the keys and values
// appended to the f16 cache at the step's position, in one launch. Blocks 0..n_heads take
// query heads, then n_kv_heads key heads, then one block copies the values.
extern "C" __global__ void rope_kv(float* q, float* k, const float* v, u16* kc, u16* vc, const int* posp, int n_heads,
                                   int n_kv_heads, int head_dim, int n_rot, float theta_scale, float freq_scale,
                                   int neox, int k_dim, int v_dim) {
    pdl_trigger();
    pdl_wait();
    int b = blockIdx.x, pos = *posp;
    if (b < n_heads) {
        rope_head(q + (long long)b * head_dim, pos, n_rot, theta_scale, freq_scale, neox);
    } else if (b < n_heads + n_kv_heads) {
        float* head = k + (long long)(b - n_heads) * head_dim;
        rope_head(head, pos, n_rot, theta_scale, freq_scale, neox);
        __syncthreads();
        u16* dst = kc + (long long)pos * k_dim + (b - n_heads) * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = f2h(head[i]);
    } else {
        for (int i = threadIdx.x; i < v_dim; i += blockDim.x) vc[(long long)pos * v_dim + i] = f2h(v[i]);
    }
}
