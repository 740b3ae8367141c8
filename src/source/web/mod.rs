//! Browser byte sources (wasm32 only): a JS `ReadableStream`, a `Blob` or `File`, a URL.
//!
//! Design decisions:
//! - Each source holds at most one chunk, as a `Uint8Array` in JS memory (outside the wasm
//!   heap), and copies from it straight into the reader's buffer. So the wasm heap does not grow
//!   with the file: a 4 GB model streams through a tab whose heap stays at the loader's chunk
//!   size (ARCHITECTURE.md, rule "Stream the weights").
//! - A `Blob` is read in slices of a bounded size (`Blob.slice().arrayBuffer()`), never whole.
//! - A URL is `fetch`ed once and its body streamed; if the body fails midway, the download
//!   resumes from the current byte with `Range: bytes=N-` (see [`UrlSource`]).
//! - JS failures (a rejected promise, an errored stream) become [`Error::Io`] with the
//!   JS error's message; nothing here panics.
//! - Only standard globals are used (`fetch`, `setTimeout`, streams, `Blob`), so the sources
//!   work on the main thread and in workers alike.

mod url;

use js_sys::{ArrayBuffer, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Blob, ReadableStream, ReadableStreamDefaultReader};

pub use url::{UrlOptions, UrlSource};

use super::ByteSource;
use crate::{Error, Result};

/// The text of a JS error value: `Error.message` (with its name) or the value as a string.
pub(crate) fn js_message(v: &JsValue) -> String {
    if let Some(e) = v.dyn_ref::<js_sys::Error>() {
        let (name, msg) = (String::from(e.name()), String::from(e.message()));
        return if name.is_empty() || name == "Error" { msg } else { format!("{name}: {msg}") };
    }
    if let Some(s) = v.as_string() {
        return s;
    }
    format!("{v:?}")
}

/// A chunk from JS and how much of it has been consumed.
#[derive(Default)]
struct Pending {
    data: Option<Uint8Array>,
    pos: u32,
}

impl Pending {
    /// Copy what fits of the chunk's rest into `buf`; 0 when there is no chunk left.
    fn take_into(&mut self, buf: &mut [u8]) -> usize {
        let Some(data) = &self.data else { return 0 };
        let len = data.length();
        let n = (len - self.pos).min(buf.len().min(u32::MAX as usize) as u32);
        if n > 0 {
            data.subarray(self.pos, self.pos + n).copy_to(&mut buf[..n as usize]);
            self.pos += n;
        }
        if self.pos >= len {
            self.data = None;
            self.pos = 0;
        }
        n as usize
    }
}

/// A chunk value from a stream as bytes: a `Uint8Array`, any other typed array or `DataView`
/// (its bytes), or an `ArrayBuffer`.
fn chunk_bytes(v: JsValue) -> std::result::Result<Uint8Array, String> {
    if let Some(a) = v.dyn_ref::<Uint8Array>() {
        return Ok(a.clone());
    }
    if v.is_instance_of::<ArrayBuffer>() {
        return Ok(Uint8Array::new(&v));
    }
    if ArrayBuffer::is_view(&v) {
        let get = |k: &str| Reflect::get(&v, &JsValue::from_str(k)).ok();
        if let (Some(buf), Some(off), Some(len)) = (get("buffer"), get("byteOffset"), get("byteLength")) {
            if let (Some(off), Some(len)) = (off.as_f64(), len.as_f64()) {
                return Ok(Uint8Array::new_with_byte_offset_and_length(&buf, off as u32, len as u32));
            }
        }
    }
    Err(format!("a stream chunk is not bytes (expected a Uint8Array, got {})", js_type(&v)))
}

fn js_type(v: &JsValue) -> String {
    if v.is_undefined() {
        return "undefined".into();
    }
    if v.is_null() {
        return "null".into();
    }
    v.js_typeof().as_string().unwrap_or_else(|| "an unknown value".into())
}

/// Why reading a JS stream stopped.
pub(crate) enum StreamFailure {
    /// The stream itself errored (a network failure, a cancelled producer): may be retried.
    Errored(String),
    /// The stream gave something that is not bytes: retrying would not help.
    BadChunk(String),
}

/// A locked reader over a `ReadableStream`, holding at most one chunk.
pub(crate) struct JsReader {
    reader: ReadableStreamDefaultReader,
    pending: Pending,
    done: bool,
}

impl JsReader {
    pub(crate) fn new(stream: &ReadableStream) -> Result<Self> {
        let reader = ReadableStreamDefaultReader::new(stream).map_err(|e| {
            Error::io("opening a ReadableStream (is it locked by another reader?)", js_message(&e))
        })?;
        Ok(JsReader { reader, pending: Pending::default(), done: false })
    }

    /// Up to `buf.len()` bytes; `Ok(0)` at the end of the stream.
    pub(crate) async fn read(&mut self, buf: &mut [u8]) -> std::result::Result<usize, StreamFailure> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let n = self.pending.take_into(buf);
            if n > 0 {
                return Ok(n);
            }
            if self.done {
                return Ok(0);
            }
            let result = JsFuture::from(self.reader.read())
                .await
                .map_err(|e| StreamFailure::Errored(js_message(&e)))?;
            let field = |k: &str| Reflect::get(&result, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED);
            if field("done").as_bool().unwrap_or(false) {
                self.done = true;
                self.reader.release_lock();
                continue;
            }
            self.pending.data = Some(chunk_bytes(field("value")).map_err(StreamFailure::BadChunk)?);
        }
    }
}

impl Drop for JsReader {
    /// Cancel a stream that was not read to its end, so a download stops with its reader.
    fn drop(&mut self) {
        if !self.done {
            let cancelled = JsFuture::from(self.reader.cancel());
            // Awaited so that a rejection is handled rather than reported as unhandled.
            wasm_bindgen_futures::spawn_local(async move {
                let _ = cancelled.await;
            });
        }
    }
}

/// A JS `ReadableStream` of byte chunks (`Uint8Array`s; other typed arrays and `ArrayBuffer`s
/// are taken as their bytes), e.g. a `fetch` body, `Blob.stream()`, or one a program builds.
///
/// The stream is locked by this source; dropping the source before the end cancels it.
pub struct ReadableStreamSource {
    inner: JsReader,
    len: Option<u64>,
}

impl ReadableStreamSource {
    /// A source over `stream`, length unknown. An error if the stream is already locked.
    pub fn new(stream: &ReadableStream) -> Result<Self> {
        Ok(ReadableStreamSource { inner: JsReader::new(stream)?, len: None })
    }

    /// Declare the stream's total length in bytes (for progress reports).
    pub fn with_len(mut self, len: u64) -> Self {
        self.len = Some(len);
        self
    }
}

impl ByteSource for ReadableStreamSource {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.inner.read(buf).await.map_err(|f| match f {
            StreamFailure::Errored(m) | StreamFailure::BadChunk(m) => {
                Error::io("reading a ReadableStream", m)
            }
        })
    }
    fn len_hint(&self) -> Option<u64> {
        self.len
    }
}

impl std::fmt::Debug for ReadableStreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadableStreamSource")
            .field("done", &self.inner.done)
            .field("len", &self.len)
            .finish()
    }
}

/// A `Blob` or `File` (a `File` is a `Blob`: pass `&file` or `file.as_ref()`), read front to
/// back in slices of at most [`BlobSource::DEFAULT_SLICE`] bytes; only one slice is in memory
/// at a time, and it is in JS memory, not the wasm heap.
pub struct BlobSource {
    blob: Blob,
    /// Start of the next slice to read.
    next: u64,
    len: u64,
    slice: u32,
    pending: Pending,
}

impl BlobSource {
    /// The slice size used unless [`with_slice_size`](Self::with_slice_size) says otherwise.
    pub const DEFAULT_SLICE: u32 = 4 << 20;

    /// A source over `blob`; its length is `blob.size`.
    pub fn new(blob: &Blob) -> Self {
        BlobSource {
            blob: blob.clone(),
            next: 0,
            len: blob.size() as u64,
            slice: Self::DEFAULT_SLICE,
            pending: Pending::default(),
        }
    }

    /// Read slices of at most `bytes` (at least 1).
    pub fn with_slice_size(mut self, bytes: u32) -> Self {
        self.slice = bytes.max(1);
        self
    }
}

impl ByteSource for BlobSource {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = self.pending.take_into(buf);
        if n > 0 || self.next >= self.len {
            return Ok(n);
        }
        let end = (self.next + self.slice as u64).min(self.len);
        let context = || format!("reading bytes {}..{} of a Blob of {} bytes", self.next, end, self.len);
        let part = self
            .blob
            .slice_with_f64_and_f64(self.next as f64, end as f64)
            .map_err(|e| Error::io(context(), js_message(&e)))?;
        let bytes = JsFuture::from(part.array_buffer()).await.map_err(|e| {
            // A File changed or removed after it was picked fails here (NotReadableError).
            Error::io(context(), js_message(&e))
        })?;
        let data = Uint8Array::new(&bytes);
        if data.length() as u64 != end - self.next {
            return Err(Error::io(
                context(),
                format!("the slice held {} bytes (did the file change?)", data.length()),
            ));
        }
        self.next = end;
        self.pending.data = Some(data);
        Ok(self.pending.take_into(buf))
    }
    fn len_hint(&self) -> Option<u64> {
        Some(self.len)
    }
}

impl std::fmt::Debug for BlobSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobSource")
            .field("next", &self.next)
            .field("len", &self.len)
            .field("slice", &self.slice)
            .finish()
    }
}
