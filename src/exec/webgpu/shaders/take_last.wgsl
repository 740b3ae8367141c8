// Op::TakeLast: row s of dst = the row of x of sequence s's last token (step.wgsl: past the
// step's sequences, the step's last token). One invocation per value.

// The parameters: `TakeLastParams` (params.rs), declared once for Rust and WGSL.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(64)
fn take_last(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid) * 64u + lid;
    if (i >= p.n_seq * p.cols) {
        return;
    }
    let s = i / p.cols;
    dst[i] = x[step_last(s) * p.cols + i % p.cols];
}
