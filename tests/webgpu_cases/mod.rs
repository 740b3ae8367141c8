//! The WebGPU op cases, shared by the native tests (tests/webgpu_ops.rs: lavapipe) and the
//! browser tests (tests/web_ops.rs: Chromium's SwiftShader): every op of the WebGPU executor
//! against the CPU reference, on fresh random inputs at several shapes. Each case is an async
//! function taking the WebGPU executor to test (each target acquires it its own way) and builds
//! tiny graphs directly: inputs come from F32 embedding tables (rows picked by the token ids),
//! the op under test writes the output slot.
//!
//! Tolerances (max |gpu − cpu| over the output, relative to max |cpu|):
//! - matmul: 1e-4 (same q8 activation quantization and integer block dots as the CPU; only
//!   the float summation order differs). A rounding tie that flips one q8 value would exceed
//!   it and is reported.
//! - RMSNorm, RoPE, embed, add, gated activations: 1e-5 (GELU: 2e-3, its f16 rounding can
//!   flip on a tanh ulp); attention: 2e-3 (f16 probabilities can round differently after an
//!   ulp of difference in exp).
#![allow(dead_code)]

use half::f16;
use wick::exec::cpu::CpuExecutor;
use wick::exec::webgpu::WebGpuExecutor;
use wick::exec::{
    ActId, Executor, Gate, Graph, GraphId, KvId, KvSpec, Op, Readback, RopeMode, Rows, WeightId,
};
use wick::quant::GgmlType;

pub struct Rng(u64);

impl Rng {
    /// A generator from a nonzero seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
}

/// Random raw bytes of a `k × n` tensor of type `t`, with sane block scales.
fn random_weight(rng: &mut Rng, t: GgmlType, k: usize, n: usize) -> Vec<u8> {
    let count = k * n;
    match t {
        GgmlType::F32 => return rng.vec(count, 1.0).iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => {
            return rng.vec(count, 1.0).iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect()
        }
        GgmlType::BF16 => {
            return rng.vec(count, 1.0).iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect()
        }
        _ => {}
    }
    let bytes = t.row_bytes(k as u64).unwrap() as usize * n;
    let mut b: Vec<u8> = (0..bytes).map(|_| rng.next() as u8).collect();
    let (bs, scales): (usize, &[usize]) = match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => (t.type_size(), &[0]),
        GgmlType::Q4_1 | GgmlType::Q5_1 => (t.type_size(), &[0, 2]),
        GgmlType::Q4_K | GgmlType::Q5_K => (t.type_size(), &[0, 2]),
        GgmlType::Q2_K => (t.type_size(), &[80, 82]),
        GgmlType::Q3_K => (t.type_size(), &[108]),
        GgmlType::Q6_K => (t.type_size(), &[208]),
        _ => panic!("no generator for {t}"),
    };
    for blk in b.chunks_mut(bs) {
        for &o in scales {
            let v = f16::from_f32(0.002 + 0.02 * (rng.f() + 1.0) / 2.0);
            blk[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    b
}

/// The same weights, caches and graphs on both executors.
struct Pair {
    cpu: CpuExecutor,
    gpu: WebGpuExecutor,
    rng: Rng,
}

impl Pair {
    fn new(gpu: WebGpuExecutor, seed: u64) -> Pair {
        Pair { cpu: CpuExecutor::new(), gpu, rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1) }
    }
    fn weight_bytes(&mut self, t: GgmlType, dims: &[u64], bytes: &[u8]) -> WeightId {
        let a = self.cpu.alloc_weight("w", t, dims).unwrap();
        let b = self.gpu.alloc_weight("w", t, dims).unwrap();
        assert_eq!(a, b);
        // In chunks like the loader (multiples of 4 but the last).
        let mut off = 0;
        for c in bytes.chunks(4096) {
            self.cpu.write_weight(a, off, c).unwrap();
            self.gpu.write_weight(b, off, c).unwrap();
            off += c.len() as u64;
        }
        a
    }
    fn weight(&mut self, t: GgmlType, k: usize, n: usize) -> WeightId {
        let bytes = random_weight(&mut self.rng, t, k, n);
        let dims: Vec<u64> = if n == 1 { vec![k as u64] } else { vec![k as u64, n as u64] };
        self.weight_bytes(t, &dims, &bytes)
    }
    /// An F32 table of `rows` random rows of `cols`, times `scale`.
    fn table(&mut self, cols: usize, rows: usize, scale: f32) -> WeightId {
        let v = self.rng.vec(cols * rows, scale);
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.weight_bytes(GgmlType::F32, &[cols as u64, rows as u64], &bytes)
    }
    fn kv(&mut self, n_ctx: usize, dim: usize) -> KvId {
        let spec = KvSpec { n_ctx, k_dims: vec![dim], v_dims: vec![dim] };
        let a = self.cpu.alloc_kv(&spec).unwrap();
        let b = self.gpu.alloc_kv(&spec).unwrap();
        assert_eq!(a, b);
        a
    }
    fn compile(&mut self, g: &Graph) -> GraphId {
        let a = self.cpu.compile(g).unwrap();
        let b = self.gpu.compile(g).unwrap();
        assert_eq!(a, b);
        a
    }
    /// Run on both; the graph's output slot from each.
    async fn run(&mut self, g: GraphId, kv: KvId, tokens: &[u32], pos: usize) -> (Vec<f32>, Vec<f32>) {
        let a = self.cpu.run(g, kv, tokens, pos, Readback::AllLogits).await.unwrap().logits;
        let b = self.gpu.run(g, kv, tokens, pos, Readback::AllLogits).await.unwrap().logits;
        (a, b)
    }
    fn tokens(&mut self, n: usize, vocab: usize) -> Vec<u32> {
        (0..n).map(|_| (self.rng.next() % vocab as u64) as u32).collect()
    }
}

/// Max |a − b| relative to max |a|; panics above `tol`.
fn assert_close(what: &str, cpu: &[f32], gpu: &[f32], tol: f32) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: lengths differ");
    let scale = cpu.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let (mut worst, mut at) = (0f32, 0);
    for (i, (a, b)) in cpu.iter().zip(gpu).enumerate() {
        let e = (a - b).abs();
        if e > worst || e.is_nan() {
            worst = e;
            at = i;
        }
    }
    let rel = worst / scale;
    let line = format!("{what}: max error {worst:.3e} ({rel:.1e} of {scale:.3}) at {at}");
    #[cfg(target_arch = "wasm32")]
    wasm_bindgen_test::console_log!("{line}");
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{line}");
    assert!(rel <= tol, "{what}: error {rel:.2e} > {tol:.0e} at {at}: cpu {} gpu {}", cpu[at], gpu[at]);
}

/// Graph with inputs embedded from `tables` (one slot per table, `rows` rows), then `f`
/// pushes the op under test; the returned slot is the output.
fn graph(rows: usize, inputs: &[(WeightId, usize)], f: impl FnOnce(&mut Graph, &[ActId]) -> ActId) -> Graph {
    let mut g = Graph::new(rows);
    let slots: Vec<ActId> = inputs
        .iter()
        .map(|&(table, cols)| {
            let s = g.act(Rows::All, cols);
            g.push(Op::Embed { table, dst: s, scale: 1.0 });
            s
        })
        .collect();
    g.logits = f(&mut g, &slots);
    g
}

const VOCAB: usize = 16;

pub async fn matmul_every_type(gpu: WebGpuExecutor) {
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];
    let mut p = Pair::new(gpu, 1);
    // Cooperative kernels reducing with and without subgroup operations, and one row per invocation.
    let modes = [(true, true), (true, false), (false, false)];
    for (t, (coop, sg)) in types.iter().flat_map(|&t| modes.map(|m| (t, m))) {
        p.gpu.set_cooperative_matmul(coop);
        let sg = p.gpu.set_subgroup_reduce(sg);
        // n = 2050 and 4099: two and four rows per cooperative workgroup, with a ragged end.
        for (k, n, rows) in [(256, 40, 1), (512, 67, 3), (768, 9, 2), (512, 2050, 1), (256, 4099, 2)] {
            let x = p.table(k, VOCAB, 1.0);
            let w = p.weight(t, k, n);
            let g = graph(rows, &[(x, k)], |g, s| {
                let dst = g.act(Rows::All, n);
                g.push(Op::MatMul { w, x: s[0], dst, bias: None });
                dst
            });
            let id = p.compile(&g);
            let kv = p.kv(8, 2);
            let toks = p.tokens(rows, VOCAB);
            let (a, b) = p.run(id, kv, &toks, 0).await;
            assert_close(&format!("matmul {t} k={k} n={n} rows={rows} coop={coop} sg={sg}"), &a, &b, 1e-4);
        }
    }
}

pub async fn matmul_bias_and_shared_input(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 2);
    let (k, n, rows) = (128, 33, 2);
    for coop in [true, false] {
        p.gpu.set_cooperative_matmul(coop);
        let x = p.table(k, VOCAB, 1.0);
        let w1 = p.weight(GgmlType::Q8_0, k, n);
        let w2 = p.weight(GgmlType::Q4_1, k, n);
        let bias = p.weight(GgmlType::F32, n, 1);
        let g = graph(rows, &[(x, k)], |g, s| {
            let d1 = g.act(Rows::All, n);
            let d2 = g.act(Rows::All, n);
            g.push(Op::MatMul { w: w1, x: s[0], dst: d1, bias: Some(bias) });
            g.push(Op::MatMul { w: w2, x: s[0], dst: d2, bias: None });
            g.push(Op::Add { a: d1, b: d2, dst: d1 });
            d1
        });
        let id = p.compile(&g);
        let kv = p.kv(8, 2);
        let toks = p.tokens(rows, VOCAB);
        let (a, b) = p.run(id, kv, &toks, 0).await;
        assert_close(&format!("matmul q8_0+bias + q4_1, coop={coop}"), &a, &b, 1e-4);
    }
}

pub async fn embed_every_type(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 3);
    for t in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let k = 512;
        let table = p.weight(t, k, 50);
        let mut g = Graph::new(5);
        let dst = g.act(Rows::All, k);
        g.push(Op::Embed { table, dst, scale: 1.5 });
        g.logits = dst;
        let id = p.compile(&g);
        let kv = p.kv(8, 2);
        let toks = p.tokens(5, 50);
        let (a, b) = p.run(id, kv, &toks, 0).await;
        assert_close(&format!("embed {t}"), &a, &b, 1e-6);
    }
}

pub async fn rms_norm_rows_and_heads(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 4);
    for (cols, group, in_place) in [(576, 576, false), (640, 640, true), (256, 64, true), (96, 32, false)] {
        let x = p.table(cols, VOCAB, 3.0);
        let w = p.weight(GgmlType::F32, group, 1);
        let g = graph(3, &[(x, cols)], |g, s| {
            let dst = if in_place { s[0] } else { g.act(Rows::All, cols) };
            g.push(Op::RmsNorm { x: s[0], weight: w, dst, group, eps: 1e-6 });
            dst
        });
        let id = p.compile(&g);
        let kv = p.kv(8, 2);
        let toks = p.tokens(3, VOCAB);
        let (a, b) = p.run(id, kv, &toks, 0).await;
        assert_close(&format!("rms_norm cols={cols} group={group}"), &a, &b, 1e-5);
    }
}

pub async fn rope_normal_and_neox(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 5);
    for (mode, n_heads, head_dim, n_rot, pos) in [
        (RopeMode::Normal, 3, 64, 64, 0),
        (RopeMode::Neox, 4, 32, 32, 37),
        (RopeMode::Neox, 2, 128, 64, 1500),
    ] {
        let cols = n_heads * head_dim;
        let x = p.table(cols, VOCAB, 1.0);
        let g = graph(4, &[(x, cols)], |g, s| {
            g.push(Op::Rope { x: s[0], n_heads, head_dim, n_rot, base: 10000.0, freq_scale: 1.0, mode });
            s[0]
        });
        let id = p.compile(&g);
        let kv = p.kv(2048, 2);
        let toks = p.tokens(4, VOCAB);
        let (a, b) = p.run(id, kv, &toks, pos).await;
        assert_close(&format!("rope {mode:?} pos={pos}"), &a, &b, 1e-5);
    }
}

pub async fn attention_with_history_window_softcap(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 6);
    for (n_heads, n_kv, hd, rows, window, softcap) in [
        (4, 2, 64, 3, None, None),
        (3, 1, 128, 1, None, None),
        (4, 4, 32, 2, Some(4), None),
        (2, 1, 256, 2, None, Some(30.0)),
    ] {
        let (qd, kd) = (n_heads * hd, n_kv * hd);
        let (tq, tk, tv) = (p.table(qd, VOCAB, 2.0), p.table(kd, VOCAB, 2.0), p.table(kd, VOCAB, 1.0));
        let g = graph(rows, &[(tq, qd), (tk, kd), (tv, kd)], |g, s| {
            let dst = g.act(Rows::All, qd);
            g.push(Op::KvStore { layer: 0, k: s[1], v: s[2] });
            g.push(Op::Attention {
                layer: 0,
                q: s[0],
                dst,
                n_heads,
                n_kv_heads: n_kv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window,
                softcap,
            });
            dst
        });
        let id = p.compile(&g);
        let kv = p.kv(64, kd);
        // Several steps, so later ones attend over history (and past the window).
        for step in 0..5 {
            let toks = p.tokens(rows, VOCAB);
            let (a, b) = p.run(id, kv, &toks, step * rows).await;
            assert_close(
                &format!("attention h={n_heads}/{n_kv} hd={hd} rows={rows} step={step}"),
                &a,
                &b,
                2e-3,
            );
        }
        // Past 2048 keys the kernel recomputes scores rather than keeping them.
        if window.is_none() {
            let kv = p.kv(2100, kd);
            for pos in [0, 2000, 2090] {
                let toks = p.tokens(rows, VOCAB);
                let (a, b) = p.run(id, kv, &toks, pos).await;
                assert_close(&format!("attention h={n_heads}/{n_kv} hd={hd} at {pos}"), &a, &b, 2e-3);
            }
        }
    }
}

pub async fn gated_act_add_take_last(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 7);
    for act in [Gate::Silu, Gate::Gelu] {
        let n = 1000;
        let (tg, tu) = (p.table(n, VOCAB, 4.0), p.table(n, VOCAB, 1.0));
        let g = graph(2, &[(tg, n), (tu, n)], |g, s| {
            g.push(Op::GatedAct { gate: s[0], up: s[1], act });
            s[0]
        });
        let id = p.compile(&g);
        let kv = p.kv(8, 2);
        let toks = p.tokens(2, VOCAB);
        let (a, b) = p.run(id, kv, &toks, 0).await;
        assert_close(&format!("gated {act:?}"), &a, &b, if act == Gate::Gelu { 2e-3 } else { 1e-5 });
    }
    let n = 300;
    let (ta, tb) = (p.table(n, VOCAB, 1.0), p.table(n, VOCAB, 1.0));
    let g = graph(3, &[(ta, n), (tb, n)], |g, s| {
        let sum = g.act(Rows::All, n);
        g.push(Op::Add { a: s[0], b: s[1], dst: sum });
        g.push(Op::Add { a: s[0], b: sum, dst: sum });
        let last = g.act(Rows::Last, n);
        g.push(Op::TakeLast { x: sum, dst: last });
        last
    });
    let id = p.compile(&g);
    let kv = p.kv(8, 2);
    let toks = p.tokens(3, VOCAB);
    let (a, b) = p.run(id, kv, &toks, 0).await;
    assert_close("add, add in place, take_last", &a, &b, 1e-6);
}

pub async fn argmax_on_device(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 8);
    let n = 5000;
    let t = p.table(n, VOCAB, 1.0);
    let g = graph(2, &[(t, n)], |_, s| s[0]);
    let id = p.compile(&g);
    let kv = p.kv(8, 2);
    for _ in 0..4 {
        let toks = p.tokens(2, VOCAB);
        let a = p.cpu.run(id, kv, &toks, 0, Readback::Argmax).await.unwrap().token;
        let b = p.gpu.run(id, kv, &toks, 0, Readback::Argmax).await.unwrap().token;
        assert_eq!(a, b);
        let a = p.cpu.run(id, kv, &toks, 0, Readback::LastLogits).await.unwrap().logits;
        let b = p.gpu.run(id, kv, &toks, 0, Readback::LastLogits).await.unwrap().logits;
        assert_eq!(a, b);
    }
}

pub async fn bad_token_is_an_error(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 9);
    let t = p.table(8, VOCAB, 1.0);
    let g = graph(1, &[(t, 8)], |_, s| s[0]);
    let id = p.compile(&g);
    let kv = p.kv(8, 2);
    assert!(p.gpu.run(id, kv, &[VOCAB as u32], 0, Readback::Argmax).await.is_err());
    assert!(p.gpu.run(id, kv, &[1], 8, Readback::Argmax).await.is_err());
    assert!(p.gpu.run(id, kv, &[1], 0, Readback::Argmax).await.is_ok());
}

pub async fn matmul_model_shapes(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 10);
    for (t, k, n, rows) in [
        (GgmlType::Q4_1, 576, 1536, 6),
        (GgmlType::Q4_1, 1536, 576, 6),
        (GgmlType::Q8_0, 576, 49152, 1),
        (GgmlType::Q8_0, 576, 192, 6),
    ] {
        let x = p.table(k, VOCAB, 1.0);
        let w = p.weight(t, k, n);
        let g = graph(rows, &[(x, k)], |g, s| {
            let dst = g.act(Rows::All, n);
            g.push(Op::MatMul { w, x: s[0], dst, bias: None });
            dst
        });
        let id = p.compile(&g);
        let kv = p.kv(8, 2);
        let toks = p.tokens(rows, VOCAB);
        let (a, b) = p.run(id, kv, &toks, 0).await;
        assert_close(&format!("matmul {t} k={k} n={n} rows={rows}"), &a, &b, 1e-4);
    }
}

/// Weights split across several buffers (as Gemma 3's 167 MiB embedding is on a 128 MiB
/// binding limit), forced here with a small cap: embed and matmul read every part.
pub async fn split_weights(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 11);
    p.gpu.cap_binding_size(40 * 1024);
    for t in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F32] {
        let (k, n, rows) = (512, 300, 3);
        let table = p.weight(t, k, n);
        let g = graph(rows, &[], |g, _| {
            let x = g.act(Rows::All, k);
            g.push(Op::Embed { table, dst: x, scale: 1.0 });
            let dst = g.act(Rows::All, n);
            g.push(Op::MatMul { w: table, x, dst, bias: None });
            dst
        });
        let id = p.compile(&g);
        let kv = p.kv(8, 2);
        let toks = [0, 299, 150];
        let (a, b) = p.run(id, kv, &toks, 0).await;
        assert_close(&format!("split {t} embed + tied matmul"), &a, &b, 1e-4);
    }
}

/// A Llama-like layer, whose ops the executor fuses (RMSNorm with the quantization for the
/// next product, RoPE of queries and keys with the KV store, products with the residual add
/// after them, gate and up with SiLU), over several steps, against the CPU; then the same
/// with fusion off.
pub async fn fused_layer(gpu: WebGpuExecutor) {
    let mut p = Pair::new(gpu, 12);
    let (ne, n_heads, n_kv, hd) = (512, 4, 2, 64);
    let (qd, kd) = (n_heads * hd, n_kv * hd);
    // (fusion, type of Q and O, rope mode, token rows, cooperative matmul kernels)
    for (fuse, wt, mode, rows, coop) in [
        (true, GgmlType::Q4_K, RopeMode::Normal, 1, true),
        (true, GgmlType::Q8_0, RopeMode::Neox, 3, false),
        (true, GgmlType::Q6_K, RopeMode::Normal, 2, true),
        (true, GgmlType::Q4_0, RopeMode::Normal, 1, true),
        (true, GgmlType::F16, RopeMode::Normal, 2, true),
        (false, GgmlType::Q4_K, RopeMode::Neox, 2, true),
    ] {
        p.gpu.set_fusion(fuse);
        p.gpu.set_cooperative_matmul(coop);
        // The residual as large as the block's output, so that a lost add shows.
        let tx = p.table(ne, VOCAB, 1e5);
        let norm = p.weight(GgmlType::F32, ne, 1);
        let (wq, wk, wv) =
            (p.weight(wt, ne, qd), p.weight(GgmlType::Q4_K, ne, kd), p.weight(GgmlType::Q6_K, ne, kd));
        let wo = p.weight(wt, qd, ne);
        let nf = 768;
        let norm2 = p.weight(GgmlType::F32, ne, 1);
        let (wg, wu, wd) = (p.weight(wt, ne, nf), p.weight(wt, ne, nf), p.weight(GgmlType::Q6_K, nf, ne));
        let g = graph(rows, &[(tx, ne)], |g, s| {
            let x = s[0];
            let h = g.act(Rows::All, ne);
            let (q, k, v) = (g.act(Rows::All, qd), g.act(Rows::All, kd), g.act(Rows::All, kd));
            let (att, o) = (g.act(Rows::All, qd), g.act(Rows::All, ne));
            g.push(Op::RmsNorm { x, weight: norm, dst: h, group: ne, eps: 1e-5 });
            g.push(Op::MatMul { w: wq, x: h, dst: q, bias: None });
            g.push(Op::MatMul { w: wk, x: h, dst: k, bias: None });
            g.push(Op::MatMul { w: wv, x: h, dst: v, bias: None });
            let rope = |x, n_heads| Op::Rope {
                x,
                n_heads,
                head_dim: hd,
                n_rot: hd,
                base: 10000.0,
                freq_scale: 1.0,
                mode,
            };
            g.push(rope(q, n_heads));
            g.push(rope(k, n_kv));
            g.push(Op::KvStore { layer: 0, k, v });
            g.push(Op::Attention {
                layer: 0,
                q,
                dst: att,
                n_heads,
                n_kv_heads: n_kv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window: None,
                softcap: None,
            });
            g.push(Op::MatMul { w: wo, x: att, dst: o, bias: None });
            g.push(Op::Add { a: x, b: o, dst: x });
            let (gate, up) = (g.act(Rows::All, nf), g.act(Rows::All, nf));
            g.push(Op::RmsNorm { x, weight: norm2, dst: h, group: ne, eps: 1e-5 });
            g.push(Op::MatMul { w: wg, x: h, dst: gate, bias: None });
            g.push(Op::MatMul { w: wu, x: h, dst: up, bias: None });
            g.push(Op::GatedAct { gate, up, act: Gate::Silu });
            g.push(Op::MatMul { w: wd, x: gate, dst: o, bias: None });
            g.push(Op::Add { a: o, b: x, dst: x });
            x
        });
        let id = p.compile(&g);
        let kv = p.kv(64, kd);
        for step in 0..4 {
            let toks = p.tokens(rows, VOCAB);
            let (a, b) = p.run(id, kv, &toks, step * rows).await;
            assert_close(&format!("layer fuse={fuse} {wt} {mode:?} rows={rows} step={step}"), &a, &b, 2e-3);
        }
    }
}
