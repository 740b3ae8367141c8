//! Compiling a [`Graph`] into a recorded step: buffers, per-dispatch parameters, bind groups
//! and the list of dispatches and copies that `run` replays into one command encoder.

use std::collections::HashMap;
use std::num::NonZeroU64;

use super::buffers::{err, GpuKv, GpuWeight};
use super::fuse;
use super::pipelines::{task_values, ActQuant, Kernel, MatVec, Pipelines, SUPPORTED};
use super::profile::StepQueries;
use crate::exec::{ActId, Gate, Graph, Op, RopeMode};
use crate::quant::GgmlType;
use crate::Result;

/// Workgroup grid for `n` workgroups: x at most 32768 (`wg_index` in common.wgsl).
fn groups(n: usize) -> (u32, u32) {
    if n <= 32768 {
        (n as u32, 1)
    } else {
        (32768, n.div_ceil(32768) as u32)
    }
}

/// Bytes of a dispatch's parameter binding (its slot in the uniform buffer is at least 256).
const PARAMS_BYTES: u64 = 128;

/// How matrix products are spread over invocations (see `MatVec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatVecMode {
    /// One invocation per weight row (CPU-emulated adapters).
    Rows,
    /// Workgroups of 64 invocations on 1 to 4 rows; `subgroup`: reduce with subgroup operations.
    Coop { subgroup: bool },
}

/// Weight rows per matvec workgroup for a matrix (part) of `n` rows: up to 4 (sharing each
/// activation load between rows), but at least ~1024 workgroups where the matrix allows, so
/// that a large GPU (an H100 has 132 SMs, 16 or more workgroups of 64 resident on each) has
/// enough of them in flight to cover memory latency.
fn coop_rows(n: usize) -> usize {
    match n {
        0..2048 => 1,
        2048..4096 => 2,
        _ => 4,
    }
}

/// Whether kernels for weights of type `t` read f16 values of the weights (then, with
/// `shader-f16`, through a second, f16-typed binding of the same buffer).
fn reads_f16(t: GgmlType) -> bool {
    !matches!(t, GgmlType::F32 | GgmlType::BF16)
}

/// One recorded command.
enum Cmd {
    Dispatch {
        pipe: wgpu::ComputePipeline,
        bind: wgpu::BindGroup,
        groups: (u32, u32),
    },
    /// A dispatch whose bind group names the KV cache: index into the per-cache bind groups.
    KvDispatch {
        pipe: wgpu::ComputePipeline,
        bind: usize,
        groups: (u32, u32),
    },
    Copy {
        src: usize,
        src_off: u64,
        dst: usize,
        dst_off: u64,
        size: u64,
    },
}

/// What a KV bind group binds (built per cache at its first run).
enum KvUse {
    Store {
        src: ActId,
        layer: usize,
        value: bool,
    },
    /// RoPE of `q` and `k` and the store of `k` and `v` (fuse.rs).
    RopeStore {
        q: ActId,
        k: ActId,
        v: ActId,
        layer: usize,
    },
    Attend {
        q: ActId,
        dst: ActId,
        layer: usize,
        k_dim: usize,
    },
}

struct KvBind {
    what: KvUse,
    layout: wgpu::BindGroupLayout,
    params: u64,
}

/// A compiled graph.
pub struct Plan {
    pub graph: Graph,
    acts: Vec<wgpu::Buffer>,
    /// [pos, token ids...] for the step, written by `run`.
    pub step: wgpu::Buffer,
    params: wgpu::Buffer,
    cmds: Vec<Cmd>,
    kv_binds: Vec<KvBind>,
    bound: HashMap<u32, Vec<wgpu::BindGroup>>,
    argmax: (wgpu::ComputePipeline, wgpu::BindGroup),
    argmax_out: wgpu::Buffer,
    pub argmax_read: wgpu::Buffer,
    pub logits_read: wgpu::Buffer,
    /// Bytes of logits (the readback buffer may be longer).
    pub logits_bytes: u64,
    /// Rows of the embedding table (token ids must be below), if the graph embeds.
    pub embed_rows: Option<u64>,
    /// What each command is (for the profile).
    pub labels: Vec<String>,
    /// Timestamp queries, when profiling on an adapter that has them.
    pub queries: Option<StepQueries>,
    /// The next step, recorded while the GPU ran the last one: (cache, argmax, commands).
    /// Steps differ only in the contents of `step`, so their commands are the same.
    pub ahead: Option<(u32, bool, wgpu::CommandBuffer)>,
}

/// A deferred dispatch: parameters are pushed first, bind groups made once the uniform
/// buffer exists.
struct Pending {
    label: String,
    kernel: Kernel,
    params: u64,
    bufs: Vec<Res>,
    groups: (u32, u32),
}

/// A buffer named before the buffers are all made.
#[derive(Clone, Copy)]
enum Res {
    Act(ActId),
    Weight(usize, usize),
    Step,
    Dummy,
    /// A small buffer for unused read_write bindings (a buffer may not be bound both ways).
    DummyRw,
    /// No buffer at this binding (the kernel does not use it).
    Unused,
    Quant(ActQuant),
}

enum Item {
    Run(Pending),
    Kv { label: String, kernel: Kernel, bind: usize, groups: (u32, u32) },
    Copy { src: ActId, src_off: u64, dst: ActId, size: u64 },
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(err(what()))
    }
}

/// Compile `g` against `weights`.
#[allow(clippy::too_many_arguments)]
pub fn compile(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    pipes: &mut Pipelines,
    weights: &[GpuWeight],
    dummy: &wgpu::Buffer,
    limits: &wgpu::Limits,
    coop: MatVecMode,
    profile: bool,
    fusing: bool,
    g: &Graph,
) -> Result<Plan> {
    let w_ok = |w: crate::exec::WeightId| (w.0 as usize) < weights.len();
    let a_ok = |a: ActId| (a.0 as usize) < g.acts.len();
    check(a_ok(g.logits), || "graph logits slot out of range".into())?;
    let slot = (limits.min_uniform_buffer_offset_alignment as u64).max(256);
    let mut params: Vec<u8> = Vec::new();
    let mut push = |words: &[u32]| -> u64 {
        let off = params.len() as u64;
        let mut block = vec![0u8; slot as usize];
        for (i, w) in words.iter().enumerate() {
            block[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        params.extend_from_slice(&block);
        off
    };
    let mut items: Vec<Item> = Vec::new();
    let mut kv_uses: Vec<(KvUse, Kernel, u64)> = Vec::new();
    let mut version = vec![0u64; g.acts.len()];
    let mut qstate: HashMap<ActQuant, Option<(ActId, u64)>> = HashMap::new();
    let mut qsize: HashMap<ActQuant, u64> = HashMap::new();
    let mut embed_rows = None;
    let f16 = pipes.f16();
    let n = |a: ActId| g.rows(a) * g.cols(a);
    let quantized = |op: &Op| match *op {
        Op::MatMul { w, x, .. } => {
            w_ok(w) && ActQuant::for_type(weights[w.0 as usize].dtype).is_some() && g.cols(x) % 256 == 0
        }
        _ => false,
    };
    let pair = |a: &Op, b: &Op| match (a, b) {
        (&Op::MatMul { w: w1, .. }, &Op::MatMul { w: w2, .. }) if w_ok(w1) && w_ok(w2) => {
            let (a, b) = (&weights[w1.0 as usize], &weights[w2.0 as usize]);
            matches!(coop, MatVecMode::Coop { .. })
                && a.dtype == b.dtype
                && a.dims == b.dims
                && a.parts.len() == 1
                && b.parts.len() == 1
        }
        _ => false,
    };
    let triple = |ops: &[Op]| {
        let mut ws = Vec::new();
        for op in ops {
            let Op::MatMul { w, x, dst, .. } = *op else { return false };
            if !w_ok(w) || !a_ok(x) || !a_ok(dst) {
                return false;
            }
            let wt = &weights[w.0 as usize];
            let fits = wt.k() == g.cols(x) && wt.n_rows as usize == g.cols(dst) && g.rows(x) == g.rows(dst);
            if !fits || wt.parts.len() != 1 {
                return false;
            }
            ws.push(wt);
        }
        let aq = ActQuant::for_type(ws[0].dtype);
        // Natively and with `shader-f16` only: the only combination measured on a GPU (an
        // H100's op tests of the f32 path did not finish in time with it; see fuse.rs).
        matches!(coop, MatVecMode::Coop { .. })
            && f16
            && cfg!(not(target_arch = "wasm32"))
            && limits.max_storage_buffers_per_shader_stage >= 10
            && aq.is_some()
            && ws.iter().all(|w| {
                ActQuant::for_type(w.dtype) == aq
                    && task_values(w.dtype) == task_values(ws[0].dtype)
                    && w.k() % aq.map_or(1, |q| q.block()) == 0
            })
    };
    let fz = if fusing { fuse::plan(g, quantized, pair, triple) } else { fuse::Fusions::default() };

    for (i, op) in g.ops.iter().enumerate() {
        if fz.skip.contains(&i) {
            continue;
        }
        match *op {
            Op::Embed { table, dst, scale } => {
                check(w_ok(table) && a_ok(dst), || format!("{op:?}: unknown weight or slot"))?;
                let t = &weights[table.0 as usize];
                check(t.k() == g.cols(dst), || format!("embedding '{}' does not fit {op:?}", t.name))?;
                embed_rows = Some(t.n_rows);
                let rows = g.rows(dst);
                for p in 0..t.parts.len() {
                    let (start, count) = t.part_rows(p);
                    let off = push(&[
                        t.k() as u32,
                        rows as u32,
                        t.row_bytes as u32,
                        start as u32,
                        (start + count) as u32,
                        scale.to_bits(),
                    ]);
                    let mut bufs = vec![Res::Weight(table.0 as usize, p), Res::Step, Res::Act(dst)];
                    if f16 && reads_f16(t.dtype) {
                        // The f16 view of the table (binding EMBED_WH_BINDING); F16 reads only it.
                        bufs.push(bufs[0]);
                        if t.dtype == GgmlType::F16 {
                            bufs[0] = Res::Unused;
                        }
                    }
                    items.push(Item::Run(Pending {
                        label: format!("embed {}", t.dtype),
                        kernel: Kernel::Embed(t.dtype),
                        params: off,
                        bufs,
                        groups: groups((rows * t.k()).div_ceil(64)),
                    }));
                }
                version[dst.0 as usize] += 1;
            }
            Op::RmsNorm { x, weight, dst, group, eps } => {
                check(w_ok(weight) && a_ok(x) && a_ok(dst), || format!("{op:?}: unknown weight or slot"))?;
                let w = &weights[weight.0 as usize];
                check(
                    matches!(w.dtype, GgmlType::F32 | GgmlType::F16)
                        && w.bytes() / w.dtype.type_size() as u64 == group as u64
                        && group > 0
                        && g.cols(x).is_multiple_of(group)
                        && n(x) == n(dst),
                    || format!("RMSNorm weight '{}' ({:?} {}) does not fit {op:?}", w.name, w.dims, w.dtype),
                )?;
                let n_groups = n(dst) / group;
                let next_q = match g.ops.get(i + 1) {
                    Some(&Op::MatMul { w: mw, .. }) if fz.norm_quant.contains(&i) => {
                        ActQuant::for_type(weights[mw.0 as usize].dtype)
                    }
                    _ => None,
                };
                if let Some(q) = next_q {
                    // Normalize and quantize in one dispatch (norm_quant.wgsl).
                    let vals = n(dst);
                    let meta_words = vals / 4;
                    let need = 4 * (meta_words + vals / q.block() * q.meta_words()) as u64;
                    let e = qsize.entry(q).or_insert(0);
                    *e = (*e).max(need);
                    let off = push(&[
                        group as u32,
                        (vals / 256) as u32,
                        eps.to_bits(),
                        (w.dtype == GgmlType::F16) as u32,
                        meta_words as u32,
                    ]);
                    items.push(Item::Run(Pending {
                        label: format!("norm_quant {q:?} {group}x{n_groups}"),
                        kernel: Kernel::NormQuant(q),
                        params: off,
                        bufs: vec![
                            Res::Weight(weight.0 as usize, 0),
                            Res::Act(dst),
                            Res::Act(x),
                            Res::Quant(q),
                        ],
                        groups: groups(vals / 256),
                    }));
                    version[dst.0 as usize] += 1;
                    qstate.insert(q, Some((dst, version[dst.0 as usize])));
                    continue;
                }
                let off =
                    push(&[group as u32, n_groups as u32, eps.to_bits(), (w.dtype == GgmlType::F16) as u32]);
                items.push(Item::Run(Pending {
                    label: format!("rms_norm {group}x{n_groups}"),
                    kernel: Kernel::RmsNorm(x != dst),
                    params: off,
                    bufs: if x != dst {
                        vec![Res::Weight(weight.0 as usize, 0), Res::Act(dst), Res::Act(x)]
                    } else {
                        vec![Res::Weight(weight.0 as usize, 0), Res::Act(dst)]
                    },
                    groups: groups(n_groups),
                }));
                version[dst.0 as usize] += 1;
            }
            Op::MatMul { w, x, dst, bias } => {
                check(w_ok(w) && a_ok(x) && a_ok(dst) && bias.is_none_or(w_ok), || {
                    format!("{op:?}: unknown weight or slot")
                })?;
                check(x != dst, || format!("{op:?} reads and writes the same slot"))?;
                let wt = &weights[w.0 as usize];
                let (k, nn, rows) = (wt.k(), wt.n_rows as usize, g.rows(x));
                check(k == g.cols(x) && nn == g.cols(dst) && rows == g.rows(dst), || {
                    format!(
                        "matmul with '{}' ({:?}) does not fit {}x{} -> {}x{}",
                        wt.name,
                        wt.dims,
                        rows,
                        g.cols(x),
                        g.rows(dst),
                        g.cols(dst)
                    )
                })?;
                let bias_res = match bias {
                    Some(b) => {
                        let bw = &weights[b.0 as usize];
                        check(bw.dtype == GgmlType::F32 && bw.bytes() == 4 * nn as u64, || {
                            format!("bias '{}' must be F32 of length {nn}", bw.name)
                        })?;
                        Res::Weight(b.0 as usize, 0)
                    }
                    None => Res::Dummy,
                };
                let aq = ActQuant::for_type(wt.dtype);
                let tv = task_values(wt.dtype);
                check(k % tv == 0, || {
                    format!("'{}' ({}): row length {k} is not a multiple of {tv}", wt.name, wt.dtype)
                })?;
                let (src, meta, nb) = match aq {
                    None => (Res::Act(x), 0, 0),
                    Some(q) => {
                        check(k % q.block() == 0, || {
                            format!("'{}': row length {k} is not a whole number of blocks", wt.name)
                        })?;
                        let nblk = rows * k / q.block();
                        // Quants (one byte per value), then the block records.
                        let meta_words = rows * k / 4;
                        let need = 4 * (meta_words + nblk * q.meta_words()) as u64;
                        let e = qsize.entry(q).or_insert(0);
                        *e = (*e).max(need);
                        let cur = Some((x, version[x.0 as usize]));
                        if qstate.get(&q).copied().flatten() != cur {
                            let off = push(&[nblk as u32, meta_words as u32]);
                            items.push(Item::Run(Pending {
                                label: format!("quantize {q:?} {rows}x{k}"),
                                kernel: Kernel::Quantize(q),
                                params: off,
                                bufs: vec![Res::Act(x), Res::Quant(q)],
                                groups: groups(nblk.div_ceil(q.blocks_per_group())),
                            }));
                            qstate.insert(q, cur);
                        }
                        (Res::Quant(q), meta_words / 4, k / q.block())
                    }
                };
                let avec = if aq.is_some() { k / 16 } else { k / 4 };
                if fz.triple.contains(&i) {
                    // Three products of x in one dispatch (matvec_multi.wgsl).
                    let (Some(&Op::MatMul { w: w2, dst: d2, .. }), Some(&Op::MatMul { w: w3, dst: d3, .. })) =
                        (g.ops.get(i + 1), g.ops.get(i + 2))
                    else {
                        return Err(err("fusion plan out of step with the graph"));
                    };
                    let mats = [(wt, dst), (&weights[w2.0 as usize], d2), (&weights[w3.0 as usize], d3)];
                    let MatVecMode::Coop { subgroup } = coop else {
                        return Err(err("fusion plan out of step with the graph"));
                    };
                    let rows_per = mats.map(|(m, _)| coop_rows(m.n_rows as usize));
                    let wgs: Vec<usize> = mats
                        .iter()
                        .zip(rows_per)
                        .map(|((m, _), r)| (m.n_rows as usize).div_ceil(r))
                        .collect();
                    let off = push(&[
                        nn as u32,
                        rows as u32,
                        wt.row_bytes as u32,
                        (k / tv) as u32,
                        0,
                        nn as u32,
                        0,
                        meta as u32,
                        avec as u32,
                        nb as u32,
                        0,
                        mats[1].0.n_rows as u32,
                        mats[1].0.row_bytes as u32,
                        mats[2].0.n_rows as u32,
                        mats[2].0.row_bytes as u32,
                        wgs[0] as u32,
                        wgs[1] as u32,
                    ]);
                    let mut bufs = Vec::new();
                    for (m, (mw, d)) in mats.iter().enumerate() {
                        let idx = [w.0, w2.0, w3.0][m] as usize;
                        let main =
                            if f16 && mw.dtype == GgmlType::F16 { Res::Unused } else { Res::Weight(idx, 0) };
                        let view = if f16 && reads_f16(mw.dtype) { Res::Weight(idx, 0) } else { Res::Unused };
                        if m == 0 {
                            // Bindings 1-6: w, x, dst, (bias), wh, (res).
                            bufs.extend([main, src, Res::Act(*d), Res::Unused, view, Res::Unused]);
                        } else {
                            bufs.extend([main, view, Res::Act(*d)]);
                        }
                        version[d.0 as usize] += 1;
                    }
                    let types = mats.map(|(m, _)| m.dtype);
                    items.push(Item::Run(Pending {
                        label: format!(
                            "matmul x3 {types:?} {k}x{}/{}/{} rows {rows}",
                            nn, mats[1].0.n_rows, mats[2].0.n_rows
                        ),
                        kernel: Kernel::MatMulMulti(types, rows_per.map(|r| r as u8), subgroup),
                        params: off,
                        bufs,
                        groups: groups(wgs.iter().sum()),
                    }));
                    continue;
                }
                let add_into = fz.add_into.get(&i).copied();
                // With the gate/up fusion: the up matrix and slot.
                let up = match g.ops.get(i + 1) {
                    Some(&Op::MatMul { w: uw, dst: ud, .. }) if fz.gate_up.contains(&i) => Some((uw, ud)),
                    _ => None,
                };
                for p in 0..wt.parts.len() {
                    let (start, count) = wt.part_rows(p);
                    let off = push(&[
                        count as u32,
                        rows as u32,
                        wt.row_bytes as u32,
                        (k / tv) as u32,
                        start as u32,
                        nn as u32,
                        bias.is_some() as u32,
                        meta as u32,
                        avec as u32,
                        nb as u32,
                        add_into.is_some() as u32,
                    ]);
                    let (mv, n_groups) = match coop {
                        MatVecMode::Rows => (MatVec::Rows, (count as usize).div_ceil(64)),
                        MatVecMode::Coop { subgroup } => {
                            let r = coop_rows(count as usize);
                            (MatVec::Coop { rows: r as u8, subgroup }, (count as usize).div_ceil(r))
                        }
                    };
                    let mut bufs = vec![Res::Weight(w.0 as usize, p), src, Res::Act(dst), bias_res];
                    if f16 && reads_f16(wt.dtype) {
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
                        // Bindings 7 (up matrix), 8 (its f16 view), 9 (up slot); the gated
                        // entry point uses no bias or residual.
                        bufs[3] = Res::Unused;
                        bufs[5] = Res::Unused;
                        let u = Res::Weight(uw.0 as usize, 0);
                        let f16_view = bufs[4];
                        let uw16 = if matches!(f16_view, Res::Unused) { Res::Unused } else { u };
                        let u_main = if matches!(bufs[0], Res::Unused) { Res::Unused } else { u };
                        bufs.extend([u_main, uw16, Res::Act(ud)]);
                        kernel = Kernel::MatMulGated(wt.dtype, mv);
                        plus = " +up+silu";
                    }
                    items.push(Item::Run(Pending {
                        label: format!("matmul {} {k}x{count} rows {rows}{plus}", wt.dtype),
                        kernel,
                        params: off,
                        bufs,
                        groups: groups(n_groups),
                    }));
                }
                version[dst.0 as usize] += 1;
                if let Some(r) = add_into {
                    version[r.0 as usize] += 1;
                }
                if let Some((_, ud)) = up {
                    version[ud.0 as usize] += 1;
                }
            }
            Op::Rope { x, n_heads, head_dim, n_rot, base, freq_scale, mode } => {
                check(a_ok(x), || format!("{op:?}: unknown slot"))?;
                check(n_rot <= head_dim && n_rot % 2 == 0 && n_heads * head_dim <= g.cols(x), || {
                    format!("{op:?} does not fit its slot")
                })?;
                let rows = g.rows(x);
                let theta_scale = base.powf(-2.0 / n_rot as f32);
                if let (true, Some(&Op::KvStore { layer, k, v })) =
                    (fz.rope_kv.contains(&i), g.ops.get(i + 2))
                {
                    // RoPE of queries (x) and keys, and the KV store (rope_kv.wgsl).
                    let (kd, vd) = (g.cols(k), g.cols(v));
                    let off = push(&[
                        n_heads as u32,
                        head_dim as u32,
                        n_rot as u32,
                        rows as u32,
                        theta_scale.to_bits(),
                        freq_scale.to_bits(),
                        (mode == RopeMode::Neox) as u32,
                        g.cols(x) as u32,
                        kd as u32,
                        vd as u32,
                    ]);
                    kv_uses.push((KvUse::RopeStore { q: x, k, v, layer }, Kernel::RopeKv, off));
                    items.push(Item::Kv {
                        label: "rope_kv".into(),
                        kernel: Kernel::RopeKv,
                        bind: kv_uses.len() - 1,
                        groups: groups((rows * (n_heads * n_rot / 2 + kd / 2 + vd / 2)).div_ceil(64)),
                    });
                    version[x.0 as usize] += 1;
                    continue;
                }
                let off = push(&[
                    n_heads as u32,
                    head_dim as u32,
                    n_rot as u32,
                    rows as u32,
                    theta_scale.to_bits(),
                    freq_scale.to_bits(),
                    (mode == RopeMode::Neox) as u32,
                    g.cols(x) as u32,
                ]);
                items.push(Item::Run(Pending {
                    label: "rope".into(),
                    kernel: Kernel::Rope,
                    params: off,
                    bufs: vec![Res::Step, Res::Act(x)],
                    groups: groups((rows * n_heads * n_rot / 2).div_ceil(64)),
                }));
                version[x.0 as usize] += 1;
            }
            Op::KvStore { layer, k, v } => {
                check(a_ok(k) && a_ok(v), || format!("{op:?}: unknown slot"))?;
                for (src, value) in [(k, false), (v, true)] {
                    let dim = g.cols(src);
                    check(dim.is_multiple_of(2), || format!("{op:?}: odd row width {dim}"))?;
                    let rows = g.rows(src);
                    let off = push(&[dim as u32, rows as u32]);
                    kv_uses.push((KvUse::Store { src, layer, value }, Kernel::KvStore, off));
                    items.push(Item::Kv {
                        label: "kv_store".into(),
                        kernel: Kernel::KvStore,
                        bind: kv_uses.len() - 1,
                        groups: groups((rows * dim / 2).div_ceil(64)),
                    });
                }
            }
            Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } => {
                check(a_ok(q) && a_ok(dst), || format!("{op:?}: unknown slot"))?;
                check(q != dst, || format!("{op:?} reads and writes the same slot"))?;
                check(
                    head_dim <= 256
                        && head_dim % 2 == 0
                        && n_kv_heads > 0
                        && n_heads % n_kv_heads == 0
                        && g.cols(q) == n_heads * head_dim
                        && g.cols(dst) == n_heads * head_dim
                        && g.rows(q) == g.rows(dst),
                    || format!("{op:?}: unsupported shape (head_dim at most 256)"),
                )?;
                let rows = g.rows(q);
                let kv_dim = n_kv_heads * head_dim;
                let off = push(&[
                    n_heads as u32,
                    (n_heads / n_kv_heads) as u32,
                    head_dim as u32,
                    rows as u32,
                    kv_dim as u32,
                    kv_dim as u32,
                    window.unwrap_or(0) as u32,
                    (n_heads * head_dim) as u32,
                    scale.to_bits(),
                    softcap.unwrap_or(0.0).to_bits(),
                ]);
                kv_uses.push((KvUse::Attend { q, dst, layer, k_dim: kv_dim }, Kernel::Attention, off));
                items.push(Item::Kv {
                    label: "attention".into(),
                    kernel: Kernel::Attention,
                    bind: kv_uses.len() - 1,
                    groups: groups(rows * n_heads),
                });
                version[dst.0 as usize] += 1;
            }
            Op::GatedAct { gate, up, act } => {
                check(a_ok(gate) && a_ok(up) && gate != up && n(gate) == n(up), || {
                    format!("{op:?}: bad slots")
                })?;
                let off = push(&[n(gate) as u32]);
                let kernel = if act == Gate::Silu { Kernel::GatedSilu } else { Kernel::GatedGelu };
                items.push(Item::Run(Pending {
                    label: "gated_act".into(),
                    kernel,
                    params: off,
                    bufs: vec![Res::Act(gate), Res::Act(up)],
                    groups: groups(n(gate).div_ceil(64)),
                }));
                version[gate.0 as usize] += 1;
            }
            Op::Add { a, b, dst } => {
                check(a_ok(a) && a_ok(b) && a_ok(dst) && n(a) == n(dst) && n(b) == n(dst), || {
                    format!("{op:?}: bad slots")
                })?;
                let other = if a == dst {
                    b
                } else if b == dst {
                    a
                } else {
                    items.push(Item::Copy { src: a, src_off: 0, dst, size: 4 * n(a) as u64 });
                    b
                };
                check(other != dst, || format!("{op:?}: x + x in place is not supported"))?;
                let off = push(&[n(dst) as u32]);
                items.push(Item::Run(Pending {
                    label: "add".into(),
                    kernel: Kernel::Add,
                    params: off,
                    bufs: vec![Res::Act(dst), Res::Act(other)],
                    groups: groups(n(dst).div_ceil(64)),
                }));
                version[dst.0 as usize] += 1;
            }
            Op::TakeLast { x, dst } => {
                check(
                    a_ok(x) && a_ok(dst) && x != dst && g.cols(x) == g.cols(dst) && g.rows(dst) == 1,
                    || format!("{op:?}: bad slots"),
                )?;
                let cols = g.cols(x) as u64;
                items.push(Item::Copy {
                    src: x,
                    src_off: 4 * cols * (g.rows(x) as u64 - 1),
                    dst,
                    size: 4 * cols,
                });
                version[dst.0 as usize] += 1;
            }
        }
    }
    let n_vocab = g.cols(g.logits);
    let argmax_params = push(&[n_vocab as u32, ((g.rows(g.logits) - 1) * n_vocab) as u32]);

    // Buffers.
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    // Sizes rounded to 16 bytes: kernels bind buffers as arrays of 16-byte vectors.
    let buffer = |label: &str, size: u64, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size.max(16).div_ceil(16) * 16,
            usage,
            mapped_at_creation: false,
        })
    };
    let max_binding = limits.max_storage_buffer_binding_size;
    let mut acts = Vec::new();
    for i in 0..g.acts.len() {
        let size = 4 * n(ActId(i as u32)) as u64;
        check(size <= max_binding, || {
            format!("activation slot {i} ({size} bytes) exceeds the binding size")
        })?;
        acts.push(buffer("activation", size, usage));
    }
    let step = buffer(
        "step",
        4 * (1 + g.n_tokens as u64),
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
    );
    let quant: HashMap<ActQuant, wgpu::Buffer> =
        qsize.iter().map(|(&q, &size)| (q, buffer("quantized activations", size, usage))).collect();
    let argmax_out = buffer("argmax", 16, usage);
    let dummy_rw = buffer("dummy", 16, wgpu::BufferUsages::STORAGE);
    let map = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
    let argmax_read = buffer("argmax readback", 16, map);
    let logits_read = buffer("logits readback", 4 * n(g.logits) as u64, map);
    let params_buf =
        buffer("params", params.len() as u64, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
    queue.write_buffer(&params_buf, 0, &params);

    // Bind groups.
    let bind = |pipes: &mut Pipelines, kernel: Kernel, params: u64, bufs: &[Option<&wgpu::Buffer>]| {
        let pipe = pipes.get(device, kernel);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &params_buf,
                offset: params,
                size: NonZeroU64::new(PARAMS_BYTES),
            }),
        }];
        for (i, b) in bufs.iter().enumerate().filter_map(|(i, b)| Some((i, (*b)?))) {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.as_entire_binding() });
        }
        let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.get_bind_group_layout(0),
            entries: &entries,
        });
        (pipe, bg)
    };
    let resolve = |r: Res| -> Option<&wgpu::Buffer> {
        Some(match r {
            Res::Act(a) => &acts[a.0 as usize],
            Res::Weight(w, p) => &weights[w].parts[p],
            Res::Step => &step,
            Res::Dummy => dummy,
            Res::DummyRw => &dummy_rw,
            Res::Quant(q) => &quant[&q],
            Res::Unused => return None,
        })
    };
    let mut cmds = Vec::new();
    let mut labels = Vec::new();
    for item in items {
        cmds.push(match item {
            Item::Run(p) => {
                labels.push(p.label);
                let bufs: Vec<Option<&wgpu::Buffer>> = p.bufs.iter().map(|&r| resolve(r)).collect();
                let (pipe, bind) = bind(pipes, p.kernel, p.params, &bufs);
                Cmd::Dispatch { pipe, bind, groups: p.groups }
            }
            Item::Kv { label, kernel, bind, groups } => {
                labels.push(label);
                Cmd::KvDispatch { pipe: pipes.get(device, kernel), bind, groups }
            }
            Item::Copy { src, src_off, dst, size } => {
                labels.push("copy".into());
                Cmd::Copy { src: src.0 as usize, src_off, dst: dst.0 as usize, dst_off: 0, size }
            }
        });
    }
    let argmax =
        bind(pipes, Kernel::Argmax, argmax_params, &[resolve(Res::Act(g.logits)), Some(&argmax_out)]);
    let kv_binds = kv_uses
        .into_iter()
        .map(|(what, kernel, params)| KvBind {
            what,
            layout: pipes.get(device, kernel).get_bind_group_layout(0),
            params,
        })
        .collect();
    Ok(Plan {
        graph: g.clone(),
        acts,
        step,
        params: params_buf,
        cmds,
        kv_binds,
        bound: HashMap::new(),
        argmax,
        argmax_out,
        argmax_read,
        logits_read,
        logits_bytes: 4 * n(g.logits) as u64,
        embed_rows,
        queries: if profile { StepQueries::new(device, labels.len()) } else { None },
        labels,
        ahead: None,
    })
}

impl Plan {
    /// Make (once per cache) the bind groups of the ops that read or write cache `kv`.
    pub fn bind_kv(&mut self, device: &wgpu::Device, id: u32, kv: &GpuKv) -> Result<()> {
        if self.bound.contains_key(&id) {
            return Ok(());
        }
        let mut groups = Vec::new();
        for b in &self.kv_binds {
            let params = wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &self.params,
                    offset: b.params,
                    size: NonZeroU64::new(PARAMS_BYTES),
                }),
            };
            let layer = match b.what {
                KvUse::Store { layer, .. } | KvUse::Attend { layer, .. } | KvUse::RopeStore { layer, .. } => {
                    layer
                }
            };
            let l = kv.layers.get(layer).ok_or_else(|| err(format!("KV layer {layer} out of range")))?;
            let entries = match b.what {
                KvUse::Store { src, value, .. } => {
                    let (buf, dim) = if value { (&l.v, l.v_dim) } else { (&l.k, l.k_dim) };
                    if self.graph.cols(src) != dim {
                        return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
                    }
                    vec![
                        params,
                        wgpu::BindGroupEntry { binding: 1, resource: self.step.as_entire_binding() },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: self.acts[src.0 as usize].as_entire_binding(),
                        },
                        wgpu::BindGroupEntry { binding: 3, resource: buf.as_entire_binding() },
                    ]
                }
                KvUse::RopeStore { q, k, v, .. } => {
                    if self.graph.cols(k) != l.k_dim || self.graph.cols(v) != l.v_dim {
                        return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
                    }
                    let act = |a: ActId| self.acts[a.0 as usize].as_entire_binding();
                    vec![
                        params,
                        wgpu::BindGroupEntry { binding: 1, resource: self.step.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 2, resource: act(q) },
                        wgpu::BindGroupEntry { binding: 3, resource: act(k) },
                        wgpu::BindGroupEntry { binding: 4, resource: act(v) },
                        wgpu::BindGroupEntry { binding: 5, resource: l.k.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 6, resource: l.v.as_entire_binding() },
                    ]
                }
                KvUse::Attend { q, dst, k_dim, .. } => {
                    if l.k_dim != k_dim || l.v_dim != k_dim {
                        return Err(err(format!("attention of layer {layer}: heads do not match the cache")));
                    }
                    vec![
                        params,
                        wgpu::BindGroupEntry { binding: 1, resource: self.step.as_entire_binding() },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: self.acts[q.0 as usize].as_entire_binding(),
                        },
                        wgpu::BindGroupEntry { binding: 3, resource: l.k.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 4, resource: l.v.as_entire_binding() },
                        wgpu::BindGroupEntry {
                            binding: 5,
                            resource: self.acts[dst.0 as usize].as_entire_binding(),
                        },
                    ]
                }
            };
            groups.push(device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &b.layout,
                entries: &entries,
            }));
        }
        self.bound.insert(id, groups);
        Ok(())
    }

    /// Forget the bind groups of a freed cache.
    pub fn unbind_kv(&mut self, id: u32) {
        self.bound.remove(&id);
        if self.ahead.as_ref().is_some_and(|a| a.0 == id) {
            self.ahead = None;
        }
    }

    /// Record the step (for cache `kv`, already bound) and the readback copy into `enc`;
    /// with timestamp queries, one before the first command and one after each.
    pub fn record(&self, enc: &mut wgpu::CommandEncoder, kv: u32, argmax: bool) {
        let kvb = &self.bound[&kv];
        let qs = self.queries.as_ref().map(|q| &q.set);
        if let Some(qs) = qs {
            enc.write_timestamp(qs, 0);
        }
        let mut i = 0;
        while i < self.cmds.len() {
            if let Cmd::Copy { src, src_off, dst, dst_off, size } = self.cmds[i] {
                enc.copy_buffer_to_buffer(&self.acts[src], src_off, &self.acts[dst], dst_off, size);
                i += 1;
                if let Some(qs) = qs {
                    enc.write_timestamp(qs, i as u32);
                }
                continue;
            }
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            while i < self.cmds.len() {
                match &self.cmds[i] {
                    Cmd::Dispatch { pipe, bind, groups } => {
                        pass.set_pipeline(pipe);
                        pass.set_bind_group(0, bind, &[]);
                        pass.dispatch_workgroups(groups.0, groups.1, 1);
                    }
                    Cmd::KvDispatch { pipe, bind, groups } => {
                        pass.set_pipeline(pipe);
                        pass.set_bind_group(0, &kvb[*bind], &[]);
                        pass.dispatch_workgroups(groups.0, groups.1, 1);
                    }
                    Cmd::Copy { .. } => break,
                }
                i += 1;
                if let Some(qs) = qs {
                    pass.write_timestamp(qs, i as u32);
                }
            }
        }
        let logits = &self.acts[self.graph.logits.0 as usize];
        if argmax {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&self.argmax.0);
            pass.set_bind_group(0, &self.argmax.1, &[]);
            pass.dispatch_workgroups(1, 1, 1);
            drop(pass);
            enc.copy_buffer_to_buffer(&self.argmax_out, 0, &self.argmax_read, 0, 4);
        } else {
            enc.copy_buffer_to_buffer(logits, 0, &self.logits_read, 0, self.logits_bytes);
        }
        if let Some(q) = &self.queries {
            enc.write_timestamp(&q.set, self.cmds.len() as u32 + 1);
            q.resolve(enc);
        }
    }
}

/// Whether the WebGPU executor supports weights of type `t`.
pub fn supports(t: GgmlType) -> bool {
    SUPPORTED.contains(&t)
}
