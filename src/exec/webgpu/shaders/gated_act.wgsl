// gate = act(gate) · up, in place on gate.

// The parameters: `CountParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;

// ggml's GELU (tanh approximation), evaluated on f16 values as its lookup table does.
fn gelu(x0: f32) -> f32 {
    if (x0 <= -10.0) {
        return 0.0;
    }
    if (x0 >= 10.0) {
        return x0;
    }
    let x = f16_round(x0);
    let y = 0.5 * x * (1.0 + tanh(0.7978846 * x * (1.0 + 0.044715 * x * x)));
    return f16_round(y);
}

@compute @workgroup_size(64)
fn gated_silu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid) * 64u + lid;
    if (i < p.n) {
        let g = gate[i];
        gate[i] = g / (1.0 + exp(-g)) * up[i];
    }
}

@compute @workgroup_size(64)
fn gated_gelu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid) * 64u + lid;
    if (i < p.n) {
        gate[i] = gelu(gate[i]) * up[i];
    }
}
