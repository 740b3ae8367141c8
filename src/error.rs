//! The one error type of wick. Every variant carries enough context to act on.

/// Result alias used across wick.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in wick. Library code never panics on bad input:
/// it returns one of these and leaves the engine usable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the byte source failed (file, network stream, ...).
    #[error("I/O error while {context}: {message}")]
    Io {
        /// What wick was doing.
        context: String,
        /// The underlying error's text.
        message: String,
    },
    /// The GGUF stream ended before the structure it announced was complete.
    #[error("truncated GGUF: {what} needs {needed} bytes at offset {offset}, but the stream ended")]
    Truncated {
        /// What was being read.
        what: String,
        /// Byte offset in the file where it starts.
        offset: u64,
        /// Bytes that were needed.
        needed: u64,
    },
    /// The GGUF file is malformed (bad magic, absurd counts, overlapping tensors, ...).
    #[error("corrupt GGUF at offset {offset}: {message}")]
    Corrupt {
        /// Byte offset in the file where the problem was found.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// A tensor uses a block format wick does not implement.
    #[error("tensor '{tensor}' has type {type_name} (id {type_id}), which wick does not support")]
    UnsupportedType {
        /// Tensor name (empty when not tied to a tensor).
        tensor: String,
        /// ggml type id.
        type_id: u32,
        /// ggml type name, or "unknown".
        type_name: String,
    },
    /// The model architecture named in `general.architecture` is not implemented.
    #[error("unsupported model architecture '{0}' (wick supports: {supported})", supported = crate::model::Arch::names())]
    UnsupportedArchitecture(String),
    /// A required metadata key is absent.
    #[error("missing GGUF metadata key '{0}'")]
    MissingMetadata(String),
    /// A metadata key holds the wrong type or an invalid value.
    #[error("bad GGUF metadata '{key}': {message}")]
    BadMetadata {
        /// The key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A tensor the architecture needs is missing or has the wrong shape.
    #[error("tensor '{tensor}': {message}")]
    BadTensor {
        /// Tensor name.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// The tokenizer could not be built or could not encode the input.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to parse or render.
    #[error("chat template: {0}")]
    Template(String),
    /// More tokens than the context holds.
    #[error("context overflow: {needed} tokens needed but the context holds {n_ctx}")]
    ContextOverflow {
        /// Tokens that would be in the context.
        needed: usize,
        /// Context size.
        n_ctx: usize,
    },
    /// The executor (CPU, WebGPU, CUDA) failed or is unavailable.
    #[error("{executor} executor: {message}")]
    Executor {
        /// Which executor.
        executor: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The feature needed was not compiled into this build.
    #[error("this build of wick was compiled without {0}")]
    NotCompiledWith(&'static str),
    /// The operation was cancelled by the caller.
    #[error("cancelled")]
    Cancelled,
    /// A constraint (JSON schema, grammar, `response_format`) is invalid or cannot be enforced,
    /// or generation under it failed.
    #[error("constraint: {0}")]
    Grammar(String),
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A saved prompt cache cannot be used: another model or layout, another format version,
    /// or a truncated or corrupt file. Nothing of it was trusted.
    #[error("prompt cache rejected: {0}")]
    PromptCache(String),
}

impl Error {
    /// Shorthand for [`Error::Corrupt`].
    pub fn corrupt(offset: u64, message: impl Into<String>) -> Self {
        Error::Corrupt { offset, message: message.into() }
    }
    /// Shorthand for [`Error::Io`].
    pub fn io(context: impl Into<String>, err: impl std::fmt::Display) -> Self {
        Error::Io { context: context.into(), message: err.to_string() }
    }
    /// Shorthand for [`Error::BadMetadata`].
    pub fn bad_metadata(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::BadMetadata { key: key.into(), message: message.into() }
    }
    /// [`Error::UnsupportedType`] for weight `tensor` of type `dtype`, which an executor cannot run.
    pub(crate) fn unsupported_type(tensor: &str, dtype: crate::quant::GgmlType) -> Self {
        Error::UnsupportedType { tensor: tensor.into(), type_id: dtype.id(), type_name: dtype.name().into() }
    }
    /// A model's executor is already running a step (another task started one meanwhile).
    pub(crate) fn busy() -> Self {
        Error::InvalidArgument("the model is busy with another step".into())
    }
}
