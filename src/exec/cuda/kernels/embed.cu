// Embed: dst row r = row tokens[r] of the table (n_rows rows of k, any weight type, in the
// device layout), times scale. Blocks (r, c) take row r, columns from c·blockDim.x on.
extern "C" __global__ void embed(const u8* table, int type, long long n_rows, const u32* tokens, float* dst, int k,
                                 float scale) {
    pdl_trigger();
    pdl_wait();
    int r = blockIdx.x;
    long long row = (long long)tokens[r] * k;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < k; i += gridDim.y * blockDim.x) {
        float v = deq(type, table, n_rows * k, row + i);
        dst[(long long)r * k + i] = scale != 1.0f ? v * scale : v;
    }
}
