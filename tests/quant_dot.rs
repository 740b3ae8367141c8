//! `vec_dot` for every weight type against the f64 dot product of the dequantized weights with
//! the unquantized activations, the fast paths against the scalar reference, `quantize_row_into`
//! round trips, and errors on bad lengths.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use half::{bf16, f16};
use support::tensors::random_blocks;
use support::Rng;
use wick::quant::vec_dot_rows;
use wick::quant::{
    dequantize, pack_tile8, quantize_row_into, tile_scales, vec_dot, vec_dot_gemm4, vec_dot_gemm4_run,
    vec_dot_gemm4_tile, vec_dot_portable, vec_dot_ref, vec_dot_tile, vec_dot_tile4, vec_dot_tile8,
    vec_dot_tile8_run, vec_dot_type, GgmlType, Tile8Acts,
};

/// Roughly normal (sum of uniforms), mean 0, sd ~ `sd`.
fn normal(rng: &mut Rng, sd: f32) -> f32 {
    let s: f32 = (0..4).map(|_| rng.unit()).sum::<f32>() - 2.0;
    s * sd * 1.73
}

/// Random sign, magnitude log-uniform in [0.001, 2].
fn scale(rng: &mut Rng) -> f32 {
    let m = (0.001f32.ln() + rng.unit() * (2.0f32.ln() - 0.001f32.ln())).exp();
    if rng.next() & 1 == 0 {
        m
    } else {
        -m
    }
}

/// A random weight row of `n` elements: random bytes with scales of both signs over three
/// decades (floats, roughly normal, for F32/F16/BF16).
fn random_weights(t: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let mut w = Vec::new();
    match t {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let x: Vec<f32> = (0..n).map(|_| normal(rng, 1.0)).collect();
            quantize_row_into(t, &x, &mut w).unwrap();
        }
        _ => w = random_blocks(t, n, rng, scale),
    }
    w
}

/// Largest error quantizing one activation element can make (per element `i`), for the
/// activation format `at`: half a quantization step plus the rounding of the stored scale.
fn act_err_bound(at: GgmlType, x: &[f32]) -> Vec<f64> {
    let bs = at.block_size();
    let mut e = vec![0f64; x.len()];
    for (eb, xb) in e.chunks_mut(bs).zip(x.chunks(bs)) {
        let amax = xb.iter().fold(0f64, |a, v| a.max(v.abs() as f64));
        for (ei, &xi) in eb.iter_mut().zip(xb) {
            *ei = match at {
                GgmlType::F32 => 0.0,
                GgmlType::F16 => xi.abs() as f64 * 2f64.powi(-11) + 6e-8,
                GgmlType::BF16 => xi.abs() as f64 * 2f64.powi(-8),
                // d = amax / 127 is stored as f16 (relative error 2^-11; q d <= ~amax).
                GgmlType::Q8_0 | GgmlType::Q8_1 => amax * (0.5 / 127.0 + 2f64.powi(-11)) * 1.001,
                // d is f32.
                GgmlType::Q8_K => amax * (0.5 / 127.0) * 1.001,
                _ => unreachable!(),
            };
        }
    }
    e
}

/// Row lengths to test: 256, 1024, 4096, plus one that exercises odd block counts and tails
/// (1003 for the float types, 3 blocks for the block types).
fn lengths(t: GgmlType) -> [usize; 4] {
    let odd = if t.is_quantized() { 3 * t.block_size() } else { 1003 };
    [256, 1024, 4096, odd]
}

#[test]
fn vec_dot_matches_f64_dot_of_dequantized_weights() {
    let mut rng = Rng(0x5EED_0001);
    for t in GgmlType::WEIGHT_TYPES {
        let at = vec_dot_type(t);
        for n in lengths(t) {
            for trial in 0..3 {
                let w = random_weights(t, n, &mut rng);
                let x: Vec<f32> = (0..n).map(|_| normal(&mut rng, 1.0)).collect();
                let mut acts = Vec::new();
                quantize_row_into(at, &x, &mut acts).unwrap();
                let mut wf = vec![0f32; n];
                dequantize(t, &w, &mut wf).unwrap();
                let exact: f64 = wf.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
                let abs_sum: f64 = wf.iter().zip(&x).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                // Tolerance: the activation quantization error can move the result by at most
                // sum_i |w_i| * err_i; for Q8_1 the stored block sum s (f16, relative 2^-11)
                // multiplies the weight min; plus f32 rounding of the accumulation, 1e-4 relative.
                let eb = act_err_bound(at, &x);
                let mut tol: f64 = wf.iter().zip(&eb).map(|(&a, &e)| a.abs() as f64 * e).sum();
                if at == GgmlType::Q8_1 {
                    for (wb, xb) in w.chunks(t.type_size()).zip(x.chunks(32)) {
                        let m = f16::from_le_bytes([wb[2], wb[3]]).to_f32().abs() as f64;
                        let s: f64 = xb.iter().map(|v| v.abs() as f64).sum();
                        tol += m * s * (2f64.powi(-10) + 0.5 / 127.0);
                    }
                }
                tol += 1e-4 * abs_sum + 1e-6;
                let got = vec_dot(t, n, &w, &acts) as f64;
                assert!(
                    (got - exact).abs() <= tol,
                    "{t} n={n} trial {trial}: vec_dot {got}, exact {exact}, err {}, tol {tol}, sum|wx| {abs_sum}",
                    (got - exact).abs()
                );
                // The bound must be meaningfully smaller than the result's scale, or the test
                // could not catch a wrong layout.
                assert!(tol < 0.05 * abs_sum, "{t}: tolerance {tol} too loose vs {abs_sum}");
            }
        }
    }
}

#[test]
fn fast_paths_match_scalar_reference() {
    let mut rng = Rng(0x5EED_0002);
    let types = GgmlType::WEIGHT_TYPES.iter().copied().chain([GgmlType::Q8_1, GgmlType::Q8_K]);
    for t in types {
        let at = vec_dot_type(t);
        for n in lengths(t) {
            for _ in 0..4 {
                let w = if matches!(t, GgmlType::Q8_1 | GgmlType::Q8_K) {
                    let x: Vec<f32> = (0..n).map(|_| normal(&mut rng, 1.0)).collect();
                    let mut w = Vec::new();
                    quantize_row_into(t, &x, &mut w).unwrap();
                    w
                } else {
                    random_weights(t, n, &mut rng)
                };
                let x: Vec<f32> = (0..n).map(|_| normal(&mut rng, 0.5)).collect();
                let mut acts = Vec::new();
                quantize_row_into(at, &x, &mut acts).unwrap();
                let mut wf = vec![0f32; n];
                dequantize(t, &w, &mut wf).unwrap();
                let mut af = vec![0f32; n];
                dequantize(at, &acts, &mut af).unwrap();
                let abs_sum: f64 = wf.iter().zip(&af).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                let r = vec_dot_ref(t, n, &w, &acts) as f64;
                // Same integer sums; only the order of f32 additions differs: 5e-5 relative to
                // sum |w_i a_i|. (Q4_1/Q5_1 also add m * s per block, bounded by the same sum.)
                let tol = 5e-5 * abs_sum + 1e-6;
                let fast = vec_dot(t, n, &w, &acts) as f64;
                let port = vec_dot_portable(t, n, &w, &acts) as f64;
                assert!((fast - r).abs() <= tol, "{t} n={n}: vec_dot {fast} vs reference {r} (tol {tol})");
                assert!((port - r).abs() <= tol, "{t} n={n}: portable {port} vs reference {r} (tol {tol})");
            }
        }
    }
}

#[test]
fn quantize_round_trips() {
    let mut rng = Rng(0x5EED_0003);
    for at in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K] {
        let n = 1024;
        let mut x: Vec<f32> = (0..n).map(|_| normal(&mut rng, 2.0)).collect();
        x[0..32].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
        let mut q = Vec::new();
        quantize_row_into(at, &x, &mut q).unwrap();
        assert_eq!(q.len() as u64, at.row_bytes(n as u64).unwrap());
        let mut y = vec![0f32; n];
        dequantize(at, &q, &mut y).unwrap();
        let eb = act_err_bound(at, &x);
        for i in 0..n {
            assert!(((y[i] - x[i]) as f64).abs() <= eb[i] + 1e-7, "{at} [{i}]: {} -> {}", x[i], y[i]);
        }
        if at == GgmlType::Q8_1 {
            for b in q.chunks_exact(36) {
                let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
                let s = f16::from_le_bytes([b[2], b[3]]).to_f32();
                let sum: i32 = b[4..].iter().map(|&v| v as i8 as i32).sum();
                assert!((s - d * sum as f32).abs() <= 1e-3 * (d * sum as f32).abs() + 1e-6);
            }
        }
        if at == GgmlType::Q8_K {
            for b in q.chunks_exact(292) {
                for g in 0..16 {
                    let sum: i32 = b[4 + 16 * g..4 + 16 * g + 16].iter().map(|&v| v as i8 as i32).sum();
                    assert_eq!(sum, i16::from_le_bytes([b[260 + 2 * g], b[261 + 2 * g]]) as i32);
                }
            }
        }
        if at == GgmlType::BF16 {
            assert_eq!(bf16::from_le_bytes([q[64], q[65]]).to_f32(), bf16::from_f32(x[32]).to_f32());
        }
    }
}

#[test]
fn bad_lengths_are_errors() {
    let mut out = vec![0f32; 256];
    for t in GgmlType::WEIGHT_TYPES {
        let good = t.row_bytes(256).unwrap() as usize;
        let bytes = vec![0u8; good + 1];
        assert!(dequantize(t, &bytes[..good], &mut out).is_ok(), "{t}");
        assert!(dequantize(t, &bytes, &mut out).is_err(), "{t}: one byte too many");
        assert!(dequantize(t, &bytes[..good - 1], &mut out).is_err(), "{t}: one byte short");
        assert!(dequantize(t, &[], &mut out).is_err(), "{t}: empty");
        if t.is_quantized() {
            // 255 elements: not a whole number of blocks.
            assert!(dequantize(t, &bytes[..good], &mut out[..255]).is_err(), "{t}: partial block");
        }
    }
    let x = vec![1f32; 100];
    let mut q = vec![1u8; 3];
    for t in [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K] {
        assert!(quantize_row_into(t, &x, &mut q).is_err(), "{t}: 100 elements");
    }
    for t in [GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K] {
        assert!(quantize_row_into(t, &vec![0f32; 256], &mut q).is_err(), "{t}: not an activation format");
    }
    assert!(quantize_row_into(GgmlType::F16, &x, &mut q).is_ok());
    assert_eq!(q.len(), 200);
}

/// `vec_dot` has no `Result` (hot path) and debug-asserts its lengths; in release builds wrong
/// lengths must still not panic or read out of bounds.
#[test]
fn vec_dot_with_short_slices_does_not_panic_in_release() {
    if cfg!(debug_assertions) {
        return;
    }
    for t in GgmlType::WEIGHT_TYPES {
        let n = 1024;
        let at = vec_dot_type(t);
        let w = vec![0x11u8; t.row_bytes(n as u64).unwrap() as usize];
        let a = vec![0x22u8; at.row_bytes(n as u64).unwrap() as usize];
        for (wl, al) in [(w.len() / 2, a.len()), (w.len(), a.len() / 3), (0, 0), (w.len() - 1, a.len() - 1)] {
            let _ = vec_dot(t, n, &w[..wl], &a[..al]);
            let _ = vec_dot_portable(t, n, &w[..wl], &a[..al]);
        }
        let _ = vec_dot(t, n + 5, &w, &a);
    }
}

/// Where the portable path follows llama.cpp's x86 accumulation order (legacy types and Q4_K),
/// it gives the same bits as the AVX2 kernels: wasm and x86 agree exactly.
#[test]
fn portable_path_is_bit_identical_to_avx2_for_llamacpp_ordered_types() {
    let mut rng = Rng(0x5EED_0003);
    let types =
        [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K];
    for t in types {
        let at = vec_dot_type(t);
        for n in lengths(t) {
            for _ in 0..8 {
                let w = random_weights(t, n, &mut rng);
                let x: Vec<f32> = (0..n).map(|_| normal(&mut rng, 0.5)).collect();
                let mut acts = Vec::new();
                quantize_row_into(at, &x, &mut acts).unwrap();
                let fast = vec_dot(t, n, &w, &acts);
                let port = vec_dot_portable(t, n, &w, &acts);
                assert_eq!(fast.to_bits(), port.to_bits(), "{t} n={n}: vec_dot {fast} vs portable {port}");
            }
        }
    }
}

/// Tiles of weight rows times activation rows give exactly the bits of one `vec_dot` per pair,
/// for every weight type (tiled kernels on x86 for the legacy types, the loop elsewhere).
#[test]
fn tiles_are_bit_identical_to_vec_dot() {
    fn check<const R: usize, const C: usize>(t: GgmlType, n: usize, rng: &mut Rng) {
        let at = vec_dot_type(t);
        let w: Vec<Vec<u8>> = (0..R).map(|_| random_weights(t, n, rng)).collect();
        let a: Vec<Vec<u8>> = (0..C)
            .map(|_| {
                let x: Vec<f32> = (0..n).map(|_| normal(rng, 0.5)).collect();
                let mut acts = Vec::new();
                quantize_row_into(at, &x, &mut acts).unwrap();
                acts
            })
            .collect();
        let mut out = vec![0f32; R * C];
        vec_dot_tile::<R, C>(t, n, &w.concat(), w[0].len(), &a.concat(), a[0].len(), &mut out);
        for r in 0..R {
            for c in 0..C {
                let want = vec_dot(t, n, &w[r], &a[c]);
                assert_eq!(out[r * C + c].to_bits(), want.to_bits(), "{t} n={n} {R}x{C} tile ({r},{c})");
            }
        }
    }
    let mut rng = Rng(0x5EED_0004);
    for t in GgmlType::WEIGHT_TYPES {
        for n in lengths(t) {
            check::<1, 1>(t, n, &mut rng);
            check::<4, 1>(t, n, &mut rng);
            check::<1, 4>(t, n, &mut rng);
            check::<2, 4>(t, n, &mut rng);
        }
    }
}

/// `count` rows of random activations (`n` elements each) in `vec_dot_type(t)`.
fn activation_rows(t: GgmlType, n: usize, count: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let x: Vec<f32> = (0..n).map(|_| normal(rng, 0.5)).collect();
            let mut acts = Vec::new();
            quantize_row_into(vec_dot_type(t), &x, &mut acts).unwrap();
            acts
        })
        .collect()
}

/// Prefill's 1 x 4 tile with the activation scales converted beforehand (`tile_scales`,
/// `vec_dot_tile4`) gives exactly the bits of one `vec_dot` per row, for every weight type.
#[test]
fn scaled_tiles_are_bit_identical_to_vec_dot() {
    let mut rng = Rng(0x5EED_0006);
    for t in GgmlType::WEIGHT_TYPES {
        for n in lengths(t) {
            for _ in 0..4 {
                let w = random_weights(t, n, &mut rng);
                let a = activation_rows(t, n, 4, &mut rng);
                let (acts, arb) = (a.concat(), a[0].len());
                let mut sc = vec![f32::NAN; 8 * (n / t.block_size())];
                tile_scales(t, n, &acts, arb, &mut sc);
                let mut out = [0f32; 4];
                vec_dot_tile4(t, n, &w, &acts, arb, &sc, &mut out);
                for c in 0..4 {
                    let want = vec_dot(t, n, &w, &a[c]);
                    assert_eq!(out[c].to_bits(), want.to_bits(), "{t} n={n} row {c}: {} vs {want}", out[c]);
                }
                assert!(out.iter().any(|&v| v != 0.0), "{t} n={n}: all zero");
            }
        }
    }
}

/// Prefill's 1 x 8 tile (`vec_dot_tile8`: two groups of four rows with their converted scales)
/// gives exactly the bits of one `vec_dot` per row, for every weight type (Q4_0, Q5_0 and Q8_0
/// through their own kernel on x86, the others through two 1 x 4 tiles).
#[test]
fn eight_row_tiles_are_bit_identical_to_vec_dot() {
    let mut rng = Rng(0x5EED_0009);
    for t in GgmlType::WEIGHT_TYPES {
        for n in lengths(t) {
            for _ in 0..3 {
                let w = random_weights(t, n, &mut rng);
                let a = activation_rows(t, n, 8, &mut rng);
                let (acts, arb) = (a.concat(), a[0].len());
                let gsz = 8 * (n / t.block_size());
                let (mut sc0, mut sc1) = (vec![f32::NAN; gsz], vec![f32::NAN; gsz]);
                tile_scales(t, n, &acts, arb, &mut sc0);
                tile_scales(t, n, &acts[4 * arb..], arb, &mut sc1);
                let mut out = [0f32; 8];
                vec_dot_tile8(t, n, &w, &acts, arb, &sc0, &sc1, &mut out);
                for c in 0..8 {
                    let want = vec_dot(t, n, &w, &a[c]);
                    assert_eq!(out[c].to_bits(), want.to_bits(), "{t} n={n} row {c}: {} vs {want}", out[c]);
                }
                assert!(out.iter().any(|&v| v != 0.0), "{t} n={n}: all zero");
            }
        }
    }
}

/// Prefill's four-row groups (`vec_dot_gemm4_tile`: Q4_K and Q6_K as tiles on x86) give exactly
/// the bits of one `vec_dot_gemm4` per row, for every weight type.
#[test]
fn gemm4_tiles_are_bit_identical_to_gemm4() {
    let mut rng = Rng(0x5EED_0005);
    for t in GgmlType::WEIGHT_TYPES {
        for n in lengths(t) {
            for _ in 0..4 {
                let w = random_weights(t, n, &mut rng);
                let a = activation_rows(t, n, 4, &mut rng);
                let mut out = [0f32; 4];
                vec_dot_gemm4_tile(t, n, &w, &a.concat(), a[0].len(), &mut out);
                for c in 0..4 {
                    let want = vec_dot_gemm4(t, n, &w, &a[c]);
                    assert_eq!(out[c].to_bits(), want.to_bits(), "{t} n={n} row {c}: {} vs {want}", out[c]);
                }
                assert!(out.iter().any(|&v| v != 0.0), "{t} n={n}: all zero");
            }
        }
    }
}

/// The decode loop over weight rows gives exactly the bits of one `vec_dot` per row.
/// The run forms (`vec_dot_tile8_run`, `vec_dot_gemm4_run`: several weight rows in one call,
/// results strided by output row) give exactly the bits of one `vec_dot` / `vec_dot_gemm4` per
/// pair, for every weight type, and write nothing between the strided results.
#[test]
fn tile_runs_are_bit_identical_and_write_only_their_outputs() {
    let mut rng = Rng(0x5EED_000B);
    let (nw, stride, at) = (5usize, 9usize, 2usize);
    for t in GgmlType::WEIGHT_TYPES {
        for n in lengths(t) {
            let rows: Vec<Vec<u8>> = (0..nw).map(|_| random_weights(t, n, &mut rng)).collect();
            let (w, wrb) = (rows.concat(), rows[0].len());
            let a = activation_rows(t, n, 8, &mut rng);
            let (acts, arb) = (a.concat(), a[0].len());
            let gsz = 8 * (n / t.block_size());
            let (mut sc0, mut sc1) = (vec![f32::NAN; gsz], vec![f32::NAN; gsz]);
            tile_scales(t, n, &acts, arb, &mut sc0);
            tile_scales(t, n, &acts[4 * arb..], arb, &mut sc1);
            let sentinel = f32::from_bits(0x7fc0_1234);
            let mut out = vec![sentinel; 8 * stride];
            let mut packed = vec![0u8; 256 * (n / 32)];
            pack_tile8(n, &acts, arb, &mut packed);
            let a8 = Tile8Acts { raw: &acts, arb, packed: &packed, scales: [&sc0, &sc1] };
            vec_dot_tile8_run(t, n, (&w, wrb, nw), &a8, &mut out[at..], stride);
            let mut out4 = vec![sentinel; 4 * stride];
            vec_dot_gemm4_run(t, n, &w, wrb, nw, &acts, arb, &mut out4[at..], stride);
            for (i, (&v, &v4)) in out.iter().zip(out4.iter().chain(std::iter::repeat(&sentinel))).enumerate()
            {
                let (c, j) = (i / stride, (i % stride).wrapping_sub(at));
                if j >= nw {
                    assert_eq!(v.to_bits(), sentinel.to_bits(), "{t} n={n}: wrote index {i}");
                    assert_eq!(v4.to_bits(), sentinel.to_bits(), "{t} n={n}: gemm4 wrote index {i}");
                    continue;
                }
                let want = vec_dot(t, n, &rows[j], &a[c]);
                assert_eq!(v.to_bits(), want.to_bits(), "{t} n={n} weight row {j} row {c}: {v} vs {want}");
                if c < 4 {
                    let want = vec_dot_gemm4(t, n, &rows[j], &a[c]);
                    assert_eq!(v4.to_bits(), want.to_bits(), "{t} n={n} gemm4 weight row {j} row {c}");
                }
            }
        }
    }
}

#[test]
fn rows_are_bit_identical_to_vec_dot() {
    let mut rng = Rng(0x5EED_0006);
    for t in GgmlType::WEIGHT_TYPES {
        let at = vec_dot_type(t);
        for n in lengths(t) {
            let w: Vec<Vec<u8>> = (0..5).map(|_| random_weights(t, n, &mut rng)).collect();
            let x: Vec<f32> = (0..n).map(|_| normal(&mut rng, 0.5)).collect();
            let mut acts = Vec::new();
            quantize_row_into(at, &x, &mut acts).unwrap();
            let mut out = [0f32; 5];
            vec_dot_rows(t, n, &w.concat(), w[0].len(), &acts, &mut out);
            for (j, o) in out.iter().enumerate() {
                let want = vec_dot(t, n, &w[j], &acts);
                assert_eq!(o.to_bits(), want.to_bits(), "{t} n={n} row {j}");
            }
        }
    }
}
