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

/// `metadata(arch)` with YaRN scaling by 4 from an original context of 32768.
fn yarn_metadata(arch: Arch) -> Metadata {
    let mut md = metadata(arch);
    let a = arch.name();
    md.insert(format!("{a}.rope.scaling.type"), MetaValue::Str("yarn".into()));
    md.insert(format!("{a}.rope.scaling.factor"), MetaValue::F32(4.0));
    md.insert(format!("{a}.rope.scaling.original_context_length"), MetaValue::U32(32768));
    md
}

/// YaRN is read with llama.cpp's defaults (ext_factor 1, beta_fast 32, beta_slow 1, a net
/// magnitude of 1 + 0.1 ln 4 applied by the kernels), and the file's own values where it has them.
#[test]
fn yarn_scaling_is_read() {
    for arch in Arch::ALL {
        let hp = Hparams::from_metadata(&yarn_metadata(arch)).expect("yarn loads");
        assert_eq!(hp.rope_freq_scale, 0.25);
        let e = hp.rope_ext;
        assert_eq!((e.ext_factor, e.beta_fast, e.beta_slow, e.n_ctx_orig), (1.0, 32.0, 1.0, 32768));
        assert!((e.attn_factor - 1.0).abs() < 1e-6, "{e:?}");
        let k = wick::exec::RopeConsts::new(hp.n_rot, hp.rope_base, hp.rope_freq_scale, e);
        assert!((k.mscale - (1.0 + 0.1 * 4f32.ln())).abs() < 1e-6, "{k:?}");
    }
    let mut md = yarn_metadata(Arch::Qwen2);
    md.insert("qwen2.rope.scaling.yarn_ext_factor", MetaValue::F32(0.5));
    md.insert("qwen2.rope.scaling.yarn_beta_fast", MetaValue::F32(16.0));
    md.insert("qwen2.rope.scaling.yarn_beta_slow", MetaValue::F32(2.0));
    md.insert("qwen2.rope.scaling.attn_factor", MetaValue::F32(0.9));
    let e = Hparams::from_metadata(&md).unwrap().rope_ext;
    assert_eq!((e.ext_factor, e.beta_fast, e.beta_slow), (0.5, 16.0, 2.0));
    assert!((e.attn_factor - 0.9).abs() < 1e-6, "{e:?}");
    // No original context in the file: the training context is the original one.
    let mut md = metadata(Arch::Qwen3);
    md.insert("qwen3.rope.scaling.type", MetaValue::Str("yarn".into()));
    md.insert("qwen3.rope.scaling.factor", MetaValue::F32(2.0));
    let hp = Hparams::from_metadata(&md).unwrap();
    assert_eq!(hp.rope_ext.n_ctx_orig, hp.n_ctx_train);
    // Linear scaling keeps working, without YaRN.
    let mut md = metadata(Arch::Llama);
    md.insert("llama.rope.scaling.type", MetaValue::Str("linear".into()));
    md.insert("llama.rope.scaling.factor", MetaValue::F32(8.0));
    let hp = Hparams::from_metadata(&md).unwrap();
    assert_eq!((hp.rope_freq_scale, hp.rope_ext), (0.125, wick::exec::RopeExt::default()));
}

/// Bad YaRN values are an error naming their key.
#[test]
fn bad_yarn_values_are_rejected_with_their_key() {
    let rejected_yarn = |arch: Arch, key: &str, value: MetaValue| {
        let mut md = yarn_metadata(arch);
        let full = format!("{}.{key}", arch.name());
        md.insert(full.clone(), value.clone());
        match Hparams::from_metadata(&md) {
            Ok(hp) => panic!("{full} = {value:?} was accepted: {hp:?}"),
            Err(e) => assert!(e.to_string().contains(&full), "the error for {full} does not name it: {e}"),
        }
    };
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        rejected_yarn(arch, "rope.scaling.factor", MetaValue::F32(0.0));
        rejected_yarn(arch, "rope.scaling.factor", MetaValue::F32(-4.0));
        rejected_yarn(arch, "rope.scaling.factor", MetaValue::F32(f32::NAN));
        rejected_yarn(arch, "rope.scaling.factor", MetaValue::F32(f32::INFINITY));
        rejected_yarn(arch, "rope.scaling.yarn_ext_factor", MetaValue::F32(2.0));
        rejected_yarn(arch, "rope.scaling.yarn_ext_factor", MetaValue::F32(f32::NAN));
        rejected_yarn(arch, "rope.scaling.yarn_beta_fast", MetaValue::F32(0.0));
        rejected_yarn(arch, "rope.scaling.yarn_beta_slow", MetaValue::F32(-1.0));
        rejected_yarn(arch, "rope.scaling.yarn_beta_slow", MetaValue::F32(64.0));
        rejected_yarn(arch, "rope.scaling.attn_factor", MetaValue::F32(0.0));
        rejected_yarn(arch, "rope.scaling.original_context_length", MetaValue::U32(u32::MAX));
        rejected_yarn(arch, "rope.scaling.type", MetaValue::Str("longrope".into()));
    }
}
