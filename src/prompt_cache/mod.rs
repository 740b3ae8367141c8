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
#[cfg(not(target_arch = "wasm32"))]
pub use dir::{CacheDir, Found};

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

fn bad(message: impl Into<String>) -> Error {
    Error::PromptCache(message.into())
}

/// A saved cache: `header` and the `payload` of its blocks ([`crate::exec::Executor::read_kv_blocks`]).
pub fn encode(header: &CacheHeader, payload: &[u8]) -> Result<Vec<u8>> {
    if payload.len() != header.payload_bytes() || header.k_dims.len() != header.v_dims.len() {
        return Err(bad(format!(
            "{} payload bytes for {} tokens, which take {}",
            payload.len(),
            header.tokens.len(),
            header.payload_bytes()
        )));
    }
    let u32_of = |n: usize| u32::try_from(n).map_err(|_| bad(format!("{n} does not fit the format")));
    let mut out = Vec::with_capacity(64 + 8 * header.k_dims.len() + 4 * header.tokens.len() + payload.len());
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
/// [`header_len`]).
pub fn read_header_of(bytes: &[u8], file_len: usize) -> Result<(CacheHeader, usize)> {
    let mut f = Fields { bytes, at: 0 };
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
    let n_layers = f.u32("layer count")? as usize;
    // Each layer takes 8 bytes of dims: a count the file cannot hold is corrupt.
    if n_layers.saturating_mul(8) > file_len {
        return Err(bad(format!("{n_layers} layers in a file of {file_len} bytes")));
    }
    let mut dims = Vec::with_capacity(2 * n_layers);
    for _ in 0..2 * n_layers {
        dims.push(f.u32("row widths")? as usize);
    }
    let v_dims = dims.split_off(n_layers);
    let n_tokens = f.u32("token count")? as usize;
    if n_tokens.saturating_mul(4) > file_len {
        return Err(bad(format!("{n_tokens} tokens in a file of {file_len} bytes")));
    }
    let tokens = f
        .take(4 * n_tokens, "tokens")?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let header = CacheHeader { digest, k_dims: dims, v_dims, tokens };
    let want = f.at.saturating_add(header.payload_bytes()).saturating_add(CHECKSUM_BYTES);
    if file_len != want {
        return Err(bad(format!(
            "{file_len} bytes where its header announces {want} (truncated or corrupt)"
        )));
    }
    Ok((header, f.at))
}

/// Bytes of the header that begins with `start` (the first [`HEADER_MIN`] bytes or more):
/// `None` until enough of it is there to tell (the layer and token counts).
pub fn header_len(start: &[u8]) -> Option<usize> {
    let u32_at =
        |at: usize| start.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let n_layers = u32_at(HEADER_MIN - 4)?;
    let tokens_at = HEADER_MIN.checked_add(n_layers.checked_mul(8)?)?;
    let n_tokens = u32_at(tokens_at)?;
    tokens_at.checked_add(4)?.checked_add(n_tokens.checked_mul(4)?)
}

/// Bytes before the row widths: magic, version, digest, element and block sizes, layers.
pub const HEADER_MIN: usize = 8 + 4 + 16 + 4 + 4 + 4;

/// The header and payload of a saved cache, after every check: the format ([`read_header`]),
/// the checksum, and the model's `digest` and KV row widths.
pub fn decode<'a>(
    bytes: &'a [u8],
    digest: &[u8; 16],
    k_dims: &[usize],
    v_dims: &[usize],
) -> Result<(CacheHeader, &'a [u8])> {
    let (header, at) = read_header(bytes)?;
    let body = bytes.len() - CHECKSUM_BYTES;
    if checksum(&bytes[..body])[..] != bytes[body..] {
        return Err(bad("checksum mismatch (the file is corrupt)"));
    }
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
    Ok((header, &bytes[at..body]))
}

/// The payload of the first `n_blocks` blocks of a payload of blocks (the layout of
/// [`crate::exec::kv_io_pieces`] keeps each layer's keys, then values, of all blocks together).
pub fn payload_prefix(payload: &[u8], k_dims: &[usize], v_dims: &[usize], n_blocks: usize) -> Vec<u8> {
    let total: usize = blocks_for_payload(payload.len(), k_dims, v_dims);
    let mut out = Vec::with_capacity(kv_io_bytes(k_dims, v_dims, n_blocks));
    let mut at = 0;
    for (&k, &v) in k_dims.iter().zip(v_dims) {
        for dim in [k, v] {
            let block = KV_BLOCK * dim * KV_ELEM_BYTES;
            out.extend_from_slice(&payload[at..at + n_blocks.min(total) * block]);
            at += total * block;
        }
    }
    out
}

fn blocks_for_payload(len: usize, k_dims: &[usize], v_dims: &[usize]) -> usize {
    len.checked_div(kv_io_bytes(k_dims, v_dims, 1)).unwrap_or(0)
}

/// A 128-bit checksum against corruption (not tampering by someone who rewrites it): four
/// lanes of 64-bit multiply-xorshift over little-endian words, the tail and length mixed in.
/// It runs at memory speed, so restoring a cache of hundreds of MB is not slowed by it.
pub fn checksum(bytes: &[u8]) -> [u8; 16] {
    const P: [u64; 4] =
        [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0x27D4_EB2F_1656_67C5];
    let mut lanes =
        [0x243F_6A88_85A3_08D3u64, 0x1319_8A2E_0370_7344, 0xA409_3822_299F_31D0, 0x082E_FA98_EC4E_6C89];
    let word = |c: &[u8]| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
    let mix = |h: u64, w: u64, p: u64| (h ^ w).wrapping_mul(p).rotate_left(29);
    let mut quads = bytes.chunks_exact(32);
    for q in &mut quads {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = mix(*lane, word(&q[8 * i..8 * i + 8]), P[i]);
        }
    }
    let mut tail = [0u8; 32];
    let rest = quads.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    for (i, lane) in lanes.iter_mut().enumerate() {
        *lane = mix(*lane, word(&tail[8 * i..8 * i + 8]), P[i]);
        *lane = mix(*lane, bytes.len() as u64, P[(i + 1) % 4]);
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
        let (h2, p2) = decode(&bytes, &[7; 16], &[4, 2], &[2, 2]).unwrap();
        assert_eq!((h2, p2), (h, &p[..]));
    }

    #[test]
    fn every_damage_is_caught() {
        let (h, p) = sample();
        let bytes = encode(&h, &p).unwrap();
        let ok = |b: &[u8]| decode(b, &[7; 16], &[4, 2], &[2, 2]).is_ok();
        // Any single flipped byte, anywhere (header, tokens, payload, checksum).
        for i in (0..bytes.len()).step_by(97).chain([0, 12, 40, bytes.len() - 1]) {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            assert!(!ok(&b), "flipped byte {i} accepted");
        }
        // Every truncation.
        for n in (0..bytes.len()).step_by(61) {
            assert!(matches!(decode(&bytes[..n], &[7; 16], &[4, 2], &[2, 2]), Err(Error::PromptCache(_))));
        }
        // Another model, other widths.
        assert!(decode(&bytes, &[8; 16], &[4, 2], &[2, 2]).is_err());
        assert!(decode(&bytes, &[7; 16], &[4, 4], &[2, 2]).is_err());
    }

    #[test]
    fn header_length_from_its_start() {
        let (h, p) = sample();
        let bytes = encode(&h, &p).unwrap();
        let (_, at) = read_header(&bytes).unwrap();
        assert_eq!(header_len(&bytes[..HEADER_MIN]), None);
        assert_eq!(header_len(&bytes[..at]), Some(at));
        assert_eq!(read_header_of(&bytes[..at], bytes.len()).unwrap().0, h);
    }

    #[test]
    fn prefix_of_blocks() {
        let (h, p) = sample();
        // 70 tokens: 2 blocks. The first block of each (layer, side) section.
        let one = payload_prefix(&p, &h.k_dims, &h.v_dims, 1);
        assert_eq!(one.len(), kv_io_bytes(&h.k_dims, &h.v_dims, 1));
        let b = |dim: usize| KV_BLOCK * dim * 2;
        assert_eq!(&one[..b(4)], &p[..b(4)]);
        assert_eq!(&one[b(4)..b(4) + b(2)], &p[2 * b(4)..2 * b(4) + b(2)]);
        assert_eq!(payload_prefix(&p, &h.k_dims, &h.v_dims, 2), p);
    }
}
