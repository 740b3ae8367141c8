//! Launcher of kernels/sampling.cu: the argmax of rows of logits (when the logits' product
//! did not keep it, see `Step::MatVec::argmax`).

use super::super::params::ArgmaxParams;
use super::super::{kernels::Kernel, CudaExecutor};
use crate::Result;

impl CudaExecutor {
    /// out[i] = the index of the largest of the `n` floats of row i at device address `x`,
    /// for `rows` consecutive rows (a block each); with `mask` (not 0), among the ids that row
    /// i's token mask allows (`mask_words(n)` words a row from device address `mask`).
    pub(in super::super) fn argmax(&self, x: u64, n: usize, rows: usize, mask: u64, out: u64) -> Result<()> {
        let p = ArgmaxParams { x, out, mask, n: n as i32 };
        self.launch(Kernel::Argmax, (rows.max(1) as u32, 1), 1024, &p)
    }
}
