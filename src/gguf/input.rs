//! A small read-ahead buffer over a [`ByteSource`] that tracks the absolute file offset, so every
//! error can say where it happened. The header is parsed through it in small pieces; tensor data
//! goes around it, straight into the caller's chunk buffer.

use crate::source::ByteSource;
use crate::{Error, Result};

/// Read-ahead size while parsing the header: big enough that a 262k-token vocabulary is not a
/// million tiny source reads, small next to any chunk size.
const READ_AHEAD: usize = 64 << 10;

/// Vectors whose length comes from the file are grown at most this much at a time, so memory
/// follows the bytes that actually arrive, not the length the file claims.
const GROW_STEP: usize = 1 << 20;

pub(crate) struct Input<S> {
    src: S,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Absolute offset of the next byte to be consumed.
    pos: u64,
    len: Option<u64>,
}

impl<S: ByteSource> Input<S> {
    pub fn new(src: S) -> Self {
        let len = src.len_hint();
        Self { src, buf: vec![0; READ_AHEAD].into_boxed_slice(), start: 0, end: 0, pos: 0, len }
    }

    /// Offset of the next byte.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Total length, if the source knows it.
    pub fn len(&self) -> Option<u64> {
        self.len
    }

    /// Bytes left before the known end, if known.
    pub fn remaining(&self) -> Option<u64> {
        self.len.map(|l| l.saturating_sub(self.pos))
    }

    pub fn into_source(self) -> S {
        self.src
    }

    fn truncated(&self, what: &str, offset: u64, needed: u64) -> Error {
        Error::Truncated { what: what.to_string(), offset, needed }
    }

    /// Fill `out` completely, or fail with `Truncated` naming `what`. `pos` always counts the
    /// bytes actually consumed, even when this fails part-way.
    pub async fn read_exact(&mut self, out: &mut [u8], what: &str) -> Result<()> {
        let at = self.pos;
        let mut done = 0;
        while done < out.len() {
            let want = out.len() - done;
            if self.start == self.end {
                if want >= self.buf.len() {
                    // Large read: straight into `out`, no copy through the read-ahead buffer.
                    let got = self.src.read(&mut out[done..]).await?.min(want);
                    if got == 0 {
                        return Err(self.truncated(what, at, out.len() as u64));
                    }
                    done += got;
                    self.pos += got as u64;
                    continue;
                }
                let got = self.src.read(&mut self.buf).await?;
                if got == 0 {
                    return Err(self.truncated(what, at, out.len() as u64));
                }
                // A misbehaving source cannot claim more than it was given.
                self.start = 0;
                self.end = got.min(self.buf.len());
            }
            let n = (self.end - self.start).min(want);
            out[done..done + n].copy_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
            done += n;
            self.pos += n as u64;
        }
        Ok(())
    }

    /// Skip `n` bytes (padding), failing with `Truncated` if the stream ends first.
    pub async fn skip(&mut self, n: u64, what: &str) -> Result<()> {
        let at = self.pos;
        let mut left = n;
        while left > 0 {
            if self.start == self.end {
                let got = self.src.read(&mut self.buf).await?;
                if got == 0 {
                    return Err(self.truncated(what, at, n));
                }
                self.start = 0;
                self.end = got.min(self.buf.len());
            }
            let k = ((self.end - self.start) as u64).min(left) as usize;
            self.start += k;
            self.pos += k as u64;
            left -= k as u64;
        }
        Ok(())
    }

    /// A vector of exactly `n` bytes, grown as the bytes arrive.
    pub async fn read_vec(&mut self, n: u64, what: &str) -> Result<Vec<u8>> {
        let at = self.pos;
        let n_usize = usize::try_from(n).map_err(|_| self.truncated(what, at, n))?;
        let mut v = Vec::new();
        while v.len() < n_usize {
            let old = v.len();
            let step = (n_usize - old).min(GROW_STEP);
            v.resize(old + step, 0);
            self.read_exact(&mut v[old..], what).await.map_err(|e| match e {
                Error::Truncated { .. } => Error::Truncated { what: what.to_string(), offset: at, needed: n },
                e => e,
            })?;
        }
        Ok(v)
    }

    pub async fn u8(&mut self, what: &str) -> Result<u8> {
        let mut b = [0u8; 1];
        self.read_exact(&mut b, what).await?;
        Ok(b[0])
    }
    pub async fn u16(&mut self, what: &str) -> Result<u16> {
        let mut b = [0u8; 2];
        self.read_exact(&mut b, what).await?;
        Ok(u16::from_le_bytes(b))
    }
    pub async fn u32(&mut self, what: &str) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b, what).await?;
        Ok(u32::from_le_bytes(b))
    }
    pub async fn u64(&mut self, what: &str) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact(&mut b, what).await?;
        Ok(u64::from_le_bytes(b))
    }
}
