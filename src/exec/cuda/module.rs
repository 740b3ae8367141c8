//! The kernels: CUDA C sources embedded in the binary, compiled by NVRTC for the device's own
//! architecture at first use, the PTX cached on disk keyed by a hash of source, options and
//! architecture (`$WICK_CACHE_DIR`, else `$XDG_CACHE_HOME/wick`, else `~/.cache/wick`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{CompileOptions, Ptx};

use super::err;
use crate::Result;

/// One kernel family per file; `common.cuh` and `matvec.cuh` first (the others use them).
const SOURCES: &[(&str, &str)] = &[
    ("common.cuh", include_str!("kernels/common.cuh")),
    ("matvec.cuh", include_str!("kernels/matvec.cuh")),
    ("embed.cu", include_str!("kernels/embed.cu")),
    ("rms_norm.cu", include_str!("kernels/rms_norm.cu")),
    ("rope.cu", include_str!("kernels/rope.cu")),
    ("kv_store.cu", include_str!("kernels/kv_store.cu")),
    ("attention.cu", include_str!("kernels/attention.cu")),
    ("elementwise.cu", include_str!("kernels/elementwise.cu")),
    ("argmax.cu", include_str!("kernels/argmax.cu")),
    ("quantize.cu", include_str!("kernels/quantize.cu")),
    ("matvec_legacy.cu", include_str!("kernels/matvec_legacy.cu")),
    ("matvec_k.cu", include_str!("kernels/matvec_k.cu")),
    ("matvec_float.cu", include_str!("kernels/matvec_float.cu")),
];

/// Every entry point the executor launches.
const FUNCTIONS: &[&str] = &[
    "embed",
    "rms_norm",
    "rope",
    "rope_kv",
    "kv_store",
    "attention",
    "gated_act",
    "add",
    "copy",
    "argmax",
    "quantize_q8_0",
    "quantize_q8_k",
    "round_f16",
    "quantize_q8s",
    "quantize_q8ks",
    "rms_norm_q8s",
    "mmv_q4_0",
    "mmv2_q4_0",
    "mmv3_q4_0",
    "mmv_q4_1",
    "mmv2_q4_1",
    "mmv3_q4_1",
    "mmv_q5_0",
    "mmv2_q5_0",
    "mmv3_q5_0",
    "mmv_q5_1",
    "mmv2_q5_1",
    "mmv3_q5_1",
    "mmv_q8_0",
    "mmv2_q8_0",
    "mmv3_q8_0",
    "mmv_q4_k",
    "mmv2_q4_k",
    "mmv3_q4_k",
    "mmv_q5_k",
    "mmv2_q5_k",
    "mmv3_q5_k",
    "mmv_q6_k",
    "mmv2_q6_k",
    "mmv3_q6_k",
    "mmv3_kmix",
    "matvec_q4_0",
    "matvec_q4_0_r8",
    "matvec_q4_1",
    "matvec_q4_1_r8",
    "matvec_q5_0",
    "matvec_q5_0_r8",
    "matvec_q5_1",
    "matvec_q5_1_r8",
    "matvec_q8_0",
    "matvec_q8_0_r8",
    "matvec_q4_k",
    "matvec_q4_k_r8",
    "matvec_q5_k",
    "matvec_q5_k_r8",
    "matvec_q6_k",
    "matvec_q6_k_r8",
    "matvec_f32",
    "matvec_f32_r8",
    "matvec_f16",
    "matvec_f16_r8",
];

/// NVRTC options. No FMA contraction: the CPU reference rounds every product, and token-exact
/// agreement is worth more than the few percent contraction would buy in memory-bound kernels.
fn options(arch: (i32, i32)) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{}{}", arch.0, arch.1),
        "--fmad=false".into(),
        "-std=c++17".into(),
    ]
}

/// All sources as one translation unit.
pub fn source() -> String {
    SOURCES.iter().map(|(name, s)| format!("// ---- {name}\n{s}\n")).collect()
}

/// FNV-1a, 64 bits: stable across Rust versions (the std hasher is not).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("WICK_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("wick")))
        .or_else(|| env("HOME").map(|p| p.join(".cache").join("wick")))
}

/// Compile the kernels for `arch` with NVRTC (no GPU needed), returning the PTX text.
pub fn compile(arch: (i32, i32)) -> Result<String> {
    let opts = CompileOptions { options: options(arch), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source(), opts)
        .map_err(|e| err(format!("NVRTC could not compile the kernels: {e}")))?;
    Ok(ptx.to_src())
}

/// PTX for `arch`, from the disk cache or freshly compiled (then cached; a cache that cannot
/// be written is not an error).
fn ptx(arch: (i32, i32)) -> Result<String> {
    let key = fnv1a(format!("{}\n{:?}", source(), options(arch)).as_bytes());
    let path = cache_dir().map(|d| d.join(format!("kernels-sm{}{}-{key:016x}.ptx", arch.0, arch.1)));
    if let Some(text) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        return Ok(text);
    }
    let text = compile(arch)?;
    if let Some(p) = &path {
        let _ = p.parent().map(std::fs::create_dir_all);
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &text).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok(text)
}

/// Load every entry point into `ctx`.
pub fn load(ctx: &Arc<CudaContext>) -> Result<HashMap<&'static str, CudaFunction>> {
    let arch = ctx.compute_capability().map_err(|e| err(format!("compute capability: {e}")))?;
    let module = ctx
        .load_module(Ptx::from_src(ptx(arch)?))
        .map_err(|e| err(format!("loading the kernels for sm_{}{}: {e}", arch.0, arch.1)))?;
    let mut fns = HashMap::new();
    for &name in FUNCTIONS {
        let f = module.load_function(name).map_err(|e| err(format!("kernel '{name}': {e}")))?;
        fns.insert(name, f);
    }
    Ok(fns)
}
