//! The downloaded models (`bash .ci/get-models`), the JSON references beside the tests, and
//! models loaded on the CPU.

use std::path::{Path, PathBuf};

use super::block_on;

/// SmolLM2 135M, Q4_1: the small model of most tests and the synthetic models' tokenizer donor.
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Gemma 3 270M, Q4_K_M.
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// The models directory: `$WICK_MODELS`, else `<crate>/models`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("WICK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

/// Path of a downloaded model; panics (failing the test) with instructions when it is missing.
pub fn model_path(name: &str) -> PathBuf {
    let p = models_dir().join(name);
    assert!(p.exists(), "model {} is missing: run `bash .ci/get-models` (or set WICK_MODELS)", p.display());
    p
}

/// Load a model on the CPU executor.
pub fn load_cpu(name: &str) -> wick::Model {
    load_on(name, wick::ExecutorKind::Cpu)
}

/// Load a model on `executor`.
pub fn load_on(name: &str, executor: wick::ExecutorKind) -> wick::Model {
    block_on(async {
        let src = wick::source::FileSource::open(model_path(name)).await.expect("open");
        let opts = wick::LoadOptions { executor, ..Default::default() };
        wick::Model::load(src, opts).await.expect("load")
    })
}

/// The JSON reference file `tests/data/NAME`.
pub fn reference(name: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("read reference")).expect("parse reference")
}

/// The metadata of a GGUF file, read by the crate's own streaming reader (which stops after
/// the header: the tensor data is not read).
pub fn read_metadata(path: &Path) -> wick::gguf::Metadata {
    block_on(async {
        let src = wick::source::FileSource::open(path)
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        wick::gguf::GgufReader::open(src).await.expect("a GGUF file").into_header().metadata
    })
}

/// SmolLM2's metadata: the tokenizer donor of the synthetic models.
pub fn donor_metadata() -> wick::gguf::Metadata {
    read_metadata(&model_path(SMOLLM2))
}

/// The tokenizer donor of the synthetic models on GPU machines: `$WICK_DONOR`, else SmolLM2
/// from the models directory; None (after saying so) where neither exists.
pub fn tokenizer_donor() -> Option<wick::gguf::Metadata> {
    let p = std::env::var_os("WICK_DONOR").map(PathBuf::from).unwrap_or_else(|| models_dir().join(SMOLLM2));
    if !p.exists() {
        eprintln!("SKIPPED: no tokenizer donor at {} (set WICK_DONOR)", p.display());
        return None;
    }
    Some(read_metadata(&p))
}
