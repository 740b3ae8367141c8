//! Sampling on the device: the argmax of each sequence's row of logits.

use super::Builder;
use crate::exec::webgpu::params::ArgmaxParams;
use crate::exec::Rows;

/// The parameters of the argmax (argmax.wgsl) over the graph's logits: their offset in the
/// uniform buffer and the chunks of a row. The dispatches themselves are recorded only for
/// steps that read back a token id (record.rs).
pub fn argmax(b: &mut Builder) -> (u64, u32) {
    let g = b.g;
    let n_vocab = g.cols(g.logits);
    let (parts, chunk) = chunks(n_vocab);
    let off = b.push(&ArgmaxParams {
        n: n_vocab as u32,
        all: (g.acts[g.logits.0 as usize].rows == Rows::All) as u32,
        n_tok: g.n_tokens as u32,
        n_seq: g.n_seqs as u32,
        parts,
        chunk,
    });
    (off, parts)
}

/// The first pass's chunks of an `n`-value row: (count, values each). About 2,048 values a
/// chunk (one round of eight loads a invocation), at most 256 chunks (the second pass's
/// workgroup), each a multiple of 256 values.
fn chunks(n: usize) -> (u32, u32) {
    let parts = n.div_ceil(2048).clamp(1, 256);
    let chunk = n.div_ceil(parts).div_ceil(256) * 256;
    (parts as u32, chunk as u32)
}

#[cfg(test)]
mod tests {
    use super::chunks;

    #[test]
    fn chunks_cover_the_row() {
        for n in [1, 33, 255, 256, 2047, 2049, 49152, 152_067, 262_144, 1 << 20, 3 << 20] {
            let (parts, chunk) = chunks(n);
            assert!((1..=256).contains(&parts) && chunk % 256 == 0, "{n}");
            assert!(parts as usize * chunk as usize >= n, "{n}: {parts} x {chunk}");
            assert!((parts as usize - 1) * (chunk as usize) < n, "{n}: an empty chunk");
        }
        assert_eq!(chunks(262_144), (128, 2048));
    }
}
