// f16 values of the weights with `shader-f16`: the weight buffer bound a second time as f16
// (binding WH_BINDING), read and converted by the hardware: 4 f16 per 8-byte load.

@group(0) @binding({{WH_BINDING}}) var<storage, read> wh: array<vec4<f16>>;

// The f16 at an even byte offset.
fn whalf(off: u32) -> f32 {
    return f32(wh[off >> 3u][(off >> 1u) & 3u]);
}

// The two f16 at a 4-byte aligned offset.
fn whalf2(off: u32) -> vec2<f32> {
    let h = wh[off >> 3u];
    return select(vec2<f32>(h.xy), vec2<f32>(h.zw), (off & 4u) != 0u);
}

// The 8 f16 of 16-byte unit u: values 0..4, 4..8.
fn wf16_lo(u: u32) -> vec4<f32> {
    return vec4<f32>(wh[2u * u]);
}

fn wf16_hi(u: u32) -> vec4<f32> {
    return vec4<f32>(wh[2u * u + 1u]);
}
