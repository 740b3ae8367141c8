//! Embedding, the gated activation, the residual add and taking the last row.

use super::{check, groups, reads_f16, Builder};
use crate::exec::webgpu::kernels::Kernel;
use crate::exec::webgpu::params::{CountParams, EmbedParams, TakeLastParams};
use crate::exec::webgpu::record::Res;
use crate::exec::{Gate, Op};
use crate::quant::GgmlType;
use crate::Result;

/// `Op::Embed` (embed.wgsl): one dispatch per part of the table, each writing the tokens
/// whose rows lie in its part.
pub fn embed(b: &mut Builder, i: usize) -> Result<()> {
    let op = &b.g.ops[i];
    let Op::Embed { table, dst, scale } = *op else { unreachable!("embed launch for {op:?}") };
    let t = b.weight(table);
    check(t.k() == b.g.cols(dst), || format!("embedding '{}' does not fit {op:?}", t.name))?;
    b.embed_rows = Some(t.n_rows);
    let rows = b.g.rows(dst);
    for part in 0..t.parts.len() {
        let (start, count) = t.part_rows(part);
        let p = EmbedParams {
            k: t.k() as u32,
            rows: rows as u32,
            row_bytes: t.row_bytes as u32,
            row_start: start as u32,
            row_end: (start + count) as u32,
            scale,
        };
        let mut bufs = vec![Res::Weight(table.0 as usize, part), Res::Step, Res::Act(dst)];
        if b.f16 && reads_f16(t.dtype) {
            // The f16 view of the table (binding EMBED_WH_BINDING); F16 reads only it.
            bufs.push(bufs[0]);
            if t.dtype == GgmlType::F16 {
                bufs[0] = Res::Unused;
            }
        }
        let label = format!("embed {}", t.dtype);
        b.run(label, Kernel::Embed(t.dtype), &p, bufs, groups((rows * t.k()).div_ceil(64)));
    }
    b.wrote(dst);
    Ok(())
}

/// `Op::GatedAct` (gated_act.wgsl), in place on the gate slot.
pub fn gated_act(b: &mut Builder, i: usize) -> Result<()> {
    let op = &b.g.ops[i];
    let Op::GatedAct { gate, up, act } = *op else { unreachable!("gated_act launch for {op:?}") };
    check(b.n(gate) == b.n(up), || format!("{op:?}: bad slots"))?;
    let n = b.n(gate);
    let kernel = if act == Gate::Silu { Kernel::GatedSilu } else { Kernel::GatedGelu };
    let bufs = vec![Res::Act(gate), Res::Act(up)];
    b.run("gated_act".into(), kernel, &CountParams { n: n as u32 }, bufs, groups(n.div_ceil(64)));
    b.wrote(gate);
    Ok(())
}

/// `Op::Add` (add.wgsl) in place; into a third slot after copying one operand there.
pub fn add(b: &mut Builder, i: usize) -> Result<()> {
    let op = &b.g.ops[i];
    let Op::Add { a, b: b2, dst } = *op else { unreachable!("add launch for {op:?}") };
    check(b.n(a) == b.n(dst) && b.n(b2) == b.n(dst), || format!("{op:?}: bad slots"))?;
    let other = if a == dst {
        b2
    } else if b2 == dst {
        a
    } else {
        b.copy(a, 0, dst, 4 * b.n(a) as u64);
        b2
    };
    check(other != dst, || format!("{op:?}: x + x in place is not supported"))?;
    let n = b.n(dst);
    let bufs = vec![Res::Act(dst), Res::Act(other)];
    b.run("add".into(), Kernel::Add, &CountParams { n: n as u32 }, bufs, groups(n.div_ceil(64)));
    b.wrote(dst);
    Ok(())
}

/// `Op::TakeLast` (take_last.wgsl): each sequence's last row (the rows differ from step to
/// step, so a kernel reading them from the step buffer rather than a recorded copy).
pub fn take_last(b: &mut Builder, i: usize) -> Result<()> {
    let op = &b.g.ops[i];
    let Op::TakeLast { x, dst } = *op else { unreachable!("take_last launch for {op:?}") };
    let g = b.g;
    check(g.cols(x) == g.cols(dst) && g.rows(dst) == g.n_seqs && g.rows(x) == g.n_tokens, || {
        format!("{op:?}: bad slots")
    })?;
    let cols = g.cols(x);
    let p = TakeLastParams { cols: cols as u32, n_tok: g.n_tokens as u32, n_seq: g.n_seqs as u32 };
    let bufs = vec![Res::Step, Res::Act(x), Res::Act(dst)];
    b.run("take_last".into(), Kernel::TakeLast, &p, bufs, groups((g.n_seqs * cols).div_ceil(64)));
    b.wrote(dst);
    Ok(())
}
