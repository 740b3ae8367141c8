//! Fuzz a whole model load from bytes on the CPU executor: GGUF header, hyperparameters,
//! tokenizer, chat template and tensor upload, with small chunks. Any input must give `Ok` or
//! `Err`, never a panic, a hang or an allocation beyond what the bytes justify. A model that
//! loads also tokenizes a prompt and renders its chat template.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick::chat::ChatMessage;
use wick::source::MemorySource;
use wick::{ExecutorKind, LoadOptions, Model};

fuzz_target!(|data: &[u8]| {
    let opts = LoadOptions { executor: ExecutorKind::Cpu, chunk_size: 4096, ..Default::default() };
    let Ok(model) = pollster::block_on(Model::load(MemorySource::new(data), opts)) else { return };
    let _ = model.tokenizer().encode("Hello, world! <|im_start|>", true, true);
    if let Some(t) = model.chat_template() {
        let _ = t.render(&[ChatMessage::new("user", "hi")], true);
    }
});
