// Three products of the same activations in one dispatch (Q, K and V; fuse.rs): the
// workgroups form three consecutive ranges, one per matrix (p.g_a, p.g_b, the rest), and each
// runs the matvec loop of its matrix's type and row count. Matrices 2 and 3 are read through
// copies of the weight functions renamed with `_2` and `_3` suffixes. No bias, one part each.

@group(0) @binding(7) var<storage, read> w2: array<vec4<u32>>;
@group(0) @binding(9) var<storage, read_write> dst2: array<f32>;
@group(0) @binding(10) var<storage, read> w3: array<vec4<u32>>;
@group(0) @binding(12) var<storage, read_write> dst3: array<f32>;

fn store_1(r: u32, j: u32, v: f32) {
    if (j < p.n) {
        dst[r * p.n + j] = v;
    }
}

fn store_2(r: u32, j: u32, v: f32) {
    if (j < p.n_b) {
        dst2[r * p.n_b + j] = v;
    }
}

fn store_3(r: u32, j: u32, v: f32) {
    if (j < p.n_c) {
        dst3[r * p.n_c + j] = v;
    }
}

{{SEGMENTS}}

@compute @workgroup_size(64)
fn main_multi(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32{{SG_ARGS}}) {
    let g = wg_index(wid);
    if (g < p.g_a) {
        seg_1(g, lid{{SG_PASS}});
    } else if (g < p.g_a + p.g_b) {
        seg_2(g - p.g_a, lid{{SG_PASS}});
    } else {
        seg_3(g - p.g_a - p.g_b, lid{{SG_PASS}});
    }
}
