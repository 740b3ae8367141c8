//! Sampling on the device: the argmax of each sequence's row of logits.

use super::Builder;
use crate::exec::webgpu::params::ArgmaxParams;
use crate::exec::Rows;

/// The parameters of the argmax (argmax.wgsl) over the graph's logits; returns their offset
/// in the uniform buffer. The dispatch itself is recorded only for steps that read back a
/// token id (record.rs).
pub fn argmax(b: &mut Builder) -> u64 {
    let g = b.g;
    let n_vocab = g.cols(g.logits);
    b.push(&ArgmaxParams {
        n: n_vocab as u32,
        all: (g.acts[g.logits.0 as usize].rows == Rows::All) as u32,
        n_tok: g.n_tokens as u32,
        n_seq: g.n_seqs as u32,
    })
}
