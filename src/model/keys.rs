//! GGUF metadata keys and tensor names, in one place.

/// `general.architecture`.
pub const ARCHITECTURE: &str = "general.architecture";

/// A per-architecture metadata key: `{arch}.{suffix}`.
pub fn arch_key(arch: &str, suffix: &str) -> String {
    format!("{arch}.{suffix}")
}

/// Suffixes of per-architecture keys.
#[allow(missing_docs)]
pub mod suffix {
    pub const CONTEXT_LENGTH: &str = "context_length";
    pub const EMBEDDING_LENGTH: &str = "embedding_length";
    pub const BLOCK_COUNT: &str = "block_count";
    pub const FEED_FORWARD_LENGTH: &str = "feed_forward_length";
    pub const HEAD_COUNT: &str = "attention.head_count";
    pub const HEAD_COUNT_KV: &str = "attention.head_count_kv";
    pub const KEY_LENGTH: &str = "attention.key_length";
    pub const VALUE_LENGTH: &str = "attention.value_length";
    pub const RMS_EPS: &str = "attention.layer_norm_rms_epsilon";
    pub const SLIDING_WINDOW: &str = "attention.sliding_window";
    pub const ROPE_FREQ_BASE: &str = "rope.freq_base";
    pub const ROPE_DIMENSION_COUNT: &str = "rope.dimension_count";
    pub const ROPE_SCALING_TYPE: &str = "rope.scaling.type";
    pub const ROPE_SCALING_FACTOR: &str = "rope.scaling.factor";
    pub const ROPE_SCALING_ATTN_FACTOR: &str = "rope.scaling.attn_factor";
    pub const ROPE_SCALING_ORIG_CTX: &str = "rope.scaling.original_context_length";
    pub const ROPE_SCALING_YARN_EXT_FACTOR: &str = "rope.scaling.yarn_ext_factor";
    pub const ROPE_SCALING_YARN_BETA_FAST: &str = "rope.scaling.yarn_beta_fast";
    pub const ROPE_SCALING_YARN_BETA_SLOW: &str = "rope.scaling.yarn_beta_slow";
}

/// Tensor names of the GGUF convention.
#[allow(missing_docs)]
pub mod tensor {
    pub const TOKEN_EMBD: &str = "token_embd.weight";
    pub const OUTPUT_NORM: &str = "output_norm.weight";
    pub const OUTPUT: &str = "output.weight";
    /// RoPE frequency factors (Llama 3.1+): F32, one per rotated pair.
    pub const ROPE_FREQS: &str = "rope_freqs.weight";

    /// `blk.{layer}.{name}`.
    pub fn blk(layer: usize, name: &str) -> String {
        format!("blk.{layer}.{name}")
    }

    pub const ATTN_NORM: &str = "attn_norm.weight";
    pub const ATTN_Q: &str = "attn_q.weight";
    pub const ATTN_K: &str = "attn_k.weight";
    pub const ATTN_V: &str = "attn_v.weight";
    pub const ATTN_Q_BIAS: &str = "attn_q.bias";
    pub const ATTN_K_BIAS: &str = "attn_k.bias";
    pub const ATTN_V_BIAS: &str = "attn_v.bias";
    pub const ATTN_Q_NORM: &str = "attn_q_norm.weight";
    pub const ATTN_K_NORM: &str = "attn_k_norm.weight";
    pub const ATTN_OUTPUT: &str = "attn_output.weight";
    pub const ATTN_POST_NORM: &str = "post_attention_norm.weight";
    pub const FFN_NORM: &str = "ffn_norm.weight";
    pub const FFN_GATE: &str = "ffn_gate.weight";
    pub const FFN_UP: &str = "ffn_up.weight";
    pub const FFN_DOWN: &str = "ffn_down.weight";
    pub const FFN_POST_NORM: &str = "post_ffw_norm.weight";
}
