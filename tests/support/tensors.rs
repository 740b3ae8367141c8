//! Synthetic tensors: random GGUF bytes of any weight type, with block scales in a sane range
//! so that dequantized values stay near [-1, 1] (random scale bytes would give f16 infinities
//! and NaNs).

use half::{bf16, f16};
use wick::quant::GgmlType;

use super::rng::Rng;

/// Byte offsets of the f16 scales (d, and dmin or m where the type has one) inside one block.
pub fn scale_offsets(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => panic!("no generator for {t}"),
    }
}

/// Random bytes of `count` elements of type `t` (a whole number of blocks): floats uniform in
/// [-1, 1), quantized blocks with random quants and f16 scales in [0.002, 0.022].
pub fn random_bytes(t: GgmlType, count: usize, rng: &mut Rng) -> Vec<u8> {
    match t {
        GgmlType::F32 => return rng.vec(count, 1.0).iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => {
            return rng.vec(count, 1.0).iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect()
        }
        GgmlType::BF16 => {
            return rng.vec(count, 1.0).iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect()
        }
        _ => {}
    }
    random_blocks(t, count, rng, |rng| 0.002 + 0.01 * (rng.uniform() + 1.0))
}

/// Random blocks of `count` elements of the block type `t` (a whole number of blocks):
/// random quants, each f16 scale drawn by `scale`.
pub fn random_blocks(
    t: GgmlType,
    count: usize,
    rng: &mut Rng,
    mut scale: impl FnMut(&mut Rng) -> f32,
) -> Vec<u8> {
    assert_eq!(count % t.block_size(), 0, "{count} values of {t} are not whole blocks");
    let bs = t.type_size();
    let mut b = rng.bytes(count / t.block_size() * bs);
    for blk in b.chunks_mut(bs) {
        for &o in scale_offsets(t) {
            let v = f16::from_f32(scale(rng));
            blk[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    b
}

/// F32 values as GGUF bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// GGUF bytes as F32 values.
pub fn f32_values(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}
