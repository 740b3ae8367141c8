//! Reading and writing whole blocks of a KV cache (issue 18: a prompt cache saved to disk or
//! OPFS and restored into another session, on any executor).
//!
//! Every executor stores keys and values as f16, one row of `dim` values per position, the
//! rows of block `b` being `b · KV_BLOCK ..` of each layer's pool. The bytes that
//! [`super::Executor::read_kv_blocks`] returns and [`super::Executor::write_kv_blocks`] takes
//! are the same on every executor (so a cache saved from one executor restores on another):
//!
//! ```text
//! for each layer:   keys of blocks[0], blocks[1], … (KV_BLOCK rows of k_dim f16 each)
//!                   values of blocks[0], blocks[1], … (KV_BLOCK rows of v_dim f16 each)
//! ```
//!
//! little-endian f16. [`kv_io_pieces`] lists the copies that make up a byte range of this
//! layout, consecutive block ids merged into one copy, so an executor does one copy per layer,
//! side and run of blocks (a session's blocks are usually one run). Reads and writes take a
//! byte range of the layout, so hundreds of MB of cache stream through a bounded buffer.

use std::ops::Range;

use super::KV_BLOCK;
use crate::{Error, Result};

/// Bytes of one f16 value of the cache.
pub const KV_ELEM_BYTES: usize = 2;

/// One copy between an executor's KV cache and the host bytes of [`kv_io_pieces`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvPiece {
    /// Layer of the cache.
    pub layer: usize,
    /// Values (else keys).
    pub values: bool,
    /// Byte offset in that layer's key or value pool.
    pub device: usize,
    /// Byte offset in the host bytes.
    pub host: usize,
    /// Bytes to copy.
    pub len: usize,
}

/// Bytes of `n_blocks` blocks of a cache whose layers have key and value rows of `k_dims` and
/// `v_dims` values.
pub fn kv_io_bytes(k_dims: &[usize], v_dims: &[usize], n_blocks: usize) -> usize {
    let per_row: usize = k_dims.iter().chain(v_dims).sum::<usize>() * KV_ELEM_BYTES;
    per_row.saturating_mul(KV_BLOCK).saturating_mul(n_blocks)
}

/// Check a block read or write against the cache (every block below `n_blocks`, none twice,
/// `range` within the layout's bytes) and list the copies of the layout's bytes `range` in
/// host order, host offsets counted from `range.start` (so a large read or write can go in
/// pieces of bounded size).
pub fn kv_io_pieces(
    executor: &'static str,
    n_blocks: usize,
    k_dims: &[usize],
    v_dims: &[usize],
    blocks: &[u32],
    range: Range<usize>,
) -> Result<Vec<KvPiece>> {
    let fail = |message: String| Error::Executor { executor, message };
    if let Some(&b) = blocks.iter().find(|&&b| b as usize >= n_blocks) {
        return Err(fail(format!("block {b} is outside the KV cache's {n_blocks} blocks")));
    }
    let mut sorted = blocks.to_vec();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(fail(format!("block {} is named twice", w[0])));
    }
    let total = kv_io_bytes(k_dims, v_dims, blocks.len());
    if range.start > range.end || range.end > total {
        return Err(fail(format!("bytes {range:?} of {} KV blocks, which take {total}", blocks.len())));
    }
    // Runs of consecutive block ids: (first block, blocks).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &b in blocks {
        match runs.last_mut() {
            Some((first, n)) if *first + *n == b as usize => *n += 1,
            _ => runs.push((b as usize, 1)),
        }
    }
    let mut pieces = Vec::with_capacity(k_dims.len() * 2 * runs.len());
    let mut host = 0;
    for (layer, (&k, &v)) in k_dims.iter().zip(v_dims).enumerate() {
        for (values, dim) in [(false, k), (true, v)] {
            let block_bytes = KV_BLOCK * dim * KV_ELEM_BYTES;
            for &(first, n) in &runs {
                let len = n * block_bytes;
                // The part of this copy inside `range`.
                let (a, b) = (host.max(range.start), (host + len).min(range.end));
                if a < b {
                    let device = first * block_bytes + (a - host);
                    pieces.push(KvPiece { layer, values, device, host: a - range.start, len: b - a });
                }
                host += len;
            }
        }
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_merge_runs_and_follow_the_layout() {
        let all = kv_io_bytes(&[4, 6], &[2, 2], 3);
        let p = kv_io_pieces("cpu", 8, &[4, 6], &[2, 2], &[3, 4, 1], 0..all).unwrap();
        // Per layer: keys (run 3-4, run 1), then values (same runs).
        let b = |dim: usize| KV_BLOCK * dim * 2;
        assert_eq!(p.len(), 8);
        assert_eq!(p[0], KvPiece { layer: 0, values: false, device: 3 * b(4), host: 0, len: 2 * b(4) });
        assert_eq!(p[1], KvPiece { layer: 0, values: false, device: b(4), host: 2 * b(4), len: b(4) });
        assert_eq!(p[2], KvPiece { layer: 0, values: true, device: 3 * b(2), host: 3 * b(4), len: 2 * b(2) });
        assert_eq!(p[4].layer, 1);
        let end = p.last().map(|q| q.host + q.len).unwrap();
        assert_eq!(end, all);
        // A range cuts the copies and counts host bytes from its start.
        let r = b(4) + 10..3 * b(4) + 6;
        let q = kv_io_pieces("cpu", 8, &[4, 6], &[2, 2], &[3, 4, 1], r.clone()).unwrap();
        assert_eq!(
            q[0],
            KvPiece { layer: 0, values: false, device: 3 * b(4) + b(4) + 10, host: 0, len: b(4) - 10 }
        );
        assert_eq!(q[1], KvPiece { layer: 0, values: false, device: b(4), host: b(4) - 10, len: b(4) });
        assert_eq!(q[2], KvPiece { layer: 0, values: true, device: 3 * b(2), host: 2 * b(4) - 10, len: 6 });
        assert_eq!(q.iter().map(|x| x.len).sum::<usize>(), r.len());
    }

    #[test]
    fn bad_requests_are_refused() {
        let one = kv_io_bytes(&[2], &[2], 1);
        assert!(kv_io_pieces("cpu", 4, &[2], &[2], &[4], 0..one).is_err());
        assert!(kv_io_pieces("cpu", 4, &[2], &[2], &[1, 1], 0..2 * one).is_err());
        assert!(kv_io_pieces("cpu", 4, &[2], &[2], &[1], 0..one + 2).is_err());
        assert!(kv_io_pieces("cpu", 4, &[2], &[2], &[1], 0..one).is_ok());
    }
}
