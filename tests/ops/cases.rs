//! The rows of single ops: each family is a function returning its rows (shapes, types,
//! tolerance); the graph of a row embeds its inputs and applies the op under test.

use wick::exec::{Gate, Op, Readback, RopeExt, RopeMode, Rows};
use wick::quant::GgmlType;

use super::{graph, row, tol, Case, Expect, Row, ROWS, VOCAB};

/// Every weight type of the GGUF files wick loads.
pub const TYPES: [GgmlType; 13] = GgmlType::WEIGHT_TYPES;

/// A k that is a whole number of blocks of `t`: 256 or, every other row, 544 (17 blocks of
/// 32: a partial 256-value stage) for the 32-value and float types, 512 for the k-quants.
fn k_for(t: GgmlType, i: usize) -> usize {
    match (i % 2, t.block_size()) {
        (0, _) => 256,
        (_, 256) => 512,
        _ => 544,
    }
}

/// Weight row counts that are no multiple of the workgroup or block row counts.
const NS: [usize; 9] = [67, 129, 33, 250, 71, 97, 40, 130, 9];

/// x (rows × k, embedded) · Wᵀ (+ bias).
pub fn matmul_row(t: GgmlType, rows: usize, k: usize, n: usize, bias: bool) -> Row {
    let name = format!("matmul {t} rows={rows} k={k} n={n}{}", if bias { " +bias" } else { "" });
    let types: &[GgmlType] = &[t];
    row(name, tol::matmul(t), types, move |c: &mut Case| {
        let x = c.table(k, 1.0);
        let w = c.weight(t, k, n);
        let b = bias.then(|| c.weight(GgmlType::F32, n, 1));
        let g = c.graph(graph(rows, &[(x, k)], |g, s| {
            let dst = g.act(Rows::All, n);
            g.push(Op::MatMul { w, x: s[0], dst, bias: b });
            dst
        }));
        c.step(g, 0);
    })
}

/// Matrix products of every type at every token row count, with and without bias, and with
/// thousands of weight rows (several rows per cooperative workgroup in prefill, ragged at the
/// end).
pub fn matmul() -> Vec<Row> {
    let mut rows = Vec::new();
    for t in TYPES {
        for (i, &r) in ROWS.iter().enumerate() {
            rows.push(matmul_row(t, r, k_for(t, i), NS[i], false));
        }
        rows.push(matmul_row(t, 3, k_for(t, 1), 33, true));
        rows.push(matmul_row(t, 17, 256, 67, true));
        rows.push(matmul_row(t, 1, 512, 2050, false));
        rows.push(matmul_row(t, 2, 256, 4099, false));
        // prefill's two weight rows a workgroup on GPUs
        rows.push(matmul_row(t, 9, 256, 2051, false));
        // CUDA: few tiles, so the tensor-core product is split along k (and summed after)
        rows.push(matmul_row(t, 20, 2048, 300, true));
    }
    rows
}

/// The products of a small model's shapes (SmolLM2: 576 wide, 1536 feed-forward, 49152 vocab).
pub fn matmul_model() -> Vec<Row> {
    [
        (GgmlType::Q4_1, 576, 1536, 6),
        (GgmlType::Q4_1, 1536, 576, 6),
        (GgmlType::Q8_0, 576, 49152, 1),
        (GgmlType::Q8_0, 576, 192, 6),
    ]
    .into_iter()
    .map(|(t, k, n, rows)| matmul_row(t, rows, k, n, false))
    .collect()
}

/// Products large enough for CUDA's 128 × 128 tiles of the legacy types (`mmq_T_l`, from one
/// and a half tiles a multiprocessor: 331 tiles, up to 220 SMs), with partial tiles of weight
/// rows and tokens and a partial last stage of k (128 values), below the 128 tokens from which
/// cuBLAS takes quantized products; a type with a min and Q8_0.
pub fn matmul_large() -> Vec<Row> {
    [GgmlType::Q4_1, GgmlType::Q8_0].into_iter().map(|t| matmul_row(t, 120, 320, 42300, true)).collect()
}

/// The quantized types of CUDA's tensor-core products (`mmq_T`) and of its dequantization for
/// cuBLAS (`dequant_T`).
const TILE_TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Products of 256 tokens, where CUDA multiplies the quantized types' weights dequantized to
/// f16 through cuBLAS (ops/matmul_blas.rs, from 128 tokens): every type with a `dequant_T`
/// kernel, with and without bias, at their own tolerance ([`tol::MATMUL_DEQ`]).
pub fn matmul_dequantized() -> Vec<Row> {
    TILE_TYPES
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let mut r = matmul_row(t, 256, 512, 300 + 17 * i, i % 2 == 1);
            r.tol = tol::MATMUL_DEQ;
            r
        })
        .collect()
}

/// Prefill tiles (CUDA's tensor-core products from 16 rows, from 7 for Q4_K and Q6_K: 32- and
/// 64-token tiles, token and weight rows no multiple of a tile, k of one to several 256-value
/// stages and, for the 32-value types, a partial stage), with and without bias.
pub fn matmul_tiles() -> Vec<Row> {
    let mut rows = Vec::new();
    for t in TILE_TYPES.into_iter().chain([GgmlType::F16, GgmlType::BF16, GgmlType::F32]) {
        let mut shapes = vec![
            (16, 256, 64, false),
            (77, 768, 200, true),
            (64, 1024, 130, false),
            (120, 512, 72, false),
            (127, 256, 3264, true),
            // 16-32 tokens (the decode steps of several sequences): mmqs_T for Q4_K and Q6_K,
            // split along k, a partial last block of rows, with and without a bias.
            (24, 2048, 200, true),
            (32, 1024, 96, false),
            (17, 512, 130, true),
            // 7-15 tokens: mmqs_T rather than mmvn_T for Q4_K and Q6_K (a partial token
            // tile), mmvn_T for the other types.
            (12, 2048, 136, true),
            (9, 512, 64, false),
            (7, 1024, 80, true),
        ];
        if t.block_size() == 32 {
            shapes.extend([(40, 800, 96, true), (19, 96, 33, false)]);
        }
        rows.extend(shapes.into_iter().map(|(r, k, n, b)| matmul_row(t, r, k, n, b)));
    }
    // f16 and bf16 weights in prefill steps (CUDA: cuBLAS's GEMM where the library is
    // there, over 64 rows), with and without a bias.
    for t in [GgmlType::F16, GgmlType::BF16] {
        rows.extend(
            [(77, 768, 200, true), (130, 544, 72, false)].map(|(r, k, n, b)| matmul_row(t, r, k, n, b)),
        );
    }
    rows
}

/// Embedding rows of every type, scaled.
pub fn embed() -> Vec<Row> {
    let mut rows = Vec::new();
    for t in TYPES {
        for n_tok in [1, 7, 17] {
            rows.push(row(format!("embed {t} rows={n_tok}"), tol::COPY, &[t], move |c: &mut Case| {
                let (k, vocab) = (512, 50);
                let table = c.weight(t, k, vocab);
                let mut g = wick::exec::Graph::new(n_tok);
                let dst = g.act(Rows::All, k);
                g.push(Op::Embed { table, dst, scale: 1.5 });
                g.logits = dst;
                let g = c.graph(g);
                c.step_with(g, 0, vocab, Expect::Close(Readback::AllLogits));
            }));
        }
    }
    rows
}

/// RMSNorm over whole rows and per head (QK norm), in place and not.
pub fn rms_norm() -> Vec<Row> {
    let mut rows = Vec::new();
    for (cols, group, in_place) in [
        (576, 576, false),
        (640, 640, true),
        (256, 64, true),
        (96, 32, false),
        (1000, 1000, true),
        (512, 128, false),
    ] {
        for n_tok in [1, 3, 33] {
            let name = format!("rms_norm cols={cols} group={group} in_place={in_place} rows={n_tok}");
            rows.push(row(name, tol::NORM, &[], move |c: &mut Case| {
                let x = c.table(cols, 3.0);
                let w = c.weight(GgmlType::F32, group, 1);
                let g = c.graph(graph(n_tok, &[(x, cols)], |g, s| {
                    let dst = if in_place { s[0] } else { g.act(Rows::All, cols) };
                    g.push(Op::RmsNorm { x: s[0], weight: w, dst, group, eps: 1e-6 });
                    dst
                }));
                c.step(g, 0);
            }));
        }
    }
    rows
}

/// RoPE, adjacent pairs and halves, whole and partial rotation, at positions up to 1500.
pub fn rope() -> Vec<Row> {
    let mut rows = Vec::new();
    for (mode, n_heads, head_dim, n_rot, pos) in [
        (RopeMode::Normal, 3, 64, 64, 0),
        (RopeMode::Neox, 4, 32, 32, 37),
        (RopeMode::Neox, 2, 128, 64, 1500),
        (RopeMode::Normal, 4, 64, 32, 1000),
        (RopeMode::Normal, 2, 80, 80, 5),
    ] {
        for n_tok in [1, 3, 17] {
            let name =
                format!("rope {mode:?} heads={n_heads}x{head_dim} n_rot={n_rot} pos={pos} rows={n_tok}");
            let shape = RopeShape { mode, n_heads, head_dim, n_rot, base: 10000.0 };
            rows.push(rope_row(name, tol::ROPE, shape, n_tok, pos, RopeScale::default()));
        }
    }
    rows.extend(rope_scaled());
    rows
}

/// A RoPE op's layout.
#[derive(Clone, Copy)]
pub struct RopeShape {
    pub mode: RopeMode,
    pub n_heads: usize,
    pub head_dim: usize,
    pub n_rot: usize,
    pub base: f32,
}

/// How a RoPE op scales its angles: linear, frequency factors, YaRN.
#[derive(Clone, Default)]
pub struct RopeScale {
    pub freq_scale: Option<f32>,
    /// The frequency factors (n_rot/2).
    pub factors: Option<Vec<f32>>,
    pub ext: Option<RopeExt>,
}

fn rope_row(name: String, tol: f32, sh: RopeShape, n_tok: usize, pos: usize, sc: RopeScale) -> Row {
    row(name, tol, &[], move |c: &mut Case| {
        let cols = sh.n_heads * sh.head_dim;
        let x = c.table(cols, 1.0);
        let freqs = sc.factors.as_ref().map(|f| c.values(f));
        c.kv((pos + n_tok).max(2048), &[2]);
        let g = c.graph(graph(n_tok, &[(x, cols)], |g, s| {
            g.push(Op::Rope {
                x: s[0],
                n_heads: sh.n_heads,
                head_dim: sh.head_dim,
                n_rot: sh.n_rot,
                base: sh.base,
                freq_scale: sc.freq_scale.unwrap_or(1.0),
                mode: sh.mode,
                freqs,
                ext: sc.ext.unwrap_or_default(),
            });
            s[0]
        }));
        c.step(g, pos);
    })
}

/// YaRN as a Qwen 2.5/3 file with `rope.scaling.type = yarn` gets it from wick's hparams
/// (llama.cpp's defaults: ext_factor 1, beta_fast 32, beta_slow 1).
pub fn yarn(factor: f32, n_ctx_orig: usize, ext_factor: f32, attn_factor: f32) -> (f32, RopeExt) {
    let ext = RopeExt { ext_factor, attn_factor, beta_fast: 32.0, beta_slow: 1.0, n_ctx_orig };
    (1.0 / factor, ext)
}

/// RoPE with frequency factors (Llama 3.1's, and arbitrary ones), with YaRN, with both, and
/// with linear scaling, both pairings, at positions up to ~100k.
pub fn rope_scaled() -> Vec<Row> {
    let mut rows = Vec::new();
    let llama = |mode| RopeShape { mode, n_heads: 4, head_dim: 64, n_rot: 64, base: 500_000.0 };
    let qwen = |mode| RopeShape { mode, n_heads: 3, head_dim: 128, n_rot: 128, base: 1_000_000.0 };
    let partial = |mode| RopeShape { mode, n_heads: 2, head_dim: 128, n_rot: 64, base: 10_000.0 };
    let l31 = wick::synth::llama3_rope_factors(64, 500_000.0, 8.0, 1.0, 4.0, 8192.0);
    let l32 = wick::synth::llama3_rope_factors(64, 500_000.0, 32.0, 1.0, 4.0, 8192.0);
    // Factors of no particular law, some below 1, none a power of two.
    let odd: Vec<f32> = (0..32).map(|i| 0.7 + 1.37 * i as f32).collect();
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (pos, n_tok) in [(0, 3), (8190, 1), (65_521, 17), (100_000, 3)] {
            let sc = RopeScale { factors: Some(l31.clone()), ..Default::default() };
            let name = format!("rope {mode:?} llama3.1 factors pos={pos} rows={n_tok}");
            rows.push(rope_row(name, tol::ROPE_LONG, llama(mode), n_tok, pos, sc));
        }
        let sc = RopeScale { factors: Some(l32.clone()), ..Default::default() };
        let name = format!("rope {mode:?} llama3.2 factors pos=131000 rows=2");
        rows.push(rope_row(name, tol::ROPE_LONG, llama(mode), 2, 131_000, sc));
        let sc = RopeScale { factors: Some(odd.clone()), ..Default::default() };
        // At ~1000 (angles up to ~1400 rad): WGSL's division may be 2.5 ulp off, 3e-4 there.
        let name = format!("rope {mode:?} partial odd factors pos=1000 rows=3");
        rows.push(rope_row(name, tol::ROPE_LONG, partial(mode), 3, 1000, sc));
        for (factor, orig, ext_factor, attn, pos, n_tok) in [
            (4.0, 32768, 1.0, 1.0, 0, 3),
            (4.0, 32768, 1.0, 1.0, 40_000, 17),
            (4.0, 32768, 1.0, 1.0, 100_000, 1),
            (8.0, 4096, 0.5, 0.8, 30_000, 3),
            (2.0, 65536, 1.0, 1.0, 99_000, 2),
        ] {
            let (fs, ext) = yarn(factor, orig, ext_factor, attn);
            let sc = RopeScale { freq_scale: Some(fs), ext: Some(ext), ..Default::default() };
            let name = format!(
                "rope {mode:?} yarn factor={factor} orig={orig} ext={ext_factor} attn={attn} pos={pos} rows={n_tok}"
            );
            rows.push(rope_row(name, tol::ROPE_LONG, qwen(mode), n_tok, pos, sc));
        }
        let (fs, ext) = yarn(4.0, 8192, 1.0, 1.0);
        let sc = RopeScale { freq_scale: Some(fs), ext: Some(ext), factors: Some(l31.clone()) };
        let name = format!("rope {mode:?} yarn + llama3.1 factors pos=50000 rows=3");
        rows.push(rope_row(name, tol::ROPE_LONG, llama(mode), 3, 50_000, sc));
        let sc = RopeScale { freq_scale: Some(0.25), ..Default::default() };
        let name = format!("rope {mode:?} linear x4 pos=90000 rows=3");
        rows.push(rope_row(name, tol::ROPE_LONG, partial(mode), 3, 90_000, sc));
    }
    rows
}

/// Heads, KV heads (GQA), head size, sliding window, softcap.
type AttnShape = (usize, usize, usize, Option<usize>, Option<f32>);

const ATTN: [AttnShape; 7] = [
    (4, 2, 64, None, None),
    (3, 1, 128, None, None),
    (4, 4, 32, Some(4), None),
    (2, 1, 256, None, Some(30.0)),
    (8, 2, 128, Some(21), Some(50.0)),
    (3, 3, 80, Some(7), None),
    (6, 1, 32, Some(3), None),
];

/// KvStore of the step's k and v into layer `layer`, then attention of q over the cache.
fn attention_graph(c: &mut Case, n_tok: usize, shape: AttnShape, layer: usize) -> usize {
    let (n_heads, n_kv, hd, window, softcap) = shape;
    let (qd, kd) = (n_heads * hd, n_kv * hd);
    let (tq, tk, tv) = (c.table(qd, 2.0), c.table(kd, 2.0), c.table(kd, 1.0));
    c.graph(graph(n_tok, &[(tq, qd), (tk, kd), (tv, kd)], |g, s| {
        let dst = g.act(Rows::All, qd);
        g.push(Op::KvStore { layer, k: s[1], v: s[2] });
        let scale = 1.0 / (hd as f32).sqrt();
        g.push(Op::Attention {
            layer,
            q: s[0],
            dst,
            n_heads,
            n_kv_heads: n_kv,
            head_dim: hd,
            scale,
            window,
            softcap,
        });
        dst
    }))
}

/// KV store and attention: a prefill of 37 rows, then three steps of `rows` over the history
/// (past the window where there is one), on layer 1 of a two-layer cache; then the context
/// lengths around the kernels' tile and split boundaries ([`attention_lengths`]).
pub fn attention() -> Vec<Row> {
    let mut rows = Vec::new();
    for shape in ATTN {
        // 1 to 4 rows: WebGPU's split (decode) kernel; 5 and more: its tiled kernel.
        for n_tok in [1, 3, 5, 16, 33] {
            let (h, kvh, hd, window, softcap) = shape;
            let name = format!(
                "attention heads={h}/{kvh} hd={hd} window={window:?} softcap={softcap:?} rows={n_tok}"
            );
            rows.push(row(name, tol::ATTENTION, &[], move |c: &mut Case| {
                c.kv(160, &[h * hd, kvh * hd]);
                let prefill = attention_graph(c, 37, shape, 1);
                let g = attention_graph(c, n_tok, shape, 1);
                c.step(prefill, 0);
                for i in 0..3 {
                    c.step(g, 37 + i * n_tok);
                }
            }));
        }
    }
    rows.extend(attention_lengths());
    rows
}

/// Shapes of [`attention_lengths`]: GQA ratios 8, 7, 3, 4, 1 and 2; head sizes 64, 128, 256,
/// 80 and 34 (not a multiple of 4: WebGPU's per-row kernel).
const ATTN_LENGTHS: [AttnShape; 8] = [
    (8, 1, 64, None, None),
    (4, 1, 64, None, None),
    (2, 2, 128, None, Some(20.0)),
    (7, 1, 128, Some(100), None),
    (6, 2, 256, None, Some(30.0)),
    (8, 2, 128, Some(40), Some(50.0)),
    (2, 2, 80, None, None),
    (4, 2, 34, Some(20), None),
];

/// A graph that only stores `n_tok` rows of keys and values into layer 0 (filling the cache).
fn kv_fill(c: &mut Case, n_tok: usize, kd: usize) -> usize {
    let (tk, tv) = (c.table(kd, 2.0), c.table(kd, 1.0));
    c.graph(graph(n_tok, &[(tk, kd), (tv, kd)], |g, s| {
        g.push(Op::KvStore { layer: 0, k: s[0], v: s[1] });
        s[0]
    }))
}

/// Context lengths across the boundaries of key tiles (32, 64 keys) and decode splits
/// (multiples of 64 keys on WebGPU): one row seeing 1, 31 to 33 and 255 to 257 keys, 17 rows seeing 241 to 257 and
/// 258 to 274; the cache between them filled by KvStore alone.
fn attention_lengths() -> Vec<Row> {
    let mut rows = Vec::new();
    for shape in ATTN_LENGTHS {
        let (h, kvh, hd, window, softcap) = shape;
        let name = format!("attention lengths heads={h}/{kvh} hd={hd} window={window:?} softcap={softcap:?}");
        rows.push(row(name, tol::ATTENTION, &[], move |c: &mut Case| {
            let kd = kvh * hd;
            c.kv(300, &[kd]);
            let one = attention_graph(c, 1, shape, 0);
            let many = attention_graph(c, 17, shape, 0);
            let (fill_a, fill_b) = (kv_fill(c, 29, kd), kv_fill(c, 221, kd));
            let fill = Expect::Close(Readback::LastLogits);
            c.step(one, 0);
            c.step_with(fill_a, 1, VOCAB, fill);
            for pos in 30..33 {
                c.step(one, pos);
            }
            c.step_with(fill_b, 33, VOCAB, fill);
            c.step(many, 240);
            for pos in 254..257 {
                c.step(one, pos);
            }
            c.step(many, 257);
        }));
    }
    rows
}

/// Attention deep in the cache: 4096 rows filled by KvStore, then steps of 1 and 17 rows
/// attend over all of it (4097 keys and more: many decode splits, many key tiles); and decode
/// steps over 8257 and 16385 keys and more.
pub fn attention_deep() -> Vec<Row> {
    let mut rows = Vec::new();
    for shape in [(8, 1, 128, None, None), ATTN[3], ATTN[4]] {
        let (h, kvh, hd, window, softcap) = shape;
        let name = format!("attention deep heads={h}/{kvh} hd={hd} window={window:?} softcap={softcap:?}");
        rows.push(row(name, tol::ATTENTION, &[], move |c: &mut Case| {
            let kd = kvh * hd;
            c.kv(4120, &[kd]);
            let fill = kv_fill(c, 4096, kd);
            let one = attention_graph(c, 1, shape, 0);
            let many = attention_graph(c, 17, shape, 0);
            c.step_with(fill, 0, VOCAB, Expect::Close(Readback::LastLogits));
            c.step(one, 4096);
            c.step(many, 4097);
            c.step(one, 4114);
        }));
    }
    // Past 8192 keys each of WebGPU's 128 decode splits walks two tiles of 64 keys (the second
    // tile's scores once started from the first's in Chromium: attention_split.wgsl). Decode
    // steps only: lavapipe ends every loop of an invocation after 65535 iterations of all its
    // loops together, which the tiled kernel's 17 rows pass from ~6600 keys (head size 128).
    // Past 16384 keys, three tiles a split.
    let (h, kvh, hd) = (8, 1, 128);
    for (filled, steps) in [(8256, 4), (16384, 2)] {
        rows.push(row(
            format!("attention deep decode heads={h}/{kvh} hd={hd} keys={}..", filled + 1),
            tol::ATTENTION,
            &[],
            move |c: &mut Case| {
                let kd = kvh * hd;
                c.kv(filled + 8, &[kd]);
                let fill = kv_fill(c, filled, kd);
                let one = attention_graph(c, 1, (h, kvh, hd, None, None), 0);
                c.step_with(fill, 0, VOCAB, Expect::Close(Readback::LastLogits));
                for pos in filled..filled + steps {
                    c.step(one, pos);
                }
            },
        ));
    }
    rows
}

/// Gated activations (a width with a tail past the 16-wide chunks, and a long one).
pub fn gated_act() -> Vec<Row> {
    let mut rows = Vec::new();
    for act in [Gate::Silu, Gate::Gelu] {
        for (n, n_tok) in [(1000, 1), (1000, 2), (4112, 17)] {
            let t = if act == Gate::Gelu { tol::GELU } else { tol::SILU };
            rows.push(row(format!("gated_act {act:?} n={n} rows={n_tok}"), t, &[], move |c: &mut Case| {
                let (tg, tu) = (c.table(n, 4.0), c.table(n, 1.0));
                let g = c.graph(graph(n_tok, &[(tg, n), (tu, n)], |g, s| {
                    g.push(Op::GatedAct { gate: s[0], up: s[1], act });
                    s[0]
                }));
                c.step(g, 0);
            }));
        }
    }
    rows
}

/// Add (into a third slot, then in place) and TakeLast.
pub fn add_take_last() -> Vec<Row> {
    [1, 3, 17, 80]
        .into_iter()
        .map(|n_tok| {
            row(format!("add, add in place, take_last rows={n_tok}"), tol::COPY, &[], move |c: &mut Case| {
                let n = 300;
                let (ta, tb) = (c.table(n, 1.0), c.table(n, 1.0));
                let g = c.graph(graph(n_tok, &[(ta, n), (tb, n)], |g, s| {
                    let sum = g.act(Rows::All, n);
                    g.push(Op::Add { a: s[0], b: s[1], dst: sum });
                    g.push(Op::Add { a: s[0], b: sum, dst: sum });
                    let last = g.act(Rows::Last, n);
                    g.push(Op::TakeLast { x: sum, dst: last });
                    last
                }));
                c.step(g, 0);
            })
        })
        .collect()
}

/// The readbacks: the argmax on the device, the last row's logits, every row's logits.
pub fn readback() -> Vec<Row> {
    let mut rows = Vec::new();
    for n in [5000, 49155] {
        for n_tok in [1, 2, 7] {
            rows.push(row(
                format!("readback vocab={n} rows={n_tok}"),
                tol::COPY,
                &[],
                move |c: &mut Case| {
                    let t = c.table(n, 1.0);
                    let g = c.graph(graph(n_tok, &[(t, n)], |_, s| s[0]));
                    for rb in [Readback::Argmax, Readback::LastLogits, Readback::AllLogits, Readback::Argmax]
                    {
                        c.step_with(g, 0, VOCAB, Expect::Close(rb));
                    }
                },
            ));
        }
    }
    rows
}

/// Weights split across buffers (as on a small binding limit; the WebGPU runner caps it):
/// embedding rows and the tied product read every part.
pub fn split_weights() -> Vec<Row> {
    [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F32]
        .into_iter()
        .map(|t| {
            row(format!("split {t} embed + tied matmul"), tol::matmul(t), &[t], move |c: &mut Case| {
                let (k, n, n_tok) = (512, 300, 3);
                let table = c.weight(t, k, n);
                let mut g = wick::exec::Graph::new(n_tok);
                let x = g.act(Rows::All, k);
                g.push(Op::Embed { table, dst: x, scale: 1.0 });
                let dst = g.act(Rows::All, n);
                g.push(Op::MatMul { w: table, x, dst, bias: None });
                g.logits = dst;
                let g = c.graph(g);
                // The first and last rows, then random ones.
                c.step_tokens(g, 0, &[0, n as u32 - 1, 150]);
                c.step_with(g, 0, n, Expect::Close(Readback::AllLogits));
            })
        })
        .collect()
}

/// KV shift (context shift by RoPE re-positioning): 256 positions of keys rotated by RoPE at
/// their positions and stored (blocks 0 to 3), then the blocks after one or two dropped ones
/// shifted back by 64 or 128 positions, then three queries after them attending over the
/// shifted cache through the table the shift leaves (the dropped blocks reused last). The
/// reference rotates each shifted key directly to its new position in f64. Normal and neox
/// pairs, head sizes 64, 128 and 256 (one row rotating half of the head), with and without
/// frequency factors.
pub fn kv_shift() -> Vec<Row> {
    let mut rows = Vec::new();
    for (j, (mode, hd, n_rot)) in [
        (RopeMode::Normal, 64, 64),
        (RopeMode::Neox, 64, 64),
        (RopeMode::Normal, 128, 128),
        (RopeMode::Neox, 128, 64),
        (RopeMode::Normal, 256, 256),
        (RopeMode::Neox, 256, 256),
    ]
    .into_iter()
    .enumerate()
    {
        for factors in [false, true] {
            let drop = 1 + (j + factors as usize) % 2;
            let name = format!(
                "kv_shift {mode:?} hd={hd} n_rot={n_rot} factors={factors} by -{}",
                drop * wick::exec::KV_BLOCK
            );
            rows.push(row(name, tol::ATTENTION, &[], move |c: &mut Case| {
                kv_shift_case(c, mode, hd, n_rot, factors, drop)
            }));
        }
    }
    rows
}

fn kv_shift_case(c: &mut Case, mode: RopeMode, hd: usize, n_rot: usize, factors: bool, drop: usize) {
    use wick::exec::{KvRope, KvShift, KV_BLOCK};
    let (n_heads, n_kv) = (4, 2);
    let (qd, kd) = (n_heads * hd, n_kv * hd);
    let freqs = factors.then(|| {
        let f: Vec<f32> = (0..n_rot / 2).map(|i| 1.0 + (i % 5) as f32 * 0.75).collect();
        c.values(&f)
    });
    let rope = KvRope {
        n_heads: n_kv,
        head_dim: hd,
        n_rot,
        base: 10000.0,
        freq_scale: 1.0,
        mode,
        freqs,
        ext: RopeExt::default(),
    };
    let rope_op = |x, n_heads| Op::Rope {
        x,
        n_heads,
        head_dim: hd,
        n_rot,
        base: rope.base,
        freq_scale: rope.freq_scale,
        mode,
        freqs,
        ext: rope.ext,
    };
    c.kv(4 * KV_BLOCK, &[kd]);
    // Fill: keys rotated at their positions and stored, with values; the rotated keys read back.
    let (tk, tv) = (c.table(kd, 1.0), c.table(kd, 1.0));
    let fill = c.graph(graph(KV_BLOCK, &[(tk, kd), (tv, kd)], |g, s| {
        g.push(rope_op(s[0], n_kv));
        g.push(Op::KvStore { layer: 0, k: s[0], v: s[1] });
        s[0]
    }));
    // Three queries after the shifted keys, storing their own keys and values first.
    let (tq, tk2, tv2) = (c.table(qd, 1.0), c.table(kd, 1.0), c.table(kd, 1.0));
    let attend = c.graph(graph(3, &[(tq, qd), (tk2, kd), (tv2, kd)], |g, s| {
        let dst = g.act(Rows::All, qd);
        g.push(rope_op(s[0], n_heads));
        g.push(rope_op(s[1], n_kv));
        g.push(Op::KvStore { layer: 0, k: s[1], v: s[2] });
        g.push(Op::Attention {
            layer: 0,
            q: s[0],
            dst,
            n_heads,
            n_kv_heads: n_kv,
            head_dim: hd,
            scale: 2.0 / (hd as f32).sqrt(),
            window: None,
            softcap: None,
        });
        dst
    }));
    for b in 0..4 {
        c.step(fill, b * KV_BLOCK);
    }
    // Drop blocks 1 .. 1 + drop: the blocks after them move back, the dropped ones come last.
    let moved: Vec<u32> = (1 + drop as u32..4).collect();
    c.shift(KvShift { blocks: moved.clone(), delta: -((drop * KV_BLOCK) as i32), layers: vec![Some(rope)] });
    let table: Vec<u32> = std::iter::once(0).chain(moved).chain(1..1 + drop as u32).collect();
    let pos = (4 - drop) * KV_BLOCK;
    c.step_seqs(attend, &[(pos, 3, table)], Expect::Close(Readback::AllLogits));
}

/// KV blocks through the host (prompt caches, issue 18): keys and values of two layers of
/// different widths stored in blocks 0 to 2, read back in the order 2, 0, 1 (compared with the
/// reference's bytes) and the reference's bytes written to blocks 5, 6, 4, then three queries
/// attending through the table 6, 4, 5, 7: what the executor wrote must be what it reads.
pub fn kv_copy() -> Vec<Row> {
    [64, 128]
        .into_iter()
        .map(|hd| {
            row(format!("kv_copy hd={hd}"), tol::ATTENTION, &[], move |c: &mut Case| kv_copy_case(c, hd))
        })
        .collect()
}

fn kv_copy_case(c: &mut Case, hd: usize) {
    use wick::exec::KV_BLOCK;
    let (n_heads, n_kv) = (4, 2);
    let (qd, kd) = (n_heads * hd, n_kv * hd);
    c.kv(8 * KV_BLOCK, &[kd, 64]);
    let (tk, tv, tk1, tv1) = (c.table(kd, 1.0), c.table(kd, 1.0), c.table(64, 1.0), c.table(64, 1.0));
    let fill = c.graph(graph(KV_BLOCK, &[(tk, kd), (tv, kd), (tk1, 64), (tv1, 64)], |g, s| {
        g.push(Op::KvStore { layer: 0, k: s[0], v: s[1] });
        g.push(Op::KvStore { layer: 1, k: s[2], v: s[3] });
        s[0]
    }));
    let (tq, tk2, tv2) = (c.table(qd, 1.0), c.table(kd, 1.0), c.table(kd, 1.0));
    let attend = c.graph(graph(3, &[(tq, qd), (tk2, kd), (tv2, kd)], |g, s| {
        let dst = g.act(Rows::All, qd);
        g.push(Op::KvStore { layer: 0, k: s[1], v: s[2] });
        g.push(Op::Attention {
            layer: 0,
            q: s[0],
            dst,
            n_heads,
            n_kv_heads: n_kv,
            head_dim: hd,
            scale: 2.0 / (hd as f32).sqrt(),
            window: None,
            softcap: None,
        });
        dst
    }));
    for b in 0..3 {
        c.step(fill, b * KV_BLOCK);
    }
    c.copy_blocks(vec![2, 0, 1], vec![5, 6, 4]);
    c.step_seqs(attend, &[(3 * KV_BLOCK, 3, vec![6, 4, 5, 7])], Expect::Close(Readback::AllLogits));
}
