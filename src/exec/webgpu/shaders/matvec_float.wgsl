// Tasks of the float formats (see matvec.wgsl): 16 weight bytes each (4 F32 or 8 F16/BF16
// values, one aligned load; rows must be a multiple of 4 or 8 values long). The activations
// are f32, rounded to f16 (bf16) first for F16 (BF16) weights as the CPU reference converts
// them; products and sums in f32.

fn act_f32(r: u32, t: u32) -> Act {
    var x: Act;
    x.q0 = a[r * p.avec + t];
    return x;
}

fn dot_f32(ro: u32, t: u32, x: Act) -> f32 {
    return dot(bitcast<vec4<f32>>(w[ro / 16u + t]), bitcast<vec4<f32>>(x.q0));
}

fn act_f16(r: u32, t: u32) -> Act {
    let u = r * p.avec + 2u * t;
    var x: Act;
    let v0 = bitcast<vec4<f32>>(a[u]);
    let v1 = bitcast<vec4<f32>>(a[u + 1u]);
    x.q0 = bitcast<vec4<u32>>(vec4<f32>(f16_round(v0.x), f16_round(v0.y), f16_round(v0.z), f16_round(v0.w)));
    x.q1 = bitcast<vec4<u32>>(vec4<f32>(f16_round(v1.x), f16_round(v1.y), f16_round(v1.z), f16_round(v1.w)));
    return x;
}

fn dot_f16(ro: u32, t: u32, x: Act) -> f32 {
    let u = ro / 16u + t;
    return dot(wf16_lo(u), bitcast<vec4<f32>>(x.q0)) + dot(wf16_hi(u), bitcast<vec4<f32>>(x.q1));
}

fn act_bf16(r: u32, t: u32) -> Act {
    let u = r * p.avec + 2u * t;
    var x: Act;
    let v0 = bitcast<vec4<f32>>(a[u]);
    let v1 = bitcast<vec4<f32>>(a[u + 1u]);
    x.q0 = bitcast<vec4<u32>>(vec4<f32>(bf16_round(v0.x), bf16_round(v0.y), bf16_round(v0.z), bf16_round(v0.w)));
    x.q1 = bitcast<vec4<u32>>(vec4<f32>(bf16_round(v1.x), bf16_round(v1.y), bf16_round(v1.z), bf16_round(v1.w)));
    return x;
}

// The two bf16 of a word as f32.
fn bf2(v: u32) -> vec2<f32> {
    return bitcast<vec2<f32>>(vec2<u32>(v << 16u, v & 0xffff0000u));
}

fn dot_bf16(ro: u32, t: u32, x: Act) -> f32 {
    let v = w[ro / 16u + t];
    let w0 = vec4<f32>(bf2(v.x), bf2(v.y));
    let w1 = vec4<f32>(bf2(v.z), bf2(v.w));
    return dot(w0, bitcast<vec4<f32>>(x.q0)) + dot(w1, bitcast<vec4<f32>>(x.q1));
}
