//! What one step carries: tokens of one or more sequences, each at its own positions, each
//! reading and writing the KV cache through its own block table; and the checks and the packed
//! form every executor uses (rule 8: one preamble, the same errors everywhere).
//!
//! The KV cache of an executor is a pool of blocks of [`KV_BLOCK`] positions (per layer, a
//! block is `KV_BLOCK` consecutive key rows and as many value rows). A sequence's position `p`
//! lives in row `blocks[p / KV_BLOCK] · KV_BLOCK + p % KV_BLOCK` of the pool, so sequences can
//! share a prefix's blocks, and blocks can be saved, restored and moved without copying rows.

use super::{Graph, Readback};
use crate::{Error, Result};

/// Positions per block of the KV cache. A power of two; a multiple of every attention kernel's
/// key tile (64), so a tile of keys never straddles two blocks.
pub const KV_BLOCK: usize = 64;

/// One sequence's part of a step: its tokens are consecutive in the step, at positions
/// `pos, pos + 1, …`; every earlier position of the sequence is already in the cache.
#[derive(Debug, Clone, Copy)]
pub struct SeqStep<'a> {
    /// Token ids.
    pub tokens: &'a [u32],
    /// Position of the first token.
    pub pos: usize,
    /// The sequence's block table: block `i` of the pool holds positions
    /// `i·KV_BLOCK .. (i+1)·KV_BLOCK`. It covers at least `pos + tokens.len()` positions.
    pub blocks: &'a [u32],
    /// The ids the device's argmax may pick for this sequence (constrained decoding): one bit
    /// per id of the logits row, bit `i % 32` of word `i / 32` ([`mask_words`] words). Only
    /// with [`Readback::Argmax`]; `None`: every id.
    pub mask: Option<&'a [u32]>,
}

impl<'a> SeqStep<'a> {
    /// A step of one sequence.
    pub fn one(tokens: &'a [u32], pos: usize, blocks: &'a [u32]) -> [SeqStep<'a>; 1] {
        [SeqStep { tokens, pos, blocks, mask: None }]
    }
}

/// `seqs` with the token masks of `masks` (entry `i` for sequence `i`; `None` or a missing
/// entry keeps the sequence's own), as [`super::Executor::run_with`]'s work returns them.
pub fn with_masks<'a>(seqs: &[SeqStep<'a>], masks: &'a [Option<Vec<u32>>]) -> Vec<SeqStep<'a>> {
    seqs.iter()
        .enumerate()
        .map(|(i, s)| SeqStep { mask: masks.get(i).and_then(|m| m.as_deref()).or(s.mask), ..*s })
        .collect()
}

/// Words of a token mask ([`SeqStep::mask`]) for logits rows of `n` values.
pub fn mask_words(n: usize) -> usize {
    n.div_ceil(32)
}

/// Whether token mask `mask` allows id `i`.
pub fn mask_allows(mask: &[u32], i: usize) -> bool {
    mask.get(i / 32).is_some_and(|w| w & (1 << (i % 32)) != 0)
}

/// The identity block table of a cache of `n_blocks` blocks used by a single sequence.
pub fn identity_blocks(n_blocks: usize) -> Vec<u32> {
    (0..n_blocks as u32).collect()
}

/// Blocks needed for `n_ctx` positions.
pub fn blocks_for(n_ctx: usize) -> usize {
    n_ctx.div_ceil(KV_BLOCK)
}

/// The step preamble every executor runs (rule 8), so that a bad step gets the same error on
/// each: one to `graph.n_seqs` sequences, none empty, `graph.n_tokens` tokens in all, each below
/// `n_vocab` (the rows of [`Graph::embed_table`]); every sequence's table covers its positions
/// with blocks below `n_blocks` (the pool) and holds at most `n_blocks` entries; no block is
/// written by two sequences of the step; token masks only with [`Readback::Argmax`], each of
/// [`mask_words`] words of the logits row.
pub fn check_step(
    g: &Graph,
    executor: &'static str,
    seqs: &[SeqStep],
    readback: Readback,
    n_blocks: usize,
    n_vocab: usize,
) -> Result<()> {
    let total: usize = seqs.iter().map(|s| s.tokens.len()).sum();
    if seqs.is_empty()
        || seqs.len() > g.n_seqs
        || total != g.n_tokens
        || seqs.iter().any(|s| s.tokens.is_empty())
    {
        return Err(Error::Executor {
            executor,
            message: format!(
                "graph takes {} tokens of at most {} sequences, got {total} tokens of {} sequences{}",
                g.n_tokens,
                g.n_seqs,
                seqs.len(),
                if seqs.iter().any(|s| s.tokens.is_empty()) { " (one empty)" } else { "" }
            ),
        });
    }
    for m in seqs.iter().filter_map(|s| s.mask) {
        let words = mask_words(g.cols(g.logits));
        if readback != Readback::Argmax {
            return Err(Error::InvalidArgument("a token mask applies to the argmax readback only".into()));
        }
        if m.len() != words {
            return Err(Error::InvalidArgument(format!(
                "a token mask of {} words for logits rows of {} values (needs {words})",
                m.len(),
                g.cols(g.logits)
            )));
        }
    }
    let mut written: Vec<u32> = Vec::new();
    for s in seqs {
        if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::InvalidArgument(format!(
                "token id {t} is outside the vocabulary of {n_vocab} tokens"
            )));
        }
        let n_ctx = s.blocks.len().min(n_blocks).saturating_mul(KV_BLOCK);
        let needed = s.pos.saturating_add(s.tokens.len());
        if needed > n_ctx {
            return Err(Error::ContextOverflow { needed, n_ctx });
        }
        let used = &s.blocks[..blocks_for(needed)];
        if let Some(&b) = used.iter().find(|&&b| b as usize >= n_blocks) {
            return Err(Error::Executor {
                executor,
                message: format!("block {b} is outside the KV cache's {n_blocks} blocks"),
            });
        }
        written.extend_from_slice(&s.blocks[s.pos / KV_BLOCK..blocks_for(needed)]);
    }
    if seqs.len() > 1 {
        written.sort_unstable();
        if let Some(w) = written.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::Executor {
                executor,
                message: format!("block {} is written by two sequences of one step", w[0]),
            });
        }
    }
    Ok(())
}

/// The step's inputs as one array of 32-bit words, the layout the GPU kernels read (offsets
/// from [`StepLayout`]):
///
/// ```text
/// tokens     n_tokens   token ids
/// positions  n_tokens   each token's position in its sequence
/// seq_of     n_tokens   each token's sequence (0 .. n_seqs)
/// seq_start  S + 1      first token of each sequence; entries past the step's sequences = n_tokens
/// seq_len    S          each sequence's valid length after the step (last position + 1); 0 past them
/// last       S          each sequence's last token (the rows `Rows::Last` slots take); past the
///                       step's sequences, the step's last token
/// n_seqs     1          sequences in this step
/// tables     S × T      block tables, one row of T (`table_stride`) entries per sequence
/// ```
/// where S is the graph's `n_seqs` and T the cache's block count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLayout {
    /// Tokens of the graph.
    pub n_tokens: usize,
    /// Most sequences of the graph.
    pub n_seqs: usize,
    /// Entries of a block-table row (the cache's blocks).
    pub table_stride: usize,
}

impl StepLayout {
    /// The layout for graph `g` on a cache of `n_blocks` blocks.
    pub fn new(g: &Graph, n_blocks: usize) -> StepLayout {
        StepLayout { n_tokens: g.n_tokens, n_seqs: g.n_seqs, table_stride: n_blocks }
    }
    /// Word offset of the token ids.
    pub fn tokens(&self) -> usize {
        0
    }
    /// Word offset of the positions.
    pub fn positions(&self) -> usize {
        self.n_tokens
    }
    /// Word offset of each token's sequence.
    pub fn seq_of(&self) -> usize {
        2 * self.n_tokens
    }
    /// Word offset of the sequences' first tokens.
    pub fn seq_start(&self) -> usize {
        3 * self.n_tokens
    }
    /// Word offset of the sequences' valid lengths.
    pub fn seq_len(&self) -> usize {
        self.seq_start() + self.n_seqs + 1
    }
    /// Word offset of the sequences' last tokens.
    pub fn last(&self) -> usize {
        self.seq_len() + self.n_seqs
    }
    /// Word offset of the step's sequence count.
    pub fn count(&self) -> usize {
        self.last() + self.n_seqs
    }
    /// Word offset of the block tables.
    pub fn tables(&self) -> usize {
        self.count() + 1
    }
    /// Words in all.
    pub fn len(&self) -> usize {
        self.tables() + self.n_seqs * self.table_stride
    }
    /// Never empty (a graph has at least one token); for clippy's `len` rule.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Pack a checked step ([`check_step`]).
    pub fn pack(&self, seqs: &[SeqStep]) -> Vec<u32> {
        let mut w = vec![0u32; self.len()];
        let (pos_at, seq_at, start_at, len_at, last_at) =
            (self.positions(), self.seq_of(), self.seq_start(), self.seq_len(), self.last());
        let mut t = 0;
        for (i, s) in seqs.iter().enumerate() {
            w[start_at + i] = t as u32;
            for (j, &tok) in s.tokens.iter().enumerate() {
                w[t] = tok;
                w[pos_at + t] = (s.pos + j) as u32;
                w[seq_at + t] = i as u32;
                t += 1;
            }
            w[len_at + i] = (s.pos + s.tokens.len()) as u32;
            w[last_at + i] = t as u32 - 1;
            let row = self.tables() + i * self.table_stride;
            let n = s.blocks.len().min(self.table_stride);
            w[row..row + n].copy_from_slice(&s.blocks[..n]);
        }
        for i in seqs.len()..self.n_seqs {
            w[start_at + i] = t as u32;
            w[last_at + i] = t.saturating_sub(1) as u32;
        }
        w[start_at + self.n_seqs] = t as u32;
        w[self.count()] = seqs.len() as u32;
        w
    }
}

/// The cache row of position `p` of a sequence with block table `blocks`.
pub fn kv_row(blocks: &[u32], p: usize) -> usize {
    blocks[p / KV_BLOCK] as usize * KV_BLOCK + p % KV_BLOCK
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(n_tokens: usize, n_seqs: usize) -> Graph {
        let mut g = Graph::new(n_tokens);
        g.n_seqs = n_seqs;
        g
    }

    #[test]
    fn packs_two_sequences() {
        let g = graph(4, 3);
        let (a, b) = ([7u32, 8, 9], [5u32]);
        let (ta, tb) = ([2u32, 0], [1u32]);
        let seqs = [
            SeqStep { tokens: &a, pos: 62, blocks: &ta, mask: None },
            SeqStep { tokens: &b, pos: 10, blocks: &tb, mask: None },
        ];
        check_step(&g, "test", &seqs, Readback::Argmax, 3, 10).unwrap();
        let l = StepLayout::new(&g, 3);
        let w = l.pack(&seqs);
        assert_eq!(w.len(), l.len());
        assert_eq!(&w[..4], &[7, 8, 9, 5]);
        assert_eq!(&w[l.positions()..l.positions() + 4], &[62, 63, 64, 10]);
        assert_eq!(&w[l.seq_of()..l.seq_of() + 4], &[0, 0, 0, 1]);
        assert_eq!(&w[l.seq_start()..l.seq_start() + 4], &[0, 3, 4, 4]);
        assert_eq!(&w[l.seq_len()..l.seq_len() + 3], &[65, 11, 0]);
        assert_eq!(&w[l.last()..l.last() + 3], &[2, 3, 3]);
        assert_eq!(w[l.count()], 2);
        assert_eq!(&w[l.tables()..], &[2, 0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(kv_row(&ta, 63), 2 * KV_BLOCK + 63);
        assert_eq!(kv_row(&ta, 64), 0);
    }

    #[test]
    fn rejects_bad_steps() {
        let g = graph(2, 2);
        let t = [0u32, 1];
        let ok = |seqs: &[SeqStep]| check_step(&g, "test", seqs, Readback::Argmax, 4, 10);
        assert!(ok(&[SeqStep { tokens: &[1, 2], pos: 0, blocks: &t, mask: None }]).is_ok());
        // Token count, empty sequence, too many sequences.
        assert!(ok(&[SeqStep { tokens: &[1], pos: 0, blocks: &t, mask: None }]).is_err());
        assert!(ok(&[
            SeqStep { tokens: &[1, 2], pos: 0, blocks: &t, mask: None },
            SeqStep { tokens: &[], pos: 0, blocks: &t, mask: None }
        ])
        .is_err());
        // Vocabulary.
        assert!(matches!(
            ok(&[SeqStep { tokens: &[1, 10], pos: 0, blocks: &t, mask: None }]),
            Err(Error::InvalidArgument(_))
        ));
        // Past the table, blocks outside the pool.
        assert!(matches!(
            ok(&[SeqStep { tokens: &[1, 2], pos: 127, blocks: &t, mask: None }]),
            Err(Error::ContextOverflow { needed: 129, n_ctx: 128 })
        ));
        assert!(ok(&[SeqStep { tokens: &[1, 2], pos: 0, blocks: &[4], mask: None }]).is_err());
        // Two sequences writing one block; reading a shared one is fine.
        let (a, b) = ([0u32, 1], [0u32, 2]);
        assert!(ok(&[
            SeqStep { tokens: &[1], pos: 64, blocks: &a, mask: None },
            SeqStep { tokens: &[1], pos: 64, blocks: &b, mask: None }
        ])
        .is_ok());
        assert!(ok(&[
            SeqStep { tokens: &[1], pos: 3, blocks: &a, mask: None },
            SeqStep { tokens: &[1], pos: 64, blocks: &b, mask: None }
        ])
        .is_ok());
        assert!(ok(&[
            SeqStep { tokens: &[1], pos: 3, blocks: &a, mask: None },
            SeqStep { tokens: &[1], pos: 5, blocks: &b, mask: None }
        ])
        .is_err());
    }

    #[test]
    fn checks_token_masks() {
        let mut g = graph(1, 1);
        g.logits = g.act(crate::exec::Rows::Last, 65);
        let t = [0u32];
        let (three, two) = ([u32::MAX; 3], [u32::MAX; 2]);
        let step = |mask: Option<&[u32]>, rb: Readback| {
            check_step(&g, "test", &[SeqStep { tokens: &[1], pos: 0, blocks: &t, mask }], rb, 1, 10)
        };
        assert_eq!(mask_words(65), 3);
        assert!(step(Some(&three), Readback::Argmax).is_ok());
        assert!(step(None, Readback::LastLogits).is_ok());
        // Of the wrong length, or with a logits readback.
        assert!(matches!(step(Some(&two), Readback::Argmax), Err(Error::InvalidArgument(_))));
        assert!(matches!(step(Some(&three), Readback::LastLogits), Err(Error::InvalidArgument(_))));
        assert!(mask_allows(&[0, 1 << 31, 1], 63) && mask_allows(&[0, 0, 1], 64));
        assert!(!mask_allows(&[0, 0, 1], 65) && !mask_allows(&[u32::MAX], 32));
    }
}
