//! The compiled plan of a graph: its buffers, the uniform buffer of every dispatch's
//! parameters, the command list, the bind groups of KV caches (made at a cache's first step),
//! and the recording of a step into one command encoder.
//!
//! The step buffer holds the step's inputs as [`StepLayout`] packs them, block tables
//! included; their stride is the cache's block count, so a plan has one step buffer per cache
//! it has run with, made with the cache's bind groups, and every dispatch that reads the step
//! (not only those naming the cache: embedding, RoPE, the attention merge, TakeLast, argmax)
//! is bound per cache. The step is bound with exactly the pack's size: kernels derive the
//! table stride from its length (step.wgsl). Commands recorded for a (plan, cache) are
//! replayed step after step; only the step buffer's contents change.

use std::collections::HashMap;
use std::num::NonZeroU64;

use super::buffers::{err, GpuKv, GpuWeight};
use super::device::{check_size, scoped, Gpu};
use super::kernels::{ActQuant, Kernel, Pipelines};
use super::profile::StepQueries;
use crate::exec::{check_step, mask_words, ActId, Graph, Readback, SeqStep, StepLayout};
use crate::Result;

/// Bytes of a dispatch's parameter binding (its slot in the uniform buffer is at least 256).
const PARAMS_BYTES: u64 = 128;

/// A buffer named before the buffers are all made.
#[derive(Clone, Copy, PartialEq)]
pub enum Res {
    /// An activation slot.
    Act(ActId),
    /// Part `.1` of weight `.0`.
    Weight(usize, usize),
    /// The step buffer of the cache the step runs with (`StepLayout`): a dispatch binding it
    /// is bound per cache.
    Step,
    /// The executor's small buffer for unused read-only bindings.
    Dummy,
    /// A small buffer for unused read_write bindings (a buffer may not be bound both ways).
    DummyRw,
    /// No buffer at this binding (the kernel does not use it).
    Unused,
    /// The quantized activations of this format.
    Quant(ActQuant),
    /// The partial results of the attention splits.
    AttnScratch,
    /// The step's RoPE angles for one set of RoPE constants (rope_table.wgsl): index into
    /// [`Built::rope_tables`].
    RopeTable(usize),
}

/// A dispatch whose bind group is made once the buffers exist.
pub struct Pending {
    /// What it is (for the profile).
    pub label: String,
    /// The kernel.
    pub kernel: Kernel,
    /// Offset of its parameters in the uniform buffer.
    pub params: u64,
    /// Buffers at bindings 1, 2, ...
    pub bufs: Vec<Res>,
    /// Workgroup grid.
    pub groups: (u32, u32),
}

/// One command as the launch units describe it.
pub enum Item {
    /// A dispatch.
    Run(Pending),
    /// A dispatch binding a KV cache: `bind` indexes the plan's KV uses.
    Kv { label: String, kernel: Kernel, bind: usize, groups: (u32, u32) },
    /// A copy between activation slots.
    Copy { src: ActId, src_off: u64, dst: ActId, size: u64 },
}

/// What a KV bind group binds (built per cache at its first run).
pub enum KvUse {
    /// kv_store.wgsl: the keys (or, with `value`, the values) of `src` into layer `layer`.
    Store { src: ActId, layer: usize, value: bool },
    /// RoPE of `q` and `k` and the store of `k` and `v` (fuse.rs); `table`: the step's
    /// angles (a `Res::RopeTable`).
    RopeStore { q: ActId, k: ActId, v: ActId, layer: usize, table: Res },
    /// attention.wgsl or attention_tiled.wgsl over layer `layer`, whose rows are `k_dim` wide.
    Attend { q: ActId, dst: ActId, layer: usize, k_dim: usize },
    /// attention_split.wgsl: the splits' partial results into the plan's scratch buffer (the
    /// output of rows of one split into `dst`).
    AttendSplit { q: ActId, dst: ActId, layer: usize, k_dim: usize },
    /// A dispatch that reads the step but not the cache (record.rs makes these from the
    /// dispatches whose buffers include `Res::Step`): its bindings 1, 2, ...
    Plain(Vec<Slot>),
}

/// A binding of a [`KvUse::Plain`] dispatch.
pub enum Slot {
    /// The cache's step buffer.
    Step,
    /// This buffer.
    Buf(wgpu::Buffer),
    /// None (the kernel does not use it).
    Unused,
}

/// What compiling a graph's ops produced (ops/mod.rs), before any buffer exists.
pub struct Built {
    /// The commands in order.
    pub items: Vec<Item>,
    /// The KV uses of `Item::Kv` commands: what they bind, their kernel and parameters.
    pub kv_uses: Vec<(KvUse, Kernel, u64)>,
    /// The uniform buffer's contents.
    pub params: Vec<u8>,
    /// Bytes of each quantized-activation buffer.
    pub qsize: HashMap<ActQuant, u64>,
    /// Rows of the embedding table, if the graph embeds.
    pub embed_rows: Option<u64>,
    /// Bytes of the attention splits' partial results (0: none).
    pub attn_scratch: u64,
    /// Bytes of each RoPE angle table.
    pub rope_tables: Vec<u64>,
    /// Offset of the argmax's parameters.
    pub argmax: u64,
    /// Chunks of a row in the argmax's first pass.
    pub argmax_parts: u32,
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
        size: u64,
    },
}

struct KvBind {
    what: KvUse,
    layout: wgpu::BindGroupLayout,
    params: u64,
    /// The buffer of a use's binding that is neither a slot nor the cache (RoPE's frequency
    /// factors), resolved when the plan is made.
    extra: Option<wgpu::Buffer>,
}

/// What a plan binds for one KV cache.
struct CacheBinds {
    /// The bind groups of the plan's `kv_binds`, in order.
    groups: Vec<wgpu::BindGroup>,
    /// The argmax's bind group.
    argmax: wgpu::BindGroup,
    /// The step's inputs for this cache's table stride, written by `submit`.
    step: wgpu::Buffer,
    layout: StepLayout,
}

/// A compiled graph.
pub struct Plan {
    /// The graph it runs.
    pub graph: Graph,
    acts: Vec<wgpu::Buffer>,
    /// The device's limits (step buffers are made per cache).
    limits: wgpu::Limits,
    /// The attention splits' partial results.
    attn_scratch: wgpu::Buffer,
    params: wgpu::Buffer,
    cmds: Vec<Cmd>,
    kv_binds: Vec<KvBind>,
    bound: HashMap<u32, CacheBinds>,
    /// The argmax's first pass (bound per cache: it reads the step), its chunks of a row, and
    /// its second pass with its bind group.
    argmax: (wgpu::ComputePipeline, KvBind),
    argmax_parts: u32,
    argmax_final: (wgpu::ComputePipeline, wgpu::BindGroup),
    argmax_out: wgpu::Buffer,
    /// The argmax's token masks (argmax.wgsl): a word per sequence of the graph (not 0: the
    /// sequence has a mask), then each sequence's mask (`mask_words` of the logits).
    masks: wgpu::Buffer,
    /// Whether the last step with the argmax wrote a mask (so the next must clear the flags).
    masks_set: bool,
    /// Where the argmax's token ids (one per sequence of the graph) are read back: two, so that
    /// a chained step ([`Tail::Argmax`]'s `fed`) can copy into one while the other is mapped.
    pub argmax_read: [wgpu::Buffer; 2],
    /// Where the logits are read back.
    pub logits_read: wgpu::Buffer,
    /// Bytes of logits (the readback buffer may be longer).
    pub logits_bytes: u64,
    /// Rows of the embedding table (token ids must be below), if the graph embeds.
    pub embed_rows: Option<u64>,
    /// What each command is (for the profile).
    pub labels: Vec<String>,
    /// Timestamp queries, when profiling on an adapter that has them.
    pub queries: Option<StepQueries>,
    /// The next step, recorded while the GPU ran the last one: (cache, tail, commands).
    /// Steps differ only in the contents of the cache's step buffer, so their commands are
    /// the same.
    pub ahead: Option<(u32, Tail, wgpu::CommandBuffer)>,
    /// When profiling (natively): the host's nanoseconds in `queue.submit` of the steps, and
    /// in recording the next step ahead.
    pub host_ns: (f64, f64),
}

/// The first `bytes` of step buffer `step`.
fn step_binding(step: &wgpu::Buffer, bytes: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: step,
        offset: 0,
        size: NonZeroU64::new(bytes),
    })
}

/// The whole of `buf`, bound.
fn whole(buf: &wgpu::Buffer) -> Option<wgpu::BindingResource<'_>> {
    Some(buf.as_entire_binding())
}

/// The bindings of a plain dispatch with the step buffer `step` (its first `bytes`).
fn plain<'a>(
    slots: &'a [Slot],
    step: &'a wgpu::Buffer,
    bytes: u64,
) -> Vec<Option<wgpu::BindingResource<'a>>> {
    slots
        .iter()
        .map(|s| match s {
            Slot::Step => Some(step_binding(step, bytes)),
            Slot::Buf(b) => Some(b.as_entire_binding()),
            Slot::Unused => None,
        })
        .collect()
}

/// The parameter binding (binding 0) of a dispatch whose parameters are at `offset`.
fn params_entry(buffer: &wgpu::Buffer, offset: u64) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset,
            size: NonZeroU64::new(PARAMS_BYTES),
        }),
    }
}

impl Plan {
    /// Make the buffers, pipelines and bind groups of graph `g` from what its ops produced.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipes: &mut Pipelines,
        weights: &[GpuWeight],
        dummy: &wgpu::Buffer,
        limits: &wgpu::Limits,
        profile: bool,
        g: &Graph,
        built: Built,
    ) -> Result<Plan> {
        let n = |a: ActId| g.rows(a) * g.cols(a);
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        // Sizes rounded to 16 bytes: kernels bind buffers as arrays of 16-byte vectors.
        // Checked against the device's limits first (the uniform params buffer is bound in
        // pieces, so only its whole size is limited) (an error, not a wgpu validation failure),
        // then created inside error scopes (out of device memory is an error too).
        let buffer = |label: &str, size: u64, usage: wgpu::BufferUsages| -> Result<wgpu::Buffer> {
            let size = size.max(16).div_ceil(16) * 16;
            let what = format!("the {label} buffer of a {}-token graph", g.n_tokens);
            check_size(limits, &what, size, usage.contains(wgpu::BufferUsages::STORAGE))?;
            scoped(device, &format!("allocating {what} ({size} bytes)"), || {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                })
            })
        };
        let mut acts = Vec::new();
        for i in 0..g.acts.len() {
            let size = 4 * n(ActId(i as u32)) as u64;
            acts.push(buffer(&format!("activation {i}"), size, usage)?);
        }
        let quant: HashMap<ActQuant, wgpu::Buffer> = built
            .qsize
            .iter()
            .map(|(&q, &size)| Ok((q, buffer("quantized activations", size, usage)?)))
            .collect::<Result<_>>()?;
        let attn_scratch = buffer("attention splits", built.attn_scratch, wgpu::BufferUsages::STORAGE)?;
        let rope_tables: Vec<wgpu::Buffer> = built
            .rope_tables
            .iter()
            .map(|&size| buffer("RoPE angles", size, wgpu::BufferUsages::STORAGE))
            .collect::<Result<_>>()?;
        let argmax_out = buffer("argmax", 4 * g.n_seqs as u64, usage)?;
        let parts_bytes = 8 * (g.n_seqs * built.argmax_parts as usize) as u64;
        let argmax_chunks = buffer("argmax chunks", parts_bytes, wgpu::BufferUsages::STORAGE)?;
        let mask_bytes = 4 * (g.n_seqs * (1 + mask_words(g.cols(g.logits)))) as u64;
        let masks =
            buffer("token masks", mask_bytes, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST)?;
        let dummy_rw = buffer("dummy", 16, wgpu::BufferUsages::STORAGE)?;
        let map = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let argmax_read = [
            buffer("argmax readback", 4 * g.n_seqs as u64, map)?,
            buffer("argmax readback", 4 * g.n_seqs as u64, map)?,
        ];
        let logits_read = buffer("logits readback", 4 * n(g.logits) as u64, map)?;
        let params_buf = buffer(
            "params",
            built.params.len() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        )?;
        queue.write_buffer(&params_buf, 0, &built.params);

        // Bind groups.
        let bind = |pipes: &mut Pipelines, kernel: Kernel, params: u64, bufs: &[Option<&wgpu::Buffer>]| {
            let pipe = pipes.get(device, kernel)?;
            let mut entries = vec![params_entry(&params_buf, params)];
            for (i, b) in bufs.iter().enumerate().filter_map(|(i, b)| Some((i, (*b)?))) {
                entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.as_entire_binding() });
            }
            let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipe.get_bind_group_layout(0),
                entries: &entries,
            });
            Ok::<_, crate::Error>((pipe, bg))
        };
        // Res::Step is bound per cache (`plain`), never resolved here.
        let resolve = |r: Res| -> Option<&wgpu::Buffer> {
            Some(match r {
                Res::Act(a) => &acts[a.0 as usize],
                Res::Weight(w, p) => &weights[w].parts[p],
                Res::Step => return None,
                Res::Dummy => dummy,
                Res::DummyRw => &dummy_rw,
                Res::Quant(q) => &quant[&q],
                Res::AttnScratch => &attn_scratch,
                Res::RopeTable(t) => &rope_tables[t],
                Res::Unused => return None,
            })
        };
        // The bindings of a dispatch bound per cache because it reads the step.
        let plain = |bufs: &[Res]| {
            KvUse::Plain(
                bufs.iter()
                    .map(|&r| match (r, resolve(r)) {
                        (Res::Step, _) => Slot::Step,
                        (_, Some(b)) => Slot::Buf(b.clone()),
                        (_, None) => Slot::Unused,
                    })
                    .collect(),
            )
        };
        let mut kv_binds = Vec::new();
        for (what, kernel, params) in built.kv_uses {
            let extra = match what {
                KvUse::RopeStore { table, .. } => resolve(table).cloned(),
                _ => None,
            };
            kv_binds.push(KvBind {
                what,
                layout: pipes.get(device, kernel)?.get_bind_group_layout(0),
                params,
                extra,
            });
        }
        let mut cmds = Vec::new();
        let mut labels = Vec::new();
        for item in built.items {
            cmds.push(match item {
                Item::Run(p) if p.bufs.iter().any(|r| matches!(r, Res::Step)) => {
                    labels.push(p.label);
                    let pipe = pipes.get(device, p.kernel)?;
                    let layout = pipe.get_bind_group_layout(0);
                    kv_binds.push(KvBind { what: plain(&p.bufs), layout, params: p.params, extra: None });
                    Cmd::KvDispatch { pipe, bind: kv_binds.len() - 1, groups: p.groups }
                }
                Item::Run(p) => {
                    labels.push(p.label);
                    let bufs: Vec<Option<&wgpu::Buffer>> = p.bufs.iter().map(|&r| resolve(r)).collect();
                    let (pipe, bind) = bind(pipes, p.kernel, p.params, &bufs)?;
                    Cmd::Dispatch { pipe, bind, groups: p.groups }
                }
                Item::Kv { label, kernel, bind, groups } => {
                    labels.push(label);
                    Cmd::KvDispatch { pipe: pipes.get(device, kernel)?, bind, groups }
                }
                Item::Copy { src, src_off, dst, size } => {
                    labels.push("copy".into());
                    Cmd::Copy { src: src.0 as usize, src_off, dst: dst.0 as usize, size }
                }
            });
        }
        let argmax_pipe = pipes.get(device, Kernel::Argmax)?;
        let argmax = KvBind {
            what: KvUse::Plain(vec![
                Slot::Buf(acts[g.logits.0 as usize].clone()),
                Slot::Buf(argmax_chunks.clone()),
                Slot::Step,
                Slot::Buf(masks.clone()),
            ]),
            layout: argmax_pipe.get_bind_group_layout(0),
            params: built.argmax,
            extra: None,
        };
        // The second pass reads the chunks' results and writes the ids: bindings 5 and 6.
        let final_pipe = pipes.get(device, Kernel::ArgmaxFinal)?;
        let final_bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &final_pipe.get_bind_group_layout(0),
            entries: &[
                params_entry(&params_buf, built.argmax),
                wgpu::BindGroupEntry { binding: 5, resource: argmax_chunks.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 6, resource: argmax_out.as_entire_binding() },
            ],
        });
        Ok(Plan {
            graph: g.clone(),
            acts,
            limits: limits.clone(),
            attn_scratch,
            params: params_buf,
            cmds,
            kv_binds,
            bound: HashMap::new(),
            argmax: (argmax_pipe, argmax),
            argmax_parts: built.argmax_parts,
            argmax_final: (final_pipe, final_bind),
            argmax_out,
            masks,
            masks_set: false,
            argmax_read,
            logits_read,
            logits_bytes: 4 * n(g.logits) as u64,
            embed_rows: built.embed_rows,
            queries: if !profile {
                None
            } else if super::profile::span_only() {
                StepQueries::new(device, 0)
            } else {
                StepQueries::new(device, labels.len())
            },
            labels,
            ahead: None,
            host_ns: (0.0, 0.0),
        })
    }

    /// Check a step of `seqs` against the graph and cache `kv` (`cache`), write
    /// its inputs, and submit its commands: those recorded ahead during the previous step if
    /// they read the same cache the same way, else recorded now. With `ahead`, also record
    /// the next step's commands (with that tail) while the GPU works. Returns the submission's
    /// index.
    #[allow(clippy::too_many_arguments)]
    pub fn submit(
        &mut self,
        gpu: &Gpu,
        kv: u32,
        cache: &GpuKv,
        seqs: &[SeqStep],
        tail: Tail,
        ahead: Option<Tail>,
    ) -> Result<wgpu::SubmissionIndex> {
        let n_vocab = self.embed_rows.map_or(0, |r| r as usize);
        let readback = if tail == Tail::Logits { Readback::LastLogits } else { Readback::Argmax };
        check_step(&self.graph, "webgpu", seqs, readback, cache.n_blocks, n_vocab)?;
        self.bind_kv(&gpu.device, kv, cache)?;
        let cb = &self.bound[&kv];
        let words = cb.layout.pack(seqs);
        gpu.queue.write_buffer(&cb.step, 0, &u32_bytes(&words));
        if let Tail::Argmax { .. } = tail {
            self.write_masks(gpu, seqs);
        }
        let record = |plan: &Plan, tail| {
            let mut enc =
                gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("step") });
            plan.record(&mut enc, kv, tail);
            enc.finish()
        };
        let cmds = match self.ahead.take() {
            Some((k, t, cmds)) if k == kv && t == tail => cmds,
            _ => record(self, tail),
        };
        // Timed only when profiling, which is native only (`Instant` panics in the browser).
        let timing = self.queries.is_some();
        let t0 = timing.then(std::time::Instant::now);
        let index = gpu.queue.submit([cmds]);
        let t1 = timing.then(std::time::Instant::now);
        if let Some(next) = ahead {
            // The next step of this graph most likely reads the same cache the same way: record
            // it now, while the GPU works (wgpu's recording costs microseconds per dispatch).
            self.ahead = Some((kv, next, record(self, next)));
        }
        if let (Some(t0), Some(t1)) = (t0, t1) {
            self.host_ns.0 += (t1 - t0).as_nanos() as f64;
            self.host_ns.1 += t1.elapsed().as_nanos() as f64;
        }
        Ok(index)
    }

    /// The second half of a step submitted in two (see [`Tail::Nothing`]): `seqs` are the
    /// step's sequences with the masks the host computed meanwhile, checked again. With the
    /// argmax readback, the argmax, queued behind the forward pass (which does not read the
    /// masks); the logits readback was in the first half.
    pub fn submit_rest(
        &mut self,
        gpu: &Gpu,
        kv: u32,
        cache: &GpuKv,
        seqs: &[SeqStep],
        readback: Readback,
    ) -> Result<()> {
        let n_vocab = self.embed_rows.map_or(0, |r| r as usize);
        check_step(&self.graph, "webgpu", seqs, readback, cache.n_blocks, n_vocab)?;
        if readback != Readback::Argmax {
            return Ok(());
        }
        self.write_masks(gpu, seqs);
        let cb = self.bound.get(&kv).ok_or_else(|| err("the step's cache is not bound"))?;
        let mut enc =
            gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("argmax") });
        self.record_argmax(&mut enc, cb, 0);
        gpu.queue.submit([enc.finish()]);
        Ok(())
    }

    /// Token masks for the argmax (checked: only with it): the flags, then each masked
    /// sequence's words; the flags are cleared once after a masked step, not written on every
    /// step.
    fn write_masks(&mut self, gpu: &Gpu, seqs: &[SeqStep]) {
        let masked = seqs.iter().any(|s| s.mask.is_some());
        if masked || self.masks_set {
            let n_seqs = self.graph.n_seqs;
            let mw = mask_words(self.graph.cols(self.graph.logits));
            let flags: Vec<u32> =
                (0..n_seqs).map(|i| seqs.get(i).is_some_and(|s| s.mask.is_some()) as u32).collect();
            gpu.queue.write_buffer(&self.masks, 0, &u32_bytes(&flags));
            for (i, m) in seqs.iter().enumerate().filter_map(|(i, s)| Some((i, s.mask?))) {
                gpu.queue.write_buffer(&self.masks, 4 * (n_seqs + i * mw) as u64, &u32_bytes(m));
            }
            self.masks_set = masked;
        }
    }

    /// Make (once per cache) the step buffer for the cache's table stride and the bind
    /// groups of the dispatches that read it or the cache `kv`.
    fn bind_kv(&mut self, device: &wgpu::Device, id: u32, kv: &GpuKv) -> Result<()> {
        if self.bound.contains_key(&id) {
            return Ok(());
        }
        let layout = StepLayout::new(&self.graph, kv.n_blocks);
        let step_bytes = 4 * layout.len() as u64;
        let what = format!(
            "the step buffer of a {}-token graph of {} sequences over {} blocks",
            self.graph.n_tokens, self.graph.n_seqs, kv.n_blocks
        );
        let size = step_bytes.div_ceil(16) * 16;
        check_size(&self.limits, &what, size, true)?;
        let step = scoped(device, &format!("allocating {what} ({size} bytes)"), || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("step"),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        // Exactly the pack's words: kernels derive the table stride from the binding's length.
        let step_res = || step_binding(&step, step_bytes);
        let make = |b: &KvBind, res: Vec<Option<wgpu::BindingResource>>| {
            let mut entries = vec![params_entry(&self.params, b.params)];
            for (i, r) in res.into_iter().enumerate() {
                if let Some(resource) = r {
                    entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource });
                }
            }
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &b.layout,
                entries: &entries,
            })
        };
        let mut groups = Vec::new();
        for b in &self.kv_binds {
            let layer = match b.what {
                KvUse::Store { layer, .. }
                | KvUse::Attend { layer, .. }
                | KvUse::AttendSplit { layer, .. }
                | KvUse::RopeStore { layer, .. } => layer,
                KvUse::Plain(ref slots) => {
                    groups.push(make(b, plain(slots, &step, step_bytes)));
                    continue;
                }
            };
            let l = kv.layers.get(layer).ok_or_else(|| err(format!("KV layer {layer} out of range")))?;
            let act = |a: ActId| Some(self.acts[a.0 as usize].as_entire_binding());
            // Bindings 1, 2, ... in order (binding 0: the parameters).
            let bufs: Vec<Option<wgpu::BindingResource>> = match b.what {
                KvUse::Store { src, value, .. } => {
                    let (buf, dim) = if value { (&l.v, l.v_dim) } else { (&l.k, l.k_dim) };
                    if self.graph.cols(src) != dim {
                        return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
                    }
                    vec![Some(step_res()), act(src), whole(buf)]
                }
                KvUse::RopeStore { q, k, v, .. } => {
                    if self.graph.cols(k) != l.k_dim || self.graph.cols(v) != l.v_dim {
                        return Err(err(format!("KV store of layer {layer}: rows do not match the cache")));
                    }
                    let table =
                        b.extra.as_ref().ok_or_else(|| err("RoPE store without its angles' buffer"))?;
                    vec![Some(step_res()), act(q), act(k), act(v), whole(&l.k), whole(&l.v), whole(table)]
                }
                KvUse::Attend { q, dst, k_dim, .. } => {
                    if l.k_dim != k_dim || l.v_dim != k_dim {
                        return Err(err(format!("attention of layer {layer}: heads do not match the cache")));
                    }
                    vec![Some(step_res()), act(q), whole(&l.k), whole(&l.v), act(dst)]
                }
                KvUse::AttendSplit { q, dst, k_dim, .. } => {
                    if l.k_dim != k_dim || l.v_dim != k_dim {
                        return Err(err(format!("attention of layer {layer}: heads do not match the cache")));
                    }
                    vec![
                        Some(step_res()),
                        act(q),
                        whole(&l.k),
                        whole(&l.v),
                        whole(&self.attn_scratch),
                        act(dst),
                    ]
                }
                KvUse::Plain(_) => unreachable!("plain dispatches are bound above"),
            };
            groups.push(make(b, bufs));
        }
        let KvUse::Plain(ref slots) = self.argmax.1.what else {
            unreachable!("the argmax is a plain dispatch")
        };
        let argmax = make(&self.argmax.1, plain(slots, &step, step_bytes));
        self.bound.insert(id, CacheBinds { groups, argmax, step, layout });
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
    pub fn record(&self, enc: &mut wgpu::CommandEncoder, kv: u32, tail: Tail) {
        let cb = &self.bound[&kv];
        let kvb = &cb.groups;
        if let Tail::Argmax { fed: true, .. } = tail {
            // The token is the argmax of the step before, still on the device.
            enc.copy_buffer_to_buffer(&self.argmax_out, 0, &cb.step, 0, 4);
        }
        if let Some(q) = &self.queries {
            enc.write_timestamp(&q.set, 0);
        }
        // A timestamp after each command, unless only the span is measured.
        let qs = self.queries.as_ref().filter(|q| q.count > 2).map(|q| &q.set);
        let mut i = 0;
        while i < self.cmds.len() {
            if let Cmd::Copy { src, src_off, dst, size } = self.cmds[i] {
                enc.copy_buffer_to_buffer(&self.acts[src], src_off, &self.acts[dst], 0, size);
                i += 1;
                if let Some(qs) = qs {
                    enc.write_timestamp(qs, i as u32);
                }
                continue;
            }
            // Dispatches up to the next copy share one compute pass.
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
        match tail {
            Tail::Argmax { slot, .. } => self.record_argmax(enc, cb, slot),
            Tail::Logits => enc.copy_buffer_to_buffer(logits, 0, &self.logits_read, 0, self.logits_bytes),
            Tail::Nothing => {}
        }
        if let Some(q) = &self.queries {
            enc.write_timestamp(&q.set, q.count - 1);
            q.resolve(enc);
        }
    }
}

impl Plan {
    /// The argmax of every sequence's logits row (its two passes) and its copy to readback
    /// buffer `slot`.
    fn record_argmax(&self, enc: &mut wgpu::CommandEncoder, cb: &CacheBinds, slot: usize) {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&self.argmax.0);
        pass.set_bind_group(0, &cb.argmax, &[]);
        pass.dispatch_workgroups(self.argmax_parts, self.graph.n_seqs as u32, 1);
        pass.set_pipeline(&self.argmax_final.0);
        pass.set_bind_group(0, &self.argmax_final.1, &[]);
        pass.dispatch_workgroups(self.graph.n_seqs as u32, 1, 1);
        drop(pass);
        let bytes = 4 * self.graph.n_seqs as u64;
        enc.copy_buffer_to_buffer(&self.argmax_out, 0, &self.argmax_read[slot], 0, bytes);
    }
}

/// What a step's commands end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// The argmax of each sequence's row (with the masks written before), read back through
    /// readback buffer `slot`. `fed`: a chained step of one token, whose token is the argmax
    /// of the step before it on the device (copied into the step buffer first).
    Argmax { slot: usize, fed: bool },
    /// The logits, read back.
    Logits,
    /// Nothing: the argmax follows in its own submission ([`Plan::submit_rest`]), once the
    /// host has the masks.
    Nothing,
}

/// Little-endian bytes of `words`.
fn u32_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}
