//! wick: run GGUF language models on the GPU — WebGPU in the browser and natively, CUDA on NVIDIA.
#![warn(missing_docs)]

pub mod chat;
mod error;
pub mod gguf;
pub mod quant;
pub mod sampling;
pub mod stop;

pub use error::{Error, Result};
