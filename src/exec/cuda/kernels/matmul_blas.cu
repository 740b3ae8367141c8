// Around cuBLAS's products of f16 and bf16 weights (ops/matmul_blas.rs): the activations
// converted to the weights' 16-bit type, and the bias added to the product's rows.

#ifdef MOD_quantize
// n values to f16 (bf16 when p.bf16, by matmul_float.cu's bf16r), round to nearest even: the
// CPU's conversion (quant::quantize_row_into) of a dot product's activations for these weights.
extern "C" __global__ void to_halves(const HalvesParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    float v = p.x[i];
    p.out[i] = p.bf16 ? (u16)(__float_as_uint(bf16r(v)) >> 16) : f2h(v);
}

// n activations to the f16 values of their q8 conversion, d·q rounded to nearest: the values
// the CPU's and the int8 tiles' products multiply (q8_0 and q8_1 per 32 values with d rounded
// to f16; with p.k256, q8_K per 256 with an f32 d), for cuBLAS's products of dequantized
// weights. 256 threads a block: a warp a 32-value block, or the block one 256-value block
// (n is a multiple of 256 then, of 32 otherwise).
extern "C" __global__ void q8_halves(const Q8HalvesParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float d;
    if (p.k256) {
        int q = q8_k_value(p.x[i], &d);
        p.out[i] = f2h(d * (float)q);
    } else {
        if (i >= p.n) return;
        int q = q8_0_value(p.x[i], &d);
        p.out[i] = f2h(f16r(d) * (float)q);
    }
}

// out[r][j] += bias[j] for `rows` rows of n (bias: n values of type btype).
extern "C" __global__ void bias_rows(const BiasRowsParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)p.rows * p.n) return;
    int j = (int)(i % p.n);
    p.out[i] += deq(p.btype, p.bias, p.n, j);
}
#endif
