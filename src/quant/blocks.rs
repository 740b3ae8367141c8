//! Byte layouts of the ggml block formats, and their unpacking into small integers.
//!
//! Layouts mirror `ggml-common.h` of llama.cpp (ggml-org/llama.cpp, `block_q4_0` ... `block_q8_K`).
//! Blocks are parsed by byte offset from `&[u8; SIZE]` (GGUF data has no alignment guarantee, so
//! `#[repr(C)]` structs with `u16` fields could not be referenced in place); all multi-byte
//! fields are little-endian. The constants below are checked against [`GgmlType::type_size`].
//!
//! Every weight block decomposes as `x[i] = d * sc[i/16] * q[i] - dmin * mn[i/16]` (legacy
//! 32-element blocks: `x[i] = d * q[i] + m`). The unpack functions produce that decomposition;
//! dequantization and the reference dot products are both built on it, so the only bit-twiddling
//! that is shared between them is here.

// Index loops mirror the documented layouts more plainly than zipped iterators.
#![allow(clippy::needless_range_loop)]

use super::GgmlType;
use half::bf16;

/// Elements in a K-quant super-block.
pub const QK_K: usize = 256;
/// Elements in a legacy block.
pub const QK: usize = 32;

// Block sizes in bytes.
pub const Q4_0_BYTES: usize = 2 + 16;
pub const Q4_1_BYTES: usize = 2 + 2 + 16;
pub const Q5_0_BYTES: usize = 2 + 4 + 16;
pub const Q5_1_BYTES: usize = 2 + 2 + 4 + 16;
pub const Q8_0_BYTES: usize = 2 + 32;
pub const Q8_1_BYTES: usize = 2 + 2 + 32;
/// scales[16], qs[64], d, dmin.
pub const Q2_K_BYTES: usize = 16 + 64 + 2 + 2;
/// hmask[32], qs[64], scales[12], d.
pub const Q3_K_BYTES: usize = 32 + 64 + 12 + 2;
/// d, dmin, scales[12], qs[128].
pub const Q4_K_BYTES: usize = 2 + 2 + 12 + 128;
/// d, dmin, scales[12], qh[32], qs[128].
pub const Q5_K_BYTES: usize = 2 + 2 + 12 + 32 + 128;
/// ql[128], qh[64], scales[16] (i8), d.
pub const Q6_K_BYTES: usize = 128 + 64 + 16 + 2;
/// d (f32), qs[256] (i8), bsums[16] (i16).
pub const Q8_K_BYTES: usize = 4 + 256 + 32;

const _: () = {
    assert!(Q4_0_BYTES == 18);
    assert!(Q4_1_BYTES == 20);
    assert!(Q5_0_BYTES == 22);
    assert!(Q5_1_BYTES == 24);
    assert!(Q8_0_BYTES == 34);
    assert!(Q8_1_BYTES == 36);
    assert!(Q2_K_BYTES == 84);
    assert!(Q3_K_BYTES == 110);
    assert!(Q4_K_BYTES == 144);
    assert!(Q5_K_BYTES == 176);
    assert!(Q6_K_BYTES == 210);
    assert!(Q8_K_BYTES == 292);
};

/// Little-endian f16 at byte `off`, as f32.
#[inline(always)]
pub fn f16_at(b: &[u8], off: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[off], b[off + 1]]))
}

/// Exact f16 -> f32 conversion without branches, for loops over many values (they vectorize):
/// the f16 bits moved into f32 position read as a number 2^112 too small, for normals and
/// subnormals alike; Inf/NaN get the all-ones f32 exponent by a select.
#[inline(always)]
pub fn f16_to_f32_branchless(h: u16) -> f32 {
    let o = ((h & 0x7fff) as u32) << 13;
    let v = f32::from_bits(o) * f32::from_bits(0x7780_0000); // * 2^112
    let v = if o >= 0x7c00 << 13 { f32::from_bits(o | 0x7f80_0000) } else { v };
    f32::from_bits(v.to_bits() | ((h & 0x8000) as u32) << 16)
}

/// Exact f16 -> f32 conversion for one value.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    // Re-bias the exponent; subnormals are renormalized through one float subtraction and
    // Inf/NaN get the all-ones f32 exponent. (Faster than `f16_to_f32_branchless` for one value
    // at a time: the branches are predictable.)
    const EXP: u32 = 0x7c00 << 13;
    let mut o = ((h & 0x7fff) as u32) << 13;
    let exp = o & EXP;
    o += (127 - 15) << 23;
    if exp == EXP {
        o += (128 - 16) << 23;
    } else if exp == 0 {
        o += 1 << 23;
        o = (f32::from_bits(o) - f32::from_bits(113 << 23)).to_bits();
    }
    f32::from_bits(o | ((h & 0x8000) as u32) << 16)
}

/// Little-endian bf16 at byte `off`, as f32.
#[inline(always)]
pub fn bf16_at(b: &[u8], off: usize) -> f32 {
    bf16::from_le_bytes([b[off], b[off + 1]]).to_f32()
}

/// Little-endian f32 at byte `off`.
#[inline(always)]
pub fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// A legacy 32-element block: `x[i] = d * q[i] (+ m when has_min)`.
pub struct Legacy {
    pub d: f32,
    pub m: f32,
    pub has_min: bool,
    pub q: [i8; QK],
}

/// Unpack one legacy block (`b.len() == t.type_size()`; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).
/// Always inlined so that a constant `t` specializes it.
#[inline(always)]
pub fn unpack_legacy(t: GgmlType, b: &[u8]) -> Legacy {
    let mut q = [0i8; QK];
    let d = f16_at(b, 0);
    match t {
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            // Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble.
            let (off, bias) = if t == GgmlType::Q4_0 { (2, 8) } else { (4, 0) };
            for j in 0..16 {
                q[j] = (b[off + j] & 0xF) as i8 - bias;
                q[j + 16] = (b[off + j] >> 4) as i8 - bias;
            }
            let has_min = t == GgmlType::Q4_1;
            Legacy { d, m: if has_min { f16_at(b, 2) } else { 0.0 }, has_min, q }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            // Bit j of the 32-bit qh is the fifth bit of element j.
            let (hoff, bias) = if t == GgmlType::Q5_0 { (2, 16) } else { (4, 0) };
            let qh = u32::from_le_bytes([b[hoff], b[hoff + 1], b[hoff + 2], b[hoff + 3]]);
            for j in 0..16 {
                let lo = b[hoff + 4 + j];
                let h0 = ((qh >> j) & 1) as u8;
                let h1 = ((qh >> (j + 16)) & 1) as u8;
                q[j] = ((lo & 0xF) | (h0 << 4)) as i8 - bias;
                q[j + 16] = ((lo >> 4) | (h1 << 4)) as i8 - bias;
            }
            let has_min = t == GgmlType::Q5_1;
            Legacy { d, m: if has_min { f16_at(b, 2) } else { 0.0 }, has_min, q }
        }
        GgmlType::Q8_0 | GgmlType::Q8_1 => {
            // Q8_1 stores s = d * sum(q) after d; it is not part of the value.
            let off = if t == GgmlType::Q8_0 { 2 } else { 4 };
            for j in 0..QK {
                q[j] = b[off + j] as i8;
            }
            Legacy { d, m: 0.0, has_min: false, q }
        }
        _ => unreachable!("unpack_legacy called with {t}"),
    }
}

/// A K-quant super-block: `x[i] = d * sc[i/16] * q[i] - dmin * mn[i/16]`.
/// (Q4_K/Q5_K have 8 scales of 32 elements; they appear here duplicated into 16.)
pub struct KBlock {
    pub d: f32,
    pub dmin: f32,
    pub sc: [i16; 16],
    pub mn: [i16; 16],
    pub q: [i8; QK_K],
}

/// The 6-bit scale and min of sub-block `j` (0..8) of Q4_K/Q5_K from their 12 packed bytes:
/// bytes 0..4 hold scales 0..4 in their low 6 bits, bytes 4..8 mins 0..4; scales and mins 4..8
/// have their low 4 bits in bytes 8..12 and their top 2 bits in the spare top bits of 0..8.
#[inline(always)]
pub fn k4_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// The 16 signed 6-bit scales of Q3_K (already minus 32) from their 12 packed bytes:
/// low 4 bits of scale i are nibble (i / 8) of byte i % 8, the top 2 bits are bits
/// 2 * (i / 4) of byte 8 + i % 4. Done four scales at a time in u32 words.
#[inline(always)]
pub fn q3k_scales(s: &[u8]) -> [i8; 16] {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (lo0, lo1, hi) = (word(0), word(1), word(2));
    let (m4, m2) = (0x0f0f_0f0fu32, 0x0303_0303u32);
    let words = [
        (lo0 & m4) | ((hi & m2) << 4),
        (lo1 & m4) | (((hi >> 2) & m2) << 4),
        ((lo0 >> 4) & m4) | (((hi >> 4) & m2) << 4),
        ((lo1 >> 4) & m4) | (((hi >> 6) & m2) << 4),
    ];
    let mut out = [0i8; 16];
    for (k, w) in words.iter().enumerate() {
        for (j, b) in w.to_le_bytes().iter().enumerate() {
            out[4 * k + j] = *b as i8 - 32;
        }
    }
    out
}

/// Unpack one K-quant weight block (`b.len() == t.type_size()`; Q2_K..Q6_K).
/// Always inlined so that a constant `t` specializes it.
#[inline(always)]
pub fn unpack_k(t: GgmlType, b: &[u8]) -> KBlock {
    let mut k = KBlock { d: 0.0, dmin: 0.0, sc: [0; 16], mn: [0; 16], q: [0; QK_K] };
    match t {
        GgmlType::Q2_K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            k.d = f16_at(b, 80);
            k.dmin = f16_at(b, 82);
            for i in 0..16 {
                k.sc[i] = (scales[i] & 0xF) as i16;
                k.mn[i] = (scales[i] >> 4) as i16;
            }
            // Chunk c (32 elements) = half c / 4, 2-bit field c % 4 of qs[32 * half ..][0..32].
            for c in 0..8 {
                let (h, s) = (c / 4, 2 * (c % 4));
                for l in 0..32 {
                    k.q[32 * c + l] = ((qs[32 * h + l] >> s) & 3) as i8;
                }
            }
        }
        GgmlType::Q3_K => {
            let (hmask, qs, scales) = (&b[0..32], &b[32..96], &b[96..108]);
            k.d = f16_at(b, 108);
            let sc = q3k_scales(scales);
            for i in 0..16 {
                k.sc[i] = sc[i] as i16;
            }
            // Like Q2_K, plus a high bit c of hmask[l]; the value is offset by -4 when it is clear.
            for c in 0..8 {
                let (h, s) = (c / 4, 2 * (c % 4));
                for l in 0..32 {
                    let lo = ((qs[32 * h + l] >> s) & 3) as i8;
                    let hi = (hmask[l] >> c) & 1;
                    k.q[32 * c + l] = lo - if hi == 0 { 4 } else { 0 };
                }
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            k.d = f16_at(b, 0);
            k.dmin = f16_at(b, 2);
            let scales = &b[4..16];
            for j in 0..8 {
                let (sc, mn) = k4_scale_min(j, scales);
                k.sc[2 * j] = sc as i16;
                k.sc[2 * j + 1] = sc as i16;
                k.mn[2 * j] = mn as i16;
                k.mn[2 * j + 1] = mn as i16;
            }
            let (qh, qs) =
                if t == GgmlType::Q5_K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            // Chunk c: nibble c % 2 of qs[32 * (c / 2)..][0..32]; Q5_K: fifth bit c of qh[l].
            for c in 0..8 {
                for l in 0..32 {
                    let mut v = (qs[32 * (c / 2) + l] >> (4 * (c % 2))) & 0xF;
                    if let Some(qh) = qh {
                        v |= ((qh[l] >> c) & 1) << 4;
                    }
                    k.q[32 * c + l] = v as i8;
                }
            }
        }
        GgmlType::Q6_K => {
            let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
            k.d = f16_at(b, 208);
            for i in 0..16 {
                k.sc[i] = scales[i] as i8 as i16;
            }
            // Half h (128 elements) uses ql[64h..64h+64] and qh[32h..32h+32]. Its chunk c (0..4)
            // takes nibble c / 2 of ql[64h + 32 (c % 2) + l] and 2-bit field c of qh[32h + l].
            for h in 0..2 {
                for c in 0..4 {
                    for l in 0..32 {
                        let lo = (ql[64 * h + 32 * (c % 2) + l] >> (4 * (c / 2))) & 0xF;
                        let hi = (qh[32 * h + l] >> (2 * c)) & 3;
                        k.q[128 * h + 32 * c + l] = (lo | (hi << 4)) as i8 - 32;
                    }
                }
            }
        }
        _ => unreachable!("unpack_k called with {t}"),
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_to_f32_is_exact_for_every_value() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{h:#06x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn q3k_scales_match_the_per_scale_layout() {
        for seed in 0..256u32 {
            let s: [u8; 12] =
                std::array::from_fn(|i| (seed.wrapping_mul(2654435761).rotate_left(i as u32 * 5) >> 3) as u8);
            let want: Vec<i8> = (0..16)
                .map(|i| {
                    let lo = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
                    let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
                    (lo | (hi << 4)) as i8 - 32
                })
                .collect();
            assert_eq!(q3k_scales(&s).to_vec(), want);
        }
    }
}
