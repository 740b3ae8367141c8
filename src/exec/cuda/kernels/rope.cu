// Rotary embedding in place, and the appends to the KV cache (the step's first position read
// from device memory, so that a captured CUDA graph replays at any position). Angles as ggml computes them: position times
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
extern "C" __global__ void rope(const RopeParams p) {
    int r = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads;
    rope_head(p.x + ((long long)r * p.n_heads + h) * p.head_dim, *p.posp + r, p.n_rot, p.theta_scale, p.freq_scale,
              p.neox);
}

// Decode (one row): RoPE on the query heads and the key heads, and the keys and values
// appended to the f16 cache at the step's position, in one launch. Blocks 0..n_heads take
// query heads, then n_kv_heads key heads, then one block copies the values.
extern "C" __global__ void rope_kv(const RopeKvParams p) {
    pdl_trigger();
    pdl_wait();
    int n_heads = p.n_heads, head_dim = p.head_dim;
    int b = blockIdx.x, pos = *p.posp;
    if (b < n_heads) {
        rope_head(p.q + (long long)b * head_dim, pos, p.n_rot, p.theta_scale, p.freq_scale, p.neox);
    } else if (b < n_heads + p.n_kv_heads) {
        float* head = p.k + (long long)(b - n_heads) * head_dim;
        rope_head(head, pos, p.n_rot, p.theta_scale, p.freq_scale, p.neox);
        __syncthreads();
        u16* dst = p.kc + (long long)pos * p.k_dim + (b - n_heads) * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = f2h(head[i]);
    } else {
        for (int i = threadIdx.x; i < p.v_dim; i += blockDim.x) p.vc[(long long)pos * p.v_dim + i] = f2h(p.v[i]);
    }
}

// Append rows of k (or v) to an f16 cache at positions pos.. : one thread per element.
extern "C" __global__ void kv_store(const KvStoreParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.cache[(long long)*p.posp * p.dim + i] = f2h(p.src[i]);
}
