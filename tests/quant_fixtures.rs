//! wick's `dequantize` against fixtures produced by the `gguf` Python package (0.19.0), whose
//! numpy dequantization is the reference (tests/scripts/make_quant_fixtures.py writes them).
//!
//! The comparison is **bit-exact** (f32 bit patterns equal, -0.0 and +0.0 distinguished): wick
//! does the same float operations in the same order as the numpy code.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use wick::quant::{dequantize, GgmlType};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn check(t: GgmlType) {
    let path = format!("{}/tests/data/quant/{}.json", env!("CARGO_MANIFEST_DIR"), t.name());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], t.name());
    let n = v["n_elements"].as_u64().unwrap() as usize;
    let blocks = unhex(v["blocks_hex"].as_str().unwrap());
    let expected: Vec<f32> = unhex(v["expected_f32_le_hex"].as_str().unwrap())
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(expected.len(), n);
    assert!(n >= 96, "fixture too small");
    let mut got = vec![f32::NAN; n];
    dequantize(t, &blocks, &mut got).unwrap();
    let mut nonzero = 0;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(
            g.to_bits(),
            e.to_bits(),
            "{t}: element {i} (block {}): wick {g}, gguf {e}",
            i / t.block_size()
        );
        nonzero += (*e != 0.0) as usize;
    }
    // Guard against a degenerate fixture that any implementation would pass.
    assert!(nonzero > n / 2, "{t}: fixture is mostly zeros");
}

macro_rules! fixture_tests {
    ($($name:ident => $t:ident),* $(,)?) => {
        $(#[test] fn $name() { check(GgmlType::$t); })*
    };
}

fixture_tests! {
    f32 => F32, f16 => F16, bf16 => BF16,
    q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0,
    q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K,
}

#[test]
fn every_weight_type_has_a_fixture() {
    for t in GgmlType::WEIGHT_TYPES {
        let path = format!("{}/tests/data/quant/{}.json", env!("CARGO_MANIFEST_DIR"), t.name());
        assert!(std::path::Path::new(&path).exists(), "missing {path}");
    }
}
