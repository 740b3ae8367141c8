// Which elements RoPE rotates together (rope.wgsl, rope_kv.wgsl).

// The two elements element pair i of a head at `base` rotates: adjacent (normal) or half a
// rotation apart (neox).
fn rope_pair(base: u32, i: u32, half_rot: u32, neox: u32) -> vec2<u32> {
    if (neox != 0u) {
        return vec2<u32>(base + i, base + i + half_rot);
    }
    return vec2<u32>(base + 2u * i, base + 2u * i + 1u);
}
