// The matrix-vector frame shared by every quantized type: one warp per output (weight row
// j, activation row blockIdx.y); its lanes take the row's blocks in turn, each block's dot
// product is exact integer arithmetic (dp4a) scaled once, as on the CPU; one warp sum.
// WB/AB: bytes of a weight block and of its activation block; QB: elements per block.
template <int WB, int AB, int QB, float (*DOT)(const u8*, const u8*)>
__device__ __forceinline__ void matvec_blocks(const u8* W, const u8* A, float* out, const u8* bias, int btype,
                                              int k, int n) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int j = blockIdx.x * (blockDim.x / 32) + warp, r = blockIdx.y;
    if (j >= n) return;
    int nb = k / QB;
    const u8* w = W + (long long)j * nb * WB;
    const u8* a = A + (long long)r * nb * AB;
    float acc = 0.0f;
    for (int b = lane; b < nb; b += 32) acc += DOT(w + b * WB, a + b * AB);
    acc = warp_sum(acc);
    if (lane == 0) {
        if (bias) acc += deq(btype, bias, j);
        out[(long long)r * n + j] = acc;
    }
}

#define MATVEC(name, WB, AB, QB, DOT)                                                                        \
    extern "C" __global__ void name(const u8* W, const u8* A, float* out, const u8* bias, int btype, int k,   \
                                    int n) {                                                                 \
        matvec_blocks<WB, AB, QB, DOT>(W, A, out, bias, btype, k, n);                                        \
    }
