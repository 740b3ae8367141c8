//! Prefill (many-token) matrix products on the int8 tensor cores: the `mmq_*` kernels of
//! kernels/mmq.cu. The activations are converted to the split q8 layout of the decode kernels
//! (all rows at once), then one launch computes the product in tiles of 64 weight rows × 64
//! tokens. Used on sm_80 and later for at least [`MMQ_MIN_ROWS`] token rows of the covered
//! types; `WICK_CUDA_MMQ=0` turns it off (the dp4a kernels of matmul.cuh then run).

use super::super::kernels::{Block, Kernel};
use super::super::params::{MmqParams, QuantizeSplitParams};
use super::super::record::Compiled;
use super::super::{drv, err, CudaExecutor};
use crate::exec::{ActId, Op, WeightId};
use crate::quant::{self, GgmlType};
use crate::Result;

/// Fewest token rows for the tensor-core kernels: a tile takes 64 tokens, and below this the
/// dp4a kernels (8 tokens a warp) waste less.
const MMQ_MIN_ROWS: usize = 16;
/// Weight rows and tokens of one block's tile (`MMQ_BM` in mmq.cu; tokens 64, or 32 in `_n32`).
const MMQ_BM: usize = 64;
const MMQ_BN: usize = 64;
/// Below this many 64 × 64 tiles (about one and a half per SM of an H100), the 32-token tiles
/// of the `_n32` kernels are used instead (the K and V products of 1B/8B models).
const MMQ_SMALL_GRID: usize = 200;
/// Threads a block (`MMQ_THREADS`).
const MMQ_THREADS: u32 = 128;

/// The tensor-core kernels' block type for weights of type `t`, if they cover it.
fn kernel(t: GgmlType) -> Option<Block> {
    Block::of(t)
}

/// Whether the tensor-core kernels may run on a device of compute capability `arch`: the
/// int8 `mma.sync` shapes they use need sm_80; `WICK_CUDA_MMQ=0` turns them off.
pub(in super::super) fn enabled(arch: (i32, i32)) -> bool {
    arch.0 >= 8 && std::env::var("WICK_CUDA_MMQ").as_deref() != Ok("0")
}

/// Bytes of q8 scratch the tensor-core path needs for `rows` rows of `k` values: the quants,
/// then at most two floats per 32 values.
pub(super) fn qact_bytes(k: usize, rows: usize) -> usize {
    rows * k + rows * (k / 32) * 8
}

impl CudaExecutor {
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
        if !self.mmq || rows < MMQ_MIN_ROWS || k % 32 != 0 {
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
                    kernel(p.dtype).is_some() && quant::vec_dot_type(p.dtype) == quant::vec_dot_type(wt.dtype)
                })
            }
            _ => false,
        };
        let blocks = |per: usize| u32::try_from(rows * k / per).map_err(|_| err("activation too large"));
        let vt = quant::vec_dot_type(wt.dtype);
        if !reuse {
            let p = QuantizeSplitParams { x: c.act(x), qs, ds, with_sum: (vt == GgmlType::Q8_1) as i32 };
            match vt {
                GgmlType::Q8_K => self.launch(Kernel::QuantizeQ8Ks, (blocks(256)?, 1), 256, &p)?,
                _ => self.launch(Kernel::QuantizeQ8s, (blocks(32)?, 1), 32, &p)?,
            }
        }
        let (bias, btype) = self.bias_param(bias)?;
        let p = MmqParams {
            w: wt.buf.ptr,
            aq: qs,
            ad: ds,
            out: c.act(dst),
            bias,
            btype,
            k: k as i32,
            n: n as i32,
            rows: rows as i32,
        };
        // Products too small to give the device a few blocks per SM take 32-token tiles.
        let tiles64 = n.div_ceil(MMQ_BM) * rows.div_ceil(MMQ_BN);
        if tiles64 < MMQ_SMALL_GRID {
            let grid = (n.div_ceil(MMQ_BM) as u32, rows.div_ceil(MMQ_BN / 2) as u32);
            self.launch(Kernel::Mmq { t, n32: true }, grid, MMQ_THREADS, &p)?;
        } else {
            let grid = (n.div_ceil(MMQ_BM) as u32, rows.div_ceil(MMQ_BN) as u32);
            self.launch(Kernel::Mmq { t, n32: false }, grid, MMQ_THREADS, &p)?;
        }
        if self.debug {
            self.stream.synchronize().map_err(drv("debug"))?;
        }
        Ok(true)
    }
}
