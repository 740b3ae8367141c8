// The reduction of matvec.wgsl with subgroup operations (native devices with
// `Features::SUBGROUP`; wgpu never reports it in browsers): one subgroupAdd per subgroup, one
// barrier, then invocation 0 adds the subgroups' sums. Correct for any subgroup size and
// layout: each subgroup writes its own slot.
fn reduce_sg(acc: vec4<f32>, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) -> vec4<f32> {
    let s = subgroupAdd(acc);
    if (sg_lane == 0u) {
        red[sg_id] = s;
    }
    workgroupBarrier();
    var t = red[0];
    for (var i = 1u; i < n_sg; i++) {
        t += red[i];
    }
    return t;
}
