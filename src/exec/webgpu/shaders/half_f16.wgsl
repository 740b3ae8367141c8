enable f16;

// With `shader-f16`, bulk f16 data is read through f16-typed bindings (wview_f16.wgsl for
// weights, the KV cache in attention.wgsl) and converted by the hardware. Single f16 values
// inside words are still converted by hand: naga cannot bitcast u32 to vec2<f16>, and
// unpack2x16float may flush f16 subnormals (lavapipe does), which small block scales are.

// The f16 in the low 16 bits of `word`.
fn half_lo(word: u32) -> f32 {
    return f16_to_f32(word & 0xffffu);
}

// The two f16 of `word` (low half first).
fn half2(word: u32) -> vec2<f32> {
    return vec2<f32>(f16_to_f32(word & 0xffffu), f16_to_f32(word >> 16u));
}
