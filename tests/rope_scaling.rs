//! Positions as the model defines them, at the model level: a file's `rope_freqs.weight` is
//! loaded and changes the output (and factors of 1 change nothing), `wick synth` writes Llama
//! 3.1/3.2's factors for the 1b and 8b shapes, and YaRN metadata reaches every RoPE op.
//! (The op suite checks the rotation itself on every executor.)
#![cfg(not(target_arch = "wasm32"))]

mod support;

use std::cell::Cell;

use support::block_on;
use support::models::donor_metadata;
use wick::exec::{Op, Readback, WeightId};
use wick::gguf::{MetaValue, Metadata};
use wick::model::{Arch, Hparams, Logits, Weights};
use wick::synth::{FileType, SynthSpec};

/// The last logits of the tiny synthetic llama (seed 5) with `llama3_rope`, after 40 tokens
/// (positions where the slowed pairs' angles differ by radians).
fn last_logits(llama3_rope: Option<f32>) -> Vec<f32> {
    let spec = SynthSpec { llama3_rope, ..SynthSpec::tiny(Arch::Llama, 5) };
    let bytes = wick::synth::write(Vec::new(), &spec, &donor_metadata()).unwrap();
    block_on(async {
        let opts = wick::LoadOptions { executor: wick::ExecutorKind::Cpu, ..Default::default() };
        let model = wick::Model::load(wick::source::MemorySource::new(bytes), opts).await.expect("load");
        let tokens: Vec<u32> = (0..40).map(|i| (i * 977 + 31) % model.n_vocab() as u32).collect();
        let mut s = model.session(wick::SessionOptions { n_ctx: 64, ..Default::default() }).unwrap();
        s.eval(&tokens, Readback::LastLogits).await.unwrap().logits
    })
}

#[test]
fn rope_freqs_load_and_change_the_output() {
    let none = last_logits(None);
    let ones = last_logits(Some(1.0));
    let llama31 = last_logits(Some(8.0));
    // Factors of 1 divide nothing: the same logits, bit for bit.
    assert_eq!(none, ones, "factors of 1 changed the output");
    let scale = ones.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = ones.iter().zip(&llama31).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff > 1e-3 * scale, "Llama 3.1's factors did not change the output ({diff} of {scale})");
}

#[test]
fn synth_writes_llama3_factors_for_the_real_shapes() {
    for (shape, factor, hd) in [("1b", 32.0, 64), ("8b", 8.0, 128)] {
        let spec = SynthSpec::shape(shape, Arch::Llama, FileType::Q4_K_M, 1).unwrap();
        assert_eq!((spec.n_ctx, spec.rope_base, spec.llama3_rope), (131072, 500_000.0, Some(factor)));
        let t = spec.tensor_specs(1000).into_iter().find(|t| t.name == "rope_freqs.weight").expect(shape);
        assert_eq!((t.dims, t.dtype), (vec![hd as u64 / 2], wick::quant::GgmlType::F32));
        // Llama 3.1's law: the fastest pairs keep their frequency, the slowest are divided by
        // the factor, and the factors never decrease in between.
        let f = wick::synth::llama3_rope_factors(hd, 500_000.0, factor, 1.0, 4.0, 8192.0);
        assert_eq!((f[0], f[hd / 2 - 1]), (1.0, factor));
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
    }
    // Other architectures have no such tensor.
    let spec = SynthSpec::shape("1b", Arch::Qwen2, FileType::Q4_K_M, 1).unwrap();
    assert!(spec.tensor_specs(1000).iter().all(|t| t.name != "rope_freqs.weight"));
}

/// Hands out a new handle for every weight asked for; `rope_freqs.weight` is absent.
struct AnyWeights(Cell<u32>);

impl Weights for AnyWeights {
    fn get(&self, _: &str, _: &[usize]) -> wick::Result<WeightId> {
        self.0.set(self.0.get() + 1);
        Ok(WeightId(self.0.get()))
    }
    fn get_opt(&self, name: &str, dims: &[usize]) -> wick::Result<Option<WeightId>> {
        if name == "rope_freqs.weight" || name == "output.weight" {
            return Ok(None);
        }
        self.get(name, dims).map(Some)
    }
}

#[test]
fn yarn_reaches_every_rope_op() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let mut donor = Metadata::default();
        donor.insert("tokenizer.ggml.model", MetaValue::Str("gpt2".into()));
        let mut md = wick::synth::metadata(&SynthSpec::tiny(arch, 1), &donor).unwrap();
        md.insert(format!("{}.rope.scaling.type", arch.name()), MetaValue::Str("yarn".into()));
        md.insert(format!("{}.rope.scaling.factor", arch.name()), MetaValue::F32(4.0));
        let hp = Hparams::from_metadata(&md).unwrap();
        let g = wick::model::build_graph(&hp, 100, &AnyWeights(Cell::new(0)), 1, 1, Logits::Last).unwrap();
        let ropes: Vec<_> = g.ops.iter().filter(|op| matches!(op, Op::Rope { .. })).collect();
        assert_eq!(ropes.len(), 2 * hp.n_layer);
        for op in ropes {
            let Op::Rope { freq_scale, ext, freqs, .. } = *op else { unreachable!() };
            assert_eq!((freq_scale, ext, freqs), (0.25, hp.rope_ext, None));
            assert_eq!(ext.ext_factor, 1.0);
        }
    }
}
