//! Products of f16 and bf16 weights through cuBLAS's tensor-core GEMM (as llama.cpp does), for
//! prefill steps: the activations are converted to the weights' 16-bit type
//! (kernels/matmul_blas.cu, rounded as the CPU rounds them), `cublasGemmEx` sums in f32, and a
//! bias is added to the rows after. cuBLAS is loaded at run time like the driver; where the
//! library is absent (or `WICK_CUDA_CUBLAS=0`) these products keep wick's own kernels
//! (`matvec_f16`, `matvec_bf16`). Steps captured as CUDA graphs (up to `graph_max_tokens`
//! tokens) keep them too, so no cuBLAS call is ever captured.

use std::ffi::c_void;

use cudarc::cublas::{result as blas, sys};
use cudarc::driver::CudaStream;

use super::super::device::Weight;
use super::super::kernels::{Block, Kernel};
use super::super::params::{BiasRowsParams, DequantParams, HalvesParams, Q8HalvesParams};
use super::super::record::Compiled;
use super::super::{err, CudaExecutor};
use super::elementwise::blocks_of_256;
use crate::exec::{ActId, WeightId};
use crate::quant::{self, GgmlType};
use crate::Result;

/// A cuBLAS handle on the executor's stream. (cudarc's `CudaBlas` unwraps the handle's
/// destruction in its drop, which would panic after a fatal device error.)
pub(in super::super) struct Blas(sys::cublasHandle_t);

// SAFETY: the handle is used only by the executor that owns it, one call at a time.
unsafe impl Send for Blas {}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: a handle this struct created and nothing else destroys; an error (a device
        // already lost) leaves nothing to release.
        let _ = unsafe { blas::destroy_handle(self.0) };
    }
}

/// cuBLAS on `stream`, when the library loads and `WICK_CUDA_CUBLAS` is not `0`.
fn open(stream: &CudaStream) -> Option<Blas> {
    if std::env::var("WICK_CUDA_CUBLAS").as_deref() == Ok("0") {
        return None;
    }
    // SAFETY: only tries to open the library by its usual names.
    if !unsafe { sys::is_culib_present() } {
        return None;
    }
    stream.context().bind_to_thread().ok()?;
    let handle = Blas(blas::create_handle().ok()?);
    // SAFETY: a live handle and the executor's live stream, which outlives it (both are the
    // executor's; the handle is dropped first, see `CudaExecutor`).
    unsafe { blas::set_stream(handle.0, stream.cu_stream() as _) }.ok()?;
    Some(handle)
}

/// Load the cuBLAS library on a thread of its own (unless `WICK_CUDA_CUBLAS=0`), so that the
/// first product that opens it (`open`) finds it mapped: on an H200 the load cost the first
/// prompt of 512 tokens about 0.2 s.
pub(in super::super) fn preload_blas() {
    if std::env::var("WICK_CUDA_CUBLAS").as_deref() == Ok("0") {
        return;
    }
    // SAFETY: only opens the library by its usual names, and keeps it (`culib`, which is
    // called only once it is known to load).
    let _ = std::thread::Builder::new().name("wick-cublas-load".into()).spawn(|| unsafe {
        if sys::is_culib_present() {
            sys::culib();
        }
    });
}

/// Bytes of f16 weights a dequantized slice takes at most (`DEQ_SLICE_BYTES / 2k` rows, in
/// multiples of 256): a product's weights are dequantized and multiplied a slice at a time, so
/// the scratch stays small whatever the matrix.
const DEQ_SLICE_BYTES: usize = 64 << 20;

/// Weight rows of one dequantized slice for rows of `k` values, of `n` rows.
fn deq_slice(k: usize, n: usize) -> usize {
    (DEQ_SLICE_BYTES / (2 * k.max(1)) / 256 * 256).max(256).min(n)
}

/// Bytes of scratch a dequantized product of `rows` tokens needs: the f16 activations, then a
/// slice of f16 weights.
fn deq_bytes(k: usize, n: usize, rows: usize) -> usize {
    (2 * rows * k).div_ceil(256) * 256 + 2 * deq_slice(k, n) * k
}

impl CudaExecutor {
    /// cuBLAS, opened by the first product that asks for it; None where the library is absent
    /// or turned off.
    fn blas_handle(&self) -> Option<sys::cublasHandle_t> {
        self.blas.get_or_init(|| open(&self.stream)).as_ref().map(|b| b.0)
    }

    /// Whether a product of `w` over `rows` tokens takes cuBLAS on dequantized f16 weights: a
    /// quantized type with a `dequant_T` kernel, at least `deq_min_rows` tokens (where the f16
    /// tensor cores' speed pays for rewriting the weights each step), and cuBLAS present.
    pub(in super::super) fn takes_deq(&self, w: &Weight, rows: usize) -> bool {
        rows >= self.deq_min_rows
            && rows > self.graph_max_tokens
            && w.k().is_multiple_of(32)
            && Block::of(w.dtype).is_some()
            && self.blas_handle().is_some()
    }

    /// Scratch bytes the cuBLAS path needs for a product of `w` over `rows` tokens (0 where it
    /// does not take it, or takes it with the q8 scratch's room, as for f16 weights).
    pub(in super::super) fn blas_bytes(&self, w: &Weight, rows: usize) -> usize {
        if self.takes_deq(w, rows) {
            deq_bytes(w.k(), w.n_rows(), rows)
        } else {
            0
        }
    }

    /// Enqueue `dst = x · wᵀ (+ bias)` through cuBLAS. Ok(false), with nothing enqueued, when
    /// this path does not apply (no cuBLAS, a step that is captured, a quantized type below
    /// `deq_min_rows` tokens or without a `dequant_T` kernel, another type).
    pub(in super::super) fn matmul_blas(
        &self,
        c: &Compiled,
        w: WeightId,
        x: ActId,
        dst: ActId,
        bias: Option<WeightId>,
    ) -> Result<bool> {
        let wt = self.weight(w)?;
        let (k, n, rows) = (wt.k(), wt.n_rows(), c.g.rows(x));
        let (ty, bf16, deq) = match wt.dtype {
            GgmlType::F16 => (sys::cudaDataType::CUDA_R_16F, 0, None),
            GgmlType::BF16 => (sys::cudaDataType::CUDA_R_16BF, 1, None),
            t if self.takes_deq(wt, rows) => (sys::cudaDataType::CUDA_R_16F, 0, Block::of(t)),
            _ => return Ok(false),
        };
        if rows <= self.graph_max_tokens {
            return Ok(false);
        }
        let Some(handle) = self.blas_handle() else {
            return Ok(false);
        };
        let dim = |v: usize| i32::try_from(v).map_err(|_| err("product too large for cuBLAS"));
        let (ki, ri) = (dim(k)?, dim(rows)?);
        // The activations in f16: for float weights x rounded as the CPU rounds it; for
        // quantized weights the q8 values the CPU and the int8 tiles multiply (d·q in f16), so
        // that only the f16 rounding of d·q and of the dequantized weights separates this
        // product from theirs.
        let n_act = (rows * k) as i64;
        let halves = c.qact.ptr;
        if deq.is_some() {
            let k256 = quant::vec_dot_type(wt.dtype) == GgmlType::Q8_K;
            let p = Q8HalvesParams { x: c.act(x), out: halves, n: n_act, k256: k256 as i32 };
            self.launch(Kernel::Q8Halves, (blocks_of_256(rows * k), 1), 256, &p)?;
        } else {
            let p = HalvesParams { x: c.act(x), out: halves, n: n_act, bf16 };
            self.launch(Kernel::ToHalves, (blocks_of_256(rows * k), 1), 256, &p)?;
        }
        // The weights a slice of rows at a time: dequantized into the scratch after the
        // activations, or the f16/bf16 weights as they are, whole.
        let (slice, w16) = match deq {
            Some(_) => (deq_slice(k, n), halves + (2 * rows * k).div_ceil(256) as u64 * 256),
            None => (n, wt.buf.ptr),
        };
        for r0 in (0..n).step_by(slice) {
            let sn = slice.min(n - r0);
            let a = match deq {
                Some(t) => {
                    let p = DequantParams {
                        w: wt.buf.ptr,
                        out: w16,
                        k: ki,
                        n: dim(n)?,
                        r0: dim(r0)?,
                        rows: dim(sn)?,
                    };
                    self.launch(Kernel::Dequant { t }, (blocks_of_256(sn * k / 32), 1), 256, &p)?;
                    w16
                }
                None => wt.buf.ptr,
            };
            // Row-major out[rows][n] = x[rows][k] · W[n][k]ᵀ is, column-major, the n × rows
            // product of Wᵀ (W read as k × n, transposed) and x (k × rows); a slice writes its
            // sn rows of each token's n.
            let (alpha, beta) = (1.0f32, 0.0f32);
            // SAFETY: the weights (sn rows of k, f16 or bf16: the weight itself or the
            // dequantized slice in the scratch), the converted activations (rows of k, at the
            // scratch's start, which `qact_bytes`/`blas_bytes` size for them) and dst (rows of n
            // floats, written from column r0 with leading dimension n) are live device buffers
            // of those sizes on the handle's stream; alpha and beta are host floats (the
            // handle's default pointer mode).
            unsafe {
                blas::gemm_ex(
                    handle,
                    sys::cublasOperation_t::CUBLAS_OP_T,
                    sys::cublasOperation_t::CUBLAS_OP_N,
                    dim(sn)?,
                    ri,
                    ki,
                    (&alpha as *const f32).cast::<c_void>(),
                    a as *const c_void,
                    ty,
                    ki,
                    halves as *const c_void,
                    ty,
                    ki,
                    (&beta as *const f32).cast::<c_void>(),
                    (c.act(dst) + 4 * r0 as u64) as *mut c_void,
                    sys::cudaDataType::CUDA_R_32F,
                    dim(n)?,
                    sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| err(format!("cuBLAS product for {}: {e:?}", wt.name)))?;
        }
        if let Some(b) = bias {
            let (bias, btype) = self.bias_param(Some(b))?;
            let p = BiasRowsParams { out: c.act(dst), bias, btype, n: dim(n)?, rows: ri };
            self.launch(Kernel::BiasRows, (blocks_of_256(rows * n), 1), 256, &p)?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slices of whole 256-row runs within the byte bound, never more than the matrix.
    #[test]
    fn dequantized_slices() {
        // 8b: 4,096-value rows take 8,192 rows a slice; 14,336-value rows 2,304.
        assert_eq!(deq_slice(4096, 14336), 8192);
        assert_eq!(deq_slice(14336, 4096), 2304);
        assert_eq!(deq_slice(4096, 1024), 1024);
        assert!(2 * deq_slice(14336, 4096) * 14336 <= DEQ_SLICE_BYTES);
        // Very long rows still take 256.
        assert_eq!(deq_slice(1 << 20, 4096), 256);
        assert_eq!(deq_bytes(4096, 4096, 512), 2 * 512 * 4096 + 2 * 4096 * 4096);
    }
}
