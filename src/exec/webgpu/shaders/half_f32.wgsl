// f16 reads without `shader-f16` (the browser's SwiftShader, adapters without the feature):
// converted by hand, exactly (see f16_to_f32 in common.wgsl).

// The f16 in the low 16 bits of `word`.
fn half_lo(word: u32) -> f32 {
    return f16_to_f32(word & 0xffffu);
}

// The two f16 of `word` (low half first).
fn half2(word: u32) -> vec2<f32> {
    return vec2<f32>(f16_to_f32(word & 0xffffu), f16_to_f32(word >> 16u));
}
