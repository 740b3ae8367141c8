// The epilogue of the tiled products (matmul_tiled.wgsl, matmul_tiled_float.wgsl): output
// (r, j) of the tile's part, with the bias, then by `p.add`: 0 stored, 1 stored and added into
// `res` (the residual), 2 the gate of a SiLU-gated pair: dst := silu(x · Wᵀ) · res, `res`
// holding the up product (computed first). Outputs past the rows or the part are dropped.
fn store(r: u32, j: u32, v: f32) {
    if (r < p.rows && j < p.n) {
        var o = v;
        if (p.has_bias != 0u) {
            o += bias[p.n_off + j];
        }
        let i = r * p.n_dst + p.n_off + j;
        if (p.add == 2u) {
            o = o / (1.0 + exp(-o)) * res[i];
        }
        dst[i] = o;
        if (p.add == 1u) {
            res[i] = res[i] + o;
        }
    }
}

