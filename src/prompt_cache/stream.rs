//! Saved caches read from a byte stream (a file, a browser Blob) in bounded pieces: the header
//! first, then the payload mapped onto the blocks being restored, so hundreds of MB of cache
//! never sit in memory at once.

use std::ops::Range;

use super::{bad, header_needs, parse_header, CacheHeader, HEADER_MIN};
use crate::exec::{KV_BLOCK, KV_ELEM_BYTES};
use crate::source::ByteSource;
use crate::Result;

/// Bytes of payload read or written at a time.
pub const IO_CHUNK: usize = 16 << 20;

/// Largest header accepted from a stream of unknown length (about 64 M tokens).
const MAX_HEADER: usize = 256 << 20;

/// Fill `buf` from `src`; a stream that ends first is a truncated cache.
pub async fn read_exact<S: ByteSource>(src: &mut S, buf: &mut [u8], what: &str) -> Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let n = src.read(&mut buf[at..]).await?;
        if n == 0 {
            return Err(bad(format!("truncated: the stream ends in its {what}")));
        }
        at += n;
    }
    Ok(())
}

/// Read a saved cache's header from the start of `src`: the header and its bytes. Counts are
/// checked against the stream's length (when known) before anything is allocated for them.
pub async fn read_header_from<S: ByteSource>(src: &mut S) -> Result<(CacheHeader, Vec<u8>)> {
    let limit = src.len_hint().map_or(MAX_HEADER, |n| n.min(usize::MAX as u64) as usize);
    let mut head = vec![0u8; HEADER_MIN];
    read_exact(src, &mut head, "header").await?;
    while let Some(n) = header_needs(&head, limit)? {
        let at = head.len();
        head.resize(n, 0);
        read_exact(src, &mut head[at..], "header").await?;
    }
    let (header, at) = parse_header(&head, limit)?;
    debug_assert_eq!(at, head.len());
    Ok((header, head))
}

/// Where the payload of a cache of `saved` blocks goes when its first `kept` blocks are
/// restored: the payload keeps each layer's keys, then values, of all its blocks together
/// ([`crate::exec::kv_io_pieces`]), so the kept part of each section moves to the same section
/// of the smaller layout.
pub struct Sections {
    /// Per (layer, side): bytes of one block.
    block_bytes: Vec<usize>,
    saved: usize,
    kept: usize,
}

impl Sections {
    /// The sections of a cache with rows of `k_dims` and `v_dims` values per layer.
    pub fn new(k_dims: &[usize], v_dims: &[usize], saved: usize, kept: usize) -> Sections {
        let block_bytes = k_dims
            .iter()
            .zip(v_dims)
            .flat_map(|(&k, &v)| [k, v])
            .map(|d| KV_BLOCK * d * KV_ELEM_BYTES)
            .collect();
        Sections { block_bytes, saved, kept: kept.min(saved) }
    }

    /// Bytes of the saved payload.
    pub fn total(&self) -> usize {
        self.block_bytes.iter().sum::<usize>() * self.saved
    }

    /// For payload bytes `start .. start + len`: each kept part as (offset in the restored
    /// layout, range within these bytes).
    pub fn map(&self, start: usize, len: usize) -> Vec<(usize, Range<usize>)> {
        let mut out = Vec::new();
        let (mut from, mut to) = (0, 0);
        for &b in &self.block_bytes {
            let keep = from..from + self.kept * b;
            let (a, e) = (keep.start.max(start), keep.end.min(start + len));
            if a < e {
                out.push((to + (a - from), a - start..e - start));
            }
            from += self.saved * b;
            to += self.kept * b;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keep_the_first_blocks_of_each() {
        // Two layers: keys 2 wide, values 4 wide, then 2 and 2; 3 blocks saved, 2 kept.
        let s = Sections::new(&[2, 2], &[4, 2], 3, 2);
        let b = |d: usize| KV_BLOCK * d * 2;
        assert_eq!(s.total(), 3 * (b(2) + b(4) + b(2) + b(2)));
        // The whole payload at once: each section's first two blocks.
        let all = s.map(0, s.total());
        assert_eq!(all[0], (0, 0..2 * b(2)));
        assert_eq!(all[1], (2 * b(2), 3 * b(2)..3 * b(2) + 2 * b(4)));
        assert_eq!(all.iter().map(|(_, r)| r.len()).sum::<usize>(), 2 * (b(2) + b(4) + b(2) + b(2)));
        // In small pieces: the same bytes reach the same places.
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < s.total() {
            let len = 100.min(s.total() - at);
            pieces.extend(s.map(at, len).into_iter().map(|(to, r)| (to, r.start + at..r.end + at)));
            at += len;
        }
        let flat = |v: &[(usize, Range<usize>)]| -> Vec<(usize, usize)> {
            v.iter().flat_map(|(to, r)| r.clone().enumerate().map(move |(i, x)| (to + i, x))).collect()
        };
        assert_eq!(flat(&pieces), flat(&all));
    }
}
