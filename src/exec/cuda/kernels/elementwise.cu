// Elementwise ops: embedding rows, gated activations, addition, copy of rows. Parameters: the structs
// of params.rs (generated header).

// Embed: dst row r = row tokens[r] of the table (n_rows rows of k, any weight type, in the
// device layout), times scale. Blocks (r, c) take row r, columns from c·blockDim.x on.
extern "C" __global__ void embed(const EmbedParams p) {
    pdl_trigger();
    pdl_wait();
    int r = blockIdx.x, k = p.k;
    long long row = (long long)p.tokens[r] * k;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < k; i += gridDim.y * blockDim.x) {
        float v = deq(p.wtype, p.table, p.n_rows * k, row + i);
        p.dst[(long long)r * k + i] = p.scale != 1.0f ? v * p.scale : v;
    }
}

// gate = act(gate) * up; act 0 = SiLU, 1 = GELU.
extern "C" __global__ void gated_act(const GatedActParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    float g = p.gate[i];
    p.gate[i] = p.act == 0 ? g / (1.0f + expf(-g)) * p.up[i] : gelu_f16(g) * p.up[i];
}

extern "C" __global__ void add(const AddParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.dst[i] = p.a[i] + p.b[i];
}

// Row gather: dst row blockIdx.x = src row rows[blockIdx.x] (TakeLast: each sequence's last
// row); blocks (r, c) take columns from c·blockDim.x on.
extern "C" __global__ void copy(const CopyParams p) {
    const long long src = (long long)p.rows[blockIdx.x] * p.n, dst = (long long)blockIdx.x * p.n;
    for (long long i = (long long)blockIdx.y * blockDim.x + threadIdx.x; i < p.n; i += (long long)gridDim.y * blockDim.x)
        p.dst[dst + i] = p.src[src + i];
}
