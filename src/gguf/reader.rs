//! The streaming GGUF reader: header, metadata and tensor infos up front, then tensor bytes in
//! bounded chunks, front to back, with no seeking (ARCHITECTURE.md, rule "Stream the weights").
//!
//! Every length read from the file is checked against a cap (see [`super::format`]) and, when the
//! source knows its length, against the bytes that remain, before anything is allocated for it.
//! Bad input gives an [`Error`], never a panic; `tests/gguf_errors.rs` (truncations, mutations, absurd counts) and `fuzz/` hammer this.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;

use super::format::{self, value_type as vt};
use super::input::Input;
use super::{MetaArray, MetaValue, Metadata};
use crate::quant::GgmlType;
use crate::source::ByteSource;
use crate::{Error, Result};

/// Default chunk size of [`GgufReader::next_chunk`]: 4 MiB.
pub const DEFAULT_CHUNK_SIZE: usize = 4 << 20;

/// Where one tensor lives and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Shape in ggml order: `dims[0]` is the row length (the fastest-varying dimension).
    pub dims: Vec<u64>,
    /// Storage type.
    pub dtype: GgmlType,
    /// Byte offset of the tensor's data, relative to the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (product of `dims`). Validated by the reader not to overflow.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |a, &d| a.saturating_mul(d))
    }
    /// Bytes of data: whole blocks of `dtype`. Validated by the reader not to overflow.
    pub fn n_bytes(&self) -> u64 {
        let bs = self.dtype.block_size() as u64;
        (self.n_elements() / bs).saturating_mul(self.dtype.type_size() as u64)
    }
}

/// Everything before the tensor data.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Metadata key/value pairs.
    pub metadata: Metadata,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Alignment of the data section and of every tensor offset.
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
}

impl GgufHeader {
    /// Index of the tensor named `name`.
    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }
    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// Total bytes of tensor data (without padding).
    pub fn total_tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes()).sum()
    }
}

/// How far loading has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes consumed from the source, header and padding included.
    pub bytes_done: u64,
    /// Source length, when known.
    pub bytes_total: Option<u64>,
    /// Tensors whose last chunk has been yielded.
    pub tensors_done: usize,
    /// Number of tensors.
    pub tensors_total: usize,
}

/// A piece of one tensor's data.
#[derive(Debug)]
pub struct TensorChunk<'a> {
    /// Index into [`GgufHeader::tensors`].
    pub tensor: usize,
    /// That tensor's info (the reader stays borrowed while a chunk is alive, so it comes along).
    pub info: &'a TensorInfo,
    /// Byte offset of `data` within the tensor.
    pub offset: u64,
    /// The bytes; a multiple of 4 long unless `last`.
    pub data: &'a [u8],
    /// Whether this is the tensor's last chunk.
    pub last: bool,
}

/// A streaming GGUF reader over any [`ByteSource`].
pub struct GgufReader<S: ByteSource> {
    input: Input<S>,
    header: GgufHeader,
    /// Tensor indices in order of offset.
    order: Vec<usize>,
    /// Position in `order` of the tensor being streamed.
    cur: usize,
    /// Bytes of the current tensor already yielded.
    within: u64,
    chunk_size: usize,
    buf: Vec<u8>,
    /// Set when a `next_chunk` failed part-way: the source position is then unknown.
    failed: bool,
}

impl<S: ByteSource> std::fmt::Debug for GgufReader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufReader")
            .field("version", &self.header.version)
            .field("tensors", &self.header.tensors.len())
            .field("progress", &self.progress())
            .finish()
    }
}

impl<S: ByteSource> GgufReader<S> {
    /// Read and validate the header, the metadata and the tensor infos. The source is left at the
    /// end of the tensor infos; tensor data is read by [`GgufReader::next_chunk`].
    pub async fn open(src: S) -> Result<Self> {
        let mut input = Input::new(src);
        let header = read_header(&mut input).await?;
        let mut order: Vec<usize> = (0..header.tensors.len()).collect();
        order.sort_by_key(|&i| header.tensors[i].offset);
        Ok(Self {
            input,
            header,
            order,
            cur: 0,
            within: 0,
            chunk_size: DEFAULT_CHUNK_SIZE,
            buf: Vec::new(),
            failed: false,
        })
    }

    /// The header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The metadata, taken out of the header (left empty): tensor data does not need it.
    pub(crate) fn take_metadata(&mut self) -> Metadata {
        std::mem::take(&mut self.header.metadata)
    }

    /// The header, dropping the source.
    pub fn into_header(self) -> GgufHeader {
        self.header
    }

    /// The source, positioned wherever streaming stopped.
    pub fn into_source(self) -> S {
        self.input.into_source()
    }

    /// Largest chunk [`GgufReader::next_chunk`] yields. Rounded down to a multiple of 4 (at least
    /// 4), so that every chunk but a tensor's last is a multiple of 4 bytes long.
    pub fn set_chunk_size(&mut self, bytes: usize) {
        self.chunk_size = (bytes & !3).max(4);
        if self.buf.len() > self.chunk_size {
            self.buf.truncate(self.chunk_size);
            self.buf.shrink_to_fit();
        }
    }

    /// The chunk size in effect.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// Next chunk of tensor data: tensors in order of file offset, each tensor's chunks in order,
    /// padding skipped. `None` once every tensor has been yielded.
    ///
    /// A chunk is at most the chunk size, never spans two tensors, and is a multiple of 4 bytes
    /// long unless it is its tensor's last. One buffer of at most the chunk size is reused.
    ///
    /// After an error the reader is spent: later calls fail with [`Error::InvalidArgument`].
    pub async fn next_chunk(&mut self) -> Result<Option<TensorChunk<'_>>> {
        if self.failed {
            return Err(Error::InvalidArgument("GGUF reader used after a failed next_chunk".into()));
        }
        let Some(&index) = self.order.get(self.cur) else { return Ok(None) };
        let t = &self.header.tensors[index];
        let size = t.n_bytes();
        if self.within == 0 {
            // Skip padding (or a gap other writers may leave) up to the tensor's start. The
            // reader validated that offsets do not overlap, so the start is never behind us.
            let start = self.header.data_offset + t.offset;
            let gap = start.saturating_sub(self.input.pos());
            if gap > 0 {
                if let Err(e) = self.input.skip(gap, &format!("padding before tensor '{}'", t.name)).await {
                    self.failed = true;
                    return Err(e);
                }
            }
        }
        let n = (size - self.within).min(self.chunk_size as u64) as usize;
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        if let Err(e) = self.input.read_exact(&mut self.buf[..n], "").await {
            self.failed = true;
            return Err(match e {
                Error::Truncated { offset, .. } => Error::Truncated {
                    what: format!("data of tensor '{}' ({} of {size} bytes read)", t.name, self.within),
                    offset,
                    needed: n as u64,
                },
                e => e,
            });
        }
        let offset = self.within;
        self.within += n as u64;
        let last = self.within == size;
        if last {
            self.cur += 1;
            self.within = 0;
        }
        Ok(Some(TensorChunk {
            tensor: index,
            info: &self.header.tensors[index],
            offset,
            data: &self.buf[..n],
            last,
        }))
    }

    /// Bytes and tensors done so far.
    pub fn progress(&self) -> Progress {
        Progress {
            bytes_done: self.input.pos(),
            bytes_total: self.input.len(),
            tensors_done: self.cur,
            tensors_total: self.header.tensors.len(),
        }
    }
}

/// Read the magic, version, counts, metadata and tensor infos, and validate them.
async fn read_header<S: ByteSource>(input: &mut Input<S>) -> Result<GgufHeader> {
    let mut magic = [0u8; 4];
    input.read_exact(&mut magic, "magic").await?;
    if magic != format::MAGIC {
        return Err(Error::corrupt(0, format!("not a GGUF file: magic is {magic:02x?}, expected \"GGUF\"")));
    }
    let version = input.u32("version").await?;
    match version {
        2 | 3 => {}
        1 => return Err(Error::corrupt(4, "GGUF version 1 is not supported (re-convert the model: v2/v3)")),
        v => return Err(Error::corrupt(4, format!("unknown GGUF version {v} (wick reads 2 and 3)"))),
    }

    let at = input.pos();
    let n_tensors = input.u64("tensor count").await?;
    if n_tensors > format::MAX_TENSORS {
        return Err(Error::corrupt(at, format!("tensor count {n_tensors} exceeds {}", format::MAX_TENSORS)));
    }
    let at = input.pos();
    let n_kv = input.u64("metadata count").await?;
    if n_kv > format::MAX_KV {
        return Err(Error::corrupt(at, format!("metadata count {n_kv} exceeds {}", format::MAX_KV)));
    }
    // Both counts against what is left: every entry takes at least a few bytes.
    let min_rest = n_kv * format::MIN_KV_SIZE + n_tensors * format::MIN_TENSOR_INFO_SIZE;
    check_fits(input, min_rest, || format!("{n_kv} metadata entries and {n_tensors} tensor infos"))?;

    let mut metadata = Metadata::new();
    for _ in 0..n_kv {
        let at = input.pos();
        let key = read_string(input, format::MAX_NAME_LEN, "metadata key").await?;
        let ctx = |e: Error| add_context(e, &format!("metadata '{key}'"));
        let t = input.u32("value type").await.map_err(ctx)?;
        let value = read_value(input, t, 0).await.map_err(ctx)?;
        if metadata.contains(&key) {
            return Err(Error::corrupt(at, format!("duplicate metadata key '{key}'")));
        }
        metadata.insert(key, value);
    }

    let alignment = match metadata.get(format::ALIGNMENT_KEY) {
        None => format::DEFAULT_ALIGNMENT,
        Some(v) => match v.as_int() {
            Some(a) if a > 0 && a <= u32::MAX as i128 && (a as u64).is_power_of_two() => a as u64,
            _ => {
                return Err(Error::bad_metadata(
                    format::ALIGNMENT_KEY,
                    format!("{v:?} is not a nonzero power of two that fits u32"),
                ))
            }
        },
    };

    let mut tensors = Vec::with_capacity(n_tensors.min(4096) as usize);
    let mut names = HashSet::new();
    for _ in 0..n_tensors {
        let at = input.pos();
        let t = read_tensor_info(input, alignment).await?;
        if !names.insert(t.name.clone()) {
            return Err(Error::corrupt(at, format!("duplicate tensor name '{}'", t.name)));
        }
        tensors.push(t);
    }

    let infos_end = input.pos();
    let data_offset = format::align_up(infos_end, alignment)
        .ok_or_else(|| Error::corrupt(infos_end, "data offset overflows"))?;

    // Offsets must not overlap (they are aligned; checked per tensor), and all data must fit.
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    let mut end = 0u64;
    let mut prev: Option<&TensorInfo> = None;
    for t in &order {
        if t.offset < end {
            let p = prev.map(|p| p.name.as_str()).unwrap_or("");
            return Err(Error::corrupt(
                data_offset.saturating_add(t.offset),
                format!(
                    "tensor '{}' at offset {} overlaps tensor '{p}', which ends at {end}",
                    t.name, t.offset
                ),
            ));
        }
        end = t
            .offset
            .checked_add(t.n_bytes())
            .and_then(|e| e.checked_add(data_offset).map(|_| e))
            .ok_or_else(|| Error::corrupt(infos_end, format!("tensor '{}' ends past 2^64", t.name)))?;
        prev = Some(t);
    }
    if let (Some(len), Some(last)) = (input.len(), order.last()) {
        let data_end = data_offset + end;
        if data_end > len {
            return Err(Error::Truncated {
                what: format!("tensor data (last tensor '{}')", last.name),
                offset: data_offset + last.offset,
                needed: last.n_bytes(),
            });
        }
    }

    Ok(GgufHeader { version, metadata, tensors, alignment, data_offset })
}

/// An error if the known remaining length cannot hold `needed` more bytes.
fn check_fits<S: ByteSource>(input: &Input<S>, needed: u64, what: impl FnOnce() -> String) -> Result<()> {
    match input.remaining() {
        Some(rest) if needed > rest => Err(Error::Truncated { what: what(), offset: input.pos(), needed }),
        _ => Ok(()),
    }
}

/// Prefix the `what`/`message` of an error with `ctx` (which key or tensor it belongs to).
fn add_context(e: Error, ctx: &str) -> Error {
    match e {
        Error::Truncated { what, offset, needed } => {
            Error::Truncated { what: format!("{what} of {ctx}"), offset, needed }
        }
        Error::Corrupt { offset, message } => Error::Corrupt { offset, message: format!("{ctx}: {message}") },
        e => e,
    }
}

/// A length-prefixed UTF-8 string of at most `cap` bytes.
async fn read_string<S: ByteSource>(input: &mut Input<S>, cap: u64, what: &str) -> Result<String> {
    let at = input.pos();
    let n = input.u64(what).await?;
    if n > cap {
        return Err(Error::corrupt(at, format!("{what} length {n} exceeds {cap}")));
    }
    check_fits(input, n, || what.to_string())?;
    let bytes = input.read_vec(n, what).await?;
    String::from_utf8(bytes).map_err(|e| Error::corrupt(at + 8, format!("{what} is not valid UTF-8: {e}")))
}

async fn read_value<S: ByteSource>(input: &mut Input<S>, t: u32, depth: usize) -> Result<MetaValue> {
    let at = input.pos();
    Ok(match t {
        vt::U8 => MetaValue::U8(input.u8("u8 value").await?),
        vt::I8 => MetaValue::I8(input.u8("i8 value").await? as i8),
        vt::U16 => MetaValue::U16(input.u16("u16 value").await?),
        vt::I16 => MetaValue::I16(input.u16("i16 value").await? as i16),
        vt::U32 => MetaValue::U32(input.u32("u32 value").await?),
        vt::I32 => MetaValue::I32(input.u32("i32 value").await? as i32),
        vt::U64 => MetaValue::U64(input.u64("u64 value").await?),
        vt::I64 => MetaValue::I64(input.u64("i64 value").await? as i64),
        vt::F32 => MetaValue::F32(f32::from_bits(input.u32("f32 value").await?)),
        vt::F64 => MetaValue::F64(f64::from_bits(input.u64("f64 value").await?)),
        vt::BOOL => MetaValue::Bool(read_bool(input, at).await?),
        vt::STRING => MetaValue::Str(read_string(input, format::MAX_STRING_LEN, "string value").await?),
        vt::ARRAY => MetaValue::Array(read_array(input, depth).await?),
        t => return Err(Error::corrupt(at.saturating_sub(4), format!("unknown value type {t}"))),
    })
}

async fn read_bool<S: ByteSource>(input: &mut Input<S>, at: u64) -> Result<bool> {
    match input.u8("bool value").await? {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(Error::corrupt(at, format!("bool value {b} is neither 0 nor 1"))),
    }
}

/// An array: element type, count, elements. Boxed because arrays may nest (up to a cap).
fn read_array<'a, S: ByteSource>(
    input: &'a mut Input<S>,
    depth: usize,
) -> Pin<Box<dyn Future<Output = Result<MetaArray>> + 'a>> {
    Box::pin(async move {
        let at = input.pos();
        if depth >= format::MAX_ARRAY_DEPTH {
            return Err(Error::corrupt(at, format!("arrays nested deeper than {}", format::MAX_ARRAY_DEPTH)));
        }
        let t = input.u32("array element type").await?;
        let min = format::min_value_size(t)
            .ok_or_else(|| Error::corrupt(at, format!("unknown array element type {t}")))?;
        let n = input.u64("array length").await?;
        if n > format::MAX_ARRAY_LEN {
            return Err(Error::corrupt(
                at + 4,
                format!("array length {n} exceeds {}", format::MAX_ARRAY_LEN),
            ));
        }
        check_fits(input, n * min, || format!("array of {n} elements of type {t}"))?;
        // Capacity from the count only up to a bound; beyond it, memory grows with real bytes.
        let cap = n.min(1 << 16) as usize;
        macro_rules! elems {
            ($variant:ident, $read:expr) => {{
                let mut v = Vec::with_capacity(cap);
                for _ in 0..n {
                    v.push($read);
                }
                MetaArray::$variant(v)
            }};
        }
        Ok(match t {
            vt::U8 => MetaArray::U8(input.read_vec(n, "u8 array").await?),
            vt::I8 => {
                MetaArray::I8(input.read_vec(n, "i8 array").await?.into_iter().map(|b| b as i8).collect())
            }
            vt::U16 => elems!(U16, input.u16("u16 array").await?),
            vt::I16 => elems!(I16, input.u16("i16 array").await? as i16),
            vt::U32 => elems!(U32, input.u32("u32 array").await?),
            vt::I32 => elems!(I32, input.u32("i32 array").await? as i32),
            vt::U64 => elems!(U64, input.u64("u64 array").await?),
            vt::I64 => elems!(I64, input.u64("i64 array").await? as i64),
            vt::F32 => elems!(F32, f32::from_bits(input.u32("f32 array").await?)),
            vt::F64 => elems!(F64, f64::from_bits(input.u64("f64 array").await?)),
            vt::BOOL => elems!(Bool, {
                let at = input.pos();
                read_bool(input, at).await?
            }),
            vt::STRING => {
                elems!(Str, read_string(input, format::MAX_STRING_LEN, "string array element").await?)
            }
            vt::ARRAY => elems!(Array, read_array(&mut *input, depth + 1).await?),
            // min_value_size already rejected unknown types; kept an error, never a panic.
            t => return Err(Error::corrupt(at, format!("unknown array element type {t}"))),
        })
    })
}

async fn read_tensor_info<S: ByteSource>(input: &mut Input<S>, alignment: u64) -> Result<TensorInfo> {
    let name = read_string(input, format::MAX_NAME_LEN, "tensor name").await?;
    let ctx = |e: Error| add_context(e, &format!("tensor '{name}'"));
    let at = input.pos();
    let n_dims = input.u32("dimension count").await.map_err(ctx)?;
    if n_dims == 0 || n_dims as usize > format::MAX_DIMS {
        return Err(ctx(Error::corrupt(
            at,
            format!("{n_dims} dimensions (must be 1 to {})", format::MAX_DIMS),
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    let mut n_elements = 1u64;
    for _ in 0..n_dims {
        let at = input.pos();
        let d = input.u64("dimension").await.map_err(ctx)?;
        // ggml stores dimensions as i64, so anything above i64::MAX is garbage too.
        if d == 0 || d > i64::MAX as u64 {
            return Err(ctx(Error::corrupt(at, format!("dimension {d} is out of range"))));
        }
        n_elements = n_elements
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| ctx(Error::corrupt(at, "element count overflows")))?;
        dims.push(d);
    }
    let at = input.pos();
    let type_id = input.u32("tensor type").await.map_err(ctx)?;
    let dtype = GgmlType::from_id(type_id, &name)?;
    let bs = dtype.block_size() as u64;
    if dims[0] % bs != 0 {
        return Err(ctx(Error::corrupt(
            at,
            format!("row length {} is not a multiple of the {dtype} block size {bs}", dims[0]),
        )));
    }
    // Bytes = rows × row bytes; must fit u64 (the element count already fits i64).
    (n_elements / bs)
        .checked_mul(dtype.type_size() as u64)
        .ok_or_else(|| ctx(Error::corrupt(at, "byte size overflows")))?;
    let at = input.pos();
    let offset = input.u64("tensor offset").await.map_err(ctx)?;
    if offset % alignment != 0 {
        return Err(ctx(Error::corrupt(
            at,
            format!("offset {offset} is not a multiple of the alignment {alignment}"),
        )));
    }
    Ok(TensorInfo { name, dims, dtype, offset })
}
