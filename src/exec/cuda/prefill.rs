//! Prefill (many-token) matrix products on the int8 tensor cores: the `mmq_*` kernels of
//! kernels/mmq.cu. The activations are converted to the split q8 layout of the decode kernels
//! (all rows at once), then one launch computes the product in tiles of 64 weight rows × 64
//! tokens. Used on sm_80 and later for at least [`MMQ_MIN_ROWS`] token rows of the covered
//! types; `WICK_CUDA_MMQ=0` turns it off (the dp4a kernels of matvec.cuh then run).

use super::{drv, err, ActId, Arg, Compiled, CudaExecutor, WeightId};
use crate::quant::{self, GgmlType};
use crate::Result;

/// Fewest token rows for the tensor-core kernels: a tile takes 64 tokens, and below this the
/// dp4a kernels (8 tokens a warp) waste less.
pub(super) const MMQ_MIN_ROWS: usize = 16;
/// Weight rows and tokens of one block's tile (`MMQ_BM`, `MMQ_BN` in mmq.cu).
const MMQ_BM: usize = 64;
const MMQ_BN: usize = 64;
/// Threads a block (`MMQ_THREADS`).
const MMQ_THREADS: u32 = 128;

/// The tensor-core kernel for weights of type `t`, if there is one.
fn kernel(t: GgmlType) -> Option<&'static str> {
    Some(match t {
        GgmlType::Q4_0 => "mmq_q4_0",
        GgmlType::Q4_1 => "mmq_q4_1",
        GgmlType::Q5_0 => "mmq_q5_0",
        GgmlType::Q5_1 => "mmq_q5_1",
        GgmlType::Q8_0 => "mmq_q8_0",
        GgmlType::Q4_K => "mmq_q4_k",
        GgmlType::Q5_K => "mmq_q5_k",
        GgmlType::Q6_K => "mmq_q6_k",
        _ => return None,
    })
}

/// Whether the tensor-core kernels may run on a device of compute capability `arch`: the
/// int8 `mma.sync` shapes they use need sm_80; `WICK_CUDA_MMQ=0` turns them off.
pub(super) fn enabled(arch: (i32, i32)) -> bool {
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
    pub(super) fn matmul_mmq(
        &self,
        c: &Compiled,
        w: WeightId,
        x: ActId,
        dst: ActId,
        bias: Option<WeightId>,
    ) -> Result<bool> {
        let wt = self.weight(w)?;
        let (k, n, rows) = (wt.k(), wt.n_rows(), c.g.rows(x));
        let Some(name) = kernel(wt.dtype) else { return Ok(false) };
        if !self.mmq || rows < MMQ_MIN_ROWS || k % 32 != 0 {
            return Ok(false);
        }
        let act = |a: ActId| c.acts[a.0 as usize].ptr;
        let qs = c.qact.ptr;
        let ds = qs + (rows * k) as u64;
        let blocks = |per: usize| u32::try_from(rows * k / per).map_err(|_| err("activation too large"));
        match quant::vec_dot_type(wt.dtype) {
            GgmlType::Q8_K => {
                let args = [Arg::P(act(x)), Arg::P(qs), Arg::P(ds)];
                self.launch("quantize_q8ks", (blocks(256)?, 1), 256, &args)?;
            }
            vt => {
                let args = [Arg::P(act(x)), Arg::P(qs), Arg::P(ds), Arg::I((vt == GgmlType::Q8_1) as i32)];
                self.launch("quantize_q8s", (blocks(32)?, 1), 32, &args)?;
            }
        }
        let (bp, bt) = match bias {
            Some(b) => {
                let b = self.weight(b)?;
                (b.buf.ptr, b.dtype.id() as i32)
            }
            None => (0, 0),
        };
        let args = [
            Arg::P(wt.buf.ptr),
            Arg::P(qs),
            Arg::P(ds),
            Arg::P(act(dst)),
            Arg::P(bp),
            Arg::I(bt),
            Arg::I(k as i32),
            Arg::I(n as i32),
            Arg::I(rows as i32),
        ];
        let grid = (n.div_ceil(MMQ_BM) as u32, rows.div_ceil(MMQ_BN) as u32);
        self.launch(name, grid, MMQ_THREADS, &args)?;
        if self.debug {
            self.stream.synchronize().map_err(drv("debug"))?;
        }
        Ok(true)
    }
}
