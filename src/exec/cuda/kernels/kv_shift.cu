// Context shift: rotate the f16 keys of a few cache blocks by the angle of `delta` positions
// (exec/kv_shift.rs), one layer a launch. Compiled after rope.cu in the same module: the angle
// is rope_cos_sin's (same roundings as the forward pass), at the (negative) delta, with mscale
// 1 (a pure rotation). One block per (moved row, KV head); the threads take its pairs in turn.
extern "C" __global__ void kv_shift(const KvShiftParams p) {
    const int r = blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads;
    const long long row = (long long)p.blocks[r / 64] * 64 + r % 64;
    u16* head = p.kc + row * p.k_dim + (long long)h * p.head_dim;
    const RopeAngles a = rope_angles(p);
    for (int i = threadIdx.x; i < p.n_rot / 2; i += blockDim.x) {
        float cs, sn;
        rope_cos_sin(a, p.delta, i, &cs, &sn);
        const int ia = p.neox ? i : 2 * i, ib = p.neox ? i + p.n_rot / 2 : 2 * i + 1;
        const float x0 = h2f(head[ia]), x1 = h2f(head[ib]);
        head[ia] = f2h(x0 * cs - x1 * sn);
        head[ib] = f2h(x0 * sn + x1 * cs);
    }
}
