//! The op suite (tests/ops/) on the CUDA executor: every op against the plain reference, and
//! the tensor-core prefill tiles. Skips (loudly) where no CUDA driver is installed, as on CI;
//! on a machine with one, a wrong result fails. `WICK_REQUIRE_CUDA=1` turns the skip into a
//! failure.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]
#![cfg(feature = "cuda")]

mod ops;
mod support;

use ops::{cases, fused, masked, sequences};
use wick::exec::{Executor, ExecutorKind};
use wick::quant::GgmlType;

/// The CUDA executor, or None (after saying why) where this machine has no CUDA driver.
fn cuda() -> Option<Box<dyn Executor>> {
    if !support::cuda_wanted() {
        return None;
    }
    Some(
        support::block_on(wick::exec::create(ExecutorKind::Cuda))
            .expect("a CUDA driver is present but the executor failed"),
    )
}

op_rows! { "cuda";
    embed => cuda(), cases::embed();
    rms_norm => cuda(), cases::rms_norm();
    matmul => cuda(), cases::matmul();
    matmul_model => cuda(), cases::matmul_model();
    // The tensor-core products (kernels/mmq.cu, from 16 token rows on sm_80 and later).
    matmul_tensor_cores => cuda(), cases::matmul_tiles();
    matmul_large_tiles => cuda(), cases::matmul_large();
    matmul_dequantized => cuda(), cases::matmul_dequantized();
    rope => cuda(), cases::rope();
    kv_shift => cuda(), cases::kv_shift();
    kv_copy => cuda(), cases::kv_copy();
    attention => cuda(), cases::attention();
    attention_deep => cuda(), cases::attention_deep();
    gated_act => cuda(), cases::gated_act();
    add_take_last => cuda(), cases::add_take_last();
    readback => cuda(), cases::readback();
    masked_argmax => cuda(), masked::rows();
    sequences => cuda(), sequences::rows();
    sequences_readback => cuda(), sequences::readback();
    split_weights => cuda(), cases::split_weights();
    fused_patterns => cuda(), fused::patterns();
    fused_layer => cuda(), fused::layer();
}

#[test]
fn errors_are_errors() {
    support::block_on(ops::errors_are_errors(cuda()));
}

/// The kernels compile with NVRTC alone (no GPU needed, only libnvrtc). CI sets
/// `WICK_REQUIRE_NVRTC=1` (with the library from `.ci/get-nvrtc`), so a kernel that does not
/// compile fails there.
#[test]
fn kernels_compile_with_nvrtc() {
    match wick::exec::cuda::nvrtc_library() {
        Ok((name, v)) => eprintln!("NVRTC {}.{} ({name})", v.0, v.1),
        Err(e) => {
            assert!(
                std::env::var("WICK_REQUIRE_NVRTC").as_deref() != Ok("1"),
                "WICK_REQUIRE_NVRTC=1 but {e}"
            );
            eprintln!("SKIPPED: {e}");
            return;
        }
    }
    for arch in [(8, 0), (9, 0)] {
        let ptx = wick::exec::cuda::compile_kernels(arch).expect("NVRTC compiles the kernels");
        assert!(ptx.contains(".entry matvec_q4_k"), "sm_{}{}: entry points missing", arch.0, arch.1);
        assert!(ptx.contains(".entry mmq_q6_k"), "sm_{}{}: tensor-core entry points missing", arch.0, arch.1);
        assert!(ptx.contains("mma.sync.aligned.m16n8k32"), "sm_{}{}: no int8 mma", arch.0, arch.1);
        let f16_mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
        assert!(
            ptx.contains(".entry attention_flash_128"),
            "sm_{}{}: flash attention missing",
            arch.0,
            arch.1
        );
        assert!(ptx.contains(f16_mma), "sm_{}{}: no f16 mma", arch.0, arch.1);
    }
    // The device's own machine code, as a load makes it (one small module: ptxas is slow).
    let bin =
        wick::exec::cuda::compile_cubin(wick::exec::cuda::Module::Norm, (9, 0)).expect("NVRTC makes a cubin");
    assert!(bin.len() > 1000 && bin.starts_with(b"\x7fELF"), "not an ELF cubin: {} bytes", bin.len());
}

/// Diagnostic: each module's cubin for sm_90, compiled by NVRTC (and ptxas) as a cold start
/// compiles it, on `WICK_TIMES_THREADS` threads (default: a core each), with its time and
/// size (`cargo test --release --features cuda --test ops_cuda -- --ignored kernel_compile_times`).
#[test]
#[ignore]
fn kernel_compile_times() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let modules = wick::exec::cuda::Module::all();
    let threads = std::env::var("WICK_TIMES_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let next = AtomicUsize::new(0);
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some(&m) = modules.get(next.fetch_add(1, Ordering::Relaxed)) else { return };
                let t = std::time::Instant::now();
                let bin = wick::exec::cuda::compile_cubin(m, (9, 0)).expect("NVRTC makes a cubin");
                eprintln!("{:24} {:6.2} s {:9} bytes", m.name(), t.elapsed().as_secs_f64(), bin.len());
            });
        }
    });
    eprintln!("{} modules on {threads} threads: {:.2} s", modules.len(), start.elapsed().as_secs_f64());
}

/// Diagnostic: prints the reference, CPU and CUDA outputs side by side for small quantized
/// products (`cargo test --features cuda --test ops_cuda -- --ignored matmul_side_by_side`).
#[test]
#[ignore]
fn matmul_side_by_side() {
    for t in [GgmlType::Q8_0, GgmlType::Q4_0] {
        for (k, n) in [(32usize, 4usize), (64, 4), (512, 8)] {
            let row = cases::matmul_row(t, 1, k, n, false);
            let out = |e: &mut dyn Executor| support::block_on(ops::outputs(e, &row, 9)).remove(0);
            let want = out(&mut ops::reference::Reference::new());
            let cpu = out(&mut wick::exec::cpu::CpuExecutor::new());
            let gpu = cuda().map(|mut g| out(g.as_mut()));
            eprintln!("{t} k {k} n {n}\n  reference {want:?}\n  cpu {cpu:?}\n  cuda {gpu:?}");
        }
    }
}
