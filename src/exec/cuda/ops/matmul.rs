//! Launchers of the dp4a matrix products and the q8 conversion of their input
//! (kernels/matmul_*.cu): a whole MatMul op (convert, then `matvec_*` over 1 or 8 token rows a
//! warp, or `mmvn_*` for the few rows of a decode step of several sequences), and the decode plan's steps: a conversion into the split q8 scratch, and the decode
//! products (`mmv_*`, `mmv2_*` gate and up, `mmv3_*` three matrices).

use super::super::device::Weight;
use super::super::kernels::{Block, Kernel, MatVecType, MmvForm};
use super::super::params::{
    MatVecParams, Mmv2Params, Mmv3Params, MmvParams, QuantizeParams, QuantizeSplitParams, RoundF16Params,
};
use super::super::record::Compiled;
use super::super::{drv, err, layout, CudaExecutor};
use super::elementwise::blocks_of_256;
use crate::exec::fuse::ActQuant;
use crate::exec::{ActId, Gate, Op, WeightId};
use crate::quant::{self, GgmlType};
use crate::Result;

/// Outputs per block of the decode matrix kernels (`MMV_WARPS` in kernels/matmul.cuh).
const MMV_WARPS: usize = 4;

/// Bytes the matmul of `w` needs for its converted activations, `rows` rows.
pub(in super::super) fn qact_bytes(w: &Weight, rows: usize, mmq_fill: usize) -> Result<usize> {
    let vt = quant::vec_dot_type(w.dtype);
    let per_row = match vt {
        GgmlType::F16 | GgmlType::F32 => 4 * w.k() as u64,
        _ => vt.row_bytes(w.k() as u64)?,
    };
    // The decode kernels' split layout of all the rows: k bytes a row, then up to two floats
    // per 32 values.
    let split = (rows.max(1) * w.k()).div_ceil(16) * 16 + rows.max(1) * w.k() / 4;
    Ok((per_row as usize * rows).max(split).max(super::matmul_mmq::qact_bytes(
        w.k(),
        w.n_rows(),
        rows,
        mmq_fill,
    )))
}

/// The q8 format of the decode kernels (`mmv_*`) for weights of type `t`, None for float
/// weights (no decode kernel).
pub(in super::super) fn act_quant(t: GgmlType) -> Option<ActQuant> {
    layout::split(t)?;
    Some(match quant::vec_dot_type(t) {
        GgmlType::Q8_1 => ActQuant::Q8_1,
        GgmlType::Q8_K => ActQuant::Q8K,
        _ => ActQuant::Q8_0,
    })
}

impl CudaExecutor {
    /// The q8 format of `w`'s decode kernel, None for float weights.
    pub(in super::super) fn act_quant(&self, w: WeightId) -> Option<ActQuant> {
        act_quant(self.weights.get(w.0 as usize)?.dtype)
    }

    /// A product's optional bias as kernel parameters: its address and type id (0, 0: none).
    pub(super) fn bias_param(&self, bias: Option<WeightId>) -> Result<(u64, i32)> {
        match bias {
            Some(b) => {
                let b = self.weight(b)?;
                Ok((b.buf.ptr, b.dtype.id() as i32))
            }
            None => Ok((0, 0)),
        }
    }

    /// The decode kernel `form` for `t` on rows of `k` values (the `_o` build or not).
    fn mmv(&self, t: GgmlType, form: MmvForm, k: usize) -> Result<Kernel> {
        let b = Block::of(t).ok_or_else(|| err(format!("no decode kernel for {t}")))?;
        Ok(Kernel::Mmv { t: b, form, occ: false }.decode_variant(k, self.occ))
    }

    /// The decode kernel `form` of several rows (`mmvn*_T`) for `t`.
    fn mmv_rows(&self, t: GgmlType, form: MmvForm) -> Result<Kernel> {
        let b = Block::of(t).ok_or_else(|| err(format!("no decode kernel for {t}")))?;
        Ok(Kernel::MmvRows { t: b, form })
    }

    /// Enqueue MatMul op `op`: dst = x · wᵀ (+ bias), any number of rows.
    pub(in super::super) fn matmul(
        &self,
        c: &Compiled,
        op: &Op,
        w: WeightId,
        x: ActId,
        dst: ActId,
        bias: Option<WeightId>,
    ) -> Result<()> {
        if self.matmul_rows(c, w, x, dst, bias)?
            || self.matmul_blas(c, w, x, dst, bias)?
            || self.matmul_mmq(c, op, w, x, dst, bias)?
        {
            return Ok(());
        }
        let wt = self.weight(w)?;
        let (k, n, rows) = (wt.k(), wt.n_rows(), c.g.rows(x));
        let vt = quant::vec_dot_type(wt.dtype);
        let a = match vt {
            GgmlType::Q8_0 | GgmlType::Q8_1 => {
                let with_sum = (vt == GgmlType::Q8_1) as i32;
                let p = QuantizeParams { x: c.act(x), out: c.qact.ptr, k: k as i32, with_sum };
                self.launch(Kernel::QuantizeQ8_0, ((k / 32) as u32, rows as u32), 32, &p)?;
                c.qact.ptr
            }
            GgmlType::Q8_K => {
                let p = QuantizeParams { x: c.act(x), out: c.qact.ptr, k: k as i32, with_sum: 0 };
                self.launch(Kernel::QuantizeQ8K, ((k / 256) as u32, rows as u32), 256, &p)?;
                c.qact.ptr
            }
            GgmlType::F16 => {
                let p = RoundF16Params { x: c.act(x), out: c.qact.ptr, n: (rows * k) as i64 };
                self.launch(Kernel::RoundF16, (blocks_of_256(rows * k), 1), 256, &p)?;
                c.qact.ptr
            }
            _ => c.act(x),
        };
        if self.debug {
            self.stream.synchronize().map_err(drv("debug"))?;
            let q = self.stream.clone_dtoh(&c.qact.mem).map_err(drv("debug"))?;
            let xs = c.read(self, x)?;
            eprintln!("debug {}: x {:?}\n  qact {:?}", wt.name, &xs[..k.min(32)], &q[..q.len().min(36)]);
        }
        let t = MatVecType::of(wt.dtype).ok_or_else(|| err(format!("no matrix kernel for {}", wt.dtype)))?;
        let (bias, btype) = self.bias_param(bias)?;
        let p = MatVecParams {
            w: wt.buf.ptr,
            a,
            out: c.act(dst),
            bias,
            btype,
            k: k as i32,
            n: n as i32,
            rows: rows as i32,
        };
        // Prefill: each warp takes 8 token rows, so a weight block is read once per 8.
        if rows >= 4 {
            self.launch(
                Kernel::MatVec { t, r8: true },
                (n.div_ceil(4).max(1) as u32, rows.div_ceil(8) as u32),
                128,
                &p,
            )
        } else {
            self.launch(Kernel::MatVec { t, r8: false }, (n.div_ceil(4).max(1) as u32, rows as u32), 128, &p)
        }
    }

    /// Enqueue `dst = x · wᵀ (+ bias)` for 2 to `mmvn_limit` rows (the tokens of a decode
    /// step of several sequences; 6 for types with a `mmqs_T` kernel, else 15: from there the
    /// tensor-core kernels take over) with the `mmvn_T` kernels, `mmvn_rows` rows a launch: the rows are
    /// converted to the split q8 layout, and each launch reads the weights once. Ok(false),
    /// with nothing enqueued, when this path does not apply.
    fn matmul_rows(
        &self,
        c: &Compiled,
        w: WeightId,
        x: ActId,
        dst: ActId,
        bias: Option<WeightId>,
    ) -> Result<bool> {
        let wt = self.weight(w)?;
        let (k, n, rows) = (wt.k(), wt.n_rows(), c.g.rows(x));
        let Some(t) = Block::of(wt.dtype) else { return Ok(false) };
        let vt = quant::vec_dot_type(wt.dtype);
        let qb = if vt == GgmlType::Q8_K { 256 } else { 32 };
        if !(2..=self.mmvn_limit(wt.dtype)).contains(&rows) || k % qb != 0 {
            return Ok(false);
        }
        let (bias, btype) = self.bias_param(bias)?;
        let per = self.mmvn_rows;
        for r0 in (0..rows).step_by(per) {
            let nr = per.min(rows - r0);
            let qs = c.qact.ptr;
            let x = c.act(x) + 4 * (r0 * k) as u64;
            self.quantize_split_at(vt, x, qs, c.scales_rows(k, nr), nr * k)?;
            let p = MmvParams {
                w: wt.buf.ptr,
                aq: qs,
                ad: c.scales_rows(k, nr),
                out: c.act(dst) + 4 * (r0 * n) as u64,
                bias,
                add: 0,
                best: 0,
                btype,
                k: k as i32,
                n: n as i32,
                rows: nr as i32,
            };
            self.launch(
                Kernel::MmvRows { t, form: MmvForm::One },
                (n.div_ceil(MMV_WARPS) as u32, 1),
                128,
                &p,
            )?;
        }
        Ok(true)
    }

    /// Convert slot `x` (its rows: one, or the few of a decode step of several sequences, whose
    /// rows are whole blocks) into the split q8 scratch as `kind`.
    pub(in super::super) fn quantize_split(&self, c: &Compiled, x: ActId, kind: ActQuant) -> Result<()> {
        let (k, rows) = (c.g.cols(x), c.g.rows(x));
        let vt = match kind {
            ActQuant::Q8K => GgmlType::Q8_K,
            ActQuant::Q8_1 => GgmlType::Q8_1,
            ActQuant::Q8_0 => GgmlType::Q8_0,
        };
        self.quantize_split_at(vt, c.act(x), c.qact.ptr, c.scales_rows(k, rows), rows * k)
    }

    /// Convert the `n` values at `x` (whole blocks of `vt`: q8_0, q8_1 with block sums, or q8_K)
    /// into the split q8 layout at `qs` and `ds`.
    pub(in super::super) fn quantize_split_at(
        &self,
        vt: GgmlType,
        x: u64,
        qs: u64,
        ds: u64,
        n: usize,
    ) -> Result<()> {
        let blocks = |per: usize| u32::try_from(n / per).map_err(|_| err("activation too large"));
        let nb = blocks(32)?;
        let p = QuantizeSplitParams { x, qs, ds, with_sum: (vt == GgmlType::Q8_1) as i32, nb: nb as i32 };
        match vt {
            GgmlType::Q8_K => self.launch(Kernel::QuantizeQ8Ks, (blocks(256)?, 1), 256, &p),
            _ => self.launch(Kernel::QuantizeQ8s, (nb.div_ceil(8), 1), 256, &p),
        }
    }

    /// Three products of the converted row (Q, K and V) in one launch.
    pub(in super::super) fn matvec3(
        &self,
        c: &Compiled,
        w: [WeightId; 3],
        bias: [Option<WeightId>; 3],
        dst: [ActId; 3],
    ) -> Result<()> {
        let ws = [self.weight(w[0])?, self.weight(w[1])?, self.weight(w[2])?];
        let (k, rows) = (ws[0].k(), c.g.rows(dst[0]));
        let b = [self.bias_param(bias[0])?, self.bias_param(bias[1])?, self.bias_param(bias[2])?];
        let mixed = ws.iter().any(|w| w.dtype != ws[0].dtype);
        // The weight types are read by mmv3_kmix only.
        let t = |i: usize| if mixed { ws[i].dtype.id() as i32 } else { 0 };
        let outputs: usize = ws.iter().map(|w| w.n_rows()).sum();
        let grid = (outputs.div_ceil(MMV_WARPS) as u32, 1);
        let kernel = if rows > 1 {
            if mixed {
                return Err(err("decode plan: three products of mixed types on several rows"));
            }
            self.mmv_rows(ws[0].dtype, MmvForm::Three)?
        } else if mixed {
            Kernel::Mmv3Kmix { occ: false }.decode_variant(k, self.occ)
        } else {
            self.mmv(ws[0].dtype, MmvForm::Three, k)?
        };
        let n = ws.map(|w| w.n_rows());
        for (r0, nr) in self.row_chunks(rows) {
            let (aq, ad) = self.split_rows(c, ws[0].dtype, k, rows, r0);
            let o = |i: usize| c.act(dst[i]) + 4 * (r0 * n[i]) as u64;
            let p = Mmv3Params {
                w0: ws[0].buf.ptr,
                w1: ws[1].buf.ptr,
                w2: ws[2].buf.ptr,
                o0: o(0),
                o1: o(1),
                o2: o(2),
                b0: b[0].0,
                b1: b[1].0,
                b2: b[2].0,
                aq,
                ad,
                bt0: b[0].1,
                bt1: b[1].1,
                bt2: b[2].1,
                n0: n[0] as i32,
                n1: n[1] as i32,
                n2: n[2] as i32,
                k: k as i32,
                t0: t(0),
                t1: t(1),
                t2: t(2),
                rows: nr as i32,
            };
            self.launch(kernel, grid, 128, &p)?;
        }
        Ok(())
    }

    /// The chunks (first row, rows) of `rows` rows that one `mmvn` launch takes each (one
    /// chunk of one row for a one-token step).
    fn row_chunks(&self, rows: usize) -> impl Iterator<Item = (usize, usize)> {
        let per = self.mmvn_rows.max(1);
        (0..rows).step_by(per).map(move |r0| (r0, per.min(rows - r0)))
    }

    /// Where row `r0`'s quants and scales are in the split q8 scratch of `rows` rows of `k`
    /// values converted for weights of type `t`.
    fn split_rows(&self, c: &Compiled, t: GgmlType, k: usize, rows: usize, r0: usize) -> (u64, u64) {
        // q8_K: one float a 256-value block; q8_0 and q8_1: two a 32-value block.
        let scale_bytes = if quant::vec_dot_type(t) == GgmlType::Q8_K { k / 256 * 4 } else { k / 32 * 8 };
        (c.qact.ptr + (r0 * k) as u64, c.scales_rows(k, rows) + (r0 * scale_bytes) as u64)
    }

    /// A decode product of the converted row: dst = W·x (+ bias) (+ add) (keeping the
    /// argmax), or with `gate`: dst = act(W·x) · (W2·x).
    #[allow(clippy::too_many_arguments)]
    pub(in super::super) fn matvec(
        &self,
        c: &Compiled,
        w: WeightId,
        gate: Option<(WeightId, Gate)>,
        bias: Option<WeightId>,
        add: Option<ActId>,
        dst: ActId,
        argmax: bool,
    ) -> Result<()> {
        let wt = self.weight(w)?;
        let (k, n, rows) = (wt.k(), wt.n_rows(), c.g.rows(dst));
        let grid = (n.div_ceil(MMV_WARPS) as u32, 1);
        if rows > 1 && argmax {
            return Err(err("decode plan: a fused argmax on several rows"));
        }
        let form = if gate.is_some() { MmvForm::Gated } else { MmvForm::One };
        let kernel = if rows > 1 { self.mmv_rows(wt.dtype, form)? } else { self.mmv(wt.dtype, form, k)? };
        let (bias, btype) = self.bias_param(bias)?;
        let w2 = gate.map(|(up, _)| self.weight(up).map(|u| u.buf.ptr)).transpose()?;
        for (r0, nr) in self.row_chunks(rows) {
            let (aq, ad) = self.split_rows(c, wt.dtype, k, rows, r0);
            let out = c.act(dst) + 4 * (r0 * n) as u64;
            match (gate, w2) {
                (Some((_, act)), Some(w2)) => {
                    let p = Mmv2Params {
                        w1: wt.buf.ptr,
                        w2,
                        aq,
                        ad,
                        out,
                        act: (act == Gate::Gelu) as i32,
                        k: k as i32,
                        n: n as i32,
                        rows: nr as i32,
                    };
                    self.launch(kernel, grid, 128, &p)?;
                }
                _ => {
                    let p = MmvParams {
                        w: wt.buf.ptr,
                        aq,
                        ad,
                        out,
                        bias,
                        add: add.map_or(0, |a| c.act(a) + 4 * (r0 * n) as u64),
                        best: if argmax { c.best_ptr } else { 0 },
                        btype,
                        k: k as i32,
                        n: n as i32,
                        rows: nr as i32,
                    };
                    self.launch(kernel, grid, 128, &p)?;
                }
            }
        }
        Ok(())
    }
}
