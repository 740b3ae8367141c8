//! Prompt caches: a conversation's KV blocks saved as bytes and restored into a later session
//! (issue 18), so that coming back to a long conversation prefills only the new tokens.
//!
//! A saved cache is one byte string (little-endian throughout):
//!
//! ```text
//! magic        8   "WICKKVC\0"
//! version      4   FORMAT_VERSION
//! digest      16   the model's (Model::digest)
//! elem bytes   4   2: f16 keys and values
//! block        4   KV_BLOCK
//! n_layers     4
//! k_dims       4 · n_layers   values in a key row of each layer
//! v_dims       4 · n_layers   values in a value row of each layer
//! n_tokens     4   the cached tokens
//! tokens       4 · n_tokens
//! payload      the blocks covering the tokens, in the layout of exec::kv_io_pieces
//! checksum    16   of every byte before it
//! ```
//!
//! Everything is checked before a byte reaches the device: the magic, version, digest, element
//! type, block size and row widths against the model and session, the token ids against the
//! vocabulary, the payload's length against the shapes, and the checksum; any mismatch is an
//! [`Error::PromptCache`] and the session is left empty. A cache is keyed by the model's
//! digest and its token prefix: restoring keeps the longest common prefix of the saved
//! tokens and the new prompt, so a chat template that rewrites earlier turns costs reuse, not
//! correctness.

use crate::exec::{blocks_for, kv_io_bytes, KV_BLOCK, KV_ELEM_BYTES};
use crate::{Error, Result};

#[cfg(not(target_arch = "wasm32"))]
mod dir;
mod stream;
#[cfg(not(target_arch = "wasm32"))]
pub use dir::{CacheDir, Found, PendingSave};
pub use stream::{read_exact, read_header_from, Sections, IO_CHUNK};

/// The format's version; a file of another version is rejected.
pub const FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"WICKKVC\0";
const CHECKSUM_BYTES: usize = 16;

/// What a saved cache holds besides its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheHeader {
    /// The model's digest ([`crate::Model::digest`]).
    pub digest: [u8; 16],
    /// Values in a key row, per layer.
    pub k_dims: Vec<usize>,
    /// Values in a value row, per layer.
    pub v_dims: Vec<usize>,
    /// The cached tokens.
    pub tokens: Vec<u32>,
}

impl CacheHeader {
    /// Bytes of the payload: the blocks that cover the tokens.
    pub fn payload_bytes(&self) -> usize {
        kv_io_bytes(&self.k_dims, &self.v_dims, blocks_for(self.tokens.len()))
    }
}

pub(crate) fn bad(message: impl Into<String>) -> Error {
    Error::PromptCache(message.into())
}

/// The bytes of a saved cache before its payload.
pub fn encode_header(header: &CacheHeader) -> Result<Vec<u8>> {
    if header.k_dims.len() != header.v_dims.len() {
        return Err(bad("key and value layer counts differ"));
    }
    let u32_of = |n: usize| u32::try_from(n).map_err(|_| bad(format!("{n} does not fit the format")));
    let mut out = Vec::with_capacity(HEADER_MIN + 8 * header.k_dims.len() + 4 + 4 * header.tokens.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&header.digest);
    out.extend_from_slice(&(KV_ELEM_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&(KV_BLOCK as u32).to_le_bytes());
    out.extend_from_slice(&u32_of(header.k_dims.len())?.to_le_bytes());
    for &d in header.k_dims.iter().chain(&header.v_dims) {
        out.extend_from_slice(&u32_of(d)?.to_le_bytes());
    }
    out.extend_from_slice(&u32_of(header.tokens.len())?.to_le_bytes());
    for &t in &header.tokens {
        out.extend_from_slice(&t.to_le_bytes());
    }
    Ok(out)
}

/// A whole saved cache: `header`, the `payload` of its blocks
/// ([`crate::exec::Executor::read_kv_blocks`]) and the checksum.
pub fn encode(header: &CacheHeader, payload: &[u8]) -> Result<Vec<u8>> {
    if payload.len() != header.payload_bytes() {
        return Err(bad(format!(
            "{} payload bytes for {} tokens, which take {}",
            payload.len(),
            header.tokens.len(),
            header.payload_bytes()
        )));
    }
    let mut out = encode_header(header)?;
    out.extend_from_slice(payload);
    let sum = checksum(&out);
    out.extend_from_slice(&sum);
    Ok(out)
}

/// Reads the fields of a saved cache in order, each a clear error when the bytes end early.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| bad(format!("truncated: the file ends in its {what}")))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// The header of a saved cache and the offset of its payload, checking the format (magic,
/// version, element type, block size, sizes against the file's length) but not the checksum
/// or the model: enough to choose among saved caches by their tokens.
pub fn read_header(bytes: &[u8]) -> Result<(CacheHeader, usize)> {
    read_header_of(bytes, bytes.len())
}

/// [`read_header`] of a file of `file_len` bytes that begins with `bytes` (at least its header:
/// [`header_needs`]).
pub fn read_header_of(bytes: &[u8], file_len: usize) -> Result<(CacheHeader, usize)> {
    let (header, at) = parse_header(bytes, file_len)?;
    let want = saved_len(&header, at);
    if file_len != want {
        return Err(bad(format!(
            "{file_len} bytes where its header announces {want} (truncated or corrupt)"
        )));
    }
    Ok((header, at))
}

/// Bytes of a whole saved cache whose header (of `header_bytes`) is `header`.
pub fn saved_len(header: &CacheHeader, header_bytes: usize) -> usize {
    header_bytes.saturating_add(header.payload_bytes()).saturating_add(CHECKSUM_BYTES)
}

/// The fields before the layer count (magic, version, digest, element and block sizes),
/// checked; the digest.
fn prefix(f: &mut Fields<'_>) -> Result<[u8; 16]> {
    if f.take(8, "magic")? != MAGIC {
        return Err(bad("not a wick prompt cache (bad magic)"));
    }
    let version = f.u32("version")?;
    if version != FORMAT_VERSION {
        return Err(bad(format!("format version {version}, this wick reads {FORMAT_VERSION}")));
    }
    let mut digest = [0u8; 16];
    digest.copy_from_slice(f.take(16, "model digest")?);
    let elem = f.u32("element size")?;
    let block = f.u32("block size")?;
    if elem as usize != KV_ELEM_BYTES || block as usize != KV_BLOCK {
        return Err(bad(format!(
            "KV of {elem}-byte values in blocks of {block}; this wick keeps {KV_ELEM_BYTES}-byte values in blocks of {KV_BLOCK}"
        )));
    }
    Ok(digest)
}

/// Where the row widths end and where the tokens end, for a header of `n_layers` and
/// `n_tokens`, each checked against `limit` bytes (the file's length, or what a reader
/// accepts to hold) before anything is read or allocated for them.
fn widths_end(n_layers: usize, limit: usize) -> Result<usize> {
    let end = n_layers.checked_mul(8).and_then(|n| n.checked_add(HEADER_MIN + 4)).filter(|&n| n <= limit);
    end.ok_or_else(|| bad(format!("{n_layers} layers in a file of {limit} bytes")))
}
fn tokens_end(widths_end: usize, n_tokens: usize, limit: usize) -> Result<usize> {
    let end = n_tokens.checked_mul(4).and_then(|n| n.checked_add(widths_end)).filter(|&n| n <= limit);
    end.ok_or_else(|| bad(format!("{n_tokens} tokens in a file of {limit} bytes")))
}

/// How many bytes the header that `start` begins with takes, for a reader that reads it in
/// steps: given at least [`HEADER_MIN`] bytes, `Ok(Some(n))` when it needs `n` bytes in all
/// to tell more, `Ok(None)` when `start` holds all of it. The format and the counts are
/// checked as they arrive (against `limit`, as [`parse_header`] does).
pub fn header_needs(start: &[u8], limit: usize) -> Result<Option<usize>> {
    let mut f = Fields { bytes: start, at: 0 };
    prefix(&mut f)?;
    let widths = widths_end(f.u32("layer count")? as usize, limit)?;
    if start.len() < widths {
        return Ok(Some(widths));
    }
    f.at = widths - 4;
    let end = tokens_end(widths, f.u32("token count")? as usize, limit)?;
    Ok((start.len() < end).then_some(end))
}

/// The header that `bytes` begin with and its length, checking the format; counts are
/// bounded by `limit` bytes (the file's length, or what a reader accepts to hold).
pub fn parse_header(bytes: &[u8], limit: usize) -> Result<(CacheHeader, usize)> {
    let mut f = Fields { bytes, at: 0 };
    let digest = prefix(&mut f)?;
    let n_layers = f.u32("layer count")? as usize;
    let widths = widths_end(n_layers, limit)?;
    let mut dims = Vec::with_capacity(2 * n_layers);
    for _ in 0..2 * n_layers {
        dims.push(f.u32("row widths")? as usize);
    }
    let v_dims = dims.split_off(n_layers);
    let n_tokens = f.u32("token count")? as usize;
    tokens_end(widths, n_tokens, limit)?;
    let tokens = f
        .take(4 * n_tokens, "tokens")?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((CacheHeader { digest, k_dims: dims, v_dims, tokens }, f.at))
}

/// Bytes before the row widths: magic, version, digest, element and block sizes, layers.
pub const HEADER_MIN: usize = 8 + 4 + 16 + 4 + 4 + 4;

/// The header and payload of a saved cache, after every check: the format ([`read_header`]),
/// the checksum, and the header against the model ([`check_header`]).
pub fn decode<'a>(
    bytes: &'a [u8],
    digest: &[u8; 16],
    k_dims: &[usize],
    v_dims: &[usize],
    n_vocab: usize,
) -> Result<(CacheHeader, &'a [u8])> {
    let (header, at) = read_header(bytes)?;
    let body = bytes.len() - CHECKSUM_BYTES;
    if checksum(&bytes[..body])[..] != bytes[body..] {
        return Err(bad("checksum mismatch (the file is corrupt)"));
    }
    check_header(&header, digest, k_dims, v_dims, n_vocab)?;
    Ok((header, &bytes[at..body]))
}

/// A header against the model that restores it: its `digest`, its KV rows' widths, and every
/// token id below `n_vocab`.
pub fn check_header(
    header: &CacheHeader,
    digest: &[u8; 16],
    k_dims: &[usize],
    v_dims: &[usize],
    n_vocab: usize,
) -> Result<()> {
    if &header.digest != digest {
        return Err(bad(format!(
            "saved for another model (digest {}, this model's {})",
            crate::digest::hex(&header.digest),
            crate::digest::hex(digest)
        )));
    }
    if header.k_dims != k_dims || header.v_dims != v_dims {
        return Err(bad("its KV rows have other widths than this session's"));
    }
    if let Some(t) = header.tokens.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(bad(format!("token id {t} is outside the vocabulary of {n_vocab}")));
    }
    Ok(())
}

/// The [`Checksum`] of `bytes`.
pub fn checksum(bytes: &[u8]) -> [u8; 16] {
    let mut c = Checksum::default();
    c.update(bytes);
    c.finish()
}

const P: [u64; 4] =
    [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0x27D4_EB2F_1656_67C5];

/// A 128-bit checksum against corruption (not against someone who rewrites it): four lanes of
/// 64-bit multiply-xorshift over little-endian words, the tail and length mixed in. It runs at
/// memory speed (17 GB/s on one core of the build machine), so hundreds of MB of cache are not
/// slowed by it, and takes its bytes in pieces of any size.
#[derive(Debug, Clone)]
pub struct Checksum {
    lanes: [u64; 4],
    /// Bytes of an unfinished 32-byte quad.
    tail: [u8; 32],
    n_tail: usize,
    len: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Checksum {
            lanes: [
                0x243F_6A88_85A3_08D3,
                0x1319_8A2E_0370_7344,
                0xA409_3822_299F_31D0,
                0x082E_FA98_EC4E_6C89,
            ],
            tail: [0; 32],
            n_tail: 0,
            len: 0,
        }
    }
}

fn mix(h: u64, w: u64, p: u64) -> u64 {
    (h ^ w).wrapping_mul(p).rotate_left(29)
}

impl Checksum {
    fn quad(lanes: &mut [u64; 4], q: &[u8]) {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let c = &q[8 * i..8 * i + 8];
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            *lane = mix(*lane, w, P[i]);
        }
    }

    /// Mix in `bytes`.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.n_tail > 0 {
            let n = (32 - self.n_tail).min(bytes.len());
            self.tail[self.n_tail..self.n_tail + n].copy_from_slice(&bytes[..n]);
            self.n_tail += n;
            bytes = &bytes[n..];
            if self.n_tail < 32 {
                return;
            }
            let tail = self.tail;
            Self::quad(&mut self.lanes, &tail);
            self.n_tail = 0;
        }
        let mut quads = bytes.chunks_exact(32);
        for q in &mut quads {
            Self::quad(&mut self.lanes, q);
        }
        let rest = quads.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.n_tail = rest.len();
    }

    /// The checksum of everything mixed in.
    pub fn finish(&self) -> [u8; 16] {
        let mut lanes = self.lanes;
        let mut tail = [0u8; 32];
        tail[..self.n_tail].copy_from_slice(&self.tail[..self.n_tail]);
        Self::quad(&mut lanes, &tail);
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = mix(*lane, self.len, P[(i + 1) % 4]);
        }
        // Fold the lanes into two words, each depending on all four.
        let fin = |a: u64, b: u64, c: u64, d: u64| {
            let mut x = a ^ b.rotate_left(17) ^ c.rotate_left(31) ^ d.rotate_left(47);
            x ^= x >> 33;
            x = x.wrapping_mul(P[0]);
            x ^= x >> 29;
            x
        };
        let (a, b, c, d) = (lanes[0], lanes[1], lanes[2], lanes[3]);
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&fin(a, b, c, d).to_le_bytes());
        out[8..].copy_from_slice(&fin(d, a, b, c).to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (CacheHeader, Vec<u8>) {
        let header = CacheHeader {
            digest: [7; 16],
            k_dims: vec![4, 2],
            v_dims: vec![2, 2],
            tokens: (0..70).collect(),
        };
        let payload = (0..header.payload_bytes()).map(|i| (i * 13 % 256) as u8).collect();
        (header, payload)
    }

    #[test]
    fn round_trip() {
        let (h, p) = sample();
        let bytes = encode(&h, &p).unwrap();
        let (h2, p2) = decode(&bytes, &[7; 16], &[4, 2], &[2, 2], 100).unwrap();
        assert_eq!((h2, p2), (h, &p[..]));
    }

    #[test]
    fn every_damage_is_caught() {
        let (h, p) = sample();
        let bytes = encode(&h, &p).unwrap();
        let ok = |b: &[u8]| decode(b, &[7; 16], &[4, 2], &[2, 2], 100).is_ok();
        // Any single flipped byte, anywhere (header, tokens, payload, checksum).
        for i in (0..bytes.len()).step_by(97).chain([0, 12, 40, bytes.len() - 1]) {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            assert!(!ok(&b), "flipped byte {i} accepted");
        }
        // Every truncation.
        for n in (0..bytes.len()).step_by(61) {
            assert!(matches!(
                decode(&bytes[..n], &[7; 16], &[4, 2], &[2, 2], 100),
                Err(Error::PromptCache(_))
            ));
        }
        // Another model, other widths.
        assert!(decode(&bytes, &[8; 16], &[4, 2], &[2, 2], 100).is_err());
        assert!(decode(&bytes, &[7; 16], &[4, 4], &[2, 2], 100).is_err());
        // A token outside the vocabulary.
        assert!(decode(&bytes, &[7; 16], &[4, 2], &[2, 2], 69).is_err());
    }

    #[test]
    fn header_length_from_its_start() {
        let (h, p) = sample();
        let bytes = encode(&h, &p).unwrap();
        let (_, at) = read_header(&bytes).unwrap();
        // Read in steps as a reader does: the widths first, then the tokens, then done.
        let widths = header_needs(&bytes[..HEADER_MIN], bytes.len()).unwrap().unwrap();
        assert!(widths > HEADER_MIN && widths < at);
        assert_eq!(header_needs(&bytes[..widths], bytes.len()).unwrap(), Some(at));
        assert_eq!(header_needs(&bytes[..at], bytes.len()).unwrap(), None);
        assert_eq!(read_header_of(&bytes[..at], bytes.len()).unwrap().0, h);
        // A count the limit cannot hold, or a bad magic, is an error before reading on.
        assert!(header_needs(&bytes[..HEADER_MIN], HEADER_MIN + 8).is_err());
        assert!(header_needs(&[0u8; HEADER_MIN], bytes.len()).is_err());
    }

    #[test]
    fn checksum_takes_pieces_of_any_size() {
        let data: Vec<u8> = (0..1000).map(|i| (i * 37 % 253) as u8).collect();
        let whole = checksum(&data);
        for cut in [1, 5, 31, 32, 33, 100, 999] {
            let mut c = Checksum::default();
            data.chunks(cut).for_each(|p| c.update(p));
            assert_eq!(c.finish(), whole, "pieces of {cut}");
        }
        assert_ne!(checksum(&data[..999]), whole);
    }
}
