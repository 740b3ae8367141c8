//! Pieces shared by the architectures: embedding, attention, feed-forward, output head.

use super::keys::tensor::{self as t, blk};
use super::{Hparams, Logits, Weights};
use crate::exec::{ActId, Gate, Graph, Op, Rows};
use crate::Result;

/// Activation slots reused by every layer.
pub struct Slots {
    /// Residual stream (n_embd).
    pub x: ActId,
    /// Normed input of a block (n_embd).
    pub h: ActId,
    /// Queries (n_head · head_dim).
    pub q: ActId,
    /// Keys (n_head_kv · head_dim).
    pub k: ActId,
    /// Values (n_head_kv · v_head_dim).
    pub v: ActId,
    /// Attention output (n_head · v_head_dim).
    pub att: ActId,
    /// Output of a block before the residual add (n_embd).
    pub o: ActId,
    /// Feed-forward gate (n_ff).
    pub gate: ActId,
    /// Feed-forward up (n_ff).
    pub up: ActId,
}

impl Slots {
    /// Allocate the slots in `g`.
    pub fn new(g: &mut Graph, hp: &Hparams) -> Slots {
        Slots {
            x: g.act(Rows::All, hp.n_embd),
            h: g.act(Rows::All, hp.n_embd),
            q: g.act(Rows::All, hp.n_head * hp.head_dim),
            k: g.act(Rows::All, hp.n_head_kv * hp.head_dim),
            v: g.act(Rows::All, hp.n_head_kv * hp.v_head_dim),
            att: g.act(Rows::All, hp.n_head * hp.v_head_dim),
            o: g.act(Rows::All, hp.n_embd),
            gate: g.act(Rows::All, hp.n_ff),
            up: g.act(Rows::All, hp.n_ff),
        }
    }
}

/// How an attention block differs between architectures.
pub struct AttnOptions {
    /// q/k/v biases (qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k (qwen3, gemma3).
    pub qk_norm: bool,
    /// RoPE base for this layer.
    pub rope_base: f32,
    /// RoPE frequency scale for this layer.
    pub rope_freq_scale: f32,
    /// Score scale.
    pub scale: f32,
    /// Sliding window for this layer.
    pub window: Option<usize>,
}

/// x_slot := embedding of the step's tokens × scale.
pub fn embed(
    g: &mut Graph,
    hp: &Hparams,
    n_vocab: usize,
    w: &dyn Weights,
    s: &Slots,
    scale: f32,
) -> Result<()> {
    let table = w.get(t::TOKEN_EMBD, &[hp.n_embd, n_vocab])?;
    g.push(Op::Embed { table, dst: s.x, scale });
    Ok(())
}

/// s.o := attention(s.h) for layer `il`, from the normed input in `s.h`.
pub fn attention(
    g: &mut Graph,
    hp: &Hparams,
    w: &dyn Weights,
    s: &Slots,
    il: usize,
    opt: &AttnOptions,
) -> Result<()> {
    let (ne, hd, vd) = (hp.n_embd, hp.head_dim, hp.v_head_dim);
    let (nq, nkv) = (hp.n_head * hd, hp.n_head_kv * hd);
    let bias = |name: &str, n: usize| -> Result<Option<_>> {
        if opt.qkv_bias {
            w.get(&blk(il, name), &[n]).map(Some)
        } else {
            Ok(None)
        }
    };
    // wq: (n_embd, n_head·head_dim), wk: (n_embd, n_head_kv·head_dim), wv: (n_embd, n_head_kv·v_head_dim)
    let wq = w.get(&blk(il, t::ATTN_Q), &[ne, nq])?;
    let wk = w.get(&blk(il, t::ATTN_K), &[ne, nkv])?;
    let wv = w.get(&blk(il, t::ATTN_V), &[ne, hp.n_head_kv * vd])?;
    g.push(Op::MatMul { w: wq, x: s.h, dst: s.q, bias: bias(t::ATTN_Q_BIAS, nq)? });
    g.push(Op::MatMul { w: wk, x: s.h, dst: s.k, bias: bias(t::ATTN_K_BIAS, nkv)? });
    g.push(Op::MatMul { w: wv, x: s.h, dst: s.v, bias: bias(t::ATTN_V_BIAS, hp.n_head_kv * vd)? });
    if opt.qk_norm {
        let qn = w.get(&blk(il, t::ATTN_Q_NORM), &[hd])?;
        let kn = w.get(&blk(il, t::ATTN_K_NORM), &[hd])?;
        g.push(Op::RmsNorm { x: s.q, weight: qn, dst: s.q, group: hd, eps: hp.eps });
        g.push(Op::RmsNorm { x: s.k, weight: kn, dst: s.k, group: hd, eps: hp.eps });
    }
    // rope_freqs: (n_rot/2), one frequency factor per rotated pair (Llama 3.1+), shared by all layers.
    let freqs = w.get_opt(t::ROPE_FREQS, &[hp.n_rot / 2])?;
    let rope = |x, n_heads| Op::Rope {
        x,
        n_heads,
        head_dim: hd,
        n_rot: hp.n_rot,
        base: opt.rope_base,
        freq_scale: opt.rope_freq_scale,
        mode: hp.rope_mode,
        freqs,
        ext: hp.rope_ext,
    };
    g.push(rope(s.q, hp.n_head));
    g.push(rope(s.k, hp.n_head_kv));
    g.push(Op::KvStore { layer: il, k: s.k, v: s.v });
    g.push(Op::Attention {
        layer: il,
        q: s.q,
        dst: s.att,
        n_heads: hp.n_head,
        n_kv_heads: hp.n_head_kv,
        head_dim: hd,
        scale: opt.scale,
        window: opt.window,
        softcap: None,
    });
    // wo: (n_head·v_head_dim, n_embd)
    let wo = w.get(&blk(il, t::ATTN_OUTPUT), &[hp.n_head * vd, ne])?;
    g.push(Op::MatMul { w: wo, x: s.att, dst: s.o, bias: None });
    Ok(())
}

/// s.o := down(act(gate(s.h)) * up(s.h)) for layer `il`.
pub fn ffn(g: &mut Graph, hp: &Hparams, w: &dyn Weights, s: &Slots, il: usize, act: Gate) -> Result<()> {
    // gate, up: (n_embd, n_ff); down: (n_ff, n_embd)
    let wg = w.get(&blk(il, t::FFN_GATE), &[hp.n_embd, hp.n_ff])?;
    let wu = w.get(&blk(il, t::FFN_UP), &[hp.n_embd, hp.n_ff])?;
    let wd = w.get(&blk(il, t::FFN_DOWN), &[hp.n_ff, hp.n_embd])?;
    g.push(Op::MatMul { w: wg, x: s.h, dst: s.gate, bias: None });
    g.push(Op::MatMul { w: wu, x: s.h, dst: s.up, bias: None });
    g.push(Op::GatedAct { gate: s.gate, up: s.up, act });
    g.push(Op::MatMul { w: wd, x: s.gate, dst: s.o, bias: None });
    Ok(())
}

/// s.h := RMSNorm(src) · weight `name` of layer `il`.
pub fn norm(g: &mut Graph, hp: &Hparams, w: &dyn Weights, src: ActId, dst: ActId, name: &str) -> Result<()> {
    let weight = w.get(name, &[hp.n_embd])?;
    g.push(Op::RmsNorm { x: src, weight, dst, group: hp.n_embd, eps: hp.eps });
    Ok(())
}

/// Final norm and output projection (tied to the embedding when `output.weight` is absent).
pub fn output(
    g: &mut Graph,
    hp: &Hparams,
    n_vocab: usize,
    w: &dyn Weights,
    s: &Slots,
    logits: Logits,
) -> Result<()> {
    let (src, rows) = match logits {
        Logits::All => (s.x, Rows::All),
        Logits::Last => {
            let last = g.act(Rows::Last, hp.n_embd);
            g.push(Op::TakeLast { x: s.x, dst: last });
            (last, Rows::Last)
        }
    };
    // Into a slot of its own: a norm over its own input cannot be split across GPU blocks
    // (one block would overwrite values another has yet to read).
    let normed = g.act(rows, hp.n_embd);
    norm(g, hp, w, src, normed, t::OUTPUT_NORM)?;
    let src = normed;
    // output: (n_embd, n_vocab)
    let head = match w.get_opt(t::OUTPUT, &[hp.n_embd, n_vocab])? {
        Some(h) => h,
        None => w.get(t::TOKEN_EMBD, &[hp.n_embd, n_vocab])?,
    };
    let out = g.act(rows, n_vocab);
    g.push(Op::MatMul { w: head, x: src, dst: out, bias: None });
    g.logits = out;
    Ok(())
}
