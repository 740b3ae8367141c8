//! Context shift, for a [`crate::Session`] and for each sequence of a [`crate::Batch`]: make
//! room in a full window by dropping tokens after a kept prefix. One implementation, so that a
//! served conversation shifts exactly as a session does.

use crate::exec::{KvId, KvShift, KV_BLOCK};
use crate::kv::{BlockPool, SeqBlocks};
use crate::load::Model;
use crate::session::ShiftMode;

/// One sequence's cache: its tokens, and its block table in `pool` over the executor's cache `kv`.
pub(crate) struct Cached<'a> {
    pub model: &'a Model,
    pub kv: KvId,
    pub pool: &'a mut BlockPool,
    pub blocks: &'a mut SeqBlocks,
    pub tokens: &'a mut Vec<u32>,
}

/// Make room in a window of `window` positions before evaluating `pending` (see
/// [`crate::Session::shift_context`]): keep the first `keep` tokens (at most half the window),
/// drop about half of the rest. Returns what to evaluate next (`pending`, after any cached
/// tokens that must be evaluated again) and how many cached tokens that re-evaluates.
pub(crate) fn shift(
    c: Cached,
    window: usize,
    mode: ShiftMode,
    keep: usize,
    pending: &[u32],
) -> (Vec<u32>, usize) {
    let mut c = c;
    let n = c.tokens.len();
    let keep = keep.min(window / 2).min(n);
    if mode != ShiftMode::Recompute && shift_blocks(&mut c, mode, keep, n + pending.len()) {
        return (pending.to_vec(), 0);
    }
    let Cached { pool, blocks, tokens, .. } = c;
    let mut all = std::mem::take(tokens);
    all.extend_from_slice(pending);
    // More than keep + 1 tokens: rest >= 2, so 1 <= drop < rest and at least the newest
    // token is left to evaluate.
    let rest = all.len() - keep;
    let drop = (rest / 2).div_ceil(KV_BLOCK).saturating_mul(KV_BLOCK).min(rest.saturating_sub(1));
    let kept = blocks.truncate(pool, keep);
    *tokens = all[..kept].to_vec();
    let again = (keep - kept) + n.saturating_sub(keep + drop);
    (all[kept..keep].iter().chain(&all[keep + drop..]).copied().collect(), again)
}

/// The block-wise shift for `total` tokens (cached and pending): whole blocks after the kept
/// prefix are dropped and the blocks after them rotated to their new positions. False
/// (nothing changed) where it cannot be done.
fn shift_blocks(c: &mut Cached, mode: ShiftMode, keep: usize, total: usize) -> bool {
    let Cached { model, kv, pool, blocks, tokens } = c;
    let (model, kv) = (*model, *kv);
    let n = tokens.len();
    let first = keep.div_ceil(KV_BLOCK);
    let whole = n / KV_BLOCK;
    let rest = total.saturating_sub(first * KV_BLOCK);
    let n_drop = (rest / 2).div_ceil(KV_BLOCK).min(whole.saturating_sub(first));
    if n_drop == 0 {
        return false;
    }
    let moved = blocks.table()[first + n_drop..].to_vec();
    // Rotating a block in place would move it for every sequence that shares it.
    if moved.iter().any(|&b| pool.refs(b) > 1) {
        return false;
    }
    if mode == ShiftMode::Rotate && !moved.is_empty() {
        let Some(layers) = model.kv_rope() else { return false };
        let shift = KvShift { blocks: moved, delta: -((n_drop * KV_BLOCK) as i32), layers: layers.to_vec() };
        let Ok(mut exec) = model.exec.try_borrow_mut() else { return false };
        if exec.shift_kv(kv, &shift).is_err() {
            // The moved blocks are undefined now: the caller's recomputation drops them.
            return false;
        }
    }
    blocks.remove_blocks(pool, first..first + n_drop);
    tokens.drain(first * KV_BLOCK..(first + n_drop) * KV_BLOCK);
    true
}
