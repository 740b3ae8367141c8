//! The llama family: llama (SmolLM2, Llama 2/3, Mistral, TinyLlama), and its close relatives
//! qwen2 (q/k/v biases) and qwen3 (per-head QK RMSNorm). Pre-norm blocks, SwiGLU feed-forward.

use super::blocks::{self, AttnOptions, Slots};
use super::keys::tensor::{self as t, blk};
use super::{Arch, Hparams, Logits, Weights};
use crate::exec::{Gate, Graph, Op};
use crate::Result;

/// Build one step's graph.
pub fn build(
    hp: &Hparams,
    n_vocab: usize,
    w: &dyn Weights,
    n_tokens: usize,
    n_seqs: usize,
    logits: Logits,
) -> Result<Graph> {
    let mut g = Graph::with_seqs(n_tokens, n_seqs);
    let s = Slots::new(&mut g, hp);
    let opt = AttnOptions {
        qkv_bias: hp.arch == Arch::Qwen2,
        qk_norm: hp.arch == Arch::Qwen3,
        rope_base: hp.rope_base,
        rope_freq_scale: hp.rope_freq_scale,
        scale: 1.0 / (hp.head_dim as f32).sqrt(),
        window: None,
    };
    blocks::embed(&mut g, hp, n_vocab, w, &s, 1.0)?;
    for il in 0..hp.n_layer {
        blocks::norm(&mut g, hp, w, s.x, s.h, &blk(il, t::ATTN_NORM))?;
        blocks::attention(&mut g, hp, w, &s, il, &opt)?;
        g.push(Op::Add { a: s.x, b: s.o, dst: s.x });
        blocks::norm(&mut g, hp, w, s.x, s.h, &blk(il, t::FFN_NORM))?;
        blocks::ffn(&mut g, hp, w, &s, il, Gate::Silu)?;
        g.push(Op::Add { a: s.x, b: s.o, dst: s.x });
    }
    blocks::output(&mut g, hp, n_vocab, w, &s, logits)?;
    Ok(g)
}
