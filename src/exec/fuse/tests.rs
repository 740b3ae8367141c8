//! Tests of the shared planner on graphs of real architectures (`model::build_graph`), and
//! the graphs for the executors' own planner tests.

use std::cell::RefCell;
#[cfg(feature = "webgpu")]
use std::collections::HashSet;

use super::*;
use crate::exec::RopeMode;
use crate::model::{build_graph, Arch, Hparams, Logits, Weights};
use crate::quant::GgmlType;

/// Weights handed out by name in order, typed as in a Q4_K_M file (Q4_K; V, down and the
/// tied embedding Q6_K; norms F32), with no biases and no separate output head.
#[derive(Default)]
pub(crate) struct TestWeights {
    names: RefCell<Vec<(String, Vec<usize>)>>,
}

impl TestWeights {
    /// The type of weight `w`.
    pub(crate) fn dtype(&self, w: WeightId) -> GgmlType {
        let name = &self.names.borrow()[w.0 as usize].0;
        if name.contains("norm") {
            GgmlType::F32
        } else if name.contains("attn_v") || name.contains("ffn_down") || name.contains("token_embd") {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        }
    }
    /// The ggml dims of weight `w`.
    #[cfg_attr(not(feature = "webgpu"), allow(dead_code))]
    pub(crate) fn dims(&self, w: WeightId) -> Vec<usize> {
        self.names.borrow()[w.0 as usize].1.clone()
    }
}

impl Weights for TestWeights {
    fn get(&self, name: &str, dims: &[usize]) -> crate::Result<WeightId> {
        let mut names = self.names.borrow_mut();
        if let Some(i) = names.iter().position(|(n, _)| n == name) {
            return Ok(WeightId(i as u32));
        }
        names.push((name.to_string(), dims.to_vec()));
        Ok(WeightId(names.len() as u32 - 1))
    }
    fn get_opt(&self, name: &str, dims: &[usize]) -> crate::Result<Option<WeightId>> {
        if name.contains("bias") || name == "output.weight" {
            return Ok(None);
        }
        self.get(name, dims).map(Some)
    }
}

fn hparams(arch: Arch) -> Hparams {
    Hparams {
        arch,
        n_ctx_train: 4096,
        n_embd: 256,
        n_layer: 1,
        n_ff: 512,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        v_head_dim: 64,
        n_rot: 64,
        rope_base: 1e4,
        rope_base_swa: 1e4,
        rope_freq_scale: 1.0,
        rope_ext: crate::exec::RopeExt::default(),
        rope_mode: if arch == Arch::Gemma3 { RopeMode::Neox } else { RopeMode::Normal },
        eps: 1e-6,
        sliding_window: (arch == Arch::Gemma3).then_some(512),
    }
}

/// One-token graphs of one layer of a llama-like and a gemma3-like model, with their weights.
pub(crate) fn graphs() -> Vec<(&'static str, Graph, TestWeights)> {
    [("llama", Arch::Llama), ("gemma3", Arch::Gemma3)]
        .into_iter()
        .map(|(name, arch)| {
            let w = TestWeights::default();
            let g = build_graph(&hparams(arch), 1000, &w, 1, 1, Logits::Last).expect("the graph builds");
            (name, g, w)
        })
        .collect()
}

/// With the WebGPU executor's capabilities (which once had a planner of their own, whose
/// choices these are), one layer of each architecture fuses: its two whole-row norms and the
/// logits' norm with their q8 conversion, RoPE into the KV store, gate/up with SiLU and each
/// residual add into its product (llama only: see below).
#[cfg(feature = "webgpu")]
#[test]
fn webgpu_capabilities_fuse_each_pattern_once() {
    use crate::exec::webgpu::fuse as wf;
    for (name, g, w) in graphs() {
        let quant = |op: &Op| match *op {
            Op::MatMul { w: id, x, .. } if w.dtype(id).is_quantized() && g.cols(x) % 256 == 0 => {
                Some(ActQuant::Q8K)
            }
            _ => None,
        };
        let pair = |a: &Op, b: &Op| match (a, b) {
            (&Op::MatMul { w: w1, .. }, &Op::MatMul { w: w2, .. }) => {
                w.dtype(w1) == w.dtype(w2) && w.dims(w1) == w.dims(w2)
            }
            _ => false,
        };
        let triple = |ops: &[Op]| {
            let types: Vec<GgmlType> = ops
                .iter()
                .filter_map(|op| match *op {
                    Op::MatMul { w: id, .. } => Some(w.dtype(id)),
                    _ => None,
                })
                .collect();
            types.len() == 3 && types.iter().all(|&t| t == types[0])
        };
        let f = wf::from_steps(&plan(&g, &wf::capabilities(quant, pair, triple)));
        let count = |set: &HashSet<usize>| set.len();
        let got =
            (count(&f.norm_quant), count(&f.triple), count(&f.rope_kv), count(&f.gate_up), f.add_into.len());
        // (norm + q8, Q/K/V, RoPE + KV store, gate/up, residual epilogues). Q/K/V never: V is
        // Q6_K beside Q4_K (as in Q4_K_M files). gemma3: GELU, and its post-norms come between
        // each product and its residual add.
        let want = if name == "llama" { (3, 0, 1, 1, 2) } else { (3, 0, 1, 0, 0) };
        assert_eq!(got, want, "{name}: {f:?}");
        // Every fused op is skipped exactly once, and never the op that leads a fusion.
        for lead in f.norm_quant.iter().chain(&f.triple).chain(&f.rope_kv).chain(&f.gate_up) {
            assert!(!f.skip.contains(lead), "{name}: fusion leader {lead} skipped");
        }
    }
}

/// A plan for an executor that fuses nothing is the ops, one by one.
#[test]
fn no_capabilities_no_fusions() {
    for (name, g, _) in graphs() {
        let caps = Capabilities {
            quant: Box::new(|_: &Op| None),
            float_products: false,
            shared_conversion: false,
            norm_quant: None,
            epilogue: None,
            argmax: false,
            gate_up: None,
            triple: None,
            rope_kv: None,
        };
        let want: Vec<Step> = (0..g.ops.len()).map(Step::Op).collect();
        assert_eq!(plan(&g, &caps), want, "{name}");
    }
}
