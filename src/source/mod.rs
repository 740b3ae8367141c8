//! Byte sources: where GGUF bytes come from.
//!
//! A [`ByteSource`] is an ordered stream of bytes with no seeking: the GGUF reader consumes the
//! header, then every tensor's bytes, front to back (ARCHITECTURE.md, rule "Stream the weights"). That is
//! all a browser `fetch` body or a `ReadableStream` can give, so it is all wick asks of any source.
//!
//! - [`MemorySource`]: bytes already in memory (an owned `Vec<u8>`, a borrowed `&[u8]`, anything
//!   `AsRef<[u8]>`).
//! - [`FileSource`]: a native file (not on wasm).
//! - [`StreamSource`]: any `futures_core::Stream` of byte chunks.
//! - In the browser (wasm32 only, module `web`): `ReadableStreamSource` (a JS `ReadableStream`),
//!   `BlobSource` (a `Blob` or `File`, read in bounded slices) and `UrlSource` (`fetch`, resuming
//!   a broken download with `Range` requests).

use std::future::Future;
use std::pin::Pin;

use futures_core::Stream;

#[cfg(not(target_arch = "wasm32"))]
use crate::Error;
use crate::Result;

#[cfg(target_arch = "wasm32")]
pub mod web;
#[cfg(target_arch = "wasm32")]
pub use web::{BlobSource, ReadableStreamSource, UrlOptions, UrlSource};

/// An ordered, forward-only byte source.
pub trait ByteSource {
    /// Read up to `buf.len()` bytes into `buf`; `Ok(0)` means end of stream (for a non-empty `buf`).
    fn read(&mut self, buf: &mut [u8]) -> impl Future<Output = Result<usize>>;
    /// Total length in bytes if known (progress, early truncation checks).
    fn len_hint(&self) -> Option<u64> {
        None
    }
}

impl<T: ByteSource> ByteSource for &mut T {
    fn read(&mut self, buf: &mut [u8]) -> impl Future<Output = Result<usize>> {
        (**self).read(buf)
    }
    fn len_hint(&self) -> Option<u64> {
        (**self).len_hint()
    }
}

/// Bytes in memory: `MemorySource::new(vec)` owns them, `MemorySource::new(&slice[..])` borrows them.
#[derive(Debug, Clone)]
pub struct MemorySource<B: AsRef<[u8]> = Vec<u8>> {
    data: B,
    pos: usize,
}

impl<B: AsRef<[u8]>> MemorySource<B> {
    /// A source that yields `data` from its start.
    pub fn new(data: B) -> Self {
        Self { data, pos: 0 }
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.data.as_ref().len() - self.pos
    }
    /// The underlying bytes.
    pub fn into_inner(self) -> B {
        self.data
    }
}

impl<B: AsRef<[u8]>> ByteSource for MemorySource<B> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let rest = &self.data.as_ref()[self.pos..];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
    fn len_hint(&self) -> Option<u64> {
        Some(self.data.as_ref().len() as u64)
    }
}

/// A native file, read front to back. The reads are blocking `std::fs` I/O (the native CLI
/// runs the loader on its own thread): positional reads from the source's own offset, and a
/// large read (a chunk of tensor data) is cut into pieces read at once on rayon's threads, so
/// a file in the page cache is read at memory speed rather than at what one thread copies
/// (on the 16-core H200 machine one thread read 7.5-7.9 GB/s, `dd`; the loader's reads of an
/// 8b's 4.9 GB took 0.14-0.38 s on 16).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug)]
pub struct FileSource {
    file: std::fs::File,
    len: u64,
    /// Offset of the next byte to read.
    pos: u64,
    path: std::path::PathBuf,
}

/// Reads at least this long are split across threads ([`FileSource`]), in pieces of at least
/// [`PIECE_BYTES`].
#[cfg(not(target_arch = "wasm32"))]
const PARALLEL_FROM: usize = 1 << 20;
#[cfg(not(target_arch = "wasm32"))]
const PIECE_BYTES: usize = 256 << 10;

#[cfg(not(target_arch = "wasm32"))]
impl FileSource {
    /// Open `path` for reading; its length comes from the file's metadata.
    pub async fn open(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file =
            std::fs::File::open(&path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("reading the metadata of {}", path.display()), e))?
            .len();
        Ok(Self { file, len, pos: 0, path })
    }

    /// Fill `buf` from byte `at` on, stopping early only at the end of the file: the bytes
    /// read.
    fn read_full_at(&self, buf: &mut [u8], at: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match read_at(&self.file, &mut buf[done..], at + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(format!("reading {}", self.path.display()), e)),
            }
        }
        Ok(done)
    }
}

/// One positional read (no file cursor: pieces of one read go on several threads).
#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, at)
}
#[cfg(windows)]
fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, at)
}
#[cfg(not(any(unix, windows, target_arch = "wasm32")))]
fn read_at(mut file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    use std::io::{Read, Seek};
    file.seek(std::io::SeekFrom::Start(at))?;
    file.read(buf)
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for FileSource {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        use rayon::prelude::*;
        let want = (buf.len() as u64).min(self.len.saturating_sub(self.pos)) as usize;
        let n = if want < PARALLEL_FROM {
            // Small reads (the header), and whatever lies past the length the file had when
            // opened (a file that grew): one plain read.
            let n = if want == 0 { buf.len().min(PIECE_BYTES) } else { want };
            self.read_full_at(&mut buf[..n], self.pos)?
        } else {
            let piece = want.div_ceil(rayon::current_num_threads().max(1)).max(PIECE_BYTES);
            let at = self.pos;
            // Each piece reads its own range; the bytes read are those up to the first short
            // piece (a file cut since it was opened), errors first.
            let got: Vec<Result<usize>> = buf[..want]
                .par_chunks_mut(piece)
                .enumerate()
                .map(|(i, b)| self.read_full_at(b, at + (i * piece) as u64))
                .collect();
            let mut n = 0;
            for (i, g) in got.into_iter().enumerate() {
                let g = g?;
                n += g;
                if g < piece.min(want - i * piece) {
                    break;
                }
            }
            n
        };
        self.pos += n as u64;
        Ok(n)
    }
    fn len_hint(&self) -> Option<u64> {
        Some(self.len)
    }
}

/// Any async stream of byte chunks (a `fetch` body, a `Blob` reader, a network socket, ...).
///
/// Chunks may have any size, including empty; the part of a chunk that does not fit the caller's
/// buffer is kept for the next read. An `Err` item ends the read with that error.
pub struct StreamSource<S> {
    stream: S,
    chunk: Vec<u8>,
    pos: usize,
    done: bool,
    len: Option<u64>,
}

impl<S> StreamSource<S>
where
    S: Stream<Item = Result<Vec<u8>>> + Unpin,
{
    /// A source over `stream`, length unknown.
    pub fn new(stream: S) -> Self {
        Self { stream, chunk: Vec::new(), pos: 0, done: false, len: None }
    }
    /// A source over `stream` whose total length is known (e.g. from `Content-Length`).
    pub fn with_len(stream: S, len: u64) -> Self {
        Self { len: Some(len), ..Self::new(stream) }
    }
}

impl<S> ByteSource for StreamSource<S>
where
    S: Stream<Item = Result<Vec<u8>>> + Unpin,
{
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.pos >= self.chunk.len() {
            if self.done {
                return Ok(0);
            }
            let stream = &mut self.stream;
            match std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await {
                Some(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Some(Err(e)) => return Err(e),
                None => {
                    self.done = true;
                    self.chunk = Vec::new();
                    self.pos = 0;
                }
            }
        }
        let rest = &self.chunk[self.pos..];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
    fn len_hint(&self) -> Option<u64> {
        self.len
    }
}

impl<S> std::fmt::Debug for StreamSource<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSource")
            .field("buffered", &(self.chunk.len() - self.pos.min(self.chunk.len())))
            .field("done", &self.done)
            .field("len", &self.len)
            .finish()
    }
}
