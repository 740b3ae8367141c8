// Around cuBLAS's products of f16 and bf16 weights (ops/matmul_blas.rs): the activations
// converted to the weights' 16-bit type, and the bias added to the product's rows.

// n values to f16 (bf16 when p.bf16), round to nearest even: the CPU's conversion
// (quant::quantize_row_into) of a dot product's activations for these weights.
extern "C" __global__ void to_halves(const HalvesParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    float v = p.x[i];
    u16 h;
    if (!p.bf16) {
        h = f2h(v);
    } else {
        u32 b = __float_as_uint(v);
        // NaN stays a quiet NaN; others round to nearest, ties to even.
        h = (b & 0x7fffffffu) > 0x7f800000u ? (u16)((b >> 16) | 0x40) : (u16)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
    }
    p.out[i] = h;
}

// out[r][j] += bias[j] for `rows` rows of n (bias: n values of type btype).
extern "C" __global__ void bias_rows(const BiasRowsParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)p.rows * p.n) return;
    int j = (int)(i % p.n);
    p.out[i] += deq(p.btype, p.bias, p.n, j);
}
