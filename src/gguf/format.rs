//! The GGUF container format: constants shared by the reader and the writer, and the caps the
//! reader puts on every length it reads.
//!
//! Layout (little-endian; see llama.cpp `ggml/src/gguf.cpp` and `docs/gguf.md`):
//! ```text
//! magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
//! n_kv × (key: string, value type u32, value)
//! n_tensors × (name: string, n_dims u32, dims: n_dims × u64, ggml type u32, offset u64)
//! padding to `general.alignment` (default 32)
//! tensor data; each tensor at data_offset + offset, offsets aligned
//! string = len u64 + bytes (UTF-8, no terminator); array = elem type u32 + count u64 + elems
//! ```
//! Version 1 used 32-bit counts and lengths; wick reads versions 2 and 3 only.

/// The four magic bytes at the start of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The version the writer produces.
pub const VERSION: u32 = 3;
/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that overrides the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// ggml's maximum number of dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

// ---- Caps. Each stops a corrupt or hostile length from turning into a huge allocation or loop
// ---- before the bytes behind it are seen. Real files are far below every one of them.

/// Tensors per file. The largest real models have a few thousand tensors (a 600-layer MoE would
/// still be under 100k); a million tensor infos is ≥ 32 MiB of header, which no writer produces.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Metadata entries per file. Real files have tens; a million is absurd but cheap to reject.
pub const MAX_KV: u64 = 1 << 20;
/// Bytes in a metadata key or tensor name. ggml limits tensor names to 63 bytes and keys are short
/// dotted paths; 64 KiB leaves room for other writers without letting a length run wild.
pub const MAX_NAME_LEN: u64 = 1 << 16;
/// Bytes in one string value. The largest real ones are chat templates (tens of KiB) and, for
/// some converters, a whole `tokenizer.huggingface.json` (tens of MiB). Strings are also read in
/// pieces, so memory only grows as bytes actually arrive.
pub const MAX_STRING_LEN: u64 = 256 << 20;
/// Elements in one array. The largest real arrays are vocabularies and merge lists (262k tokens
/// for Gemma 3, ~500k merges for some BPE models); 64M is two orders of magnitude above that.
pub const MAX_ARRAY_LEN: u64 = 1 << 26;
/// Nesting depth of arrays of arrays. The format allows nesting, llama.cpp itself rejects it, and
/// real files never use it; a small bound keeps a corrupt file from recursing deep.
pub const MAX_ARRAY_DEPTH: usize = 4;

/// GGUF metadata value type ids.
pub mod value_type {
    #![allow(missing_docs)]
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// Smallest encoding of one value of type `t`, in bytes (a string or array is at least its length
/// prefix); `None` for an unknown type. Used to reject counts the remaining bytes cannot hold.
pub fn min_value_size(t: u32) -> Option<u64> {
    use value_type::*;
    Some(match t {
        U8 | I8 | BOOL => 1,
        U16 | I16 => 2,
        U32 | I32 | F32 => 4,
        U64 | I64 | F64 => 8,
        STRING => 8,
        ARRAY => 12,
        _ => return None,
    })
}

/// Smallest metadata entry: empty key (8) + type (4) + a one-byte value.
pub const MIN_KV_SIZE: u64 = 8 + 4 + 1;
/// Smallest tensor info: empty name (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
pub const MIN_TENSOR_INFO_SIZE: u64 = 8 + 4 + 8 + 4 + 8;

/// `x` rounded up to a multiple of `align` (a power of two); `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}
