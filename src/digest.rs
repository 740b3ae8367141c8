//! A model's identity for caches of its KV (issue 18's prompt cache): a 128-bit FNV-1a digest
//! of what decides the keys and values a token sequence gets, computed while the weights
//! stream in, never by reading gigabytes again.
//!
//! It covers the hyperparameters (their `Debug` text: RoPE bases and scales, norms, shapes),
//! the tensor table (names, types, shapes) and a sample of every tensor's bytes: the
//! [`WINDOW`] bytes at every multiple of [`STRIDE`] (and the first), about 1/4096 of the
//! weights (1.2 MB of an 8b Q4_K_M file). Two fine-tunes of one base differ in every tensor,
//! so a sample tells them apart; a file edited in a few bytes between samples would not be
//! (the cache would then be stale but well-formed: outputs drift, nothing is unsafe).
//! FNV-1a is not a cryptographic hash: the digest names a model, it does not authenticate
//! one. The samples do not depend on how the stream is cut into chunks.

use crate::gguf::TensorInfo;
use crate::model::Hparams;

/// Bytes sampled at each sample point of a tensor.
pub const WINDOW: u64 = 64;
/// Distance between sample points in a tensor's bytes.
pub const STRIDE: u64 = 256 << 10;

const FNV_OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
const FNV_PRIME: u128 = 0x0000000001000000000000000000013b;

/// FNV-1a, 128 bits.
#[derive(Debug, Clone)]
pub struct Fnv128(u128);

impl Default for Fnv128 {
    fn default() -> Self {
        Fnv128(FNV_OFFSET)
    }
}

impl Fnv128 {
    /// Mix in `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u128).wrapping_mul(FNV_PRIME);
        }
    }
    /// The digest so far, big-endian.
    pub fn finish(&self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

/// The digest of a model being loaded: [`ModelDigest::observe`] every chunk of tensor data
/// in stream order, then [`ModelDigest::finish`].
#[derive(Debug, Clone)]
pub struct ModelDigest {
    h: Fnv128,
}

impl ModelDigest {
    /// Start with what the header tells.
    pub fn new(hparams: &Hparams, tensors: &[TensorInfo]) -> ModelDigest {
        let mut h = Fnv128::default();
        h.update(b"wick model digest 1\0");
        h.update(format!("{hparams:?}").as_bytes());
        for t in tensors {
            h.update(t.name.as_bytes());
            h.update(&[0]);
            h.update(format!("{}", t.dtype).as_bytes());
            for d in &t.dims {
                h.update(&d.to_le_bytes());
            }
        }
        ModelDigest { h }
    }

    /// Mix in the sampled bytes of `data`, which lies at byte `offset` of a tensor.
    pub fn observe(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        // The sample point at or before `offset`, whose window may reach into this chunk.
        let mut s = offset / STRIDE * STRIDE;
        while s < end {
            let (a, b) = (s.max(offset), (s + WINDOW).min(end));
            if a < b {
                self.h.update(&data[(a - offset) as usize..(b - offset) as usize]);
            }
            s += STRIDE;
        }
    }

    /// The digest.
    pub fn finish(&self) -> [u8; 16] {
        self.h.finish()
    }
}

/// Lower-case hex of a digest.
pub fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv128_known_value() {
        // FNV-1a 128 of "a" (the reference implementation's test vector).
        let mut h = Fnv128::default();
        h.update(b"a");
        assert_eq!(hex(&h.finish()), "d228cb696f1a8caf78912b704e4a8964");
    }

    #[test]
    fn samples_do_not_depend_on_chunks() {
        let data: Vec<u8> = (0..3 * STRIDE as usize + 100).map(|i| (i * 31 % 251) as u8).collect();
        let digest = |cut: usize| {
            let mut d = ModelDigest { h: Fnv128::default() };
            let mut at = 0;
            for piece in data.chunks(cut) {
                d.observe(at, piece);
                at += piece.len() as u64;
            }
            d.finish()
        };
        let whole = digest(data.len());
        for cut in [1, 7, 64, 4096, STRIDE as usize - 3, STRIDE as usize + 5] {
            assert_eq!(digest(cut), whole, "chunks of {cut}");
        }
        // A byte in a sample changes it; a byte between samples does not.
        let mut d = ModelDigest { h: Fnv128::default() };
        let mut other = data.clone();
        other[STRIDE as usize + 3] ^= 1;
        d.observe(0, &other);
        assert_ne!(d.finish(), whole);
        let mut d = ModelDigest { h: Fnv128::default() };
        other = data.clone();
        other[STRIDE as usize + WINDOW as usize] ^= 1;
        d.observe(0, &other);
        assert_eq!(d.finish(), whole);
    }
}
