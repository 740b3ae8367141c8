//! GGUF: the streaming reader, the writer, and metadata.
//!
//! The reader takes any [`crate::source::ByteSource`] and never seeks: [`GgufReader::open`] reads
//! and validates everything up to the tensor data, then [`GgufReader::next_chunk`] hands out the
//! tensor bytes in bounded chunks, ready to upload:
//!
//! ```no_run
//! # async fn load() -> wick::Result<()> {
//! use wick::gguf::GgufReader;
//! use wick::source::FileSource;
//!
//! let mut reader = GgufReader::open(FileSource::open("model.gguf").await?).await?;
//! let arch = reader.header().metadata.str("general.architecture")?.to_string();
//! // reader.progress() says how far it got, for a progress bar.
//! while let Some(chunk) = reader.next_chunk().await? {
//!     // Upload chunk.data to the buffer of chunk.info.name at chunk.offset ...
//!     # let _ = (chunk.info, &arch);
//! }
//! # Ok(())
//! # }
//! ```

pub mod format;
mod input;
mod metadata;
mod reader;
mod writer;

pub use metadata::{MetaArray, MetaValue, Metadata};
pub use reader::{GgufHeader, GgufReader, Progress, TensorChunk, TensorInfo, DEFAULT_CHUNK_SIZE};
pub use writer::{write_gguf_to_vec, GgufWriter, TensorSpec};
