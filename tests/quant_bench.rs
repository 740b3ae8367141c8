//! Single-thread speed of `vec_dot` on a 4096 x 4096 matrix-vector product, per weight type.
//! Run: `cargo test --release --test quant_bench -- --ignored --nocapture`
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use std::time::Instant;
use wick::quant::{quantize_row_into, vec_dot, vec_dot_portable, vec_dot_type, GgmlType};

#[test]
#[ignore]
fn matvec_4096_speed() {
    matvec_speed(4096, 4096, &GgmlType::WEIGHT_TYPES);
}

/// Short rows, as in a 135M model (hidden size 576; the 49152 x 576 output matrix).
#[test]
#[ignore]
fn matvec_short_rows_speed() {
    use GgmlType::*;
    matvec_speed(49152, 576, &[F16, Q4_0, Q4_1, Q5_0, Q8_0]);
}

fn matvec_speed(rows: usize, n: usize, types: &[GgmlType]) {
    println!("{rows} x {n}:");
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for &t in types {
        let row_bytes = t.row_bytes(n as u64).unwrap() as usize;
        let mut w: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
        // Sane f16 scales (random bytes would give subnormals and NaNs, which are slow).
        let fields: &[usize] = match t {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q3_K => &[108],
            GgmlType::Q6_K => &[208],
            _ => &[],
        };
        for b in w.chunks_exact_mut(t.type_size()) {
            for &f in fields {
                b[f..f + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            }
        }
        if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            let x: Vec<f32> = (0..rows * n).map(|_| (next() % 1000) as f32 / 1000.0 - 0.5).collect();
            quantize_row_into(t, &x, &mut w).unwrap();
        }
        let x: Vec<f32> = (0..n).map(|_| (next() % 1000) as f32 / 1000.0 - 0.5).collect();
        let mut acts = Vec::new();
        quantize_row_into(vec_dot_type(t), &x, &mut acts).unwrap();
        let mut out = vec![0f32; rows];
        let mut run = |f: fn(GgmlType, usize, &[u8], &[u8]) -> f32| {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t0 = Instant::now();
                for (o, wr) in out.iter_mut().zip(w.chunks_exact(row_bytes)) {
                    *o = f(t, n, wr, &acts);
                }
                best = best.min(t0.elapsed().as_secs_f64());
            }
            std::hint::black_box(&out);
            best
        };
        let fast = run(vec_dot);
        let port = run(vec_dot_portable);
        let gb = (rows * row_bytes) as f64 / 1e9;
        println!(
            "{:>5}: {:6.1} MB  fast {:7.2} ms {:6.2} GB/s   portable {:7.2} ms {:6.2} GB/s",
            t.name(),
            gb * 1e3,
            fast * 1e3,
            gb / fast,
            port * 1e3,
            gb / port
        );
    }
}
