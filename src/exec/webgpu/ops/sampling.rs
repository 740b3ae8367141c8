//! Sampling on the device: the argmax of the last row of logits.

use super::Builder;
use crate::exec::webgpu::params::ArgmaxParams;

/// The parameters of the argmax (argmax.wgsl) over the graph's logits; returns their offset
/// in the uniform buffer. The dispatch itself is recorded only for steps that read back a
/// token id (record.rs).
pub fn argmax(b: &mut Builder) -> u64 {
    let g = b.g;
    let n_vocab = g.cols(g.logits);
    b.push(&ArgmaxParams { n: n_vocab as u32, offset: ((g.rows(g.logits) - 1) * n_vocab) as u32 })
}
