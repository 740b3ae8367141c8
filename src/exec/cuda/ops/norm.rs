//! Launchers of kernels/norm.cu: RMSNorm, and RMSNorm fused with the q8 conversion for the
//! next matrix product (a step of the decode plan).

use super::super::params::{RmsNormParams, RmsNormQ8Params};
use super::super::record::Compiled;
use super::super::{err, kernels::Kernel, CudaExecutor};
use crate::exec::fuse::ActQuant;
use crate::exec::{ActId, Op, WeightId};
use crate::Result;

impl CudaExecutor {
    /// dst = RMSNorm of x over groups of `group` values, times `weight`.
    pub(in super::super) fn rms_norm(
        &self,
        c: &Compiled,
        x: ActId,
        weight: WeightId,
        dst: ActId,
        group: usize,
        eps: f32,
    ) -> Result<()> {
        let w = self.weight(weight)?;
        let groups = c.g.rows(x) * c.g.cols(x) / group;
        let p = RmsNormParams {
            x: c.act(x),
            dst: c.act(dst),
            w: w.buf.ptr,
            wtype: w.dtype.id() as i32,
            group: group as i32,
            eps,
        };
        self.launch(Kernel::RmsNorm, (groups as u32, 1), 128, &p)
    }

    /// RMSNorm op `op` (one whole row), its output also converted to `kind` in the q8 scratch.
    pub(in super::super) fn rms_norm_quant(&self, c: &Compiled, op: usize, kind: ActQuant) -> Result<()> {
        let Op::RmsNorm { x, weight, dst, eps, .. } = c.g.ops[op] else {
            return Err(err("decode plan: not a norm"));
        };
        let w = self.weight(weight)?;
        let (k, rows) = (c.g.cols(x), c.g.rows(x));
        let p = RmsNormQ8Params {
            x: c.act(x),
            dst: c.act(dst),
            w: w.buf.ptr,
            qs: c.qact.ptr,
            ds: c.scales_rows(k, rows),
            wtype: w.dtype.id() as i32,
            k: k as i32,
            eps,
            kind: kind as i32,
        };
        self.launch(Kernel::RmsNormQ8, (k.div_ceil(256) as u32, rows as u32), 256, &p)
    }
}
