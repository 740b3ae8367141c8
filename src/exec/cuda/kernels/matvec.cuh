// The matrix-vector frame shared by every quantized type: one warp per output column j
// (weight row j) and ROWS activation rows (blockIdx.y selects the group); its lanes take the
// weight row's blocks in turn and dot each with the ROWS activation blocks while it is in
// registers (prefill reads each weight block once per ROWS tokens, not once per token).
// Each block's dot product is exact integer arithmetic (dp4a) scaled once, as on the CPU.
// WB/AB: bytes of a weight block and of its activation block; QB: elements per block.
template <int ROWS, int WB, int AB, int QB, float (*DOT)(const u8*, const u8*)>
__device__ __forceinline__ void matvec_blocks(const u8* W, const u8* A, float* out, const u8* bias, int btype,
                                              int k, int n, int rows) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int j = blockIdx.x * (blockDim.x / 32) + warp, r0 = blockIdx.y * ROWS;
    if (j >= n) return;
    int nr = min(ROWS, rows - r0);
    int nb = k / QB;
    const u8* w = W + (long long)j * nb * WB;
    const u8* a = A + (long long)r0 * nb * AB;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
    for (int b = lane; b < nb; b += 32) {
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (r < nr) acc[r] += DOT(w + b * WB, a + ((long long)r * nb + b) * AB);
    }
    float bv = bias ? deq(btype, bias, j) : 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < nr) out[(long long)(r0 + r) * n + j] = bias ? s + bv : s;
    }
}

// Two entry points per type: `name` (one activation row per warp, decode) and `name_r8`
// (eight, prefill).
#define MATVEC(name, WB, AB, QB, DOT)                                                                        \
    extern "C" __global__ void name(const u8* W, const u8* A, float* out, const u8* bias, int btype, int k,   \
                                    int n, int rows) {                                                       \
        matvec_blocks<1, WB, AB, QB, DOT>(W, A, out, bias, btype, k, n, rows);                               \
    }                                                                                                        \
    extern "C" __global__ void name##_r8(const u8* W, const u8* A, float* out, const u8* bias, int btype,     \
                                         int k, int n, int rows) {                                           \
        matvec_blocks<8, WB, AB, QB, DOT>(W, A, out, bias, btype, k, n, rows);                               \
    }
