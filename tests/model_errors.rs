//! Bad models and bad requests give clear errors, never panics, and leave the engine usable.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::*;
use wick::exec::Readback;
use wick::gguf::{write_gguf_to_vec, GgufReader, MetaValue, Metadata, TensorSpec};
use wick::model::Arch;
use wick::source::MemorySource;
use wick::synth::SynthSpec;
use wick::{Error, ExecutorKind, GenerateOptions, LoadOptions, Model, SessionOptions};

fn tiny_bytes() -> Vec<u8> {
    let donor = donor_metadata();
    wick::synth::write(Vec::new(), &SynthSpec::tiny(Arch::Llama, 3), &donor).unwrap()
}

/// Read a whole (small) file, let `edit` change its metadata and tensors, write it again.
fn rewrite(bytes: &[u8], edit: impl FnOnce(&mut Metadata, &mut Vec<(TensorSpec, Vec<u8>)>)) -> Vec<u8> {
    block_on(async {
        let mut r = GgufReader::open(MemorySource::new(bytes.to_vec())).await.unwrap();
        let infos = r.header().tensors.clone();
        let mut md = r.header().metadata.clone();
        let mut data: Vec<Vec<u8>> = infos.iter().map(|_| Vec::new()).collect();
        while let Some(c) = r.next_chunk().await.unwrap() {
            data[c.tensor].extend_from_slice(c.data);
        }
        let mut tensors: Vec<(TensorSpec, Vec<u8>)> = infos
            .iter()
            .zip(data)
            .map(|(t, d)| (TensorSpec::new(t.name.clone(), &t.dims, t.dtype), d))
            .collect();
        edit(&mut md, &mut tensors);
        write_gguf_to_vec(&md, &tensors).unwrap()
    })
}

fn load(bytes: Vec<u8>) -> wick::Result<Model> {
    block_on(Model::load(
        MemorySource::new(bytes),
        LoadOptions { executor: ExecutorKind::Cpu, ..Default::default() },
    ))
}

#[test]
fn unknown_architecture() {
    let b = rewrite(&tiny_bytes(), |md, _| md.insert("general.architecture", MetaValue::Str("mamba".into())));
    match load(b) {
        Err(Error::UnsupportedArchitecture(a)) => assert_eq!(a, "mamba"),
        other => panic!("expected UnsupportedArchitecture, got {:?}", other.err()),
    }
}

#[test]
fn missing_hyperparameter() {
    let b = rewrite(&tiny_bytes(), |md, _| {
        let mut m = Metadata::new();
        for (k, v) in md.iter().filter(|(k, _)| k.as_str() != "llama.block_count") {
            m.insert(k.clone(), v.clone());
        }
        *md = m;
    });
    match load(b) {
        Err(Error::MissingMetadata(k)) => assert_eq!(k, "llama.block_count"),
        other => panic!("expected MissingMetadata, got {:?}", other.err()),
    }
}

#[test]
fn missing_tensor() {
    let b = rewrite(&tiny_bytes(), |_, t| t.retain(|(s, _)| s.name != "blk.1.ffn_up.weight"));
    match load(b) {
        Err(Error::BadTensor { tensor, message }) => {
            assert_eq!(tensor, "blk.1.ffn_up.weight");
            assert!(message.contains("missing"), "{message}");
        }
        other => panic!("expected BadTensor, got {:?}", other.err()),
    }
}

#[test]
fn wrong_tensor_shape() {
    let b = rewrite(&tiny_bytes(), |_, t| {
        let (spec, data) = t.iter_mut().find(|(s, _)| s.name == "blk.0.attn_q.weight").unwrap();
        // Half the rows: still a valid tensor, but not what the hyperparameters say.
        spec.dims[1] /= 2;
        data.truncate(data.len() / 2);
    });
    match load(b) {
        Err(Error::BadTensor { tensor, message }) => {
            assert_eq!(tensor, "blk.0.attn_q.weight");
            assert!(message.contains("shape"), "{message}");
        }
        other => panic!("expected BadTensor, got {:?}", other.err()),
    }
}

#[test]
fn truncated_model_file() {
    let b = tiny_bytes();
    for cut in [b.len() - 1, b.len() / 2, 1000, 24, 3] {
        let r = load(b[..cut].to_vec());
        assert!(
            matches!(r, Err(Error::Truncated { .. }) | Err(Error::Corrupt { .. })),
            "cut at {cut}: expected Truncated, got {:?}",
            r.err()
        );
    }
}

#[test]
fn prompt_longer_than_context_and_bad_token_ids() {
    let model = load(tiny_bytes()).unwrap();
    let mut s = model.session(SessionOptions { n_ctx: 16, ..Default::default() }).unwrap();
    let long: Vec<u32> = (0..20).collect();
    match s.generate(&long, GenerateOptions::default()) {
        Err(Error::ContextOverflow { needed, n_ctx }) => assert_eq!((needed, n_ctx), (21, 16)),
        other => panic!("expected ContextOverflow, got {:?}", other.err()),
    }
    match block_on(s.eval(&long, Readback::Argmax)) {
        Err(Error::ContextOverflow { .. }) => {}
        other => panic!("expected ContextOverflow, got {other:?}"),
    }
    let bad = block_on(s.eval(&[1, 2, 999_999], Readback::Argmax));
    assert!(matches!(bad, Err(Error::InvalidArgument(_))), "{bad:?}");
    // Still usable afterwards.
    let ok = block_on(s.eval(&[1, 2, 3], Readback::Argmax)).unwrap();
    assert!(ok.token().is_some());
    assert_eq!(s.tokens(), &[1, 2, 3]);
}

/// Every integer hyperparameter set to 0, 1, an odd value or an absurd one: loading returns
/// an error or a model that runs a few steps; nothing panics.
#[test]
fn absurd_hyperparameters_never_panic() {
    let base = tiny_bytes();
    let keys = [
        "llama.context_length",
        "llama.embedding_length",
        "llama.block_count",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.attention.key_length",
        "llama.attention.value_length",
        "llama.rope.dimension_count",
    ];
    for key in keys {
        for value in [0u32, 1, 3, 7, 1 << 20, u32::MAX] {
            let b = rewrite(&base, |md, _| md.insert(key, MetaValue::U32(value)));
            let outcome = std::panic::catch_unwind(|| {
                let Ok(model) = load(b) else { return };
                let Ok(mut s) = model.session(SessionOptions { n_ctx: 32, ..Default::default() }) else {
                    return;
                };
                let _ = block_on(s.eval(&[1, 2, 3], Readback::Argmax));
                let _ = block_on(s.eval(&[4], Readback::LastLogits));
            });
            assert!(outcome.is_ok(), "{key} = {value} panicked");
        }
    }
    for (key, value) in [
        ("llama.rope.freq_base", MetaValue::F32(0.0)),
        ("llama.rope.freq_base", MetaValue::F32(f32::NAN)),
        ("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(0.0)),
        ("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(-1.0)),
        ("llama.block_count", MetaValue::Str("two".into())),
        ("llama.rope.scaling.type", MetaValue::Str("yarn".into())),
        ("llama.rope.scaling.type", MetaValue::Str("linear".into())),
        ("llama.rope.scaling.factor", MetaValue::F32(-4.0)),
    ] {
        let b = rewrite(&base, |md, _| md.insert(key, value.clone()));
        let outcome = std::panic::catch_unwind(|| {
            let Ok(model) = load(b) else { return };
            let Ok(mut s) = model.session(SessionOptions { n_ctx: 32, ..Default::default() }) else { return };
            let _ = block_on(s.eval(&[1, 2, 3], Readback::Argmax));
        });
        assert!(outcome.is_ok(), "{key} = {value:?} panicked");
    }
}

/// Random byte changes anywhere in the header (metadata, tensor infos) of a small model:
/// loading and running never panic.
#[test]
fn mutated_headers_never_panic() {
    let base = tiny_bytes();
    let header_len = block_on(async {
        wick::gguf::GgufReader::open(MemorySource::new(base.clone())).await.unwrap().header().data_offset
            as usize
    });
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut loaded = 0;
    for round in 0..400 {
        let mut b = base.clone();
        for _ in 0..1 + next() % 4 {
            // Mutations land past the 49152-token vocabulary, among the hyperparameters and tensor infos,
            // half of the time; anywhere in the header otherwise.
            let at = if round % 2 == 0 {
                header_len - 1 - (next() as usize % 4096)
            } else {
                next() as usize % header_len
            };
            b[at] = next() as u8;
        }
        let outcome = std::panic::catch_unwind(|| {
            let Ok(model) = load(b) else { return false };
            if let Ok(mut s) = model.session(SessionOptions { n_ctx: 16, ..Default::default() }) {
                let _ = block_on(s.eval(&[1, 2], Readback::Argmax));
            }
            true
        });
        match outcome {
            Ok(ok) => loaded += ok as usize,
            Err(_) => panic!("mutation round {round} panicked"),
        }
    }
    eprintln!("{loaded} of 400 mutated files still loaded");
}
