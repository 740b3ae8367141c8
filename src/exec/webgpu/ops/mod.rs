//! Compiling a [`Graph`]: each launch unit (one op, or a group of ops fused into one
//! dispatch, fuse.rs) is turned into commands by one function of the op family's file, which
//! writes the kernel's typed parameters (params.rs) and names the buffers it binds. The
//! [`Builder`] collects them; record.rs then makes the buffers and bind groups.

mod attention;
mod elementwise;
mod matmul;
mod norm;
mod rope;
mod sampling;

use std::collections::HashMap;

use super::buffers::{err, GpuWeight};
use super::fuse::{self, Fusions};
use super::kernels::{task_values, ActQuant, Kernel, Pipelines};
use super::params::Params;
use super::record::{Built, Item, KvUse, Pending, Plan, Res};
use crate::exec::{ActId, Graph, Op, WeightId};
use crate::Result;

pub use matmul::MatVecMode;

/// Workgroup grid for `n` workgroups: x at most 32768 (`wg_index` in common.wgsl).
fn groups(n: usize) -> (u32, u32) {
    if n <= 32768 {
        (n as u32, 1)
    } else {
        (32768, n.div_ceil(32768) as u32)
    }
}

/// `Err(what())` unless `ok`.
fn check(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(err(what()))
    }
}

/// Whether kernels for weights of type `t` read f16 values of the weights (then, with
/// `shader-f16`, through a second, f16-typed binding of the same buffer).
fn reads_f16(t: crate::quant::GgmlType) -> bool {
    !matches!(t, crate::quant::GgmlType::F32 | crate::quant::GgmlType::BF16)
}

/// What the launch units of a graph have produced so far.
pub struct Builder<'a> {
    /// The graph being compiled (already checked).
    pub g: &'a Graph,
    weights: &'a [GpuWeight],
    /// Kernels use `shader-f16` (bind the weights a second time, as f16).
    pub f16: bool,
    /// How matrix products are spread over invocations.
    pub mode: MatVecMode,
    /// The fusions chosen for the graph.
    pub fz: Fusions,
    /// The device's limits.
    pub limits: &'a wgpu::Limits,
    /// Bytes of the attention splits' partial results (one buffer, reused by every layer).
    pub attn_scratch: u64,
    /// Bytes between dispatches' parameters in the uniform buffer.
    slot: usize,
    params: Vec<u8>,
    items: Vec<Item>,
    kv_uses: Vec<(KvUse, Kernel, u64)>,
    /// Writes to each slot so far: quantized activations are reused while their source is
    /// unchanged.
    version: Vec<u64>,
    /// What each quantized-activation buffer holds now: (slot, its version).
    qstate: HashMap<ActQuant, Option<(ActId, u64)>>,
    /// Bytes each quantized-activation buffer needs.
    qsize: HashMap<ActQuant, u64>,
    embed_rows: Option<u64>,
    /// The RoPE angle tables made so far: what each was made from (the parameters' words and
    /// the frequency factors) and its bytes.
    rope_tables: Vec<((Vec<u32>, Res), u64)>,
}

impl<'a> Builder<'a> {
    /// The weight `w` (the graph was checked: it exists).
    pub fn weight(&self, w: WeightId) -> &'a GpuWeight {
        &self.weights[w.0 as usize]
    }

    /// Values in slot `a`.
    pub fn n(&self, a: ActId) -> usize {
        self.g.rows(a) * self.g.cols(a)
    }

    /// Write `p` into a fresh slot of the uniform buffer; returns its offset.
    pub fn push<P: Params>(&mut self, p: &P) -> u64 {
        let off = self.params.len() as u64;
        let mut block = vec![0u8; self.slot];
        for (i, w) in p.words().iter().enumerate() {
            block[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        self.params.extend_from_slice(&block);
        off
    }

    /// A dispatch of `kernel` with parameters `p` and buffers `bufs` at bindings 1, 2, ...
    pub fn run<P: Params>(
        &mut self,
        label: String,
        kernel: Kernel,
        p: &P,
        bufs: Vec<Res>,
        groups: (u32, u32),
    ) {
        let params = self.push(p);
        self.items.push(Item::Run(Pending { label, kernel, params, bufs, groups }));
    }

    /// A dispatch whose bindings name the KV cache (`what`), bound at the cache's first step.
    pub fn kv<P: Params>(&mut self, label: &str, kernel: Kernel, p: &P, what: KvUse, groups: (u32, u32)) {
        let params = self.push(p);
        self.kv_uses.push((what, kernel, params));
        let bind = self.kv_uses.len() - 1;
        self.items.push(Item::Kv { label: label.into(), kernel, bind, groups });
    }

    /// A copy of `size` bytes from `src` at `src_off` to the start of `dst`.
    pub fn copy(&mut self, src: ActId, src_off: u64, dst: ActId, size: u64) {
        self.items.push(Item::Copy { src, src_off, dst, size });
    }

    /// Note a write to slot `a`.
    pub fn wrote(&mut self, a: ActId) {
        self.version[a.0 as usize] += 1;
    }

    /// Quantized-activation buffer `q` needs `bytes`.
    pub fn quant_bytes(&mut self, q: ActQuant, bytes: u64) {
        let e = self.qsize.entry(q).or_insert(0);
        *e = (*e).max(bytes);
    }

    /// Whether buffer `q` holds slot `x` as it is now.
    pub fn holds_quantized(&self, q: ActQuant, x: ActId) -> bool {
        self.qstate.get(&q).copied().flatten() == Some((x, self.version[x.0 as usize]))
    }

    /// Buffer `q` now holds slot `x` as it is now.
    pub fn quantized(&mut self, q: ActQuant, x: ActId) {
        self.qstate.insert(q, Some((x, self.version[x.0 as usize])));
    }
}

/// Compile `g` against `weights`: check it, choose fusions (if `fusing`), turn each launch
/// unit into commands and make the plan's buffers and bind groups.
#[allow(clippy::too_many_arguments)]
pub fn compile(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    pipes: &mut Pipelines,
    weights: &[GpuWeight],
    dummy: &wgpu::Buffer,
    limits: &wgpu::Limits,
    mode: MatVecMode,
    profile: bool,
    fusing: bool,
    g: &Graph,
) -> Result<Plan> {
    check((g.logits.0 as usize) < g.acts.len(), || "graph logits slot out of range".into())?;
    g.check(weights.len(), |w| {
        let wt = &weights[w.0 as usize];
        (wt.k(), wt.n_rows as usize)
    })
    .map_err(err)?;
    let f16 = pipes.f16();
    let fz = if fusing { fusions(g, weights, mode, f16, limits) } else { Fusions::default() };
    let mut b = Builder {
        g,
        weights,
        f16,
        mode,
        fz,
        limits,
        attn_scratch: 0,
        slot: (limits.min_uniform_buffer_offset_alignment as usize).max(256),
        params: Vec::new(),
        items: Vec::new(),
        kv_uses: Vec::new(),
        version: vec![0; g.acts.len()],
        qstate: HashMap::new(),
        qsize: HashMap::new(),
        embed_rows: None,
        rope_tables: Vec::new(),
    };
    for i in 0..g.ops.len() {
        if !b.fz.skip.contains(&i) {
            launch(&mut b, i)?;
        }
    }
    let (argmax, argmax_parts) = sampling::argmax(&mut b);
    let built = Built {
        items: b.items,
        kv_uses: b.kv_uses,
        params: b.params,
        qsize: b.qsize,
        embed_rows: b.embed_rows,
        attn_scratch: b.attn_scratch,
        rope_tables: b.rope_tables.into_iter().map(|(_, bytes)| bytes).collect(),
        argmax,
        argmax_parts,
    };
    Plan::new(device, queue, pipes, weights, dummy, limits, profile, g, built)
}

/// Turn the launch unit that starts at op `i` into commands.
fn launch(b: &mut Builder, i: usize) -> Result<()> {
    let fz = &b.fz;
    match b.g.ops[i] {
        Op::Embed { .. } => elementwise::embed(b, i),
        Op::RmsNorm { .. } if fz.norm_quant.contains(&i) => norm::norm_quant(b, i),
        Op::RmsNorm { .. } => norm::rms_norm(b, i),
        Op::MatMul { .. } if fz.triple.contains(&i) => matmul::triple(b, i),
        Op::MatMul { .. } if fz.gate_up.contains(&i) => matmul::gate_up(b, i),
        Op::MatMul { .. } => matmul::matmul(b, i),
        Op::Rope { .. } if fz.rope_kv.contains(&i) => rope::rope_kv(b, i),
        Op::Rope { .. } => rope::rope(b, i),
        Op::KvStore { .. } => rope::kv_store(b, i),
        Op::Attention { .. } => attention::attention(b, i),
        Op::GatedAct { .. } => elementwise::gated_act(b, i),
        Op::Add { .. } => elementwise::add(b, i),
        Op::TakeLast { .. } => elementwise::take_last(b, i),
    }
}

/// The fusions of `g` the kernels can do here: the shared planner (`exec/fuse.rs`) finds the
/// patterns; this says which matrix products qualify.
fn fusions(g: &Graph, weights: &[GpuWeight], mode: MatVecMode, f16: bool, limits: &wgpu::Limits) -> Fusions {
    let coop = matches!(mode, MatVecMode::Coop { .. });
    let quant = |op: &Op| match *op {
        Op::MatMul { w, x, .. } if g.cols(x).is_multiple_of(256) => {
            ActQuant::for_type(weights[w.0 as usize].dtype)
        }
        _ => None,
    };
    let pair = move |a: &Op, b: &Op| match (a, b) {
        (&Op::MatMul { w: w1, .. }, &Op::MatMul { w: w2, .. }) => {
            let (a, b) = (&weights[w1.0 as usize], &weights[w2.0 as usize]);
            coop && a.dtype == b.dtype && a.dims == b.dims && a.parts.len() == 1 && b.parts.len() == 1
        }
        _ => false,
    };
    let max_storage = limits.max_storage_buffers_per_shader_stage;
    let triple = move |ops: &[Op]| {
        let mut ws = Vec::new();
        for op in ops {
            let Op::MatMul { w, x, dst, .. } = *op else { return false };
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
        coop && f16
            && cfg!(not(target_arch = "wasm32"))
            && max_storage >= 10
            && aq.is_some()
            && ws.iter().all(|w| {
                ActQuant::for_type(w.dtype) == aq
                    && task_values(w.dtype) == task_values(ws[0].dtype)
                    && w.k() % aq.map_or(1, |q| q.block()) == 0
            })
    };
    fuse::from_steps(&crate::exec::fuse::plan(g, &fuse::capabilities(quant, pair, triple)))
}
