//! Matrix products (matvec.wgsl and its variants): the activations quantized first where the
//! weights are (quantize.wgsl, shared by the products that read the same slot unchanged),
//! then one dispatch per part of the weights; the gate and up products with SiLU, and three
//! products of one input, as one dispatch each (fuse.rs). Prefill steps (from
//! `tiled_from` token rows, quantized weights) run in tiles instead (matmul_tiled.wgsl): the
//! gated pair as the up product and then the gate product with SiLU and the multiply as its
//! epilogue, the three products as three dispatches.

use super::{check, groups, reads_f16, Builder};
use crate::exec::webgpu::kernels::{
    float_type, task_values, tiled_type, ActQuant, Kernel, MatVec, TileShape,
};
use crate::exec::webgpu::params::{MatVecParams, QuantizeParams};
use crate::exec::webgpu::record::Res;
use crate::exec::{ActId, Op, WeightId};
use crate::quant::GgmlType;
use crate::Result;

/// How matrix products are spread over invocations (see `MatVec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatVecMode {
    /// One invocation per weight row (CPU-emulated adapters).
    Rows,
    /// Workgroups of 64 invocations on 1 to 4 rows; `subgroup`: reduce with subgroup operations.
    Coop {
        /// Reduce partial sums with subgroup operations.
        subgroup: bool,
        /// Token rows from which products with quantized weights run in tiles.
        tiled_from: usize,
        /// The tile shape of every tiled product (None: chosen per product).
        tile: Option<(u8, u8)>,
    },
}

/// Weight rows per matvec workgroup for a matrix (part) of `n` rows and `tokens` token rows.
/// Sharing each activation load between weight rows saves little: on an H100 through Vulkan
/// (8b Q4_K_M, same call), one weight row a workgroup decoded at 204.6 tok/s against 182.3 with
/// four (Q8_0 163.6 against 148.7, Q4_0 219.2 against 206.1), more workgroups hiding more
/// latency; prefill (pp512) ran at 653 / 690 / 594 tok/s with one / two / four.
/// `WICK_WEBGPU_MV_ROWS` (1, 2 or 4) caps it, for measuring.
fn coop_rows(n: usize, tokens: usize) -> usize {
    static CAP: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cap = *CAP.get_or_init(|| {
        std::env::var("WICK_WEBGPU_MV_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|r| [1, 2, 4].contains(r))
            .unwrap_or(4)
    });
    let rows = if tokens <= 4 || n < 2048 { 1 } else { 2 };
    rows.min(cap)
}

/// The activations a product reads, as its parameters describe them.
#[derive(Clone, Copy)]
struct Input {
    /// The slot (float weights) or the quantized-activation buffer.
    src: Res,
    /// First 16-byte unit of the block records (quantized).
    recs: usize,
    /// Activation blocks per row (quantized).
    nb: usize,
    /// 16-byte units per activation row.
    avec: usize,
    /// Tasks per weight row.
    tasks: usize,
}

/// The input of product op `i`, after quantizing it if its weights are quantized and the
/// buffer does not hold the slot as it is now.
fn input(b: &mut Builder, i: usize) -> Result<Input> {
    let Op::MatMul { w, x, .. } = b.g.ops[i] else { unreachable!("matmul launch for {:?}", b.g.ops[i]) };
    let wt = b.weight(w);
    let (k, rows) = (wt.k(), b.g.rows(x));
    let aq = ActQuant::for_type(wt.dtype);
    let tv = task_values(wt.dtype);
    check(k % tv == 0, || format!("'{}' ({}): row length {k} is not a multiple of {tv}", wt.name, wt.dtype))?;
    let (src, recs, nb) = match aq {
        None => (Res::Act(x), 0, 0),
        Some(q) => {
            check(k % q.block() == 0, || {
                format!("'{}': row length {k} is not a whole number of blocks", wt.name)
            })?;
            let nblk = rows * k / q.block();
            // Quants (one byte per value), then the block records.
            let meta_words = rows * k / 4;
            b.quant_bytes(q, 4 * (meta_words + nblk * q.meta_words()) as u64);
            if !b.holds_quantized(q, x) {
                let p = QuantizeParams { n_blocks: nblk as u32, recs: meta_words as u32 };
                let bufs = vec![Res::Act(x), Res::Quant(q)];
                let n_groups = nblk.div_ceil(q.blocks_per_group());
                b.run(format!("quantize {q:?} {rows}x{k}"), Kernel::Quantize(q), &p, bufs, groups(n_groups));
                b.quantized(q, x);
            }
            (Res::Quant(q), meta_words / 4, k / q.block())
        }
    };
    let avec = if aq.is_some() { k / 16 } else { k / 4 };
    Ok(Input { src, recs, nb, avec, tasks: k / tv })
}

/// `Op::MatMul`, with the residual add after it as its epilogue where fuse.rs chose that.
pub fn matmul(b: &mut Builder, i: usize) -> Result<()> {
    product(b, i, None)
}

/// Gate product op `i`, the up product after it and the SiLU after that (matvec_gated.wgsl).
pub fn gate_up(b: &mut Builder, i: usize) -> Result<()> {
    match b.g.ops.get(i + 1) {
        Some(&Op::MatMul { w, dst, .. }) => product(b, i, Some((w, dst))),
        _ => product(b, i, None),
    }
}

/// Product op `i`, one dispatch per part of its weights; with `up` (the up matrix and slot),
/// the gated kernel.
fn product(b: &mut Builder, i: usize, up: Option<(WeightId, ActId)>) -> Result<()> {
    let Op::MatMul { w, dst, bias, .. } = b.g.ops[i] else {
        unreachable!("matmul launch for {:?}", b.g.ops[i])
    };
    let wt = b.weight(w);
    let nn = wt.n_rows as usize;
    let bias_res = match bias {
        Some(bw) => {
            let bt = b.weight(bw);
            check(bt.dtype == GgmlType::F32 && bt.bytes() == 4 * nn as u64, || {
                format!("bias '{}' must be F32 of length {nn}", bt.name)
            })?;
            Res::Weight(bw.0 as usize, 0)
        }
        None => Res::Dummy,
    };
    let inp = input(b, i)?;
    let (k, rows) = (wt.k(), b.g.rows(dst));
    let add_into = b.fz.add_into.get(&i).copied();
    if tiled(b, w, rows) {
        let epilogue = match up {
            Some((uw, ud)) => {
                tiles(b, uw, inp, ud, Res::Dummy, Epilogue::Store)?;
                Epilogue::Gate(ud)
            }
            None => add_into.map_or(Epilogue::Store, Epilogue::Add),
        };
        return tiles(b, w, inp, dst, bias_res, epilogue);
    }
    for part in 0..wt.parts.len() {
        let (start, count) = wt.part_rows(part);
        let p = MatVecParams {
            n: count as u32,
            rows: rows as u32,
            row_bytes: wt.row_bytes as u32,
            tasks: inp.tasks as u32,
            n_off: start as u32,
            n_dst: nn as u32,
            has_bias: bias.is_some() as u32,
            recs: inp.recs as u32,
            avec: inp.avec as u32,
            nb: inp.nb as u32,
            add: add_into.is_some() as u32,
            ..Default::default()
        };
        let (mv, n_groups) = match b.mode {
            MatVecMode::Rows => (MatVec::Rows, (count as usize).div_ceil(64)),
            MatVecMode::Coop { subgroup, .. } => {
                let r = coop_rows(count as usize, rows);
                (MatVec::Coop { rows: r as u8, subgroup }, (count as usize).div_ceil(r))
            }
        };
        let mut bufs = vec![Res::Weight(w.0 as usize, part), inp.src, Res::Act(dst), bias_res];
        if b.f16 && reads_f16(wt.dtype) {
            // The f16 view of the weights (binding MATVEC_WH_BINDING); F16 reads only it.
            bufs.push(bufs[0]);
            if wt.dtype == GgmlType::F16 {
                bufs[0] = Res::Unused;
            }
        }
        bufs.resize(5, Res::Unused);
        bufs.push(add_into.map_or(Res::DummyRw, Res::Act));
        let mut kernel = Kernel::MatMul(wt.dtype, mv);
        let mut plus = if add_into.is_some() { " +add" } else { "" };
        if let Some((uw, ud)) = up {
            // Bindings 7 (up matrix), 8 (its f16 view), 9 (up slot); the gated entry point
            // uses no bias or residual.
            bufs[3] = Res::Unused;
            bufs[5] = Res::Unused;
            let u = Res::Weight(uw.0 as usize, 0);
            let uw16 = if matches!(bufs[4], Res::Unused) { Res::Unused } else { u };
            let u_main = if matches!(bufs[0], Res::Unused) { Res::Unused } else { u };
            bufs.extend([u_main, uw16, Res::Act(ud)]);
            kernel = Kernel::MatMulGated(wt.dtype, mv);
            plus = " +up+silu";
        }
        let label = format!("matmul {} {k}x{count} rows {rows}{plus}", wt.dtype);
        b.run(label, kernel, &p, bufs, groups(n_groups));
    }
    b.wrote(dst);
    if let Some(r) = add_into {
        b.wrote(r);
    }
    if let Some((_, ud)) = up {
        b.wrote(ud);
    }
    Ok(())
}

/// Product op `i` and the two after it (same input: Q, K and V) as one dispatch whose
/// workgroups are split between the three matrices (matvec_multi.wgsl).
pub fn triple(b: &mut Builder, i: usize) -> Result<()> {
    let ops = &b.g.ops;
    let (
        Op::MatMul { w, dst, .. },
        Some(&Op::MatMul { w: w2, dst: d2, .. }),
        Some(&Op::MatMul { w: w3, dst: d3, .. }),
        MatVecMode::Coop { subgroup, .. },
    ) = (ops[i].clone(), ops.get(i + 1), ops.get(i + 2), b.mode)
    else {
        return Err(super::err("fusion plan out of step with the graph"));
    };
    if tiled(b, w, b.g.rows(dst)) {
        for j in i..i + 3 {
            product(b, j, None)?;
        }
        return Ok(());
    }
    let inp = input(b, i)?;
    let mats = [(b.weight(w), dst), (b.weight(w2), d2), (b.weight(w3), d3)];
    let (wt, rows) = (mats[0].0, b.g.rows(dst));
    let rows_per = mats.map(|(m, _)| coop_rows(m.n_rows as usize, rows));
    let wgs: Vec<usize> =
        mats.iter().zip(rows_per).map(|((m, _), r)| (m.n_rows as usize).div_ceil(r)).collect();
    let nn = wt.n_rows as usize;
    let p = MatVecParams {
        n: nn as u32,
        rows: rows as u32,
        row_bytes: wt.row_bytes as u32,
        tasks: inp.tasks as u32,
        n_off: 0,
        n_dst: nn as u32,
        has_bias: 0,
        recs: inp.recs as u32,
        avec: inp.avec as u32,
        nb: inp.nb as u32,
        add: 0,
        n_b: mats[1].0.n_rows as u32,
        rb_b: mats[1].0.row_bytes as u32,
        n_c: mats[2].0.n_rows as u32,
        rb_c: mats[2].0.row_bytes as u32,
        g_a: wgs[0] as u32,
        g_b: wgs[1] as u32,
    };
    let mut bufs = Vec::new();
    for (m, (mw, d)) in mats.iter().enumerate() {
        let idx = [w.0, w2.0, w3.0][m] as usize;
        let main = if b.f16 && mw.dtype == GgmlType::F16 { Res::Unused } else { Res::Weight(idx, 0) };
        let view = if b.f16 && reads_f16(mw.dtype) { Res::Weight(idx, 0) } else { Res::Unused };
        if m == 0 {
            // Bindings 1-6: w, x, dst, (bias), wh, (res).
            bufs.extend([main, inp.src, Res::Act(*d), Res::Unused, view, Res::Unused]);
        } else {
            bufs.extend([main, view, Res::Act(*d)]);
        }
    }
    for (_, d) in mats {
        b.wrote(d);
    }
    let types = mats.map(|(m, _)| m.dtype);
    let k = wt.k();
    let label =
        format!("matmul x3 {types:?} {k}x{}/{}/{} rows {rows}", nn, mats[1].0.n_rows, mats[2].0.n_rows);
    let kernel = Kernel::MatMulMulti(types, rows_per.map(|r| r as u8), subgroup);
    b.run(label, kernel, &p, bufs, groups(wgs.iter().sum()));
    Ok(())
}

/// Whether a product with weights `w` over `rows` token rows runs in tiles.
fn tiled(b: &Builder, w: WeightId, rows: usize) -> bool {
    let wt = b.weight(w);
    // Float rows go in stages of 16 values; quantized ones are whole blocks of 32 or more.
    matches!(b.mode, MatVecMode::Coop { tiled_from, .. } if rows >= tiled_from)
        && tiled_type(wt.dtype)
        && (!float_type(wt.dtype) || wt.k().is_multiple_of(16))
}

/// What a tiled product does with its outputs (matmul_tiled.wgsl's `add`).
#[derive(Clone, Copy)]
enum Epilogue {
    /// Store them.
    Store,
    /// Store them and add them into this slot.
    Add(ActId),
    /// Store silu(output) · the value in this slot (the up product of a gated pair).
    Gate(ActId),
}

/// The tiled product of `inp` (quantized for `w`) and the weights `w` into `dst`, one
/// dispatch per part of the weights.
fn tiles(b: &mut Builder, w: WeightId, inp: Input, dst: ActId, bias: Res, epi: Epilogue) -> Result<()> {
    let wt = b.weight(w);
    let (k, rows) = (wt.k(), b.g.rows(dst));
    let (add, res, plus) = match epi {
        Epilogue::Store => (0, Res::DummyRw, ""),
        Epilogue::Add(r) => (1, Res::Act(r), " +add"),
        Epilogue::Gate(u) => (2, Res::Act(u), " +silu*up"),
    };
    let forced = match b.mode {
        MatVecMode::Coop { tile, .. } => tile,
        MatVecMode::Rows => None,
    };
    let float = float_type(wt.dtype);
    for part in 0..wt.parts.len() {
        let (start, count) = wt.part_rows(part);
        let ts = tile_shape(forced, wt.dtype, rows, count as usize, k, b.limits);
        let p = MatVecParams {
            n: count as u32,
            rows: rows as u32,
            row_bytes: wt.row_bytes as u32,
            // Stages of `sp` 16-value pieces (float weights: of 16 values).
            tasks: (k / if float { 16 } else { 16 * ts.sp as usize }) as u32,
            n_off: start as u32,
            n_dst: wt.n_rows as u32,
            has_bias: !matches!(bias, Res::Dummy) as u32,
            recs: inp.recs as u32,
            avec: inp.avec as u32,
            nb: inp.nb as u32,
            add,
            ..Default::default()
        };
        let wres = Res::Weight(w.0 as usize, part);
        let wh = if b.f16 && reads_f16(wt.dtype) && !float { wres } else { Res::Unused };
        let bufs = vec![wres, inp.src, Res::Act(dst), bias, wh, res];
        let label =
            format!("matmul tiled {}x{}x{} {} {k}x{count} rows {rows}{plus}", ts.rt, ts.ct, ts.sp, wt.dtype);
        let grid = (
            (count as usize).div_ceil(16 * ts.ct as usize) as u32,
            rows.div_ceil(16 * ts.rt as usize) as u32,
        );
        b.run(label, Kernel::MatMulTiled(wt.dtype, ts), &p, bufs, grid);
    }
    b.wrote(dst);
    if let Epilogue::Add(r) = epi {
        b.wrote(r);
    }
    Ok(())
}

/// The tile of a tiled product of `rows` token rows, `n` weight rows of type `t` and rows of
/// `k` values: `forced` (RT, CT) if given, else 128 tokens × 64 weight rows where that still
/// makes at least 128 workgroups, else 64 × 64; in stages of 64 values where `k` allows, else
/// 32; shrunk to 64 × 64 (then stages of 32) where the device's workgroup memory holds no
/// larger. On an H200 (8b Q4_K_M pp512) stages of 64 values ran 8% faster than 32, and 128
/// 11% slower than 64 (a third more workgroup memory than one 128 × 64 tile at 64).
fn tile_shape(
    forced: Option<(u8, u8)>,
    t: GgmlType,
    rows: usize,
    n: usize,
    k: usize,
    limits: &wgpu::Limits,
) -> TileShape {
    let (rt, ct) = forced.unwrap_or(if rows.div_ceil(128) * n.div_ceil(64) >= 128 { (8, 4) } else { (4, 4) });
    let fits = |ts: &TileShape| {
        k.is_multiple_of(if float_type(t) { 16 } else { 16 * ts.sp as usize })
            && ts.workgroup_bytes(t) <= limits.max_compute_workgroup_storage_size as usize
    };
    [(rt, ct, 4), (4, 4, 4), (rt, ct, 2)]
        .into_iter()
        .map(|(rt, ct, sp)| TileShape { rt, ct, sp })
        .find(fits)
        .unwrap_or(TileShape { rt: 4, ct: 4, sp: 2 })
}
