//! The one memory estimator: what a model takes on its executor for a context size, from the
//! GGUF header alone (no weight byte read), so a caller can tell whether it fits before loading.
//!
//! Three parts, each counted the way the executors allocate them:
//! - **weights**: every tensor's bytes in its block format (weights stay quantized on the device);
//! - **KV cache**: per layer, a key row and a value row of f16 per context position;
//! - **scratch**: the activation slots of the largest step (a prompt chunk of `n_batch` tokens,
//!   f32) plus the attention score scratch the GPU executors keep today (one f32 per query row,
//!   head and context position; flash attention removes it).
//!
//! Buffers smaller than this (token ids, q8 copies of activations, staging for uploads) are
//! under 1% of the total and left out.

use super::{build_graph, Hparams, Logits, WeightTable};
use crate::gguf::TensorInfo;
use crate::Result;

/// Bytes a model takes on its executor, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// The weights, in their block formats.
    pub weights: u64,
    /// The KV cache of one session.
    pub kv: u64,
    /// Activations and attention scratch of the largest step.
    pub scratch: u64,
}

impl MemoryEstimate {
    /// The sum of the parts.
    pub fn total(&self) -> u64 {
        self.weights.saturating_add(self.kv).saturating_add(self.scratch)
    }

    /// From a model's header: hyperparameters, vocabulary size and tensor infos, for one session
    /// of `n_ctx` positions evaluated in prompt chunks of at most `n_batch` tokens.
    pub fn new(
        hp: &Hparams,
        n_vocab: usize,
        tensors: &[TensorInfo],
        n_ctx: usize,
        n_batch: usize,
    ) -> Result<MemoryEstimate> {
        let weights = tensors.iter().fold(0u64, |a, t| a.saturating_add(t.n_bytes()));
        let kv_row = (hp.n_head_kv * (hp.head_dim + hp.v_head_dim)) as u64 * 2;
        // The cache holds whole blocks (exec::KV_BLOCK positions each).
        let positions = crate::exec::blocks_for(n_ctx).saturating_mul(crate::exec::KV_BLOCK);
        let kv = kv_row.saturating_mul(hp.n_layer as u64).saturating_mul(positions as u64);
        let n_batch = n_batch.clamp(1, n_ctx.max(1));
        let g = build_graph(hp, n_vocab, &WeightTable::from_infos(tensors), n_batch, 1, Logits::Last)?;
        let acts = g.acts.iter().enumerate().fold(0u64, |a, (i, _)| {
            let id = crate::exec::ActId(i as u32);
            a.saturating_add((g.rows(id) * g.cols(id)) as u64 * 4)
        });
        let scores = (n_batch as u64).saturating_mul(hp.n_head as u64).saturating_mul(n_ctx as u64) * 4;
        Ok(MemoryEstimate { weights, kv, scratch: acts.saturating_add(scores) })
    }
}

impl std::fmt::Display for MemoryEstimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "{:.1} MiB = weights {:.1} MiB + KV cache {:.1} MiB + scratch {:.1} MiB",
            mb(self.total()),
            mb(self.weights),
            mb(self.kv),
            mb(self.scratch)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{MetaValue, Metadata};
    use crate::quant::GgmlType;

    /// The 8b llama shape's KV cache: 32 layers × 8 heads × (128 + 128) × 2 bytes = 128 KiB a
    /// position, the figure the attention issue quotes.
    #[test]
    fn kv_of_the_8b_shape_is_128_kib_a_position() {
        let mut md = Metadata::default();
        let set = |md: &mut Metadata, k: &str, v: u32| md.insert(k, MetaValue::U32(v));
        md.insert("general.architecture", MetaValue::Str("llama".into()));
        set(&mut md, "llama.context_length", 8192);
        set(&mut md, "llama.embedding_length", 4096);
        set(&mut md, "llama.block_count", 32);
        set(&mut md, "llama.feed_forward_length", 14336);
        set(&mut md, "llama.attention.head_count", 32);
        set(&mut md, "llama.attention.head_count_kv", 8);
        md.insert("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5));
        let hp = Hparams::from_metadata(&md).unwrap();
        let t = |name: &str, dims: &[u64], dtype| TensorInfo {
            name: name.into(),
            dims: dims.to_vec(),
            dtype,
            offset: 0,
        };
        let mut tensors = vec![
            t("token_embd.weight", &[4096, 1000], GgmlType::Q4_K),
            t("output_norm.weight", &[4096], GgmlType::F32),
        ];
        for l in 0..32 {
            let b = |s: &str| format!("blk.{l}.{s}.weight");
            tensors.push(t(&b("attn_norm"), &[4096], GgmlType::F32));
            tensors.push(t(&b("attn_q"), &[4096, 4096], GgmlType::Q4_K));
            tensors.push(t(&b("attn_k"), &[4096, 1024], GgmlType::Q4_K));
            tensors.push(t(&b("attn_v"), &[4096, 1024], GgmlType::Q6_K));
            tensors.push(t(&b("attn_output"), &[4096, 4096], GgmlType::Q4_K));
            tensors.push(t(&b("ffn_norm"), &[4096], GgmlType::F32));
            tensors.push(t(&b("ffn_gate"), &[4096, 14336], GgmlType::Q4_K));
            tensors.push(t(&b("ffn_up"), &[4096, 14336], GgmlType::Q4_K));
            tensors.push(t(&b("ffn_down"), &[14336, 4096], GgmlType::Q6_K));
        }
        let e = MemoryEstimate::new(&hp, 1000, &tensors, 4096, 256).unwrap();
        assert_eq!(e.kv, 4096 * 128 * 1024);
        assert_eq!(e.weights, tensors.iter().map(TensorInfo::n_bytes).sum::<u64>());
        // Scores: 256 rows × 32 heads × 4096 positions × 4 bytes = 128 MiB, plus ~50 MiB of
        // activations (256 rows of the f32 slots: 4096-wide ones, two 14336-wide FFN ones, ...).
        assert!(e.scratch > 128 << 20 && e.scratch < 200 << 20, "{e}");
        let doubled = MemoryEstimate::new(&hp, 1000, &tensors, 8192, 256).unwrap();
        assert_eq!(doubled.kv, 2 * e.kv);
    }
}
