//! Context shift by re-positioning cached keys (issue 18): moving the keys of a few blocks from
//! position p to p + delta without evaluating their tokens again.
//!
//! Keys are stored already rotated by RoPE at their position: pair i of a head holds
//! `R(angle_i(p)) · k`. RoPE's angle is linear in the position (angle_i(p) = p · ω_i, with
//! ω_i from the base, the frequency factor, the linear scale and YaRN's ramp: [`RopeConsts`]),
//! and rotations compose, so `R(angle_i(delta)) · R(angle_i(p)) · k = R(angle_i(p + delta)) · k`:
//! rotating each stored pair by the angle of `delta` moves the key to `p + delta`. Values carry
//! no position and stay as they are. llama.cpp's K-shift (`llama_kv_cache::build_graph_shift`,
//! a `ggml_rope_ext` of the cached keys by the position deltas) does the same.
//!
//! The rotation is pure (cos and sin not scaled): YaRN's magnitude factor (`mscale`) was
//! applied once when the key was stored and must not be applied again. (llama.cpp passes its
//! attention factor to the shift's rope as well, which scales shifted keys once more under
//! YaRN; here a shifted key equals, up to rounding, the key stored at its new position.)

use super::{Graph, Op, RopeConsts, RopeExt, RopeMode, WeightId, KV_BLOCK};

/// How one layer's keys were rotated: the fields of the graph's `Op::Rope` of that layer's
/// keys (see [`Op::Rope`]), so a shift uses exactly the forward pass's definition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvRope {
    /// KV heads in a key row.
    pub n_heads: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Rotated dimensions of a head (the first `n_rot`).
    pub n_rot: usize,
    /// RoPE base of the layer (Gemma 3: one for sliding-window layers, one for global ones).
    pub base: f32,
    /// 1 / linear scaling factor of the layer.
    pub freq_scale: f32,
    /// Pairing of the dimensions.
    pub mode: RopeMode,
    /// The file's frequency factors (`rope_freqs.weight`, F32, n_rot/2 values), if any.
    pub freqs: Option<WeightId>,
    /// YaRN (its magnitude scale is not applied by a shift, see the module's comment).
    pub ext: RopeExt,
}

impl KvRope {
    /// The angle constants of the shift's rotation: the forward pass's, with unit magnitude.
    pub fn consts(&self) -> RopeConsts {
        let mut k = RopeConsts::new(self.n_rot, self.base, self.freq_scale, self.ext);
        k.mscale = 1.0;
        k
    }
}

/// A shift of cached keys: the rows of `blocks` (each block's [`KV_BLOCK`] rows of the pool)
/// move by `delta` positions (negative: towards the start), in every layer whose keys RoPE
/// rotated (`layers[l]`: `None` for a layer without RoPE, whose keys stay).
#[derive(Debug, Clone, PartialEq)]
pub struct KvShift {
    /// Blocks of the pool whose rows move.
    pub blocks: Vec<u32>,
    /// Positions to add to each row's position.
    pub delta: i32,
    /// Per layer of the cache: how its keys were rotated.
    pub layers: Vec<Option<KvRope>>,
}

impl KvShift {
    /// The per-layer RoPE of the keys of a model's step graph: for each `KvStore` (by layer),
    /// the `Rope` op that last rotated its key slot. `None` when some layer stores keys that
    /// RoPE did not rotate (the model cannot be shifted by rotation: recompute instead).
    pub fn layers_of(g: &Graph) -> Option<Vec<Option<KvRope>>> {
        let mut layers: Vec<Option<KvRope>> = Vec::new();
        for (i, op) in g.ops.iter().enumerate() {
            let Op::KvStore { layer, k, .. } = *op else { continue };
            let rope = g.ops[..i].iter().rev().find_map(|o| match *o {
                Op::Rope { x, n_heads, head_dim, n_rot, base, freq_scale, mode, freqs, ext } if x == k => {
                    Some(KvRope { n_heads, head_dim, n_rot, base, freq_scale, mode, freqs, ext })
                }
                _ => None,
            })?;
            if layers.len() <= layer {
                layers.resize(layer + 1, None);
            }
            layers[layer] = Some(rope);
        }
        (!layers.is_empty() && layers.iter().all(Option::is_some)).then_some(layers)
    }

    /// The checks every executor makes before a shift: blocks inside the pool of `n_blocks`,
    /// a layer entry per cache layer (`k_dims`: each layer's key row width) whose heads fill
    /// the row and whose rotated dimensions are an even number within a head.
    pub fn check(&self, executor: &'static str, n_blocks: usize, k_dims: &[usize]) -> crate::Result<()> {
        let err = |message: String| crate::Error::Executor { executor, message };
        if let Some(&b) = self.blocks.iter().find(|&&b| b as usize >= n_blocks) {
            return Err(err(format!("KV shift: block {b} is outside the cache's {n_blocks} blocks")));
        }
        if self.layers.len() != k_dims.len() {
            return Err(err(format!(
                "KV shift of {} layers on a cache of {} layers",
                self.layers.len(),
                k_dims.len()
            )));
        }
        for (l, (r, &kd)) in self.layers.iter().zip(k_dims).enumerate() {
            let Some(r) = r else { continue };
            if r.n_heads * r.head_dim != kd || r.n_rot > r.head_dim || r.n_rot % 2 != 0 {
                return Err(err(format!(
                    "KV shift of layer {l}: {r:?} does not fit key rows of {kd} values"
                )));
            }
        }
        Ok(())
    }

    /// Rows of the pool that move, in order.
    pub fn rows(&self) -> impl Iterator<Item = usize> + '_ {
        self.blocks.iter().flat_map(|&b| (b as usize * KV_BLOCK)..(b as usize + 1) * KV_BLOCK)
    }

    /// The (cos, sin) of each rotated pair of `rope`'s layer for this shift, as every executor
    /// computes them: `delta · theta_scaleⁱ` by repeated multiplication in f32 (as the
    /// forward pass computes `p · theta_scaleⁱ`), divided by the pair's factor, through
    /// [`RopeConsts::cos_sin`] with unit magnitude.
    pub fn cos_sin(&self, rope: &KvRope, freqs: Option<&[f32]>) -> Vec<(f32, f32)> {
        let k = rope.consts();
        let mut theta = self.delta as f32;
        (0..rope.n_rot / 2)
            .map(|i| {
                let extrap = freqs.map_or(theta, |f| theta / f[i]);
                theta *= k.theta_scale;
                k.cos_sin(i, extrap)
            })
            .collect()
    }
}

/// The two elements pair `i` of a head rotates: adjacent (normal) or half the rotated
/// dimensions apart (neox).
pub fn rope_pair(mode: RopeMode, n_rot: usize, i: usize) -> (usize, usize) {
    match mode {
        RopeMode::Normal => (2 * i, 2 * i + 1),
        RopeMode::Neox => (i, i + n_rot / 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Rows;

    /// A graph storing keys of one layer, rotated by RoPE or not.
    fn graph(rope: bool) -> Graph {
        let mut g = Graph::new(1);
        let (k, v) = (g.act(Rows::All, 8), g.act(Rows::All, 8));
        if rope {
            g.push(Op::Rope {
                x: k,
                n_heads: 2,
                head_dim: 4,
                n_rot: 4,
                base: 500.0,
                freq_scale: 0.5,
                mode: RopeMode::Neox,
                freqs: None,
                ext: RopeExt::default(),
            });
        }
        g.push(Op::KvStore { layer: 0, k, v });
        g
    }

    #[test]
    fn layers_come_from_the_graph() {
        let layers = KvShift::layers_of(&graph(true)).expect("rotated keys");
        let r = layers[0].expect("layer 0");
        assert_eq!((r.n_heads, r.head_dim, r.n_rot, r.base, r.freq_scale), (2, 4, 4, 500.0, 0.5));
        assert_eq!(r.mode, RopeMode::Neox);
        // Keys without RoPE cannot be re-positioned: the session recomputes instead.
        assert_eq!(KvShift::layers_of(&graph(false)), None);
    }

    #[test]
    fn a_shift_is_the_rotation_of_the_delta() {
        let r = KvShift::layers_of(&graph(true)).unwrap()[0].unwrap();
        let shift = KvShift { blocks: vec![1], delta: -3, layers: vec![Some(r)] };
        let k = r.consts();
        let cs = shift.cos_sin(&r, None);
        // Pair 1: angle −3 · 500^(−2/4) · 0.5, unit magnitude.
        let a = -3.0f32 * 500f32.powf(-0.5) * 0.5;
        assert!((cs[1].0 - a.cos()).abs() < 1e-6 && (cs[1].1 - a.sin()).abs() < 1e-6, "{cs:?}");
        assert_eq!(k.mscale, 1.0);
        assert_eq!(shift.rows().collect::<Vec<_>>(), (64..128).collect::<Vec<_>>());
        assert!(shift.check("test", 2, &[8]).is_ok());
        assert!(shift.check("test", 1, &[8]).is_err(), "block outside the pool");
        assert!(shift.check("test", 2, &[6]).is_err(), "heads do not fill the row");
    }
}
