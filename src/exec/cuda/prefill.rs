//! Prefill (many-token) matrix products on the int8 tensor cores: the `mmq_*` kernels of
//! kernels/mmq.cu. The activations are converted to the split q8 layout of the decode kernels
//! (all rows at once), then one launch computes the product in tiles of 64 weight rows × 64
//! tokens. Used on sm_80 and later for at least [`MMQ_MIN_ROWS`] token rows of the covered
//! types; `WICK_CUDA_MMQ=0` turns it off (the dp4a kernels of matvec.cuh then run).

use super::{drv, err, ActId, Arg, Compiled, CudaExecutor, Op, WeightId};
use crate::quant::{self, GgmlType};
use crate::Result;

/// Fewest token rows for the tensor-core kernels: a tile takes 64 tokens, and below this the
/// dp4a kernels (8 tokens a warp) waste less.
pub(super) const MMQ_MIN_ROWS: usize = 16;
/// Weight rows and tokens of one block's tile (`MMQ_BM` in mmq.cu; tokens 64, or 32 in `_n32`).
const MMQ_BM: usize = 64;
const MMQ_BN: usize = 64;
/// Below this many 64 × 64 tiles (about one and a half per SM of an H100), the 32-token tiles
/// of the `_n32` kernels are used instead (the K and V products of 1B/8B models).
const MMQ_SMALL_GRID: usize = 200;
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
        op: &Op,
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
        match quant::vec_dot_type(wt.dtype) {
            _ if reuse => {}
            GgmlType::Q8_K => {
                let args = [Arg::P(act(x)), Arg::P(qs), Arg::P(ds)];
                self.launch("quantize_q8ks", (blocks(256)?, 1), 256, &args)?;
            }
            vt => {
                let args = [Arg::P(act(x)), Arg::P(qs), Arg::P(ds), Arg::I((vt == GgmlType::Q8_1) as i32)];
                self.launch("quantize_q8s", (blocks(32)?, 1), 32, &args)?;
            }
        }
        let (bp, bt) = self.bias_arg(bias)?;
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
        // Products too small to give the device a few blocks per SM take 32-token tiles.
        let tiles64 = n.div_ceil(MMQ_BM) * rows.div_ceil(MMQ_BN);
        if tiles64 < MMQ_SMALL_GRID {
            let grid = (n.div_ceil(MMQ_BM) as u32, rows.div_ceil(MMQ_BN / 2) as u32);
            self.launch(&format!("{name}_n32"), grid, MMQ_THREADS, &args)?;
        } else {
            let grid = (n.div_ceil(MMQ_BM) as u32, rows.div_ceil(MMQ_BN) as u32);
            self.launch(name, grid, MMQ_THREADS, &args)?;
        }
        if self.debug {
            self.stream.synchronize().map_err(drv("debug"))?;
        }
        Ok(true)
    }
}

/// Largest head dimension of `attention_rows_*` (attention_rows.cu).
pub(super) const ATTENTION_ROWS_MAX_DIM: usize = 256;
/// Query rows a block of `attention_rows` (`ATR_Q`).
const ATTENTION_ROWS_Q: usize = 16;

impl CudaExecutor {
    /// Enqueue the many-row attention kernel: `args` are those of the one-row `attention`
    /// kernel, for `rows` query rows of `n_heads` heads of `head_dim` values.
    pub(super) fn attention_rows(
        &self,
        args: &[Arg],
        rows: usize,
        n_heads: usize,
        head_dim: usize,
    ) -> Result<()> {
        let mut all: Vec<Arg> = args
            .iter()
            .map(|a| match *a {
                Arg::P(p) => Arg::P(p),
                Arg::I(i) => Arg::I(i),
                Arg::L(l) => Arg::L(l),
                Arg::F(f) => Arg::F(f),
            })
            .collect();
        all.push(Arg::I(i32::try_from(rows).map_err(|_| err("too many rows"))?));
        let grid = (rows.div_ceil(ATTENTION_ROWS_Q) as u32, n_heads as u32);
        let name = match head_dim {
            ..=64 => "attention_rows_64",
            65..=128 => "attention_rows_128",
            _ => "attention_rows_256",
        };
        self.launch(name, grid, 128, &all)
    }
}

/// `WICK_CUDA_PROFILE=1`: many-token steps run op by op with a synchronization around each,
/// and the time per kind of op is printed to stderr (a diagnostic: slower than a plain run).
pub(super) fn profiling() -> bool {
    std::env::var("WICK_CUDA_PROFILE").as_deref() == Ok("1")
}

impl CudaExecutor {
    /// Enqueue graph `c` op by op, timing each (see [`profiling`]).
    pub(super) fn record_profiled(&self, c: &Compiled, kv: super::KvId) -> Result<()> {
        let mut times: Vec<(String, f64, usize)> = Vec::new();
        let sync = || self.stream.synchronize().map_err(drv("profiling"));
        for op in &c.g.ops {
            sync()?;
            let t = std::time::Instant::now();
            self.record(c, kv, op)?;
            sync()?;
            let dt = t.elapsed().as_secs_f64();
            let label = match op {
                Op::MatMul { w, x, .. } => {
                    let wt = self.weight(*w)?;
                    format!("MatMul {} {}x{}", wt.dtype, wt.k(), wt.n_rows())
                        + &format!(" rows {}", c.g.rows(*x))
                }
                other => format!("{other:?}").split([' ', '{']).next().unwrap_or("?").to_string(),
            };
            match times.iter_mut().find(|e| e.0 == label) {
                Some(e) => {
                    e.1 += dt;
                    e.2 += 1;
                }
                None => times.push((label, dt, 1)),
            }
        }
        times.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = times.iter().map(|e| e.1).sum();
        eprintln!("profile: {} tokens, {:.3} ms", c.g.n_tokens, total * 1e3);
        for (label, t, n) in times {
            eprintln!("  {:8.3} ms {n:4}x {label}", t * 1e3);
        }
        Ok(())
    }
}
