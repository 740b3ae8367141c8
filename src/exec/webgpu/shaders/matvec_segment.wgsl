// One matrix's share of matvec_multi.wgsl (seg_1, seg_2, seg_3; SEG_N: its row count).
fn seg_{{SEG}}(g: u32, lid: u32{{SG_PARAMS}}) {
    let j0 = g * {{ROWS}};
    if (j0 >= {{SEG_N}}) {
        return;
    }
    let last = {{SEG_N}} - 1u;
    {{ROW_OFFSETS}}
    for (var r = 0u; r < p.rows; r++) {
        var acc = vec4<f32>(0.0);
        for (var t = lid; t < p.tasks; t += WG) {
            let act = {{ACT}}(r, t);
            {{ACCUMULATE}}
        }
        let tot = {{REDUCE}};
        if (lid == 0u) {
            {{STORES}}
        }
        workgroupBarrier();
    }
}
