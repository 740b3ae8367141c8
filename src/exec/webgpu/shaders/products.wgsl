// What the matrix-product kernels share (matvec.wgsl and its variants, matmul_tiled.wgsl):
// the parameters (`MatVecParams`, params.rs, declared once for Rust and WGSL), the bindings
// and the packed dot product. The weights' f16 view (binding 5) comes with weights.wgsl.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> a: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> res: array<f32>;

// Sum of four dot products of four signed bytes.
fn dot16(w4: vec4<u32>, a4: vec4<u32>) -> i32 {
    return dot4I8Packed(w4.x, a4.x) + dot4I8Packed(w4.y, a4.y) + dot4I8Packed(w4.z, a4.z)
        + dot4I8Packed(w4.w, a4.w);
}
