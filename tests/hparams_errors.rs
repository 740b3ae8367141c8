//! Hyperparameters that would make wick divide by zero, compute NaNs or allocate without bound
//! are rejected when the header is read, with the key's name (each loaded at 20dc835).
#![cfg(not(target_arch = "wasm32"))]

use wick::gguf::{MetaValue, Metadata};
use wick::model::{Arch, Hparams};
use wick::synth::SynthSpec;

/// A valid metadata set of the tiny synthetic `arch` (no tokenizer needed for hyperparameters).
fn metadata(arch: Arch) -> Metadata {
    let mut donor = Metadata::default();
    donor.insert("tokenizer.ggml.model", MetaValue::Str("gpt2".into()));
    wick::synth::metadata(&SynthSpec::tiny(arch, 1), &donor).expect("metadata")
}

fn rejected(arch: Arch, key: &str, value: MetaValue) {
    let mut md = metadata(arch);
    assert!(Hparams::from_metadata(&md).is_ok(), "the unmodified {arch:?} metadata must load");
    let full = format!("{}.{key}", arch.name());
    md.insert(full.clone(), value.clone());
    match Hparams::from_metadata(&md) {
        Ok(hp) => panic!("{full} = {value:?} was accepted: {hp:?}"),
        Err(e) => assert!(e.to_string().contains(&full), "the error for {full} does not name it: {e}"),
    }
}

#[test]
fn zero_nan_and_huge_values_are_rejected_with_their_key() {
    for arch in Arch::ALL {
        rejected(arch, "context_length", MetaValue::U32(0));
        rejected(arch, "context_length", MetaValue::U32(u32::MAX));
        rejected(arch, "rope.freq_base", MetaValue::F32(f32::NAN));
        rejected(arch, "rope.freq_base", MetaValue::F32(0.0));
        rejected(arch, "rope.freq_base", MetaValue::F32(f32::INFINITY));
        rejected(arch, "attention.head_count", MetaValue::U32(0));
        rejected(arch, "attention.key_length", MetaValue::U32(1 << 20));
        rejected(arch, "block_count", MetaValue::U32(1 << 20));
    }
    rejected(Arch::Gemma3, "attention.sliding_window", MetaValue::U32(0));
}

/// A session longer than the model's own context is refused (it loaded and allocated at 20dc835).
#[test]
fn a_context_past_the_models_own_is_refused() {
    let dir = std::env::var_os("WICK_MODELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    let model = pollster::block_on(async {
        let src = wick::source::FileSource::open(dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")).await.unwrap();
        let donor = wick::gguf::GgufReader::open(src).await.unwrap().into_header().metadata;
        let spec = SynthSpec::tiny(Arch::Llama, 3);
        let bytes = wick::synth::write(Vec::new(), &spec, &donor).unwrap();
        let opts = wick::LoadOptions { executor: wick::ExecutorKind::Cpu, ..Default::default() };
        wick::Model::load(wick::source::MemorySource::new(bytes), opts).await.unwrap()
    });
    let own = model.hparams().n_ctx_train;
    assert!(model.session(wick::SessionOptions { n_ctx: own, ..Default::default() }).is_ok());
    let err =
        model.session(wick::SessionOptions { n_ctx: own + 1, ..Default::default() }).err().expect("refused");
    assert!(err.to_string().contains("context_length"), "{err}");
}
