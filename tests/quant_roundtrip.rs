//! Weight quantizers: quantize fresh random rows, dequantize, and bound the error per type;
//! and check that the bytes they write read back the same through the `gguf` Python package
//! (tests/data/quant_roundtrip/, made by tests/scripts/make_quant_roundtrip_fixtures.py).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use std::path::PathBuf;

use support::Rng;
use wick::quant::{dequantize, quantize_weights, GgmlType};

/// The row distributions: weights look Gaussian; some rows have outliers, an offset, blocks
/// of zeros or tiny values.
const DISTS: [&str; 6] = ["uniform", "gauss", "outliers", "offset", "zero_blocks", "small"];

fn row(dist: &str, n: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n).map(|_| rng.gauss() * 0.02).collect();
    match dist {
        "uniform" => x.iter_mut().for_each(|v| *v = rng.unit_open() * 2.0 - 1.0),
        "gauss" => {}
        "outliers" => {
            for _ in 0..n / 64 {
                let i = (rng.next() % n as u64) as usize;
                x[i] *= 20.0;
            }
        }
        "offset" => x.iter_mut().for_each(|v| *v += 0.03),
        "zero_blocks" => {
            // Every other block of 256 (and so every other group of 32) is zero.
            for (b, chunk) in x.chunks_mut(256).enumerate() {
                if b % 2 == 0 {
                    chunk.fill(0.0);
                }
            }
        }
        // Small weights (scales near the bottom of f16's normal range).
        "small" => x.iter_mut().for_each(|v| *v *= 0.1),
        _ => unreachable!(),
    }
    x
}

fn rms(v: impl Iterator<Item = f32>) -> f64 {
    let (mut s, mut n) = (0f64, 0usize);
    for x in v {
        s += (x as f64) * (x as f64);
        n += 1;
    }
    (s / n.max(1) as f64).sqrt()
}

/// Relative RMS error bound per type, for rows without outliers (twice that with outliers).
/// Measured worst cases (8 rows of 2048, seed 0x5eed; Gaussian rows are the hardest of those):
/// F16 0.022%, BF16 0.17%, Q8_0 0.55%, Q6_K 2.0%, Q5_K 3.7%, Q5_1 4.0%, Q5_0 4.6%, Q4_K 7.3%,
/// Q4_1 8.1%, Q4_0 8.9%, Q3_K 15.8%, Q2_K 31%. With outliers: Q6_K 3.3%, Q5_0 9.3%, Q4_0 16%.
/// llama.cpp's quantizers write the same bytes (tests/scripts/make_quant_roundtrip_fixtures.py).
fn bound(t: GgmlType) -> f64 {
    use GgmlType::*;
    match t {
        F32 => 0.0,
        F16 => 0.0003,
        BF16 => 0.0025,
        Q8_0 => 0.007,
        Q6_K => 0.025,
        Q5_K => 0.047,
        Q5_1 => 0.05,
        Q5_0 => 0.057,
        Q4_K => 0.09,
        Q4_1 => 0.10,
        Q4_0 => 0.11,
        Q3_K => 0.195,
        Q2_K => 0.39,
        _ => unreachable!(),
    }
}

fn roundtrip_error(t: GgmlType, x: &[f32]) -> f64 {
    let mut q = Vec::new();
    quantize_weights(t, x, &mut q).unwrap();
    assert_eq!(q.len() as u64, t.row_bytes(x.len() as u64).unwrap());
    let mut y = vec![0f32; x.len()];
    dequantize(t, &q, &mut y).unwrap();
    let e = rms(x.iter().zip(&y).map(|(a, b)| a - b));
    let r = rms(x.iter().copied());
    if r == 0.0 {
        assert_eq!(e, 0.0, "{t}: zeros do not round-trip");
        0.0
    } else {
        e / r
    }
}

#[test]
fn roundtrip_error_is_bounded_per_type() {
    let mut rng = Rng(0x5eed);
    let mut report = String::new();
    let mut failures = Vec::new();
    for t in GgmlType::WEIGHT_TYPES {
        report += &format!("{:5}", t.name());
        for dist in DISTS {
            let mut worst = 0f64;
            for _ in 0..8 {
                let x = row(dist, 2048, &mut rng);
                worst = worst.max(roundtrip_error(t, &x));
            }
            report += &format!("  {dist} {:.3}%", worst * 100.0);
            // Outlier rows cost a little more for the formats with few levels.
            let b = if dist == "outliers" { bound(t) * 2.0 } else { bound(t) };
            if worst > b {
                failures.push(format!("{t} {dist}: {:.3}% > {:.3}%", worst * 100.0, b * 100.0));
            }
        }
        report += "\n";
    }
    eprintln!("relative RMS error (worst of 8 rows of 2048):\n{report}");
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn zeros_and_constants_roundtrip() {
    for t in GgmlType::WEIGHT_TYPES {
        assert_eq!(roundtrip_error(t, &[0.0; 512]), 0.0, "{t}");
        let e = roundtrip_error(t, &[0.25; 512]);
        assert!(e < 0.01, "{t}: constant row error {e}");
    }
}

/// The fixture rows: seed 1, 4 rows of 512 per type, distribution by row.
pub fn fixture_input(t: GgmlType) -> Vec<f32> {
    let mut rng = Rng(1 + t.id() as u64);
    let mut x = Vec::new();
    for d in ["gauss", "outliers", "zero_blocks", "uniform"] {
        x.extend(row(d, 512, &mut rng));
    }
    x
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant_roundtrip")
}

/// wick's quantized bytes equal the committed ones, and both `dequantize` and the `gguf`
/// package read them as the same f32 values (bit for bit). With WICK_REGEN_QUANT_FIXTURES=1
/// the bytes are rewritten; then run tests/scripts/make_quant_roundtrip_fixtures.py.
#[test]
fn quantized_bytes_read_back_like_gguf_py() {
    let dir = fixture_dir();
    let regen = std::env::var_os("WICK_REGEN_QUANT_FIXTURES").is_some();
    for t in GgmlType::WEIGHT_TYPES {
        let x = fixture_input(t);
        let mut q = Vec::new();
        quantize_weights(t, &x, &mut q).unwrap();
        let qpath = dir.join(format!("{}.bin", t.name()));
        if regen {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&qpath, &q).unwrap();
            let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(dir.join(format!("{}.input.f32", t.name())), raw).unwrap();
            continue;
        }
        let want = std::fs::read(&qpath).expect("fixture missing: see this test's comment");
        assert!(want == q, "{t}: quantized bytes changed (regenerate the fixtures if intended)");
        let raw = std::fs::read(dir.join(format!("{}.gguf_py.f32", t.name()))).unwrap();
        let gguf: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let mut y = vec![0f32; x.len()];
        dequantize(t, &q, &mut y).unwrap();
        assert_eq!(gguf.len(), y.len());
        for (i, (a, b)) in y.iter().zip(&gguf).enumerate() {
            assert!(a.to_bits() == b.to_bits(), "{t}: element {i}: wick {a} vs gguf {b}");
        }
    }
}
