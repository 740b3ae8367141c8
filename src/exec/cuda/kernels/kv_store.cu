// Append rows of k (or v) to an f16 cache at positions pos.. : one thread per element.
extern "C" __global__ void kv_store(const float* src, u16* cache, const int* posp, int dim, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) cache[(long long)*posp * dim + i] = f2h(src[i]);
}
