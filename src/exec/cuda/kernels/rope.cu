// Rotary embedding in place, and the stores to the blocked KV cache (each row's position,
// sequence and block table read from the step's inputs in device memory, so that a captured
// CUDA graph replays at any position). Angles as ggml
// computes them (RopeConsts in graph.rs): position times theta_scale^i by repeated
// multiplication, divided by the pair's frequency factor, YaRN's ramp between the
// interpolated and the extrapolated angle, cos and sin scaled by mscale. Every operation is
// rounded on its own (--fmad=false and the _rn intrinsics): the angle reaches 1e5 rad at long
// context, where one rounding more or less moves it by 1e-2.

// The angle constants of a rope launch.
struct RopeAngles {
    float theta_scale, freq_scale, ext_factor, corr_low, corr_high, mscale;
    const float* freqs;
};

template <typename P>
__device__ __forceinline__ RopeAngles rope_angles(const P& p) {
    RopeAngles a = {p.theta_scale, p.freq_scale, p.ext_factor, p.corr_low, p.corr_high, p.mscale, p.freqs};
    return a;
}

// cos and sin of pair i at position pos.
__device__ __forceinline__ void rope_cos_sin(const RopeAngles& a, int pos, int i, float* cs, float* sn) {
    float theta = (float)pos;
    for (int c = 0; c < i; c++) theta = __fmul_rn(theta, a.theta_scale);
    float extrap = a.freqs ? __fdiv_rn(theta, a.freqs[i]) : theta;
    float interp = __fmul_rn(a.freq_scale, extrap);
    float t = interp;
    if (a.ext_factor != 0.0f) {
        float y = __fdiv_rn((float)i - a.corr_low, fmaxf(0.001f, a.corr_high - a.corr_low));
        float mix = __fmul_rn(1.0f - fminf(1.0f, fmaxf(0.0f, y)), a.ext_factor);
        t = __fadd_rn(__fmul_rn(interp, 1.0f - mix), __fmul_rn(extrap, mix));
    }
    *cs = __fmul_rn(cosf(t), a.mscale);
    *sn = __fmul_rn(sinf(t), a.mscale);
}

// Rotate one head at position pos: the block's threads take the rotated pairs in turn.
__device__ __forceinline__ void rope_head(float* head, int pos, int n_rot, const RopeAngles& a, int neox) {
    for (int i = threadIdx.x; i < n_rot / 2; i += blockDim.x) {
        float cs, sn;
        rope_cos_sin(a, pos, i, &cs, &sn);
        int ia = neox ? i : 2 * i, ib = neox ? i + n_rot / 2 : 2 * i + 1;
        float x0 = head[ia], x1 = head[ib];
        head[ia] = x0 * cs - x1 * sn;
        head[ib] = x0 * sn + x1 * cs;
    }
}

// One block per (row, head).
extern "C" __global__ void rope(const RopeParams p) {
    int r = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads;
    rope_head(p.x + ((long long)r * p.n_heads + h) * p.head_dim, p.pos[r], p.n_rot, rope_angles(p), p.neox);
}

// Decode (blockIdx.y: the token row): RoPE on the query heads and the key heads, and the keys
// and values stored in the f16 cache at the row's position (through its sequence's block
// table), in one launch. Blocks 0..n_heads take query heads, then n_kv_heads key heads, then
// one block copies the values.
extern "C" __global__ void rope_kv(const RopeKvParams p) {
    pdl_trigger();
    pdl_wait();
    int n_heads = p.n_heads, head_dim = p.head_dim;
    const int b = blockIdx.x, t = blockIdx.y, pos = p.pos[t];
    const long long row = kv_row(p.tables + (long long)p.seq[t] * p.tstride, pos);
    if (b < n_heads) {
        rope_head(p.q + ((long long)t * n_heads + b) * head_dim, pos, p.n_rot, rope_angles(p), p.neox);
    } else if (b < n_heads + p.n_kv_heads) {
        float* head = p.k + ((long long)t * p.n_kv_heads + b - n_heads) * head_dim;
        rope_head(head, pos, p.n_rot, rope_angles(p), p.neox);
        __syncthreads();
        u16* dst = p.kc + row * p.k_dim + (b - n_heads) * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = f2h(head[i]);
    } else {
        const float* v = p.v + (long long)t * p.v_dim;
        for (int i = threadIdx.x; i < p.v_dim; i += blockDim.x) p.vc[row * p.v_dim + i] = f2h(v[i]);
    }
}

// Store rows of k (or v) in an f16 cache, row r at its position in its sequence's blocks: one
// thread per element.
extern "C" __global__ void kv_store(const KvStoreParams p) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    const int r = (int)(i / p.dim), c = (int)(i % p.dim);
    const long long row = kv_row(p.tables + (long long)p.seq[r] * p.tstride, p.pos[r]);
    p.cache[row * p.dim + c] = f2h(p.src[i]);
}
