enable f16;

// f16 reads with `shader-f16`: one hardware conversion per value instead of ~10 integer
// operations. Every f16 the kernels read goes through these two functions: block scales
// (d, dmin) of the quantized weights, F16 weights and norms, and the f16 KV cache.

// The f16 in the low 16 bits of `word`.
fn half_lo(word: u32) -> f32 {
    let h = bitcast<vec2<f16>>(word);
    return f32(h.x);
}

// The two f16 of `word` (low half first).
fn half2(word: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<vec2<f16>>(word));
}
