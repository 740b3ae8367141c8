//! Fuzz restoring a saved prompt cache into a session of the seed model (CPU executor): any
//! bytes must give `Ok` or `Err`, never a panic or an allocation beyond what the bytes
//! justify, and a rejected cache must leave the session empty and usable. Each input is tried
//! as it is (mostly stopped by the checksum) and with its last 16 bytes replaced by the right
//! checksum, so mutations reach the checks after it (model digest, row widths, token ids,
//! block writes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick::source::MemorySource;
use wick::{ExecutorKind, LoadOptions, Model, SessionOptions};

const SEED_MODEL: &[u8] = include_bytes!("../corpus/model_load/tiny_llama.gguf");

thread_local! {
    static MODEL: &'static Model = {
        let opts = LoadOptions { executor: ExecutorKind::Cpu, chunk_size: 4096, ..Default::default() };
        Box::leak(Box::new(pollster::block_on(Model::load(MemorySource::new(SEED_MODEL), opts)).expect("seed model")))
    };
}

fuzz_target!(|data: &[u8]| {
    let _ = wick::prompt_cache::read_header(data);
    MODEL.with(|model| {
        let mut session = model.session(SessionOptions { n_ctx: 64, ..Default::default() }).expect("session");
        let mut fixed = data.to_vec();
        if fixed.len() >= 16 {
            let body = fixed.len() - 16;
            let sum = wick::prompt_cache::checksum(&fixed[..body]);
            fixed[body..].copy_from_slice(&sum);
        }
        for bytes in [data, &fixed[..]] {
            match pollster::block_on(session.restore_prompt_cache(bytes, &[])) {
                Ok(n) => assert_eq!(session.tokens().len(), n),
                Err(_) => assert!(session.tokens().is_empty(), "a rejected cache left tokens"),
            }
        }
    });
});
