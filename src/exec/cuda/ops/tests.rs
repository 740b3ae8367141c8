//! The CUDA executor's decode plans: the shared planner with this executor's capabilities.

use super::matmul::act_quant;
use super::*;
use crate::exec::fuse::{plan, Step};
use crate::exec::{ActId, Gate, Graph, Rows};

/// A step in a few words: `op i`, `norm+q8 i Q8K`, `q8 aX Q8K`, `mv3 i`, `rope_kv i`, and
/// `mv i wW [gate wU Silu] [bias] [+aA] -> aD [argmax]`.
fn describe(s: &Step) -> String {
    match *s {
        Step::Op(i) => format!("op {i}"),
        Step::NormQuant { op, kind } => format!("norm+q8 {op} {kind:?}"),
        Step::Quant { x, kind } => format!("q8 a{} {kind:?}", x.0),
        Step::MatVec3 { op, .. } => format!("mv3 {op}"),
        Step::RopeKv { op } => format!("rope_kv {op}"),
        Step::MatVec { op, w, gate, bias, add, dst, argmax } => {
            let mut d = format!("mv {op} w{}", w.0);
            if let Some((u, act)) = gate {
                d += &format!(" gate w{} {act:?}", u.0);
            }
            if bias.is_some() {
                d += " bias";
            }
            if let Some(a) = add {
                d += &format!(" +a{}", a.0);
            }
            d += &format!(" -> a{}", dst.0);
            if argmax {
                d += " argmax";
            }
            d
        }
    }
}

/// The plan of `g` with weights typed by `dtype`.
fn cuda_plan(g: &Graph, dtype: &dyn Fn(WeightId) -> Option<GgmlType>) -> Vec<Step> {
    plan(g, &fusions(|w| dtype(w).and_then(act_quant), dtype, g.n_tokens))
}

/// The llama layer as a step of four sequences: the same plan, but the logits' argmax is left
/// to the argmax kernel (one per sequence), and Q, K and V of mixed types (V in Q6_K here) are
/// three launches; of one type, one.
#[test]
fn plans_of_several_rows() {
    let (_, g1, w) = crate::exec::fuse::tests::graphs().into_iter().next().expect("a llama graph");
    let mut g = g1.clone();
    g.n_tokens = 4;
    g.n_seqs = 4;
    let one: Vec<String> = cuda_plan(&g1, &|id| Some(w.dtype(id))).iter().map(describe).collect();
    let four: Vec<String> = cuda_plan(&g, &|id| Some(w.dtype(id))).iter().map(describe).collect();
    let split = ["mv 2 w2 -> a2", "mv 3 w3 -> a3", "mv 4 w4 -> a4"].map(String::from);
    let want: Vec<String> = one
        .iter()
        .flat_map(|s| if s == "mv3 2" { split.to_vec() } else { vec![s.replace(" argmax", "")] })
        .collect();
    assert_eq!(four, want);
    let q4k = |_: WeightId| Some(GgmlType::Q4_K);
    let four: Vec<String> = cuda_plan(&g, &q4k).iter().map(describe).collect();
    assert_eq!(four[2], "mv3 2");
    assert!(!four.iter().any(|s| s.contains("argmax")), "{four:?}");
}

/// One layer of a llama-like and of a gemma3-like model (Q4_K with V, down and the tied
/// embedding in Q6_K): the plan the CUDA executor has always made for them.
#[test]
fn model_plans() {
    // Identical, step for step, to the plans of the planner this executor had before the
    // planner was shared (checked on these graphs and on all-Q4_0, Q8_0, Q5_1 and mixed-type
    // variants when the shared planner replaced it).
    let llama = [
        "op 0",
        "norm+q8 1 Q8K",
        "mv3 2",
        "rope_kv 5",
        "op 8",
        "q8 a5 Q8K",
        "mv 9 w6 +a0 -> a0",
        "norm+q8 11 Q8K",
        "mv 12 w8 gate w9 Silu -> a7",
        "q8 a7 Q8K",
        "mv 15 w10 +a0 -> a0",
        "op 17",
        "norm+q8 18 Q8K",
        "mv 19 w0 -> a11 argmax",
    ];
    // Gemma 3 norms the products' outputs before the residual adds, so no epilogue.
    let gemma3 = [
        "op 0",
        "norm+q8 1 Q8K",
        "mv3 2",
        "op 5",
        "op 6",
        "rope_kv 7",
        "op 10",
        "q8 a5 Q8K",
        "mv 11 w8 -> a6",
        "op 12",
        "op 13",
        "norm+q8 14 Q8K",
        "mv 15 w11 gate w12 Gelu -> a7",
        "q8 a7 Q8K",
        "mv 18 w13 -> a6",
        "op 19",
        "op 20",
        "op 21",
        "norm+q8 22 Q8K",
        "mv 23 w0 -> a11 argmax",
    ];
    let want: [&[&str]; 2] = [&llama, &gemma3];
    for ((name, g, w), want) in crate::exec::fuse::tests::graphs().into_iter().zip(want) {
        let got: Vec<String> = cuda_plan(&g, &|id| Some(w.dtype(id))).iter().map(describe).collect();
        assert_eq!(got, want, "{name}");
    }
}

/// A llama-style block: norm, Q/K/V, attention, output + residual, norm, gate/up, down +
/// residual, and the logits.
#[test]
fn llama_block_fuses() {
    let mut g = Graph::new(1);
    let x = g.act(Rows::All, 64);
    let n = g.act(Rows::All, 64);
    let q = g.act(Rows::All, 64);
    let k = g.act(Rows::All, 16);
    let v = g.act(Rows::All, 16);
    let att = g.act(Rows::All, 64);
    let t = g.act(Rows::All, 64);
    let gt = g.act(Rows::All, 128);
    let up = g.act(Rows::All, 128);
    let logits = g.act(Rows::All, 100);
    let w = WeightId;
    g.push(Op::Embed { table: w(0), dst: x, scale: 1.0 });
    g.push(Op::RmsNorm { x, weight: w(1), dst: n, group: 64, eps: 1e-5 });
    g.push(Op::MatMul { w: w(2), x: n, dst: q, bias: None });
    g.push(Op::MatMul { w: w(3), x: n, dst: k, bias: None });
    g.push(Op::MatMul { w: w(4), x: n, dst: v, bias: None });
    let rope = |x, n_heads| Op::Rope {
        x,
        n_heads,
        head_dim: 16,
        n_rot: 16,
        base: 1e4,
        freq_scale: 1.0,
        mode: crate::exec::RopeMode::Neox,
        freqs: None,
        ext: crate::exec::RopeExt::default(),
    };
    g.push(rope(q, 4));
    g.push(rope(k, 1));
    g.push(Op::KvStore { layer: 0, k, v });
    g.push(Op::Attention {
        layer: 0,
        q,
        dst: att,
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 16,
        scale: 0.25,
        window: None,
        softcap: None,
    });
    g.push(Op::MatMul { w: w(5), x: att, dst: t, bias: None });
    g.push(Op::Add { a: x, b: t, dst: x });
    g.push(Op::RmsNorm { x, weight: w(6), dst: n, group: 64, eps: 1e-5 });
    g.push(Op::MatMul { w: w(7), x: n, dst: gt, bias: None });
    g.push(Op::MatMul { w: w(8), x: n, dst: up, bias: None });
    g.push(Op::GatedAct { gate: gt, up, act: Gate::Silu });
    g.push(Op::MatMul { w: w(9), x: gt, dst: t, bias: None });
    g.push(Op::Add { a: x, b: t, dst: x });
    g.push(Op::RmsNorm { x, weight: w(1), dst: n, group: 64, eps: 1e-5 });
    g.push(Op::MatMul { w: w(0), x: n, dst: logits, bias: None });
    g.logits = logits;
    let q8 = ActQuant::Q8_0;
    let steps = cuda_plan(&g, &|_| Some(GgmlType::Q4_0));
    let mv = |op, i, add: Option<ActId>, dst| Step::MatVec {
        op,
        w: w(i),
        gate: None,
        bias: None,
        add,
        dst,
        argmax: dst == logits,
    };
    assert_eq!(
        steps,
        vec![
            Step::Op(0),
            Step::NormQuant { op: 1, kind: q8 },
            Step::MatVec3 { op: 2, w: [w(2), w(3), w(4)], bias: [None; 3], dst: [q, k, v] },
            Step::RopeKv { op: 5 },
            Step::Op(8),
            Step::Quant { x: att, kind: q8 },
            mv(9, 5, Some(x), x),
            Step::NormQuant { op: 11, kind: q8 },
            Step::MatVec {
                op: 12,
                w: w(7),
                gate: Some((w(8), Gate::Silu)),
                bias: None,
                add: None,
                dst: gt,
                argmax: false
            },
            Step::Quant { x: gt, kind: q8 },
            mv(15, 9, Some(x), x),
            Step::NormQuant { op: 17, kind: q8 },
            mv(18, 0, None, logits),
        ]
    );
    // Float weights are left as ops, and their conversion is not reused.
    let steps = cuda_plan(&g, &|wi| Some(if wi == w(3) { GgmlType::F32 } else { GgmlType::Q4_0 }));
    assert_eq!(
        &steps[2..6],
        &[mv(2, 2, None, q), Step::Op(3), Step::Quant { x: n, kind: q8 }, mv(4, 4, None, v)]
    );
}

/// A product whose output is read again is not fused with the add after it.
#[test]
fn live_outputs_are_kept() {
    let mut g = Graph::new(1);
    let x = g.act(Rows::All, 32);
    let t = g.act(Rows::All, 32);
    let y = g.act(Rows::All, 32);
    g.push(Op::MatMul { w: WeightId(0), x, dst: t, bias: None });
    g.push(Op::Add { a: x, b: t, dst: y });
    g.push(Op::Add { a: y, b: t, dst: y });
    g.logits = y;
    let steps = cuda_plan(&g, &|_| Some(GgmlType::Q4_K));
    assert!(matches!(steps[1], Step::MatVec { add: None, dst, .. } if dst == t), "{steps:?}");
}

/// Gate and up of different types are not fused (`mmv2_T` reads both as T).
#[test]
fn gate_and_up_of_two_types_stay_apart() {
    let (_, g, w) = crate::exec::fuse::tests::graphs().swap_remove(0);
    // The synthetic llama's weights: rope_freqs is w5, so up is w9.
    let up = WeightId(9);
    let steps = cuda_plan(&g, &|id| Some(if id == up { GgmlType::Q5_K } else { w.dtype(id) }));
    let d: Vec<String> = steps.iter().map(describe).collect();
    assert!(d.contains(&"mv 12 w8 -> a7".to_string()) && d.contains(&"mv 13 w9 -> a8".to_string()), "{d:?}");
}
