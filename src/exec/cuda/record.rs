//! From a graph to launches: compiling a graph (validation, its buffers, the decode plan),
//! recording a step op by op or by the plan, capturing a decode step (one token, or one a sequence) as a CUDA graph and
//! replaying it, launching a kernel (with programmatic dependent launch where it can), and
//! reading the result back.

use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};

use super::device::Buf;
use super::kernels::{Kernel, Module};
use super::ops::attention::SPLIT_COUNTERS;
use super::params::KernelParams;
use super::{drv, err, ops, CudaExecutor};
use crate::exec::fuse::{self, Step};
use crate::exec::{
    check_step, mask_words, with_masks, ActId, Graph, GraphId, HostWork, KvId, Op, Readback, Rows, SeqStep,
    StepLayout, StepOutput, WeightId,
};
use crate::Result;

/// A compiled graph: the graph and its device buffers.
pub(super) struct Compiled {
    pub(super) g: Graph,
    acts: Vec<Buf<f32>>,
    /// Activations converted for the matrix products (largest need of the graph).
    pub(super) qact: Buf<u8>,
    /// The step's inputs on the device and their page-locked host copy (the packed
    /// [`StepLayout`]), sized for the largest cache this graph has run on.
    io: StepIo,
    /// The layout of the step being run (its table stride: the blocks of the step's cache).
    pub(super) layout: StepLayout,
    /// Page-locked copy of the fused argmax: a captured step starts by copying the inputs to
    /// the device and ends by copying `best` to `best_host`, so a token costs one graph launch
    /// and one wait, no separate copies.
    _best_host: cudarc::driver::PinnedHostSlice<u64>,
    /// Its address, taken once: cudarc's accessors wait on an event, which a stream being
    /// captured does not allow.
    best_host: *mut u64,
    /// The plain argmax kernel's tokens, one per sequence of the graph.
    argmax: CudaSlice<u32>,
    argmax_ptr: u64,
    /// The token masks of the step's sequences (`mask_words` of the logits a row, one row per
    /// sequence of the graph) and their address, allocated by the first step that has one.
    /// Written before the step and read by the plain argmax kernel, which runs after the
    /// step (captured or not), so a captured graph never names it.
    mask: Option<(CudaSlice<u32>, u64)>,
    /// The argmax the logits' decode kernel keeps (see `argmax_update` in matmul.cuh).
    _best: CudaSlice<u64>,
    pub(super) best_ptr: u64,
    /// The captured step, valid for one KV cache (its table stride), one attention scratch
    /// buffer and one input buffer (dropped when `io` grows).
    captured: Option<(KvId, u64, CudaGraph)>,
    /// One-token graphs: the fused launches (`exec/fuse.rs`); empty: op by op.
    plan: Vec<Step>,
}

/// The step's inputs: a device buffer and its page-locked host copy of `len` words.
struct StepIo {
    _dev: CudaSlice<u32>,
    ptr: u64,
    _host: cudarc::driver::PinnedHostSlice<u32>,
    /// The host copy's address, taken once (cudarc's accessor waits on an event, which a
    /// stream being captured does not allow).
    host: *mut u32,
    len: usize,
}

impl StepIo {
    /// Zeroed buffers of `len` words.
    fn new(stream: &Arc<CudaStream>, len: usize) -> Result<StepIo> {
        let len = len.max(1);
        let dev = stream.alloc_zeros::<u32>(len).map_err(drv("device allocation"))?;
        let ptr = dev.device_ptr(stream).0;
        // SAFETY: page-locked host memory, zeroed below before any use.
        let mut host = unsafe { stream.context().alloc_pinned_with_flags::<u32>(len, 0) }
            .map_err(drv("allocating pinned memory"))?;
        let host_ptr = host.as_mut_ptr().map_err(drv("pinned memory"))?;
        // SAFETY: a fresh page-locked buffer of `len` u32, not yet used by any copy.
        unsafe { std::ptr::write_bytes(host_ptr, 0, len) };
        Ok(StepIo { _dev: dev, ptr, _host: host, host: host_ptr, len })
    }
}

impl Compiled {
    /// The device address of slot `a`.
    pub(super) fn act(&self, a: ActId) -> u64 {
        self.acts[a.0 as usize].ptr
    }
    /// The device address of word `w` of the step's inputs.
    fn word(&self, w: usize) -> u64 {
        self.io.ptr + 4 * w as u64
    }
    /// The device address of the step's token ids.
    pub(super) fn tokens(&self) -> u64 {
        self.word(self.layout.tokens())
    }
    /// The device address of each token's position (i32).
    pub(super) fn positions(&self) -> u64 {
        self.word(self.layout.positions())
    }
    /// The device address of each token's sequence (i32).
    pub(super) fn seq_of(&self) -> u64 {
        self.word(self.layout.seq_of())
    }
    /// The device address of each sequence's first token (i32, n_seqs + 1 of them).
    pub(super) fn seq_start(&self) -> u64 {
        self.word(self.layout.seq_start())
    }
    /// The device address of each sequence's last token (u32).
    pub(super) fn last_rows(&self) -> u64 {
        self.word(self.layout.last())
    }
    /// The device address of the block tables (u32, rows of [`Compiled::table_stride`]).
    pub(super) fn tables(&self) -> u64 {
        self.word(self.layout.tables())
    }
    /// Entries of a block-table row, as the kernels take it.
    pub(super) fn table_stride(&self) -> Result<i32> {
        i32::try_from(self.layout.table_stride).map_err(|_| err("KV cache of too many blocks"))
    }
    /// Most sequences of a step of this graph, as the kernels take it.
    pub(super) fn n_seqs(&self) -> i32 {
        self.g.n_seqs as i32
    }
    /// Where the block scales of `rows` rows of `k` values start in the split q8 scratch:
    /// after the rows' quants (k bytes a row), from a 16-byte boundary (the layout of the
    /// `mmv` kernels, and of the `mmvn` kernels: every row's quants, then every row's scales).
    pub(super) fn scales_rows(&self, k: usize, rows: usize) -> u64 {
        self.qact.ptr + (rows * k).div_ceil(16) as u64 * 16
    }
    /// The host copy of slot `a` (for debugging; synchronizes).
    pub(super) fn read(&self, ex: &CudaExecutor, a: ActId) -> Result<Vec<f32>> {
        ex.stream.clone_dtoh(&self.acts[a.0 as usize].mem).map_err(drv("reading a slot"))
    }
}

impl CudaExecutor {
    /// Launch kernel `k` on a grid of `grid` blocks of `block` threads with its parameter
    /// struct `p` (the struct that `k`'s doc names; checked by name here).
    pub(super) fn launch<P: KernelParams>(
        &self,
        k: Kernel,
        grid: (u32, u32),
        block: u32,
        p: &P,
    ) -> Result<()> {
        self.launch3(k, (grid.0, grid.1, 1), block, p)
    }

    /// [`launch`](Self::launch) on a grid of three dimensions.
    pub(super) fn launch3<P: KernelParams>(
        &self,
        k: Kernel,
        grid: (u32, u32, u32),
        block: u32,
        p: &P,
    ) -> Result<()> {
        if P::NAME != k.params() {
            return Err(err(format!("kernel '{}' takes {}, not {}", k.name(), k.params(), P::NAME)));
        }
        if self.capturing.get() && !self.kernels.ready(k) {
            // Loaded after the capture, which is then made again (`capture`).
            self.missing.borrow_mut().push(k);
            return Ok(());
        }
        let f = &self.kernels.get(k)?;
        if self.pdl && k.pdl_aware() {
            return self.launch_pdl(k, f, grid, block, p);
        }
        let cfg =
            LaunchConfig { grid_dim: grid, block_dim: (block, 1, 1), shared_mem_bytes: k.dynamic_smem() };
        let mut b = self.stream.launch_builder(f);
        b.arg(p);
        // SAFETY: the kernel takes exactly one parameter, a struct whose C declaration NVRTC
        // checked against `P`'s layout (params.rs), and `P` is its struct (checked above);
        // buffer sizes are checked in `compile_graph` and `run_sync`.
        unsafe { b.launch(cfg) }.map_err(|e| err(format!("{}: {e}", k.name())))?;
        Ok(())
    }

    /// Launch with programmatic stream serialization: the kernel's blocks may start while the
    /// previous kernel runs (they wait for it in `pdl_wait`, common.cuh).
    fn launch_pdl<P: KernelParams>(
        &self,
        k: Kernel,
        f: &CudaFunction,
        grid: (u32, u32, u32),
        block: u32,
        p: &P,
    ) -> Result<()> {
        use cudarc::driver::sys;
        // One parameter: the struct, which the driver copies when the launch is enqueued.
        let mut params = [p as *const P as *mut std::ffi::c_void];
        // SAFETY: an all-zero attribute is valid plain data; its id and value are set below.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: k.dynamic_smem(),
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as in `launch`; `params` points to `p`, alive for the call.
        unsafe { sys::cuLaunchKernelEx(&cfg, f.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(|e| err(format!("{}: {e}", k.name())))
    }

    /// Check `g` against the weights and what the kernels support.
    fn validate(&self, g: &Graph) -> Result<()> {
        g.check(self.weights.len(), |w| {
            let wt = &self.weights[w.0 as usize];
            (wt.k(), wt.n_rows())
        })
        .map_err(err)?;
        for op in &g.ops {
            match op {
                Op::MatMul { w, .. } => {
                    let wt = self.weight(*w)?;
                    if wt.k() % wt.dtype.block_size() != 0 {
                        return Err(err(format!("'{}': row length {} is not whole blocks", wt.name, wt.k())));
                    }
                }
                // TakeLast reads row last[s] (a token) of x for each sequence s.
                Op::TakeLast { x, dst }
                    if g.rows(*x) != g.n_tokens || g.cols(*x) != g.cols(*dst) || g.rows(*dst) == 0 =>
                {
                    return Err(err(format!("take-last op {op:?} does not fit its slots")));
                }
                // The attention kernel keeps the query head in 512 floats of shared memory.
                Op::Attention { head_dim, n_heads, n_kv_heads, .. }
                    if *head_dim > 512 || *n_kv_heads == 0 || n_heads % n_kv_heads != 0 =>
                {
                    return Err(err(format!("attention op {op:?} is not supported")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Validate `graph`, allocate its buffers and plan its fusions.
    pub(super) fn compile_graph(&mut self, graph: &Graph) -> Result<GraphId> {
        self.validate(graph)?;
        // The attention kernels of the graph's head sizes, prefill and decode (if the weights
        // did not tell them: `hint_attention`), and the products of a few rows (steps of several
        // sequences, short prompts) where the graph has them: compiled while the first steps
        // run what is ready.
        for op in &graph.ops {
            match *op {
                Op::Attention { head_dim, n_heads, n_kv_heads, .. } => {
                    let group = n_heads / n_kv_heads.max(1);
                    self.kernels.prefetch(Module::for_attention(
                        head_dim,
                        group,
                        self.flash,
                        self.decode_mma,
                    ));
                }
                Op::MatMul { w, x, .. } => {
                    let t = self.weight(w)?.dtype;
                    if (2..=self.mmvn_limit(t)).contains(&graph.rows(x)) {
                        self.kernels.prefetch(Module::for_few_rows(t));
                    }
                }
                _ => {}
            }
        }
        let mut acts = Vec::with_capacity(graph.acts.len());
        for i in 0..graph.acts.len() {
            let a = ActId(i as u32);
            acts.push(Buf::zeros(&self.stream, graph.rows(a) * graph.cols(a))?);
        }
        let mut qbytes = 0;
        for op in &graph.ops {
            if let Op::MatMul { w, x, .. } = op {
                let (wt, rows) = (self.weight(*w)?, graph.rows(*x));
                qbytes =
                    qbytes.max(ops::qact_bytes(wt, rows, self.mmq_fill())?).max(self.blas_bytes(wt, rows));
            }
        }
        let qact = Buf::zeros(&self.stream, qbytes)?;
        // The inputs without block tables; the first step grows them for its cache.
        let layout = StepLayout::new(graph, 0);
        let io = StepIo::new(&self.stream, layout.len())?;
        let argmax = self.stream.alloc_zeros::<u32>(graph.n_seqs.max(1)).map_err(drv("device allocation"))?;
        let argmax_ptr = argmax.device_ptr(&self.stream).0;
        let ctx = self.stream.context();
        // SAFETY: page-locked host memory, written before it is read.
        let mut best_host =
            unsafe { ctx.alloc_pinned_with_flags::<u64>(1, 0) }.map_err(drv("allocating pinned memory"))?;
        let best_host_ptr = best_host.as_mut_ptr().map_err(drv("pinned memory"))?;
        // SAFETY: a fresh page-locked buffer of one u64, not yet used by any copy.
        unsafe { best_host_ptr.write(0) };
        let best = self.stream.alloc_zeros::<u64>(1).map_err(drv("device allocation"))?;
        let best_ptr = best.device_ptr(&self.stream).0;
        // Decode plans for one-token steps and for the steps of a few sequences (up to the
        // `mmvn_limit` of every product's type, in `mmvn` launches of up to `mmvn_rows` rows;
        // their split q8 layout wants rows of whole 32-value blocks).
        let dtype = |w: WeightId| self.weights.get(w.0 as usize).map(|w| w.dtype);
        let few = graph.n_tokens >= 2
            && graph.ops.iter().all(|op| match op {
                Op::MatMul { x, w, .. } => {
                    graph.cols(*x).is_multiple_of(32)
                        && dtype(*w).is_some_and(|t| graph.n_tokens <= self.mmvn_limit(t))
                }
                _ => true,
            });
        let plan = if (graph.n_tokens == 1 || few) && self.use_fusion {
            fuse::plan(graph, &ops::fusions(|w| self.act_quant(w), dtype, graph.n_tokens))
        } else {
            Vec::new()
        };
        self.graphs.push(Some(Compiled {
            plan,
            g: graph.clone(),
            acts,
            qact,
            io,
            layout,
            argmax,
            argmax_ptr,
            mask: None,
            _best: best,
            best_ptr,
            best_host: best_host_ptr,
            _best_host: best_host,
            captured: None,
        }));
        super::kernels::trace(|| format!("graph of {} tokens compiled", graph.n_tokens));
        Ok(GraphId(self.graphs.len() as u32 - 1))
    }

    /// Free graph `graph`: its activations, pinned step buffers and captured CUDA graph. Every
    /// step ends with a synchronization, so nothing on the stream still uses them.
    pub(super) fn free_graph_bufs(&mut self, graph: GraphId) {
        if let Some(slot) = self.graphs.get_mut(graph.0 as usize) {
            *slot = None;
        }
    }

    /// Enqueue a whole step: the copy of its inputs, the decode plan if there is one (else
    /// op by op), and the copy of the fused argmax.
    fn record_all(&self, c: &Compiled, kv: KvId) -> Result<()> {
        // The current layout's words (at most io.len: run_sync grows `io` first).
        let n = c.layout.len().min(c.io.len);
        // SAFETY: io.host points to io.len page-locked u32 owned by `c`.
        let io = unsafe { std::slice::from_raw_parts(c.io.host, n) };
        // SAFETY: io.ptr is the device buffer of io.len words, as long as the host copy.
        unsafe { cudarc::driver::result::memcpy_htod_async(c.io.ptr, io, self.stream.cu_stream()) }
            .map_err(drv("uploading the step's inputs"))?;
        if c.plan.is_empty() {
            if self.profile {
                return self.record_profiled(c, kv);
            }
            return c.g.ops.iter().try_for_each(|op| self.record(c, kv, op));
        }
        let argmax = c.plan.iter().any(|s| matches!(s, Step::MatVec { argmax: true, .. }));
        if argmax {
            // Zeroed before the first kernel, not between two (which would cut the chain of
            // programmatic launches).
            // SAFETY: best_ptr is the 8-byte buffer `best` of this compiled graph.
            unsafe { cudarc::driver::result::memset_d8_async(c.best_ptr, 0, 8, self.stream.cu_stream()) }
                .map_err(drv("zeroing the argmax"))?;
        }
        c.plan.iter().try_for_each(|s| self.record_step(c, kv, s))?;
        if argmax {
            let ptr = c.best_host;
            // SAFETY: best_host is page-locked memory of one u64 owned by `c`; the host reads
            // it only after synchronizing the stream.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr, 1) };
            unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, c.best_ptr, self.stream.cu_stream()) }
                .map_err(drv("reading the argmax"))?;
        }
        Ok(())
    }

    /// Enqueue one op on the stream (the launchers are in `ops/`).
    pub(super) fn record(&self, c: &Compiled, kv: KvId, op: &Op) -> Result<()> {
        match *op {
            Op::Embed { table, dst, scale } => self.embed(c, table, dst, scale),
            Op::RmsNorm { x, weight, dst, group, eps } => self.rms_norm(c, x, weight, dst, group, eps),
            Op::MatMul { w, x, dst, bias } => self.matmul(c, op, w, x, dst, bias),
            Op::Rope { .. } => self.rope(c, op),
            Op::KvStore { layer, k, v } => self.kv_store(c, kv, layer, k, v),
            Op::Attention { .. } => self.attention(c, kv, op),
            Op::GatedAct { gate, up, act } => self.gated_act(c, gate, up, act),
            Op::Add { a, b, dst } => self.add(c, a, b, dst),
            Op::TakeLast { x, dst } => self.take_last(c, x, dst),
        }
    }

    /// Enqueue one step of a decode plan.
    fn record_step(&self, c: &Compiled, kv: KvId, step: &Step) -> Result<()> {
        match *step {
            Step::Op(i) => self.record(c, kv, &c.g.ops[i]),
            Step::NormQuant { op, kind } => self.rms_norm_quant(c, op, kind),
            Step::Quant { x, kind } => self.quantize_split(c, x, kind),
            Step::MatVec3 { w, bias, dst, .. } => self.matvec3(c, w, bias, dst),
            Step::RopeKv { op } => self.rope_kv(c, kv, op),
            Step::MatVec { w, gate, bias, add, dst, argmax, .. } => {
                self.matvec(c, w, gate, bias, add, dst, argmax)
            }
        }
    }

    /// Enqueue graph `c` op by op, timing each (see [`profiling`]).
    fn record_profiled(&self, c: &Compiled, kv: KvId) -> Result<()> {
        let mut times: Vec<(String, f64, usize)> = Vec::new();
        let sync = || self.stream.synchronize().map_err(drv("profiling"));
        for op in &c.g.ops {
            sync()?;
            let t = std::time::Instant::now();
            self.record(c, kv, op)?;
            sync()?;
            let dt = t.elapsed().as_secs_f64();
            let label = match op {
                Op::MatMul { w, x, .. } => {
                    let wt = self.weight(*w)?;
                    format!("MatMul {} {}x{}", wt.dtype, wt.k(), wt.n_rows())
                        + &format!(" rows {}", c.g.rows(*x))
                }
                other => format!("{other:?}").split([' ', '{']).next().unwrap_or("?").to_string(),
            };
            match times.iter_mut().find(|e| e.0 == label) {
                Some(e) => {
                    e.1 += dt;
                    e.2 += 1;
                }
                None => times.push((label, dt, 1)),
            }
        }
        times.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = times.iter().map(|e| e.1).sum();
        eprintln!("profile: {} tokens, {:.3} ms", c.g.n_tokens, total * 1e3);
        for (label, t, n) in times {
            eprintln!("  {:8.3} ms {n:4}x {label}", t * 1e3);
        }
        Ok(())
    }

    /// Run compiled graph `graph` on the tokens of `seqs` with cache `kv` and read back.
    pub(super) fn run_sync(
        &mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &[SeqStep],
        readback: Readback,
        work: Option<HostWork>,
    ) -> Result<StepOutput> {
        let out = self.run_step(graph, kv, seqs, readback, work);
        super::kernels::trace(|| {
            let n = self.graphs.get(graph.0 as usize).and_then(Option::as_ref).map_or(0, |c| c.g.n_tokens);
            format!("step of a {n}-token graph done")
        });
        out
    }

    fn run_step(
        &mut self,
        graph: GraphId,
        kv: KvId,
        seqs: &[SeqStep],
        readback: Readback,
        work: Option<HostWork>,
    ) -> Result<StepOutput> {
        let gi = graph.0 as usize;
        let c = self.graphs.get(gi).and_then(Option::as_ref).ok_or_else(|| err("unknown graph"))?;
        let (n_ctx, n_blocks) = (self.kv(kv)?.n_ctx, self.kv(kv)?.n_blocks);
        let n_vocab = match c.g.embed_table() {
            Some(t) => self.weight(t)?.n_rows(),
            None => 0,
        };
        check_step(&c.g, "cuda", seqs, readback, n_blocks, n_vocab)?;
        // The kernels take positions, rows and block numbers as 32-bit integers.
        if i32::try_from(n_ctx).is_err() || i32::try_from(c.g.n_tokens).is_err() {
            return Err(err("KV cache or step too large for 32-bit positions"));
        }
        // Attention scratch: the split kernel's counters, then what the largest attention op
        // needs (ops/attention.rs).
        let need = SPLIT_COUNTERS
            + c.g
                .ops
                .iter()
                .map(|op| match op {
                    Op::Attention { q, .. } => self.attention_scratch(c.g.rows(*q), c.g.n_seqs, op, n_ctx),
                    _ => 0,
                })
                .max()
                .unwrap_or(0);
        if self.scores.as_ref().is_none_or(|(_, n)| *n < need) {
            self.scores = Some((Buf::zeros(&self.stream, need)?, need));
        }
        let layout = StepLayout::new(&c.g, n_blocks);
        let words = layout.pack(seqs);
        let scores = self.scores.as_ref().map_or(0, |s| s.0.ptr);
        let c = self.graphs[gi].as_mut().ok_or_else(|| err("unknown graph"))?;
        if words.len() > c.io.len {
            // A larger cache's tables: new buffers, so a new capture. The stream is idle after
            // every step; the synchronization covers a step that failed half recorded.
            self.stream.synchronize().map_err(drv("growing the step's inputs"))?;
            c.captured = None;
            c.io = StepIo::new(&self.stream, words.len())?;
        }
        c.layout = layout;
        // SAFETY: io.host points to io.len page-locked u32 owned by `c`; the stream is idle
        // (every step ends with a synchronization), so no copy reads them now.
        let host = unsafe { std::slice::from_raw_parts_mut(c.io.host, c.io.len) };
        host[..words.len()].copy_from_slice(&words);
        if self.use_graphs && c.g.n_tokens <= self.graph_max_tokens {
            // The captured graph's parameters hold the table stride: one capture per cache.
            let fresh = matches!(&c.captured, Some((k, s, _)) if *k == kv && *s == scores);
            if !fresh {
                c.captured = None;
                let graph = self.capture(gi, kv)?;
                self.graphs[gi].as_mut().ok_or_else(|| err("unknown graph"))?.captured =
                    Some((kv, scores, graph));
            }
            let c = self.graphs[gi].as_ref().ok_or_else(|| err("unknown graph"))?;
            let graph = c.captured.as_ref().map(|x| &x.2).ok_or_else(|| err("no captured graph"))?;
            graph.launch().map_err(drv("graph launch"))?;
        } else {
            self.record_all(self.graphs[gi].as_ref().ok_or_else(|| err("unknown graph"))?, kv)?;
        }
        // The host's work runs while the GPU runs the forward pass (the captured graph, or the
        // launches just queued); then the token masks, checked as the step's own, are queued
        // behind it for the argmax kernel below (the forward pass does not read them).
        let masks = match work {
            Some(work) => work().and_then(|m| {
                let seqs = with_masks(seqs, &m);
                check_step(
                    &self.graphs[gi].as_ref().ok_or_else(|| err("unknown graph"))?.g,
                    "cuda",
                    &seqs,
                    readback,
                    n_blocks,
                    n_vocab,
                )?;
                Ok(m)
            }),
            None => Ok(Vec::new()),
        };
        let masks = match masks {
            Ok(m) => m,
            Err(e) => {
                // Every step leaves the stream idle (the step inputs' host buffer relies on it).
                self.stream.synchronize().map_err(drv("abandoning a step"))?;
                return Err(e);
            }
        };
        let masked_seqs = with_masks(seqs, &masks);
        let seqs = &masked_seqs[..];
        let masked = seqs.iter().any(|s| s.mask.is_some());
        if masked {
            let c = self.graphs[gi].as_mut().ok_or_else(|| err("unknown graph"))?;
            let mw = mask_words(c.g.cols(c.g.logits));
            if c.mask.is_none() {
                let m = self.stream.alloc_zeros::<u32>(mw * c.g.n_seqs).map_err(drv("device allocation"))?;
                let ptr = m.device_ptr(&self.stream).0;
                c.mask = Some((m, ptr));
            }
            // Each sequence's mask, all ones for a sequence without one.
            let host: Vec<u32> = seqs
                .iter()
                .flat_map(|s| s.mask.map_or_else(|| vec![u32::MAX; mw], <[u32]>::to_vec))
                .collect();
            let (m, _) = c.mask.as_mut().ok_or_else(|| err("no mask buffer"))?;
            self.stream
                .memcpy_htod(&host, &mut m.slice_mut(..host.len()))
                .map_err(drv("uploading the token masks"))?;
        }
        let c = self.graphs[gi].as_ref().ok_or_else(|| err("unknown graph"))?;
        let g = &c.g;
        let n_vocab = g.cols(g.logits);
        let rows = g.rows(g.logits);
        // The logits rows of the step's sequences: each one's last token's row (a slot of all
        // rows), or the first rows of a slot of a row per sequence (`Rows::Last`).
        let n_step = seqs.len();
        let per_token = g.acts[g.logits.0 as usize].rows == Rows::All;
        let seq_rows: Vec<usize> = if per_token {
            words[layout.last()..layout.last() + n_step].iter().map(|&r| r as usize).collect()
        } else {
            (0..n_step).collect()
        };
        if seq_rows.iter().any(|&r| r >= rows) {
            return Err(err("the logits slot has fewer rows than the step's sequences"));
        }
        let row_ptr = |r: usize| c.act(g.logits) + 4 * (r * n_vocab) as u64;
        let fused_argmax = c.plan.iter().any(|s| matches!(s, Step::MatVec { argmax: true, .. }));
        // Sequence i's token mask on the device (0: none).
        let mask_ptr = |i: usize| match (&c.mask, masked) {
            (Some((_, ptr)), true) => ptr + 4 * (i * mask_words(n_vocab)) as u64,
            _ => 0,
        };
        let out = match readback {
            // Decode plans are made for one-token graphs only: one sequence, one row. A step
            // with a token mask leaves the fused argmax (which the captured graph still
            // computes) to the argmax kernel below, which reads the mask.
            Readback::Argmax if fused_argmax && n_step == 1 && !masked => {
                self.stream.synchronize().map_err(drv("reading the token back"))?;
                // SAFETY: page-locked u64 owned by `c`, written by the copy the stream finished.
                let best = unsafe { c.best_host.read_volatile() };
                // No key (all logits NaN): token 0, as the argmax kernel answers.
                let token = if best == 0 { 0 } else { u32::MAX - best as u32 };
                StepOutput { tokens: vec![token], logits: Vec::new() }
            }
            Readback::Argmax => {
                if per_token {
                    for (i, &r) in seq_rows.iter().enumerate() {
                        self.argmax(row_ptr(r), n_vocab, 1, mask_ptr(i), c.argmax_ptr + 4 * i as u64)?;
                    }
                } else {
                    self.argmax(row_ptr(0), n_vocab, n_step, mask_ptr(0), c.argmax_ptr)?;
                }
                let mut t = self.stream.clone_dtoh(&c.argmax).map_err(drv("reading the tokens back"))?;
                t.truncate(n_step);
                StepOutput { tokens: t, logits: Vec::new() }
            }
            Readback::LastLogits | Readback::AllLogits => {
                let all = self
                    .stream
                    .clone_dtoh(&c.acts[g.logits.0 as usize].mem)
                    .map_err(drv("reading logits"))?;
                let logits = if readback == Readback::LastLogits {
                    seq_rows
                        .iter()
                        .flat_map(|&r| all[r * n_vocab..(r + 1) * n_vocab].iter().copied())
                        .collect()
                } else {
                    all[..rows * n_vocab].to_vec()
                };
                StepOutput { tokens: Vec::new(), logits }
            }
        };
        Ok(out)
    }

    /// Capture the steps of graph `gi` on cache `kv` as a CUDA graph. A capture that met
    /// kernels not loaded yet (the launch skipped) is thrown away, and made again once they
    /// are loaded.
    fn capture(&self, gi: usize, kv: KvId) -> Result<CudaGraph> {
        let c = self.graphs[gi].as_ref().ok_or_else(|| err("unknown graph"))?;
        // The second pass finds every kernel loaded; a third is a bug, not a wait.
        for _ in 0..3 {
            self.stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(drv("starting a graph capture"))?;
            self.capturing.set(true);
            let recorded = self.record_all(c, kv);
            self.capturing.set(false);
            // End the capture whatever happened, so the stream is usable again.
            let graph =
                self.stream.end_capture(CUgraphInstantiate_flags(0)).map_err(drv("ending a graph capture"));
            let missing = std::mem::take(&mut *self.missing.borrow_mut());
            recorded?;
            let graph = graph?;
            if missing.is_empty() {
                return graph.ok_or_else(|| err("the graph capture came back empty"));
            }
            for k in missing {
                self.kernels.get(k)?;
            }
        }
        Err(err("a graph capture kept meeting kernels not loaded"))
    }
}
