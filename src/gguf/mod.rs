//! GGUF: the streaming reader, the writer, and metadata.

pub mod format;
mod input;
mod metadata;
mod reader;
mod writer;

pub use metadata::{MetaArray, MetaValue, Metadata};
pub use reader::{GgufHeader, GgufReader, Progress, TensorChunk, TensorInfo, DEFAULT_CHUNK_SIZE};
pub use writer::{write_gguf_to_vec, GgufWriter, TensorSpec};
