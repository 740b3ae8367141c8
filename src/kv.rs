//! The host's book of a KV cache's blocks: which are free, how many sequences use each, and
//! each sequence's block table (what [`crate::exec::SeqStep::blocks`] passes to a step).
//!
//! The executor holds the blocks' rows ([`crate::exec::Executor::alloc_kv`]); this module
//! decides which block a sequence's positions go to. A block shared by several sequences (a
//! common prefix) is only read by them: a sequence writes only the blocks it holds alone, and
//! [`SeqBlocks::truncate`] gives back a shared block before the sequence writes into it again.

use crate::exec::{blocks_for, KV_BLOCK};
use crate::{Error, Result};

/// The free list and reference counts of a cache's blocks.
#[derive(Debug, Clone)]
pub struct BlockPool {
    /// Sequences using each block (0: free).
    refs: Vec<u32>,
    /// Free blocks, the next to hand out last.
    free: Vec<u32>,
}

impl BlockPool {
    /// A pool of `n_blocks` free blocks.
    pub fn new(n_blocks: usize) -> BlockPool {
        BlockPool { refs: vec![0; n_blocks], free: (0..n_blocks as u32).rev().collect() }
    }
    /// Blocks in all.
    pub fn n_blocks(&self) -> usize {
        self.refs.len()
    }
    /// Blocks free now.
    pub fn n_free(&self) -> usize {
        self.free.len()
    }
    /// How many sequences use block `b`.
    pub fn refs(&self, b: u32) -> u32 {
        self.refs.get(b as usize).copied().unwrap_or(0)
    }
    fn alloc(&mut self) -> Option<u32> {
        let b = self.free.pop()?;
        self.refs[b as usize] = 1;
        Some(b)
    }
    fn share(&mut self, b: u32) {
        self.refs[b as usize] += 1;
    }
    fn release(&mut self, b: u32) {
        let r = &mut self.refs[b as usize];
        *r -= 1;
        if *r == 0 {
            self.free.push(b);
        }
    }
}

/// One sequence's block table: block `i` holds its positions `i·KV_BLOCK .. (i+1)·KV_BLOCK`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqBlocks {
    blocks: Vec<u32>,
}

impl SeqBlocks {
    /// The table, for a step.
    pub fn table(&self) -> &[u32] {
        &self.blocks
    }
    /// Positions the table covers.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * KV_BLOCK
    }

    /// Make the table cover `n_positions`, taking free blocks from `pool`. On failure (too few
    /// free blocks) the table is as it was.
    pub fn reserve(&mut self, pool: &mut BlockPool, n_positions: usize) -> Result<()> {
        let need = blocks_for(n_positions).saturating_sub(self.blocks.len());
        if need > pool.n_free() {
            return Err(Error::ContextOverflow {
                needed: n_positions,
                n_ctx: self.capacity() + pool.n_free() * KV_BLOCK,
            });
        }
        for _ in 0..need {
            // Cannot fail: checked above.
            self.blocks.extend(pool.alloc());
        }
        Ok(())
    }

    /// Keep the first `n_positions` positions: blocks past them go back to the pool, and so
    /// does the block that holds position `n_positions` if another sequence shares it (the
    /// sequence will write there next; the shared rows before it are recomputed).
    pub fn truncate(&mut self, pool: &mut BlockPool, n_positions: usize) -> usize {
        let mut keep = blocks_for(n_positions).min(self.blocks.len());
        let mut kept = n_positions.min(keep * KV_BLOCK);
        if keep > 0 && !n_positions.is_multiple_of(KV_BLOCK) && pool.refs(self.blocks[keep - 1]) > 1 {
            keep -= 1;
            kept = keep * KV_BLOCK;
        }
        // Last block first, so the next reserve hands them out in the same order again.
        for b in self.blocks.drain(keep..).rev() {
            pool.release(b);
        }
        kept
    }

    /// A new sequence that shares the whole blocks of this one's first `n_positions` (a common
    /// prefix); returns it and how many positions it holds (a multiple of `KV_BLOCK`).
    pub fn fork(&self, pool: &mut BlockPool, n_positions: usize) -> (SeqBlocks, usize) {
        let n = (n_positions / KV_BLOCK).min(self.blocks.len());
        let blocks = self.blocks[..n].to_vec();
        blocks.iter().for_each(|&b| pool.share(b));
        (SeqBlocks { blocks }, n * KV_BLOCK)
    }

    /// Take blocks `range` (indices into the table) out of the table, giving them back to the
    /// pool: the blocks after them now hold positions `range.len() · KV_BLOCK` lower (a
    /// context shift; their keys must be re-positioned, [`crate::exec::KvShift`]).
    pub fn remove_blocks(&mut self, pool: &mut BlockPool, range: std::ops::Range<usize>) {
        let end = range.end.min(self.blocks.len());
        for b in self.blocks.drain(range.start.min(end)..end).rev() {
            pool.release(b);
        }
    }

    /// Give every block back.
    pub fn release(&mut self, pool: &mut BlockPool) {
        self.truncate(pool, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_come_and_go() {
        let mut pool = BlockPool::new(4);
        let mut a = SeqBlocks::default();
        a.reserve(&mut pool, 1).unwrap();
        assert_eq!(a.table(), &[0]);
        a.reserve(&mut pool, 3 * KV_BLOCK).unwrap();
        assert_eq!(a.table(), &[0, 1, 2]);
        assert_eq!(pool.n_free(), 1);
        // Too many: an error naming what fits, and nothing taken.
        let e = a.reserve(&mut pool, 5 * KV_BLOCK).unwrap_err();
        assert!(matches!(e, Error::ContextOverflow { n_ctx, .. } if n_ctx == 4 * KV_BLOCK), "{e}");
        assert_eq!(pool.n_free(), 1);
        assert_eq!(a.truncate(&mut pool, KV_BLOCK + 5), KV_BLOCK + 5);
        assert_eq!(a.table(), &[0, 1]);
        assert_eq!(pool.n_free(), 2);
        // A freed block is handed out again.
        a.reserve(&mut pool, 3 * KV_BLOCK).unwrap();
        assert_eq!(a.table(), &[0, 1, 2]);
    }

    #[test]
    fn removed_blocks_go_back() {
        let mut pool = BlockPool::new(5);
        let mut a = SeqBlocks::default();
        a.reserve(&mut pool, 4 * KV_BLOCK + 1).unwrap();
        assert_eq!(a.table(), &[0, 1, 2, 3, 4]);
        a.remove_blocks(&mut pool, 1..3);
        assert_eq!(a.table(), &[0, 3, 4]);
        assert_eq!((pool.n_free(), pool.refs(1), pool.refs(2)), (2, 0, 0));
        a.reserve(&mut pool, 5 * KV_BLOCK).unwrap();
        assert_eq!(a.table(), &[0, 3, 4, 1, 2]);
    }

    #[test]
    fn forks_share_whole_blocks() {
        let mut pool = BlockPool::new(6);
        let mut a = SeqBlocks::default();
        a.reserve(&mut pool, 2 * KV_BLOCK + 10).unwrap();
        let (mut b, held) = a.fork(&mut pool, 2 * KV_BLOCK + 10);
        assert_eq!((b.table(), held), (&[0u32, 1][..], 2 * KV_BLOCK));
        assert_eq!((pool.refs(0), pool.refs(2)), (2, 1));
        b.reserve(&mut pool, 3 * KV_BLOCK).unwrap();
        assert_eq!(b.table(), &[0, 1, 3]);
        // Truncating into a shared block gives it back: the sequence must not write into it.
        assert_eq!(b.truncate(&mut pool, KV_BLOCK + 3), KV_BLOCK);
        assert_eq!(b.table(), &[0]);
        assert_eq!(pool.refs(1), 1);
        a.release(&mut pool);
        b.release(&mut pool);
        assert_eq!(pool.n_free(), 6);
    }
}
