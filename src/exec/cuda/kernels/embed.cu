// Embed: dst row r = row tokens[r] of the table (any weight type), times scale.
extern "C" __global__ void embed(const u8* table, int type, long long row_bytes, const u32* tokens,
                                 float* dst, int k, float scale) {
    int r = blockIdx.x;
    const u8* row = table + (long long)tokens[r] * row_bytes;
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        float v = deq(type, row, i);
        dst[(long long)r * k + i] = scale != 1.0f ? v * scale : v;
    }
}
