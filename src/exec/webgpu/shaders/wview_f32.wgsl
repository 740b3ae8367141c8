// f16 values of the weights without `shader-f16`: words converted by hand (half_f32.wgsl).

// The f16 at an even byte offset.
fn whalf(off: u32) -> f32 {
    return half_lo(ww(off >> 2u) >> ((off & 2u) * 8u));
}

// The two f16 at a 4-byte aligned offset.
fn whalf2(off: u32) -> vec2<f32> {
    return half2(ww(off >> 2u));
}

// The 8 f16 of 16-byte unit u: values 0..4, 4..8.
fn wf16_lo(u: u32) -> vec4<f32> {
    let v = w[u];
    return vec4<f32>(half2(v.x), half2(v.y));
}

fn wf16_hi(u: u32) -> vec4<f32> {
    let v = w[u];
    return vec4<f32>(half2(v.z), half2(v.w));
}
