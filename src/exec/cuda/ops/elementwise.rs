//! Launchers of kernels/elementwise.cu: embedding rows, gated activations, addition, and the
//! copy of the last row.

use super::super::params::{AddParams, CopyParams, EmbedParams, GatedActParams};
use super::super::record::Compiled;
use super::super::{kernels::Kernel, CudaExecutor};
use crate::exec::{ActId, Gate, WeightId};
use crate::Result;

/// Blocks of 256 threads covering `n` values (at least one).
pub(super) fn blocks_of_256(n: usize) -> u32 {
    n.div_ceil(256).max(1) as u32
}

impl CudaExecutor {
    /// dst row r = row (token r, word r of the step's inputs) of `table`, times `scale`.
    pub(in super::super) fn embed(
        &self,
        c: &Compiled,
        table: WeightId,
        dst: ActId,
        scale: f32,
    ) -> Result<()> {
        let t = self.weight(table)?;
        let cols = c.g.cols(dst);
        let p = EmbedParams {
            table: t.buf.ptr,
            n_rows: t.n_rows() as i64,
            tokens: c.tokens(),
            dst: c.act(dst),
            wtype: t.dtype.id() as i32,
            k: cols as i32,
            scale,
        };
        self.launch(Kernel::Embed, (c.g.rows(dst) as u32, blocks_of_256(cols)), 256, &p)
    }

    /// gate = act(gate) · up.
    pub(in super::super) fn gated_act(&self, c: &Compiled, gate: ActId, up: ActId, act: Gate) -> Result<()> {
        let n = c.g.rows(gate) * c.g.cols(gate);
        let p =
            GatedActParams { gate: c.act(gate), up: c.act(up), n: n as i64, act: (act == Gate::Gelu) as i32 };
        self.launch(Kernel::GatedAct, (blocks_of_256(n), 1), 256, &p)
    }

    /// dst = a + b.
    pub(in super::super) fn add(&self, c: &Compiled, a: ActId, b: ActId, dst: ActId) -> Result<()> {
        let n = c.g.rows(dst) * c.g.cols(dst);
        let p = AddParams { a: c.act(a), b: c.act(b), dst: c.act(dst), n: n as i64 };
        self.launch(Kernel::Add, (blocks_of_256(n), 1), 256, &p)
    }

    /// dst row s = the last row of sequence s in x (the step's `last` words; rows past the
    /// step's sequences repeat its last token's row).
    pub(in super::super) fn take_last(&self, c: &Compiled, x: ActId, dst: ActId) -> Result<()> {
        let cols = c.g.cols(x);
        let rows = c.g.rows(dst).min(c.g.n_seqs);
        let p = CopyParams { src: c.act(x), dst: c.act(dst), rows: c.last_rows(), n: cols as i64 };
        self.launch(Kernel::Copy, (rows as u32, blocks_of_256(cols)), 256, &p)
    }
}
