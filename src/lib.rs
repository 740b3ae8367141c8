//! wick: run GGUF language models on the GPU — WebGPU in the browser and natively, CUDA on
//! NVIDIA — with a CPU reference executor that every other executor is tested against.
//!
//! ```no_run
//! # async fn demo() -> wick::Result<()> {
//! use wick::{GenerateOptions, LoadOptions, Model, SessionOptions};
//! let src = wick::source::FileSource::open("model.gguf").await?;
//! let model = Model::load(src, LoadOptions::default()).await?;
//! let mut session = model.session(SessionOptions::default())?;
//! let prompt = model.tokenizer().encode("The capital of France is", true, true)?;
//! let mut gen = session.generate(&prompt, GenerateOptions::default())?;
//! while let Some(tok) = gen.next().await {
//!     print!("{}", tok?.text);
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
// The threaded browser build (nightly, `+atomics`: see exec/cpu/web_pool.rs) sleeps its workers
// with `memory.atomic.wait32`, which core exposes only behind this gate.
#![cfg_attr(all(target_arch = "wasm32", target_feature = "atomics"), feature(stdarch_wasm_atomic_wait))]

mod batch;
pub mod chat;
mod clock;
pub mod constrain;
pub mod digest;
mod error;
pub mod exec;
pub(crate) mod fma;
pub mod gguf;
pub mod kv;
mod load;
mod logprobs;
pub mod model;
pub mod prompt_cache;
pub mod quant;
pub mod sampling;
mod session;
mod shift;
pub mod source;
pub mod stop;
pub mod synth;
#[cfg(test)]
mod test_rng;
pub mod tokenizer;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use batch::{Batch, SeqId};
pub use constrain::Constraint;
pub use error::{Error, Result};
pub use exec::ExecutorKind;
pub use load::{Engine, LoadOptions, Model, ModelInfo, ProgressFn};
pub use logprobs::{logprobs, Logprobs, TokenLogprob};
pub use session::{FinishReason, GenerateOptions, Generation, Session, SessionOptions, ShiftMode, Token};
