//! Launchers of kernels/attention_split.cu (decode: chunks of the keys over many blocks),
//! kernels/attention_flash.cu (prefill on the tensor cores), and the older kernels for the
//! shapes those do not take: kernels/attention.cu (one query row a block) and
//! kernels/attention_rows.cu (many query rows a block, scores in scratch memory).

use super::super::kernels::{HeadDims, Kernel};
use super::super::params::{AttentionFlashParams, AttentionParams, AttentionSplitParams};
use super::super::record::Compiled;
use super::super::{err, CudaExecutor};
use crate::exec::{KvId, Op};
use crate::Result;

/// Largest head dimension of `attention_rows_*` (attention_rows.cu).
const ATTENTION_ROWS_MAX_DIM: usize = 256;
/// Query rows a block of `attention_rows` (`ATR_Q`).
const ATTENTION_ROWS_Q: usize = 16;
/// Slots at the start of the attention scratch that hold the split kernel's counters (one
/// per block row of its grid; zeroed when the scratch is made, left at zero by each launch).
pub(in super::super) const SPLIT_COUNTERS: usize = 4096;
/// Most query rows of a step that takes the split kernel (decode; a few sequences).
const SPLIT_MAX_ROWS: usize = 4;
/// Most chunks a (row, KV head) is split into (`AS_MAX_SPLIT` in kernels/attention_split.cu,
/// whose combination keeps a weight per chunk in shared memory: the two must agree).
const SPLIT_MAX: usize = 64;
/// M-rows (query position × head) a block of `attention_flash` (`FA_M`), and the most query
/// heads of one KV head it takes.
const FLASH_M: usize = 64;
const FLASH_MAX_HEADS: usize = 8;
/// Most chunks the flash kernel splits a block's keys into.
const FLASH_SPLIT_MAX: usize = 16;

/// How `attention_flash_*` runs an attention op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in super::super) struct FlashPlan {
    dims: HeadDims,
    /// Query heads of one KV head a block (the KV head's group in ⌈G / 8⌉ even parts).
    heads: usize,
    grid: (u32, u32),
    /// Chunks of the keys (the grid's z; each block derives its own from the valid length).
    n_split: usize,
}

impl FlashPlan {
    /// The flash kernel's plan for `rows` query rows of up to `seqs` sequences (a block takes
    /// rows of one sequence: ⌈rows / positions a block⌉ + seqs − 1 block columns, the surplus
    /// returning at once): heads of 64, 128 or 256 values, whole
    /// groups; the keys split so that a grid smaller than the device gets about a block a
    /// multiprocessor (`split` instead, if given; never where the grid has more blocks than
    /// there are counters). Measured on the H200 (8b, pp512, 256 blocks): splitting further
    /// only costs (d16384: 5,720 tok/s unsplit, 5,500 in three chunks); a step of a few rows
    /// deep in the cache would otherwise run on a handful of multiprocessors.
    pub(in super::super) fn new(
        rows: usize,
        seqs: usize,
        op: &Op,
        n_sm: usize,
        split: Option<usize>,
    ) -> Option<FlashPlan> {
        let Op::Attention { n_heads, n_kv_heads, head_dim, .. } = *op else { return None };
        if rows == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return None;
        }
        let dims = match head_dim {
            64 => HeadDims::D64,
            128 => HeadDims::D128,
            256 => HeadDims::D256,
            _ => return None,
        };
        let group = n_heads / n_kv_heads;
        let n_groups = group.div_ceil(FLASH_MAX_HEADS);
        let heads = group.div_ceil(n_groups);
        let grid = (rows.div_ceil(FLASH_M / heads) + seqs.clamp(1, rows) - 1, n_kv_heads * n_groups);
        let blocks = grid.0 * grid.1;
        let n_split = if blocks > SPLIT_COUNTERS {
            1
        } else {
            split.unwrap_or(n_sm.max(1).div_ceil(blocks)).clamp(1, FLASH_SPLIT_MAX)
        };
        let grid = (u32::try_from(grid.0).ok()?, u32::try_from(grid.1).ok()?);
        Some(FlashPlan { dims, heads, grid, n_split })
    }

    /// Floats of scratch after the counters: with chunks, rows · heads · chunks outputs and
    /// as many (max, sum) pairs.
    pub(in super::super) fn scratch(&self, rows: usize, op: &Op) -> usize {
        let Op::Attention { n_heads, head_dim, .. } = *op else { return 0 };
        if self.n_split == 1 {
            return 0;
        }
        rows * n_heads * self.n_split * (head_dim + 2)
    }
}

/// How `attention_split_*` runs an attention op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in super::super) struct SplitPlan {
    kernel: Kernel,
    /// Chunks of the keys (the grid's x): each block derives its own from the valid length.
    n_split: usize,
    /// Block rows: (row, KV head, head group).
    blocks_y: usize,
}

impl SplitPlan {
    /// The split kernel's plan for `rows` query rows, if it takes them: heads of 64, 128 or
    /// 256 values, at most `SPLIT_MAX_ROWS` rows; about `target` blocks in all (two a
    /// multiprocessor). `mma`: heads of 64 and 128 take the tensor-core build
    /// (attention_decode.cu), same grid and scratch.
    pub(in super::super) fn new(rows: usize, op: &Op, target: usize, mma: bool) -> Option<SplitPlan> {
        let Op::Attention { n_heads, n_kv_heads, head_dim, .. } = *op else { return None };
        if rows == 0 || rows > SPLIT_MAX_ROWS || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return None;
        }
        let dims = match head_dim {
            64 => HeadDims::D64,
            128 => HeadDims::D128,
            256 => HeadDims::D256,
            _ => return None,
        };
        let group = n_heads / n_kv_heads;
        let heads = dims.split_group(group);
        let blocks_y = rows * n_kv_heads * group.div_ceil(usize::from(heads));
        if blocks_y > SPLIT_COUNTERS {
            return None;
        }
        let n_split = target.max(1).div_ceil(blocks_y).clamp(1, SPLIT_MAX);
        let kernel = if mma && dims != HeadDims::D256 {
            Kernel::AttentionDecode { dims, heads }
        } else {
            Kernel::AttentionSplit { dims, heads }
        };
        Some(SplitPlan { kernel, n_split, blocks_y })
    }

    /// Floats of scratch after the counters: rows · heads · chunks outputs, and as many
    /// (max, sum) pairs.
    pub(in super::super) fn scratch(&self, rows: usize, op: &Op) -> usize {
        let Op::Attention { n_heads, head_dim, .. } = *op else { return 0 };
        rows * n_heads * self.n_split * (head_dim + 2)
    }
}

impl CudaExecutor {
    /// The split kernel's plan for attention op `op` of `rows` rows, unless switched off
    /// (`WICK_CUDA_SPLIT=0`).
    pub(in super::super) fn split_plan(&self, rows: usize, op: &Op) -> Option<SplitPlan> {
        if !self.split_attention {
            return None;
        }
        SplitPlan::new(rows, op, self.split_per_sm * self.n_sm, self.decode_mma)
    }

    /// The flash kernel's plan for attention op `op` of `rows` rows of up to `seqs` sequences
    /// (more rows than the split kernel takes), on sm_80 and later unless switched off
    /// (`WICK_CUDA_FLASH=0`).
    pub(in super::super) fn flash_plan(&self, rows: usize, seqs: usize, op: &Op) -> Option<FlashPlan> {
        if !self.flash || rows <= 1 || self.split_plan(rows, op).is_some() {
            return None;
        }
        FlashPlan::new(rows, seqs, op, self.n_sm, self.flash_split)
    }

    /// Floats of attention scratch after the split counters that op `op` needs for `rows`
    /// query rows (of up to `seqs` sequences, every row its own) over a cache of `n_ctx`
    /// positions: the split kernel's partials, the flash kernel's (when it splits the keys),
    /// n_ctx scores per (row, head) for the older kernels. Partials and scores are indexed by
    /// row, so several sequences need no more than one sequence of as many rows.
    pub(in super::super) fn attention_scratch(
        &self,
        rows: usize,
        seqs: usize,
        op: &Op,
        n_ctx: usize,
    ) -> usize {
        let Op::Attention { n_heads, .. } = *op else { return 0 };
        if let Some(plan) = self.split_plan(rows, op) {
            return plan.scratch(rows, op);
        }
        if let Some(plan) = self.flash_plan(rows, seqs, op) {
            return plan.scratch(rows, op);
        }
        n_heads * rows * n_ctx
    }

    /// Causal attention of the query rows of attention op `op` over cache `kv`.
    pub(in super::super) fn attention(&self, c: &Compiled, kv: KvId, op: &Op) -> Result<()> {
        let Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } = *op
        else {
            return Err(err("not an attention op"));
        };
        let cache = self.kv(kv)?;
        let l = cache.layers.get(layer).ok_or_else(|| err("KV layer out of range"))?;
        let scratch = self.scores.as_ref().ok_or_else(|| err("no attention scratch"))?.0.ptr;
        let after_counters = scratch + 4 * SPLIT_COUNTERS as u64;
        let rows = c.g.rows(q);
        if rows != c.g.n_tokens || c.g.rows(dst) != rows {
            return Err(err("attention: queries and outputs must have a row per token"));
        }
        let tstride = c.table_stride()?;
        let window = window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
        let softcap = softcap.unwrap_or(0.0);
        let int = |n: usize, what: &str| {
            i32::try_from(n).map_err(|_| err(format!("attention: {what} out of range")))
        };
        if let Some(plan) = self.split_plan(rows, op) {
            let p = AttentionSplitParams {
                q: c.act(q),
                dst: c.act(dst),
                kc: l.k.ptr,
                vc: l.v.ptr,
                part: after_counters,
                counters: scratch,
                pos: c.positions(),
                seq: c.seq_of(),
                tables: c.tables(),
                n_heads: int(n_heads, "heads")?,
                n_kv_heads: int(n_kv_heads, "KV heads")?,
                k_dim: int(l.k_dim, "key width")?,
                v_dim: int(l.v_dim, "value width")?,
                scale,
                window,
                softcap,
                n_split: int(plan.n_split, "chunks")?,
                part_rows: int(rows * n_heads * plan.n_split, "scratch rows")?,
                tstride,
            };
            return self.launch(plan.kernel, (plan.n_split as u32, plan.blocks_y as u32), 128, &p);
        }
        if let Some(plan) = self.flash_plan(rows, c.g.n_seqs, op) {
            let p = AttentionFlashParams {
                q: c.act(q),
                dst: c.act(dst),
                kc: l.k.ptr,
                vc: l.v.ptr,
                part: after_counters,
                counters: scratch,
                pos: c.positions(),
                seq_start: c.seq_start(),
                tables: c.tables(),
                n_heads: int(n_heads, "heads")?,
                n_kv_heads: int(n_kv_heads, "KV heads")?,
                k_dim: int(l.k_dim, "key width")?,
                v_dim: int(l.v_dim, "value width")?,
                scale,
                window,
                softcap,
                n_rows: int(rows, "rows")?,
                gb: int(plan.heads, "heads a block")?,
                n_split: int(plan.n_split, "chunks")?,
                part_rows: int(rows * n_heads * plan.n_split, "scratch rows")?,
                tstride,
                n_seqs: c.n_seqs(),
            };
            let (x, y) = plan.grid;
            return self.launch3(Kernel::AttentionFlash(plan.dims), (x, y, plan.n_split as u32), 128, &p);
        }
        let p = AttentionParams {
            q: c.act(q),
            dst: c.act(dst),
            kc: l.k.ptr,
            vc: l.v.ptr,
            scores: after_counters,
            pos: c.positions(),
            seq: c.seq_of(),
            seq_start: c.seq_start(),
            tables: c.tables(),
            n_ctx: int(cache.n_ctx, "context")?,
            n_heads: int(n_heads, "heads")?,
            n_kv_heads: int(n_kv_heads, "KV heads")?,
            head_dim: int(head_dim, "head size")?,
            k_dim: int(l.k_dim, "key width")?,
            v_dim: int(l.v_dim, "value width")?,
            scale,
            window,
            softcap,
            n_rows: int(rows, "rows")?,
            tstride,
            n_seqs: c.n_seqs(),
        };
        if rows > 1 && head_dim <= ATTENTION_ROWS_MAX_DIM {
            // Each key and value row read once per ATTENTION_ROWS_Q queries; a block's rows of
            // one sequence (tiles counted per sequence, the surplus returning at once).
            let tiles = rows.div_ceil(ATTENTION_ROWS_Q) + c.g.n_seqs.clamp(1, rows) - 1;
            let grid = (tiles as u32, n_heads as u32);
            return self.launch(Kernel::AttentionRows(HeadDims::fitting(head_dim)), grid, 128, &p);
        }
        self.launch(Kernel::Attention, ((rows * n_heads) as u32, 1), 128, &p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ActId;

    fn op(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> Op {
        let (q, dst) = (ActId(0), ActId(1));
        Op::Attention {
            layer: 0,
            q,
            dst,
            n_heads,
            n_kv_heads,
            head_dim,
            scale: 1.0,
            window: None,
            softcap: None,
        }
    }

    /// The split kernel's plans: head groups rounded up to the kernels built, about two blocks
    /// a multiprocessor, other shapes left to the older kernels.
    #[test]
    fn the_kernel_keeps_a_weight_for_every_chunk() {
        let source = include_str!("../kernels/attention_split.cu");
        assert!(source.contains(&format!("#define AS_MAX_SPLIT {SPLIT_MAX}\n")));
    }

    #[test]
    fn split_plans() {
        let plan = |rows, op: Op| SplitPlan::new(rows, &op, 2 * 132, false);
        let split = |dims, heads| Kernel::AttentionSplit { dims, heads };
        // The 8b shape: 32/8 heads of 128, decode: 8 block rows, 33 chunks.
        let p = plan(1, op(32, 8, 128)).unwrap();
        assert_eq!((p.kernel, p.n_split, p.blocks_y), (split(HeadDims::D128, 4), 33, 8));
        assert_eq!(p.scratch(1, &op(32, 8, 128)), 32 * 33 * 130);
        // A group of 7 takes the 8-head kernel; 8 heads of 256 two blocks of 4.
        assert_eq!(plan(1, op(28, 4, 128)).unwrap().kernel, split(HeadDims::D128, 8));
        let p = plan(2, op(16, 2, 256)).unwrap();
        assert_eq!((p.kernel, p.blocks_y), (split(HeadDims::D256, 4), 2 * 2 * 2));
        // One query head a KV head; many blocks already: one chunk.
        let p = plan(4, op(64, 64, 64)).unwrap();
        assert_eq!((p.kernel, p.n_split, p.blocks_y), (split(HeadDims::D64, 1), 2, 256));
        assert_eq!(plan(1, op(1024, 1024, 64)).unwrap().n_split, 1);
        // Not for the split kernel: other head sizes, prefill rows, uneven groups, too many
        // block rows for the counters.
        assert!(plan(1, op(32, 8, 80)).is_none());
        assert!(plan(5, op(32, 8, 128)).is_none());
        assert!(plan(1, op(6, 4, 128)).is_none());
        assert!(plan(4, op(2048, 2048, 64)).is_none());
        assert!(plan(0, op(32, 8, 128)).is_none());
        // The tensor-core build: heads of 64 and 128, same grid; 256 stays with the split kernel.
        let mma = |rows, op: Op| SplitPlan::new(rows, &op, 2 * 132, true).unwrap();
        let decode = |dims, heads| Kernel::AttentionDecode { dims, heads };
        let p = mma(1, op(32, 8, 128));
        assert_eq!((p.kernel, p.n_split, p.blocks_y), (decode(HeadDims::D128, 4), 33, 8));
        assert_eq!(mma(1, op(32, 8, 64)).kernel, decode(HeadDims::D64, 4));
        assert_eq!(mma(1, op(16, 2, 256)).kernel, split(HeadDims::D256, 4));
    }

    /// The flash kernel's plans: whole head groups of at most 8 (larger ones in even parts),
    /// 64 M-rows a block, heads of 64 and 128 only.
    #[test]
    fn flash_plans() {
        let plan = |rows, op: Op| FlashPlan::new(rows, 1, &op, 132, None).map(|p| (p.dims, p.heads, p.grid));
        // The 8b shape, 512 rows: 4 heads a block, 16 positions, 32 × 8 blocks.
        assert_eq!(plan(512, op(32, 8, 128)), Some((HeadDims::D128, 4, (32, 8))));
        // SmolLM2 (9/3 heads of 64): 3 heads, 21 positions a block.
        assert_eq!(plan(100, op(9, 3, 64)), Some((HeadDims::D64, 3, (5, 3))));
        // Groups of 7 (Qwen) in one block; 12 in two of 6; 16 in two of 8; MHA one head.
        assert_eq!(plan(9, op(28, 4, 128)).map(|p| (p.1, p.2)), Some((7, (1, 4))));
        assert_eq!(plan(64, op(12, 1, 128)).map(|p| (p.1, p.2)), Some((6, (7, 2))));
        assert_eq!(plan(64, op(16, 1, 64)).map(|p| (p.1, p.2)), Some((8, (8, 2))));
        assert_eq!(plan(65, op(4, 4, 64)).map(|p| (p.1, p.2)), Some((1, (2, 4))));
        // Chunks of the keys: about a block a multiprocessor, at most 16; none where the grid
        // has more blocks than counters.
        let split = |rows, op: Op, force| FlashPlan::new(rows, 1, &op, 132, force).map(|p| p.n_split);
        assert_eq!(split(512, op(32, 8, 128), None), Some(1));
        assert_eq!(split(64, op(32, 8, 128), None), Some(5));
        assert_eq!(split(16, op(32, 8, 128), None), Some(16));
        assert_eq!(split(16, op(32, 8, 128), Some(2)), Some(2));
        assert_eq!(split(1 << 15, op(32, 8, 128), Some(4)), Some(1));
        let p = FlashPlan::new(64, 1, &op(32, 8, 128), 132, None).unwrap();
        assert_eq!(p.scratch(64, &op(32, 8, 128)), 64 * 32 * 5 * 130);
        assert_eq!(
            FlashPlan::new(512, 1, &op(32, 8, 128), 132, None).unwrap().scratch(512, &op(32, 8, 128)),
            0
        );
        // Several sequences: a block column more per sequence after the first (a block's rows
        // are one sequence's), never more sequences than rows.
        let seqs = |rows, seqs| FlashPlan::new(rows, seqs, &op(32, 8, 128), 132, None).map(|p| p.grid);
        assert_eq!(seqs(40, 3), Some((3 + 2, 8)));
        assert_eq!(seqs(512, 4), Some((32 + 3, 8)));
        assert_eq!(seqs(2, 5), Some((1 + 1, 8)));
        // Gemma 3 (4/1 heads of 256).
        assert_eq!(plan(64, op(4, 1, 256)), Some((HeadDims::D256, 4, (4, 1))));
        assert!(plan(64, op(8, 2, 80)).is_none());
        assert!(plan(64, op(6, 4, 64)).is_none());
    }
}
