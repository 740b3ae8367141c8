//! wick: run GGUF language models on the GPU — WebGPU in the browser and natively, CUDA on NVIDIA.
#![warn(missing_docs)]

mod error;
pub mod gguf;
pub mod quant;
pub mod tokenizer;

pub use error::{Error, Result};
