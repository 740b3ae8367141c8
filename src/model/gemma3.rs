//! Gemma 3: embeddings scaled by √n_embd, per-head QK RMSNorm, norms after attention and
//! feed-forward as well as before, GELU-gated feed-forward, and five sliding-window layers
//! (RoPE base 10k) for every global one (RoPE base from the metadata).

use super::blocks::{self, AttnOptions, Slots};
use super::keys::tensor::{self as t, blk};
use super::{Hparams, Logits, Weights};
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
    blocks::embed(&mut g, hp, n_vocab, w, &s, (hp.n_embd as f32).sqrt())?;
    // Gemma 3 27B scales queries by n_embd / n_head; the other sizes by the head size.
    let scale_dim = if hp.n_layer == 62 { hp.n_embd / hp.n_head } else { hp.head_dim };
    for il in 0..hp.n_layer {
        let swa = hp.is_swa_layer(il);
        let opt = AttnOptions {
            qkv_bias: false,
            qk_norm: true,
            rope_base: if swa { hp.rope_base_swa } else { hp.rope_base },
            rope_freq_scale: if swa { 1.0 } else { hp.rope_freq_scale },
            scale: 1.0 / (scale_dim as f32).sqrt(),
            window: if swa { hp.sliding_window } else { None },
        };
        blocks::norm(&mut g, hp, w, s.x, s.h, &blk(il, t::ATTN_NORM))?;
        blocks::attention(&mut g, hp, w, &s, il, &opt)?;
        blocks::norm(&mut g, hp, w, s.o, s.o, &blk(il, t::ATTN_POST_NORM))?;
        g.push(Op::Add { a: s.x, b: s.o, dst: s.x });
        blocks::norm(&mut g, hp, w, s.x, s.h, &blk(il, t::FFN_NORM))?;
        blocks::ffn(&mut g, hp, w, &s, il, Gate::Gelu)?;
        blocks::norm(&mut g, hp, w, s.o, s.o, &blk(il, t::FFN_POST_NORM))?;
        g.push(Op::Add { a: s.x, b: s.o, dst: s.x });
    }
    blocks::output(&mut g, hp, n_vocab, w, &s, logits)?;
    Ok(g)
}
