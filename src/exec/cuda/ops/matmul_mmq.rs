//! Prefill (many-token) matrix products on the int8 tensor cores: the `mmq_*` kernels of
//! kernels/mmq.cu. The activations are converted to the split q8 layout of the decode kernels
//! (all rows at once), then one launch computes the product in tiles of 64 weight rows × 64
//! tokens (legacy types' products with enough tiles: 128 × 128, `mmq_T_l`). Used on sm_80 and
//! later for at least [`MMQ_MIN_ROWS`] token rows of the covered types, below the tokens from
//! which cuBLAS takes them on dequantized weights (ops/matmul_blas.rs), or at any count where
//! cuBLAS is absent; `WICK_CUDA_MMQ=0` turns it off (the dp4a kernels of matmul.cuh then run).
//! Products of up to [`MMQS_TOK`] tokens of Q4_K and Q6_K weights take the `mmqs_*` kernels of
//! kernels/mmq_small.cu instead (weight fragments from global memory; `WICK_CUDA_MMQS=0` off),
//! from the rows the `mmvn` kernels leave (7, [`CudaExecutor::mmvn_limit`]).

use super::super::kernels::{Block, Kernel, MMQ_LARGE_TYPES, MMQ_SMALL_TYPES};
use super::super::params::MmqParams;
use super::super::record::Compiled;
use super::super::{drv, err, CudaExecutor};
use crate::exec::{ActId, Op, WeightId};
use crate::quant::{self, GgmlType};
use crate::Result;

/// Fewest token rows for the tensor-core kernels: a tile takes 32 or 64 tokens, and below this
/// the dp4a kernels waste less (`mmvn_T`, ops/matmul.rs, take 2 to 15 rows).
const MMQ_MIN_ROWS: usize = 16;
/// Weight rows and tokens of one block's tile (`MMQ_BM` in mmq.cu; tokens 64, or 32 in `_n32`).
const MMQ_BM: usize = 64;
/// Weight rows and tokens of the tiles of the `mmq_T_l` kernels.
const MMQ_LARGE: usize = 128;
const MMQ_BN: usize = 64;
/// Values of k a block stages at a time (`MMQ_KS` in mmq.cu): split-K runs are whole chunks.
const MMQ_KS: usize = 256;
/// Below this many 64 × 64 tiles (about one and a half per SM of an H100), the 32-token tiles
/// of the `_n32` kernels are used instead (the K and V products of 1B/8B models).
const MMQ_SMALL_GRID: usize = 200;
/// Threads a block (`MMQ_THREADS`).
const MMQ_THREADS: u32 = 128;
/// Most token rows of the `mmqs_T` kernels (`MMQS_TOK` in mmq_small.cu).
const MMQS_TOK: usize = 32;

/// The tensor-core kernels' block type for weights of type `t`, if they cover it.
fn kernel(t: GgmlType) -> Option<Block> {
    Block::of(t)
}

/// Whether the tensor-core kernels may run on a device of compute capability `arch`: the
/// int8 `mma.sync` shapes they use need sm_80; `WICK_CUDA_MMQ=0` turns them off.
pub(in super::super) fn enabled(arch: (i32, i32)) -> bool {
    arch.0 >= 8 && std::env::var("WICK_CUDA_MMQ").as_deref() != Ok("0")
}

/// Most runs of a split-K product (`mmq_reduce` adds them).
const MMQ_MAX_SPLIT: usize = 8;

/// Bytes of the split q8 activations of `rows` rows of `k` values: the quants, then at most
/// two floats per 32 values; rounded up to 256 (the split-K partials follow).
fn act_bytes(k: usize, rows: usize) -> usize {
    (rows * k + rows * (k / 32) * 8).div_ceil(256) * 256
}

/// The grid of the product of `n` weight rows of `k` values and `rows` token rows, for a
/// device that `fill` blocks fill (two a multiprocessor by default, [`CudaExecutor::mmq_fill`]):
/// (the 32-token tiles, blocks along n, along the tokens, runs along k). A product with fewer
/// tiles than `fill` is split along k into up to [`MMQ_MAX_SPLIT`] runs of whole `MMQ_KS`
/// chunks, so that the device fills (the tiles of a few tokens' products, e.g. the decode
/// steps of several sequences, walk all of k otherwise: a 4096 × 4096 product had 64 blocks
/// for 132 multiprocessors).
fn grid(n: usize, k: usize, rows: usize, fill: usize) -> (bool, usize, usize, usize) {
    // A decode step of several sequences (a tile's worth of tokens at most) is bound by its
    // weight loads' latency, so it aims for twice the blocks: on an H100 and an H200, decode of
    // 16 / 32 / 64 sequences of the 8b Q4_K_M ran 4-8% faster (kernels/mmq.cu, MMQ_LOADS), while
    // pp512 ran 1.7-1.9% slower with its 4096 × 4096 products split too.
    let fill = if rows <= MMQ_BN { 2 * fill } else { fill };
    let tiles64 = n.div_ceil(MMQ_BM) * rows.div_ceil(MMQ_BN);
    let n32 = tiles64 < MMQ_SMALL_GRID;
    let (gx, gy) = (n.div_ceil(MMQ_BM), rows.div_ceil(if n32 { MMQ_BN / 2 } else { MMQ_BN }));
    let chunks = k.div_ceil(MMQ_KS).max(1);
    let want = fill.div_ceil(gx * gy).clamp(1, MMQ_MAX_SPLIT.min(chunks));
    // Equal runs of whole chunks, none empty.
    let splits = chunks.div_ceil(chunks.div_ceil(want));
    (n32, gx, gy, splits)
}

/// Whether a product of `n` weight rows of type `t` and `rows` tokens takes the 128 × 128
/// tiles (`mmq_T_l`): where the type has them and the product has at least `min_tiles`
/// hundredths of them.
fn takes_large(t: Block, n: usize, rows: usize, min_tiles: usize) -> bool {
    MMQ_LARGE_TYPES.contains(&t) && 100 * n.div_ceil(MMQ_LARGE) * rows.div_ceil(MMQ_LARGE) >= min_tiles
}

/// Bytes of scratch the tensor-core path needs for `rows` rows of `k` values and `n` outputs:
/// the activations, then the split-K partial sums when the product is split.
pub(super) fn qact_bytes(k: usize, n: usize, rows: usize, fill: usize) -> usize {
    let (_, _, _, splits) = grid(n, k, rows, fill);
    act_bytes(k, rows) + if splits > 1 { 4 * splits * rows * n } else { 0 }
}

impl CudaExecutor {
    /// The most rows a product of `t` weights takes through the `mmvn_T` kernels: types with a
    /// `mmqs_T` kernel take that from `mmqs_from` rows (7: there the tensor cores overtake
    /// `mmvn`, whose launches of 8 rows also read the weights twice from 9).
    pub(in super::super) fn mmvn_limit(&self, t: GgmlType) -> usize {
        if self.mmq && kernel(t).is_some_and(|b| self.mmqs_type(b)) {
            self.mmvn_max_rows.min(self.mmqs_from - 1)
        } else {
            self.mmvn_max_rows
        }
    }

    /// Whether products of `t` weights take the `mmqs_T` kernels (for up to `MMQS_TOK` rows).
    fn mmqs_type(&self, t: Block) -> bool {
        self.mmq_small && MMQ_SMALL_TYPES.contains(&t)
    }

    /// The blocks the split-K choice fills the device with ([`grid`]): `mmq_fill` a
    /// multiprocessor; 0 (no split) with `WICK_CUDA_MMQ_SPLIT=0`.
    pub(in super::super) fn mmq_fill(&self) -> usize {
        if self.mmq_split {
            self.n_sm * self.mmq_fill
        } else {
            0
        }
    }

    /// Enqueue `dst = x · wᵀ (+ bias)` on the tensor cores. Ok(false), with nothing enqueued,
    /// when this path does not apply (off, too few rows, a type it does not cover).
    pub(in super::super) fn matmul_mmq(
        &self,
        c: &Compiled,
        op: &Op,
        w: WeightId,
        x: ActId,
        dst: ActId,
        bias: Option<WeightId>,
    ) -> Result<bool> {
        let wt = self.weight(w)?;
        let (k, n, rows) = (wt.k(), wt.n_rows(), c.g.rows(x));
        let Some(t) = kernel(wt.dtype) else { return Ok(false) };
        // A type with a `mmqs_T` kernel takes any rows `mmvn` leaves (`mmvn_limit`).
        let small_type = self.mmqs_type(t);
        let min_rows = if small_type { 2 } else { MMQ_MIN_ROWS };
        if !self.mmq || rows < min_rows || k % 32 != 0 {
            return Ok(false);
        }
        let qs = c.qact.ptr;
        let ds = qs + (rows * k) as u64;
        // The op before this one took the same input to the same q8 format on this path (the
        // Q, K, V and the gate, up products): its conversion is still in the scratch.
        let before = c.g.ops.iter().position(|o| std::ptr::eq(o, op)).and_then(|i| i.checked_sub(1));
        let reuse = match before.map(|i| &c.g.ops[i]) {
            Some(Op::MatMul { w: pw, x: px, dst: pd, .. }) if *px == x && *pd != x => {
                self.weight(*pw).is_ok_and(|p| {
                    kernel(p.dtype).is_some()
                        && quant::vec_dot_type(p.dtype) == quant::vec_dot_type(wt.dtype)
                        && !self.takes_deq(p, rows)
                })
            }
            _ => false,
        };
        let vt = quant::vec_dot_type(wt.dtype);
        if !reuse {
            self.quantize_split_at(vt, c.act(x), qs, ds, rows * k)?;
        }
        let (bias, btype) = self.bias_param(bias)?;
        // Products too small to give the device a few blocks per SM take 32-token tiles, and
        // are split along k.
        let (n32, gx, gy, splits) = grid(n, k, rows, self.mmq_fill());
        // A few tokens of a type with a `mmqs_T` kernel: weight fragments straight from global
        // memory (mmq_small.cu), on the same grid along n and k.
        let small = small_type && rows <= MMQS_TOK;
        // Products with enough 128 × 128 tiles to fill the device take them where the type has
        // them (legacy types): half the shared-memory loads a tensor-core product
        // (kernels/mmq.cu, `mmq_T_l`).
        let large = !small && !n32 && splits == 1 && takes_large(t, n, rows, self.mmq_large * self.n_sm);
        let (kernel, gx, gy) = if small {
            (Kernel::MmqSmall { t }, gx, 1)
        } else if large {
            (Kernel::MmqLarge { t }, n.div_ceil(MMQ_LARGE), rows.div_ceil(MMQ_LARGE))
        } else {
            (Kernel::Mmq { t, n32 }, gx, gy)
        };
        let p = MmqParams {
            w: wt.buf.ptr,
            aq: qs,
            ad: ds,
            out: c.act(dst),
            bias,
            part: qs + act_bytes(k, rows) as u64,
            btype,
            k: k as i32,
            n: n as i32,
            rows: rows as i32,
            splits: splits as i32,
        };
        let block = |v: usize| u32::try_from(v).map_err(|_| err("product too large"));
        self.launch3(kernel, (block(gx)?, block(gy)?, splits as u32), MMQ_THREADS, &p)?;
        if splits > 1 {
            self.launch(Kernel::MmqReduce, (block((rows * n).div_ceil(256))?, 1), 256, &p)?;
        }
        if self.debug {
            self.stream.synchronize().map_err(drv("debug"))?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small products are split along k into equal, non-empty runs that fill the device;
    /// large ones are not split.
    #[test]
    fn split_k_grids() {
        // A decode step of 4 sequences through a 4096 × 4096 product on 132 multiprocessors:
        // 64 blocks, 16 chunks of k: 8 runs of 2 chunks (a few rows aim for twice the blocks).
        assert_eq!(grid(4096, 4096, 4, 264), (true, 64, 1, 8));
        // A prefill chunk of 512 tokens through the Q product: 512 blocks, no split.
        assert_eq!(grid(4096, 4096, 512, 264), (false, 64, 8, 1));
        // The K product (1,024 rows): 16 blocks, 8 runs of 2 chunks.
        assert_eq!(grid(1024, 4096, 16, 264), (true, 16, 1, 8));
        // A prefill chunk of 512 tokens through 14336 rows: 1,792 tiles, no split.
        assert_eq!(grid(14336, 4096, 512, 264), (false, 224, 8, 1));
        // No split asked (WICK_CUDA_MMQ_SPLIT=0), or a single chunk of k.
        assert_eq!(grid(4096, 4096, 4, 0).3, 1);
        assert_eq!(grid(64, 256, 4, 264).3, 1);
        for (n, k, rows) in [(4096, 14336, 16), (14336, 4096, 64), (576, 1536, 20), (300, 2048, 20)] {
            let (_, gx, gy, splits) = grid(n, k, rows, 264);
            let chunks = k.div_ceil(MMQ_KS);
            let per = chunks.div_ceil(splits);
            assert!(splits <= MMQ_MAX_SPLIT && (splits - 1) * per < chunks, "{n} {k} {rows}: {splits}");
            assert!(gx * gy * splits >= 264 || splits == MMQ_MAX_SPLIT.min(chunks), "{n} {k} {rows}");
        }
        assert!(qact_bytes(4096, 4096, 4, 264) >= 4 * 4 * 4096 * 4 + 4 * 4096);
    }

    /// The 128 × 128 tiles from one and a half a multiprocessor of an H200's 132, legacy types.
    #[test]
    fn large_tiles_where_they_fill_the_device() {
        let min = 150 * 132;
        // 8b, a 1,024-token chunk: every product (the 4,096-row ones have 256 tiles); a
        // 512-token chunk: the gate and up products (448), not the 4,096-row ones (128).
        assert!(takes_large(Block::Q8_0, 4096, 1024, min));
        assert!(takes_large(Block::Q4_0, 14336, 512, min));
        assert!(!takes_large(Block::Q8_0, 4096, 512, min));
        assert!(!takes_large(Block::Q4K, 14336, 2048, min));
    }
}
