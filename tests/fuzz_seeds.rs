//! The fuzz targets' model seed (fuzz/corpus/model_load/tiny_llama.gguf) is a real, loadable
//! model of a few KB: this test checks that it still loads, tokenizes and renders on the CPU
//! executor, and rewrites it with `WICK_WRITE_FUZZ_SEEDS=1` when the format changes.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use wick::chat::ChatMessage;
use wick::gguf::{MetaArray, MetaValue, Metadata};
use wick::model::Arch;
use wick::source::MemorySource;
use wick::synth::{FileType, SynthSpec};
use wick::{ExecutorKind, LoadOptions, Model};

const SEED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/model_load/tiny_llama.gguf");
const CACHE_SEED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/prompt_cache/tiny_llama.wkv");

/// A byte-level BPE vocabulary of a few tokens, two merges, ChatML control tokens and template.
fn tokenizer() -> Metadata {
    let mut md = Metadata::new();
    let mut tokens: Vec<String> = "Helo,wrd!Ġhi".chars().map(String::from).collect();
    tokens.extend(["ll", "llo", "<|im_start|>", "<|im_end|>"].map(String::from));
    let types: Vec<i32> = tokens.iter().map(|t| if t.starts_with("<|") { 3 } else { 1 }).collect();
    let n = tokens.len() as u32;
    md.insert("tokenizer.ggml.model", MetaValue::Str("gpt2".into()));
    md.insert("tokenizer.ggml.pre", MetaValue::Str("default".into()));
    md.insert("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::Str(tokens)));
    md.insert("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(types)));
    md.insert("tokenizer.ggml.merges", MetaValue::Array(MetaArray::Str(vec!["l l".into(), "ll o".into()])));
    md.insert("tokenizer.ggml.bos_token_id", MetaValue::U32(n - 2));
    md.insert("tokenizer.ggml.eos_token_id", MetaValue::U32(n - 1));
    md.insert(
        "tokenizer.chat_template",
        MetaValue::Str(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
             {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                .into(),
        ),
    );
    md
}

fn tiny_model() -> Vec<u8> {
    let spec = SynthSpec {
        n_embd: 32,
        n_layer: 1,
        n_head: 2,
        n_head_kv: 1,
        head_dim: 16,
        n_ff: 32,
        n_ctx: 64,
        file_type: FileType::Q8_0,
        embd_type: None,
        ..SynthSpec::tiny(Arch::Llama, 1)
    };
    wick::synth::write(Vec::new(), &spec, &tokenizer()).unwrap()
}

#[test]
fn the_model_seed_loads() {
    let bytes = tiny_model();
    assert!(bytes.len() < 16 << 10, "the seed should stay a few KB, not {} bytes", bytes.len());
    if std::env::var_os("WICK_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(std::path::Path::new(SEED).parent().unwrap()).unwrap();
        std::fs::write(SEED, &bytes).unwrap();
    }
    let committed = std::fs::read(SEED).expect("fuzz seed (WICK_WRITE_FUZZ_SEEDS=1 writes it)");
    assert_eq!(committed, bytes, "the committed seed differs: rewrite it with WICK_WRITE_FUZZ_SEEDS=1");
    let opts = LoadOptions { executor: ExecutorKind::Cpu, chunk_size: 4096, ..Default::default() };
    let model = pollster::block_on(Model::load(MemorySource::new(committed), opts)).unwrap();
    let ids = model.tokenizer().encode("Hello, world!", true, true).unwrap();
    assert!(ids.len() > 2, "{ids:?}");
    let prompt = model.chat_template().unwrap().render(&[ChatMessage::new("user", "hi")], true).unwrap();
    assert_eq!(prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

/// The prompt_cache target's seed: a saved cache of "Hello, world!" on the model seed, which
/// restores into a new session.
#[test]
fn the_prompt_cache_seed_restores() {
    let opts = LoadOptions { executor: ExecutorKind::Cpu, chunk_size: 4096, ..Default::default() };
    let model = pollster::block_on(Model::load(MemorySource::new(tiny_model()), opts)).unwrap();
    let ids = model.tokenizer().encode("Hello, world!", true, true).unwrap();
    let mut session = model.session(wick::SessionOptions { n_ctx: 64, ..Default::default() }).unwrap();
    pollster::block_on(session.eval(&ids, wick::exec::Readback::LastLogits)).unwrap();
    let bytes = pollster::block_on(session.save_prompt_cache()).unwrap();
    if std::env::var_os("WICK_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(std::path::Path::new(CACHE_SEED).parent().unwrap()).unwrap();
        std::fs::write(CACHE_SEED, &bytes).unwrap();
    }
    let committed = std::fs::read(CACHE_SEED).expect("fuzz seed (WICK_WRITE_FUZZ_SEEDS=1 writes it)");
    assert_eq!(committed, bytes, "the committed seed differs: rewrite it with WICK_WRITE_FUZZ_SEEDS=1");
    let mut other = model.session(wick::SessionOptions { n_ctx: 64, ..Default::default() }).unwrap();
    assert_eq!(pollster::block_on(other.restore_prompt_cache(&committed, &[])).unwrap(), ids.len());
}
