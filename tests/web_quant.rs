//! The wasm simd128 dot products (src/quant/simd128.rs) against the portable code, in headless
//! Chromium (CI runs them twice: simd128, then the build with relaxed SIMD), on fresh random blocks of every weight type (the seed changes each run and is
//! printed on failure), through each entry point the CPU executor calls: bit-identical for the
//! K-quants and the types without a simd128 kernel; for the legacy types (whose floats the
//! simd128 kernels sum in another order) within a bound on f32 rounding that a wrong integer
//! sum exceeds.
#![cfg(target_arch = "wasm32")]

mod support;

use support::tensors::random_blocks;
use support::Rng;
use wasm_bindgen_test::*;
use wick::quant::{
    dequantize, has_tile, quantize_row_into, tile_scales, vec_dot, vec_dot_gemm4, vec_dot_gemm4_portable,
    vec_dot_portable, vec_dot_rows, vec_dot_tile4, vec_dot_type, GgmlType,
};

wasm_bindgen_test_configure!(run_in_browser);

/// Every weight type the CPU executor dots against (those without a simd128 kernel must still
/// reach the portable code unchanged).
const TYPES: [GgmlType; 12] = {
    use GgmlType::*;
    [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, F32]
};

/// Random sign, magnitude log-uniform in [0.001, 2].
fn scale(rng: &mut Rng) -> f32 {
    let m = (0.001f32.ln() + rng.unit() * (2.0f32.ln() - 0.001f32.ln())).exp();
    if rng.next() & 1 == 0 {
        m
    } else {
        -m
    }
}

fn weights(t: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    if t.is_quantized() {
        return random_blocks(t, n, rng, scale);
    }
    let mut w = Vec::new();
    quantize_row_into(t, &rng.vec(n, 1.0), &mut w).unwrap();
    w
}

/// The legacy types, whose simd128 kernels sum the block terms in their own float order.
fn reordered(t: GgmlType) -> bool {
    use GgmlType::*;
    matches!(t, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
}

/// How far two f32 summations of a legacy row's block terms may differ: each of the
/// `2 * blocks + 8` roundings of either (products, additions) moves it by at most 2^-24 of the
/// sum of the terms' magnitudes, `sum |d q_i * d_a a_i|` plus the min terms `sum |m s|`.
fn legacy_bound(t: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f64 {
    let has_min = matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1);
    let (bs, abs) = (t.type_size(), vec_dot_type(t).type_size());
    let mut wz = w.to_vec();
    let mut mag = 0f64;
    if has_min {
        for (wb, ab) in wz.chunks_exact_mut(bs).zip(a.chunks_exact(abs)) {
            let f = |b: &[u8]| half::f16::from_le_bytes([b[2], b[3]]).to_f64();
            mag += (f(wb) * f(ab)).abs();
            wb[2..4].fill(0);
        }
    }
    let (mut xw, mut xa) = (vec![0f32; n], vec![0f32; n]);
    dequantize(t, &wz, &mut xw).unwrap();
    dequantize(vec_dot_type(t), a, &mut xa).unwrap();
    mag += xw.iter().zip(&xa).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum::<f64>();
    (2 * (n / 32) + 8) as f64 * 2f64.powi(-24) * mag
}

#[wasm_bindgen_test]
fn the_build_has_simd128() {
    // Else every comparison below would hold the portable code to itself.
    let simd = cfg!(target_feature = "simd128");
    assert!(simd, "the wasm build lacks simd128 (.cargo/config.toml)");
}

#[wasm_bindgen_test]
fn the_build_has_relaxed_simd_when_asked() {
    // .ci/run builds these tests a second time with relaxed SIMD, saying so at compile time:
    // the comparisons below then hold the relaxed kernels to the portable code.
    if option_env!("WICK_EXPECT_RELAXED_SIMD") == Some("1") {
        let relaxed = cfg!(target_feature = "relaxed-simd");
        assert!(relaxed, "asked for relaxed SIMD, built without it");
    }
}

#[wasm_bindgen_test]
fn simd128_dot_products_match_the_portable_code() {
    let seed = js_sys::Date::now() as u64;
    let mut rng = Rng::new(seed);
    for t in TYPES {
        let odd = 3 * t.block_size().max(32);
        for n in [256, 1024, 2816, odd] {
            if n % t.block_size() != 0 {
                continue;
            }
            for trial in 0..8 {
                let rows = 5;
                let w: Vec<u8> = (0..rows).flat_map(|_| weights(t, n, &mut rng)).collect();
                let wrb = w.len() / rows;
                let mut a = Vec::new();
                // Activations of a few magnitudes, as the executor's rows have.
                let x = rng.vec(n, [0.01, 1.0, 30.0][trial % 3]);
                quantize_row_into(vec_dot_type(t), &x, &mut a).unwrap();
                let want: Vec<f32> =
                    (0..rows).map(|j| vec_dot_portable(t, n, &w[j * wrb..(j + 1) * wrb], &a)).collect();
                let mut rows_out = vec![0f32; rows];
                vec_dot_rows(t, n, &w, wrb, &a, &mut rows_out);
                for j in 0..rows {
                    let wr = &w[j * wrb..(j + 1) * wrb];
                    let got = vec_dot(t, n, wr, &a);
                    let (g4, w4) = (vec_dot_gemm4(t, n, wr, &a), vec_dot_gemm4_portable(t, n, wr, &a));
                    // vec_dot_rows is vec_dot per row, bit for bit; so is vec_dot_gemm4 except for Q4_K.
                    assert_eq!(
                        rows_out[j].to_bits(),
                        got.to_bits(),
                        "{t} n={n} vec_dot_rows row {j} (seed {seed})"
                    );
                    if t != GgmlType::Q4_K {
                        assert_eq!(g4.to_bits(), got.to_bits(), "{t} n={n} gemm4 row {j} (seed {seed})");
                    }
                    if reordered(t) {
                        let bound = legacy_bound(t, n, wr, &a);
                        let err = (got as f64 - want[j] as f64).abs();
                        assert!(
                            err <= bound,
                            "{t} n={n} row {j}: {got} vs portable {} (off {err:e} > {bound:e}; seed {seed})",
                            want[j]
                        );
                    } else {
                        assert_eq!(
                            got.to_bits(),
                            want[j].to_bits(),
                            "{t} n={n} row {j}: {got} != {} (seed {seed})",
                            want[j]
                        );
                        assert_eq!(
                            g4.to_bits(),
                            w4.to_bits(),
                            "{t} n={n} gemm4 row {j}: {g4} != {w4} (seed {seed})"
                        );
                    }
                }
            }
        }
    }
}

/// Prefill's 1 x 4 tile of the legacy types (the activation scales converted once, each weight
/// block unpacked once for four rows) gives each output exactly `vec_dot`'s bits.
#[wasm_bindgen_test]
fn legacy_tiles_are_bit_identical_to_vec_dot() {
    let seed = js_sys::Date::now() as u64;
    let mut rng = Rng::new(seed);
    for t in TYPES.into_iter().filter(|&t| reordered(t)) {
        assert!(has_tile(t), "{t} has no wasm tile");
        for n in [32, 256, 2816] {
            for _ in 0..4 {
                let w = weights(t, n, &mut rng);
                let mut a = Vec::new();
                let mut row = Vec::new();
                for c in 0..4 {
                    quantize_row_into(vec_dot_type(t), &rng.vec(n, [0.01, 1.0, 30.0, 2.0][c]), &mut row)
                        .unwrap();
                    a.extend_from_slice(&row);
                }
                let arb = row.len();
                let mut sc = vec![0f32; 8 * (n / 32)];
                tile_scales(t, n, &a, arb, &mut sc);
                let mut out = [0f32; 4];
                vec_dot_tile4(t, n, &w, &a, arb, &sc, &mut out);
                for c in 0..4 {
                    let want = vec_dot(t, n, &w, &a[c * arb..(c + 1) * arb]);
                    assert_eq!(
                        out[c].to_bits(),
                        want.to_bits(),
                        "{t} n={n} row {c}: {} vs {want} (seed {seed})",
                        out[c]
                    );
                }
            }
        }
    }
}
