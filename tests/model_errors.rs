//! Bad models and bad requests give clear errors, never panics, and leave the engine usable.

mod common;

use common::*;
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
    assert!(ok.token.is_some());
    assert_eq!(s.tokens(), &[1, 2, 3]);
}
