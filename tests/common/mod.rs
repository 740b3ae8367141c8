//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// Path of a downloaded model; panics (failing the test) with instructions when it is missing.
pub fn model_path(name: &str) -> PathBuf {
    let dir = std::env::var_os("WICK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    let p = dir.join(name);
    assert!(p.exists(), "model {} is missing: run `bash .ci/get-models` (or set WICK_MODELS)", p.display());
    p
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

/// Load a model on the CPU executor.
pub fn load_cpu(name: &str) -> wick::Model {
    block_on(async {
        let src = wick::source::FileSource::open(model_path(name)).await.expect("open");
        let opts = wick::LoadOptions { executor: wick::ExecutorKind::Cpu, ..Default::default() };
        wick::Model::load(src, opts).await.expect("load")
    })
}

/// The JSON reference file `tests/data/NAME`.
pub fn reference(name: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("read reference")).expect("parse reference")
}

/// SmolLM2's metadata: the tokenizer donor of the synthetic models.
pub fn donor_metadata() -> wick::gguf::Metadata {
    block_on(async {
        let src = wick::source::FileSource::open(model_path(SMOLLM2)).await.unwrap();
        wick::gguf::GgufReader::open(src).await.unwrap().into_header().metadata
    })
}
