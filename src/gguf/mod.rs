//! GGUF: the streaming reader, the writer, and metadata.

mod metadata;

pub use metadata::{MetaArray, MetaValue, Metadata};
