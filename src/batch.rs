//! Several sequences over one KV cache, evaluated together: the building block of batched
//! serving. A [`Batch`] owns a cache of blocks shared by its sequences ([`crate::kv`]); each
//! [`Batch::step`] evaluates new tokens of any of them in one forward pass (one graph, one
//! submission), and a sequence can start from another's prefix without recomputing it
//! ([`Batch::fork`]: the whole blocks are shared, only the rest is evaluated).

use crate::exec::{blocks_for, HostWork, KvId, KvSpec, Readback, SeqStep, StepOutput, KV_BLOCK};
use crate::kv::{BlockPool, SeqBlocks};
use crate::load::Model;
use crate::model::Logits;
use crate::shift::{self, Cached};
use crate::ShiftMode;
use crate::{Error, Result};

/// A sequence of a [`Batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeqId(usize);

struct Seq {
    blocks: SeqBlocks,
    tokens: Vec<u32>,
}

/// Sequences sharing one KV cache of `n_ctx` positions in all.
pub struct Batch<'m> {
    model: &'m Model,
    kv: KvId,
    pool: BlockPool,
    seqs: Vec<Option<Seq>>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if let Ok(mut e) = self.model.exec.try_borrow_mut() {
            e.free_kv(self.kv);
        }
    }
}

impl Model {
    /// A cache of `n_ctx` positions (whole blocks) for sequences evaluated together.
    pub fn batch(&self, n_ctx: usize) -> Result<Batch<'_>> {
        let hp = self.hparams();
        if n_ctx == 0 {
            return Err(Error::InvalidArgument("a batch needs a context of at least one position".into()));
        }
        let n_blocks = blocks_for(n_ctx);
        let spec = KvSpec {
            n_blocks,
            k_dims: vec![hp.n_head_kv * hp.head_dim; hp.n_layer],
            v_dims: vec![hp.n_head_kv * hp.v_head_dim; hp.n_layer],
        };
        let kv = self.exec.try_borrow_mut().map_err(|_| Error::busy())?.alloc_kv(&spec)?;
        Ok(Batch { model: self, kv, pool: BlockPool::new(n_blocks), seqs: Vec::new() })
    }
}

impl<'m> Batch<'m> {
    /// A new, empty sequence.
    pub fn add(&mut self) -> SeqId {
        self.insert(Seq { blocks: SeqBlocks::default(), tokens: Vec::new() })
    }

    /// A new sequence holding the first `n` tokens of `from` (at most what `from` holds): the
    /// whole blocks among them are shared (not copied, not recomputed); the tokens after the
    /// last whole block are returned, to be evaluated by the next step of the new sequence.
    pub fn fork(&mut self, from: SeqId, n: usize) -> Result<(SeqId, Vec<u32>)> {
        let src = self.seqs.get(from.0).and_then(Option::as_ref).ok_or_else(|| unknown(from))?;
        let n = n.min(src.tokens.len());
        let prefix = src.tokens[..n].to_vec();
        let (blocks, held) = src.blocks.fork(&mut self.pool, n);
        let id = self.insert(Seq { blocks, tokens: prefix[..held].to_vec() });
        Ok((id, prefix[held..].to_vec()))
    }

    /// Drop a sequence; its blocks go back to the cache (shared ones when no one else uses them).
    pub fn remove(&mut self, id: SeqId) {
        if let Some(mut s) = self.seqs.get_mut(id.0).and_then(Option::take) {
            s.blocks.release(&mut self.pool);
        }
    }

    /// Tokens in the cache for sequence `id`.
    pub fn tokens(&self, id: SeqId) -> Result<&[u32]> {
        Ok(&self.seq(id)?.tokens)
    }

    /// Make room for sequence `id` in a window of `window` positions before evaluating
    /// `pending`, as [`crate::Session::shift_context`] does for a session (with
    /// [`ShiftMode::Rotate`]): keep its first `keep` tokens (at most half the window), drop
    /// about half of the rest, and return what to evaluate next: `pending`, after any cached
    /// tokens that must be evaluated again (where a moved block is shared with another
    /// sequence, or the keys cannot be rotated).
    pub fn shift_context(
        &mut self,
        id: SeqId,
        window: usize,
        keep: usize,
        pending: &[u32],
    ) -> Result<Vec<u32>> {
        let s = self.seqs.get_mut(id.0).and_then(Option::as_mut).ok_or_else(|| unknown(id))?;
        let cached = Cached {
            model: self.model,
            kv: self.kv,
            pool: &mut self.pool,
            blocks: &mut s.blocks,
            tokens: &mut s.tokens,
        };
        Ok(shift::shift(cached, window, ShiftMode::Rotate, keep, pending).0)
    }

    /// Free positions of the cache (whole blocks).
    pub fn free_positions(&self) -> usize {
        self.pool.n_free() * KV_BLOCK
    }

    /// Evaluate `work` (new tokens of distinct sequences) in one forward pass and read back,
    /// per sequence in order, its last token's argmax or logits. Nothing changes on an error.
    pub async fn step(&mut self, work: &[(SeqId, &[u32])], readback: Readback) -> Result<StepOutput> {
        self.step_with(work, readback, None).await
    }

    /// [`Batch::step`] with `host` work done while the device runs the forward pass; the token
    /// masks it returns apply to the device's argmax (entry `i` for the sequence of `work[i]`,
    /// missing entries: none; see [`crate::exec::Executor::run_with`] and [`SeqStep::mask`]:
    /// only with [`Readback::Argmax`], `exec::mask_words(n_vocab)` words).
    // The executor stays borrowed across the readback on purpose (see `Session::eval`).
    #[allow(clippy::await_holding_refcell_ref)]
    pub async fn step_with(
        &mut self,
        work: &[(SeqId, &[u32])],
        readback: Readback,
        host: Option<HostWork<'_>>,
    ) -> Result<StepOutput> {
        if work.is_empty() || work.iter().any(|(_, t)| t.is_empty()) {
            return Err(Error::InvalidArgument("a step needs new tokens for every sequence it names".into()));
        }
        if readback == Readback::AllLogits {
            return Err(Error::InvalidArgument("a batch step reads back each sequence's last row".into()));
        }
        let mut ids: Vec<usize> = work.iter().map(|(id, _)| id.0).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::InvalidArgument("a sequence appears twice in one step".into()));
        }
        // Reserve every sequence's blocks; on failure give back what this step took (a fork
        // shares only full blocks, so no sequence's partial last block is shared).
        for (i, (id, toks)) in work.iter().enumerate() {
            let s = self.seqs.get_mut(id.0).and_then(Option::as_mut).ok_or_else(|| unknown(*id))?;
            if let Err(e) = s.blocks.reserve(&mut self.pool, s.tokens.len() + toks.len()) {
                for (id, _) in &work[..i] {
                    if let Some(s) = self.seqs[id.0].as_mut() {
                        s.blocks.truncate(&mut self.pool, s.tokens.len());
                    }
                }
                return Err(e);
            }
        }
        let n_tokens: usize = work.iter().map(|(_, t)| t.len()).sum();
        // Graphs take up to n_seqs sequences: a power of two keeps the compiled shapes few.
        let n_seqs = work.len().next_power_of_two().min(n_tokens);
        let graph = self.model.graph(n_tokens, n_seqs, Logits::Last)?;
        let steps: Vec<SeqStep> = work
            .iter()
            .map(|(id, toks)| {
                let s = self.seqs[id.0].as_ref().ok_or_else(|| unknown(*id))?;
                Ok(SeqStep { tokens: toks, pos: s.tokens.len(), blocks: s.blocks.table(), mask: None })
            })
            .collect::<Result<_>>()?;
        let out = match (self.model.exec.try_borrow_mut(), host) {
            (Ok(mut exec), Some(host)) => exec.run_with(graph, self.kv, &steps, readback, host).await,
            (Ok(mut exec), None) => exec.run(graph, self.kv, &steps, readback).await,
            (Err(_), _) => Err(Error::busy()),
        };
        drop(steps);
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                for (id, _) in work {
                    if let Some(s) = self.seqs[id.0].as_mut() {
                        s.blocks.truncate(&mut self.pool, s.tokens.len());
                    }
                }
                return Err(e);
            }
        };
        for (id, toks) in work {
            if let Some(s) = self.seqs[id.0].as_mut() {
                s.tokens.extend_from_slice(toks);
            }
        }
        Ok(out)
    }

    fn insert(&mut self, s: Seq) -> SeqId {
        match self.seqs.iter().position(Option::is_none) {
            Some(i) => {
                self.seqs[i] = Some(s);
                SeqId(i)
            }
            None => {
                self.seqs.push(Some(s));
                SeqId(self.seqs.len() - 1)
            }
        }
    }

    fn seq(&self, id: SeqId) -> Result<&Seq> {
        self.seqs.get(id.0).and_then(Option::as_ref).ok_or_else(|| unknown(id))
    }
}

fn unknown(id: SeqId) -> Error {
    Error::InvalidArgument(format!("sequence {} is not in this batch", id.0))
}
