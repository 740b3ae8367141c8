//! Every op of the CUDA executor against the CPU reference on fresh random inputs.
//!
//! Skips (loudly) where no CUDA driver is installed, as on CI; on a machine with one, a wrong
//! result fails. `WICK_REQUIRE_CUDA=1` turns the skip into a failure.
//!
//! Inputs enter through `Embed` from an F32 table (an exact copy on both executors), so each
//! graph is `embed → op under test → read back`. Tolerances, relative to the largest
//! reference value: matrix products 1e-4 (same q8 activations and integer block sums on both;
//! only the order of the float sums differs), elementwise ops and norms 1e-5, RoPE and
//! attention 1e-4 (device cos/sin/exp/tanh may differ by an ulp or two).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]
#![cfg(feature = "cuda")]

use wick::exec::{Executor, ExecutorKind, Gate, Graph, KvSpec, Op, Readback, RopeMode, Rows, WeightId};
use wick::quant::GgmlType;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

/// The CUDA executor, or None (after saying why) where this machine has no CUDA driver.
fn cuda() -> Option<Box<dyn Executor>> {
    // SAFETY: only tries to open the driver library.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if !present && std::env::var("WICK_REQUIRE_CUDA").as_deref() != Ok("1") {
        eprintln!("SKIPPED: no CUDA driver on this machine (set WICK_REQUIRE_CUDA=1 to fail instead)");
        return None;
    }
    Some(
        block_on(wick::exec::create(ExecutorKind::Cuda))
            .expect("a CUDA driver is present but the executor failed"),
    )
}

/// splitmix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn put_f16(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
}

/// Random GGUF bytes of `n` elements of type `t`: random quants, sane scales.
fn random_bytes(t: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    match t {
        GgmlType::F32 => (0..n).flat_map(|_| rng.uniform().to_le_bytes()).collect(),
        GgmlType::F16 => (0..n).flat_map(|_| half::f16::from_f32(rng.uniform()).to_le_bytes()).collect(),
        _ => {
            let bs = t.type_size();
            let mut out: Vec<u8> = (0..n / t.block_size() * bs).map(|_| rng.next() as u8).collect();
            for b in out.chunks_mut(bs) {
                let (d, m) = (0.02 * rng.uniform(), 0.02 * rng.uniform());
                match t {
                    GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => put_f16(b, 0, d),
                    GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
                        put_f16(b, 0, d);
                        put_f16(b, 2, m);
                    }
                    GgmlType::Q6_K => put_f16(b, 208, d),
                    _ => panic!("no generator for {t}"),
                }
            }
            out
        }
    }
}

/// A weight to load into both executors.
struct W {
    dtype: GgmlType,
    dims: Vec<u64>,
    bytes: Vec<u8>,
}

fn weight(t: GgmlType, dims: &[u64], rng: &mut Rng) -> W {
    let n = dims.iter().product::<u64>() as usize;
    W { dtype: t, dims: dims.to_vec(), bytes: random_bytes(t, n, rng) }
}

/// One run of a test graph: the steps (tokens, pos) in order, the last one's output read.
struct Case {
    weights: Vec<W>,
    kv: Option<KvSpec>,
    graph: Graph,
    steps: Vec<(Vec<u32>, usize)>,
    /// Graphs for the earlier steps, when they have another token count (prefill, then decode).
    early: Option<Graph>,
    readback: Readback,
}

fn run_on(e: &mut dyn Executor, c: &Case) -> wick::exec::StepOutput {
    for (i, w) in c.weights.iter().enumerate() {
        let id = e.alloc_weight(&format!("w{i}"), w.dtype, &w.dims).unwrap();
        // Bounded chunks, as the loader sends them.
        for (j, chunk) in w.bytes.chunks(4096).enumerate() {
            e.write_weight(id, (j * 4096) as u64, chunk).unwrap();
        }
        assert_eq!(id, WeightId(i as u32));
    }
    block_on(e.finish_upload()).unwrap();
    let kv =
        e.alloc_kv(c.kv.as_ref().unwrap_or(&KvSpec { n_ctx: 2048, k_dims: vec![], v_dims: vec![] })).unwrap();
    let g = e.compile(&c.graph).unwrap();
    let early = c.early.as_ref().map(|g| e.compile(g).unwrap());
    let mut out = None;
    for (i, (tokens, pos)) in c.steps.iter().enumerate() {
        let last = i + 1 == c.steps.len();
        let gid = if last { g } else { early.unwrap_or(g) };
        out = Some(
            block_on(e.run(gid, kv, tokens, *pos, if last { c.readback } else { Readback::LastLogits }))
                .unwrap(),
        );
    }
    out.unwrap()
}

/// Run on both executors and compare with a relative tolerance.
fn check(name: &str, c: &Case, tol: f32) {
    let Some(mut gpu) = cuda() else { return };
    let mut cpu = block_on(wick::exec::create(ExecutorKind::Cpu)).unwrap();
    let want = run_on(cpu.as_mut(), c);
    let got = run_on(gpu.as_mut(), c);
    assert_eq!(want.token, got.token, "{name}: argmax differs");
    assert_eq!(want.logits.len(), got.logits.len(), "{name}: output sizes differ");
    let scale = want.logits.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let err = want.logits.iter().zip(&got.logits).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!("{name}: max error {err:.3e} (largest value {scale:.3e}, {} values)", want.logits.len());
    assert!(err <= tol * scale, "{name}: max error {err} exceeds {tol} x {scale}");
}

/// A graph whose input slots are filled by Embed from F32 tables 0.. (one per width) and
/// whose op list ends with `ops`; weight ids of the op under test start after the tables.
fn graph(
    n_tokens: usize,
    inputs: &[usize],
    extra: &[(Rows, usize)],
    ops: impl Fn(&[wick::exec::ActId]) -> (Vec<Op>, usize),
) -> Graph {
    let mut g = Graph::new(n_tokens);
    let mut slots = Vec::new();
    for (i, &cols) in inputs.iter().enumerate() {
        let a = g.act(Rows::All, cols);
        g.push(Op::Embed { table: WeightId(i as u32), dst: a, scale: 1.0 });
        slots.push(a);
    }
    for &(rows, cols) in extra {
        slots.push(g.act(rows, cols));
    }
    let (ops, out) = ops(&slots);
    ops.into_iter().for_each(|op| g.push(op));
    g.logits = slots[out];
    g
}

const VOCAB: u64 = 40;

fn tables(widths: &[usize], rng: &mut Rng) -> Vec<W> {
    widths.iter().map(|&w| weight(GgmlType::F32, &[w as u64, VOCAB], rng)).collect()
}

fn tokens(n: usize, rng: &mut Rng) -> Vec<u32> {
    (0..n).map(|_| (rng.next() % VOCAB) as u32).collect()
}

const TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

#[test]
fn embed_every_type() {
    for &t in TYPES {
        let mut rng = Rng(1);
        let k = 512;
        let mut g = Graph::new(6);
        let a = g.act(Rows::All, k);
        g.push(Op::Embed { table: WeightId(0), dst: a, scale: 1.5 });
        g.logits = a;
        let c = Case {
            weights: vec![weight(t, &[k as u64, VOCAB], &mut rng)],
            kv: None,
            graph: g,
            steps: vec![(tokens(6, &mut rng), 0)],
            early: None,
            readback: Readback::AllLogits,
        };
        check(&format!("embed {t}"), &c, 1e-6);
    }
}

#[test]
fn matmul_every_type() {
    for &t in TYPES {
        for (rows, k, n, bias) in [(1, 512, 300, false), (13, 768, 129, true), (3, 256, 64, false)] {
            let mut rng = Rng(k as u64 + rows as u64);
            let mut weights = tables(&[k], &mut rng);
            weights.push(weight(t, &[k as u64, n as u64], &mut rng));
            if bias {
                weights.push(weight(GgmlType::F32, &[n as u64], &mut rng));
            }
            let g = graph(rows, &[k], &[(Rows::All, n)], |s| {
                let op = Op::MatMul { w: WeightId(1), x: s[0], dst: s[1], bias: bias.then_some(WeightId(2)) };
                (vec![op], 1)
            });
            let c = Case {
                weights,
                kv: None,
                graph: g,
                steps: vec![(tokens(rows, &mut rng), 0)],
                early: None,
                readback: Readback::AllLogits,
            };
            check(&format!("matmul {t} rows {rows} k {k} n {n} bias {bias}"), &c, 1e-4);
        }
    }
}

#[test]
fn rms_norm_rows_and_heads() {
    for (cols, group, in_place) in [(576, 576, false), (512, 64, true), (1000, 1000, true)] {
        let mut rng = Rng(cols as u64);
        let mut weights = tables(&[cols], &mut rng);
        weights.push(weight(GgmlType::F32, &[group as u64], &mut rng));
        let g = graph(5, &[cols], &[(Rows::All, cols)], |s| {
            let dst = if in_place { s[0] } else { s[1] };
            (
                vec![Op::RmsNorm { x: s[0], weight: WeightId(1), dst, group, eps: 1e-6 }],
                if in_place { 0 } else { 1 },
            )
        });
        let c = Case {
            weights,
            kv: None,
            graph: g,
            steps: vec![(tokens(5, &mut rng), 0)],
            early: None,
            readback: Readback::AllLogits,
        };
        check(&format!("rms_norm cols {cols} group {group}"), &c, 1e-5);
    }
}

#[test]
fn rope_both_modes() {
    for (mode, n_rot, pos) in
        [(RopeMode::Normal, 64, 0), (RopeMode::Neox, 64, 37), (RopeMode::Neox, 32, 1000)]
    {
        let mut rng = Rng(n_rot as u64 + pos as u64);
        let (n_heads, head_dim) = (4, 64);
        let weights = tables(&[n_heads * head_dim], &mut rng);
        let g = graph(3, &[n_heads * head_dim], &[], |s| {
            (vec![Op::Rope { x: s[0], n_heads, head_dim, n_rot, base: 10000.0, freq_scale: 1.0, mode }], 0)
        });
        let c = Case {
            weights,
            kv: None,
            graph: g,
            steps: vec![(tokens(3, &mut rng), pos)],
            early: None,
            readback: Readback::AllLogits,
        };
        check(&format!("rope {mode:?} n_rot {n_rot} pos {pos}"), &c, 1e-4);
    }
}

#[test]
fn gated_act_add_take_last() {
    for act in [Gate::Silu, Gate::Gelu] {
        let mut rng = Rng(3);
        let weights = tables(&[300, 300], &mut rng);
        let g = graph(4, &[300, 300], &[], |s| (vec![Op::GatedAct { gate: s[0], up: s[1], act }], 0));
        let c = Case {
            weights,
            kv: None,
            graph: g,
            steps: vec![(tokens(4, &mut rng), 0)],
            early: None,
            readback: Readback::AllLogits,
        };
        check(&format!("gated_act {act:?}"), &c, 1e-5);
    }
    let mut rng = Rng(4);
    let weights = tables(&[200, 200], &mut rng);
    let g = graph(4, &[200, 200], &[(Rows::All, 200), (Rows::Last, 200)], |s| {
        (
            vec![
                Op::Add { a: s[0], b: s[1], dst: s[2] },
                Op::Add { a: s[2], b: s[0], dst: s[2] },
                Op::TakeLast { x: s[2], dst: s[3] },
            ],
            3,
        )
    });
    let c = Case {
        weights,
        kv: None,
        graph: g,
        steps: vec![(tokens(4, &mut rng), 0)],
        early: None,
        readback: Readback::AllLogits,
    };
    check("add, add in place, take_last", &c, 1e-6);
}

#[test]
fn argmax_on_device() {
    let mut rng = Rng(5);
    let weights = tables(&[5000], &mut rng);
    let g = graph(3, &[5000], &[], |_| (vec![], 0));
    let c = Case {
        weights,
        kv: None,
        graph: g,
        steps: vec![(tokens(3, &mut rng), 0)],
        early: None,
        readback: Readback::Argmax,
    };
    check("argmax", &c, 0.0);
}

/// KV store and attention: a prefill of 6 rows at position 0, then a 1-row decode at 6 (and
/// a second prefill chunk at 6 for the batched case), GQA, with and without window/softcap.
#[test]
fn kv_store_and_attention() {
    let cases = [
        (4, 2, 64, None, None),
        (8, 2, 128, Some(4), Some(50.0f32)),
        (4, 4, 256, None, Some(30.0)),
        (6, 1, 32, Some(3), None),
    ];
    for (n_heads, n_kv, hd, window, softcap) in cases {
        for n_last in [1usize, 5] {
            let mut rng = Rng(hd as u64 * 31 + n_heads as u64);
            let (qd, kd) = (n_heads * hd, n_kv * hd);
            let weights = tables(&[qd, kd, kd], &mut rng);
            let build = |n: usize| {
                graph(n, &[qd, kd, kd], &[(Rows::All, qd)], |s| {
                    let ops = vec![
                        Op::KvStore { layer: 1, k: s[1], v: s[2] },
                        Op::Attention {
                            layer: 1,
                            q: s[0],
                            dst: s[3],
                            n_heads,
                            n_kv_heads: n_kv,
                            head_dim: hd,
                            scale: 1.0 / (hd as f32).sqrt(),
                            window,
                            softcap,
                        },
                    ];
                    (ops, 3)
                })
            };
            let kv = KvSpec { n_ctx: 32, k_dims: vec![kd, kd], v_dims: vec![kd, kd] };
            let steps = vec![(tokens(6, &mut rng), 0), (tokens(n_last, &mut rng), 6)];
            let c = Case {
                weights,
                kv: Some(kv),
                graph: build(n_last),
                early: Some(build(6)),
                steps,
                readback: Readback::AllLogits,
            };
            check(&format!("attention heads {n_heads}/{n_kv} hd {hd} window {window:?} softcap {softcap:?} rows {n_last}"), &c, 1e-4);
        }
    }
}

/// The kernels compile with NVRTC alone (no GPU needed, only libnvrtc). CI sets
/// `WICK_REQUIRE_NVRTC=1` (with the library from `.ci/get-nvrtc`), so a kernel that does not
/// compile fails there.
#[test]
fn kernels_compile_with_nvrtc() {
    // SAFETY: only tries to open the library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        assert!(
            std::env::var("WICK_REQUIRE_NVRTC").as_deref() != Ok("1"),
            "WICK_REQUIRE_NVRTC=1 but no NVRTC library"
        );
        eprintln!("SKIPPED: no NVRTC library on this machine");
        return;
    }
    for arch in [(8, 0), (9, 0)] {
        let ptx = wick::exec::cuda::compile_kernels(arch).expect("NVRTC compiles the kernels");
        assert!(ptx.contains(".entry matvec_q4_k"), "sm_{}{}: entry points missing", arch.0, arch.1);
    }
}

/// Diagnostic: prints CPU and CUDA outputs side by side for small quantized products.
#[test]
#[ignore]
fn matmul_side_by_side() {
    for t in [GgmlType::Q8_0, GgmlType::Q4_0] {
        for (k, n) in [(32usize, 4usize), (64, 4), (512, 8)] {
            let mut rng = Rng(9);
            let mut weights = tables(&[k], &mut rng);
            weights.push(weight(t, &[k as u64, n as u64], &mut rng));
            let g = graph(1, &[k], &[(Rows::All, n)], |s| {
                (vec![Op::MatMul { w: WeightId(1), x: s[0], dst: s[1], bias: None }], 1)
            });
            let c = Case {
                weights,
                kv: None,
                graph: g,
                steps: vec![(vec![3], 0)],
                early: None,
                readback: Readback::AllLogits,
            };
            let x: Vec<f32> = c.weights[0].bytes[3 * 4 * k..4 * 4 * k]
                .chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let mut wf = vec![0f32; k * n];
            wick::quant::dequantize(t, &c.weights[1].bytes, &mut wf).unwrap();
            let exact: Vec<f32> = wf
                .chunks(k)
                .map(|r| r.iter().zip(&x).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>() as f32)
                .collect();
            eprintln!("  f64 {exact:?}");
            let mut cpu = block_on(wick::exec::create(ExecutorKind::Cpu)).unwrap();
            let want = run_on(cpu.as_mut(), &c);
            let mut gpu = cuda();
            let got = gpu.as_mut().map(|g| run_on(g.as_mut(), &c).logits);
            eprintln!("{t} k {k} n {n}\n  cpu {:?}\n  gpu {:?}", want.logits, got);
        }
    }
}
