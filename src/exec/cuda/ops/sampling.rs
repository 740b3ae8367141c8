//! Launcher of kernels/sampling.cu: the argmax of a row of logits (when the logits' product
//! did not keep it, see `Step::MatVec::argmax`).

use super::super::params::ArgmaxParams;
use super::super::{kernels::Kernel, CudaExecutor};
use crate::Result;

impl CudaExecutor {
    /// out[0] = the index of the largest of the `n` floats at device address `x` (one block).
    pub(in super::super) fn argmax(&self, x: u64, n: usize, out: u64) -> Result<()> {
        let p = ArgmaxParams { x, out, n: n as i32 };
        self.launch(Kernel::Argmax, (1, 1), 1024, &p)
    }
}
