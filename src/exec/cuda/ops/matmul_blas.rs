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

use super::super::kernels::Kernel;
use super::super::params::{BiasRowsParams, HalvesParams};
use super::super::record::Compiled;
use super::super::{err, CudaExecutor};
use super::elementwise::blocks_of_256;
use crate::exec::{ActId, WeightId};
use crate::quant::GgmlType;
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

impl CudaExecutor {
    /// Enqueue `dst = x · wᵀ (+ bias)` through cuBLAS. Ok(false), with nothing enqueued, when
    /// this path does not apply (no cuBLAS, not a 16-bit float type, a step that is captured).
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
        let (ty, bf16) = match wt.dtype {
            GgmlType::F16 => (sys::cudaDataType::CUDA_R_16F, 0),
            GgmlType::BF16 => (sys::cudaDataType::CUDA_R_16BF, 1),
            _ => return Ok(false),
        };
        if rows <= self.graph_max_tokens {
            return Ok(false);
        }
        let Some(handle) = self.blas.get_or_init(|| open(&self.stream)).as_ref().map(|b| b.0) else {
            return Ok(false);
        };
        let dim = |v: usize| i32::try_from(v).map_err(|_| err("product too large for cuBLAS"));
        let (ki, ni, ri) = (dim(k)?, dim(n)?, dim(rows)?);
        let halves = c.qact.ptr;
        let p = HalvesParams { x: c.act(x), out: halves, n: (rows * k) as i64, bf16 };
        self.launch(Kernel::ToHalves, (blocks_of_256(rows * k), 1), 256, &p)?;
        // Row-major out[rows][n] = x[rows][k] · W[n][k]ᵀ is, column-major, the n × rows product
        // of Wᵀ (W read as k × n, transposed) and x (k × rows).
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the weight (n rows of k), the converted activations (rows of k, in the q8
        // scratch, which holds 4·k bytes a row for these types) and dst (rows of n floats) are
        // live device buffers of those sizes on the handle's stream; alpha and beta are host
        // floats (the handle's default pointer mode).
        unsafe {
            blas::gemm_ex(
                handle,
                sys::cublasOperation_t::CUBLAS_OP_T,
                sys::cublasOperation_t::CUBLAS_OP_N,
                ni,
                ri,
                ki,
                (&alpha as *const f32).cast::<c_void>(),
                wt.buf.ptr as *const c_void,
                ty,
                ki,
                halves as *const c_void,
                ty,
                ki,
                (&beta as *const f32).cast::<c_void>(),
                c.act(dst) as *mut c_void,
                sys::cudaDataType::CUDA_R_32F,
                ni,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| err(format!("cuBLAS product for {}: {e:?}", wt.name)))?;
        if let Some(b) = bias {
            let (bias, btype) = self.bias_param(Some(b))?;
            let p = BiasRowsParams { out: c.act(dst), bias, btype, n: ni, rows: ri };
            self.launch(Kernel::BiasRows, (blocks_of_256(rows * n), 1), 256, &p)?;
        }
        Ok(true)
    }
}
