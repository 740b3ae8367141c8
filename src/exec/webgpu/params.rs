//! Each kernel's uniform parameters, declared once: [`params!`] defines a `#[repr(C)]` Rust
//! struct and the WGSL `struct Params` text the kernel's source is composed with (kernels.rs),
//! so the two cannot drift apart. Fields are 32-bit scalars (`u32`, `f32`): WGSL's uniform
//! layout then puts field i at byte 4·i, as `repr(C)` does (the test below checks it with
//! naga's own layouter).

/// A 32-bit scalar field of a parameter struct.
pub trait Word: Copy {
    /// The value's bits, as the GPU reads them.
    fn bits(self) -> u32;
}

impl Word for u32 {
    fn bits(self) -> u32 {
        self
    }
}

impl Word for f32 {
    fn bits(self) -> u32 {
        self.to_bits()
    }
}

/// A kernel's parameter struct.
pub trait Params {
    /// The WGSL declaration (`struct Params { ... }`) the kernel's source is composed with.
    const WGSL: &'static str;
    /// The fields' bits in declaration order: the bytes written to the uniform buffer.
    fn words(&self) -> Vec<u32>;
}

/// Define a parameter struct: `#[repr(C)]`, all fields public, and its WGSL twin.
macro_rules! params {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ident,)* }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl Params for $name {
            const WGSL: &'static str =
                concat!("struct Params {\n", $("    ", stringify!($field), ": ", stringify!($ty), ",\n",)* "}\n");
            fn words(&self) -> Vec<u32> {
                vec![$(Word::bits(self.$field)),*]
            }
        }
    };
}

params!(
    /// embed.wgsl: one part of the table.
    EmbedParams {
        /// Row length (values).
        k: u32,
        /// Token rows.
        rows: u32,
        row_bytes: u32,
        /// The part's first table row and the row after its last.
        row_start: u32,
        row_end: u32,
        scale: f32,
    }
);

params!(
    /// quantize.wgsl.
    QuantizeParams {
        n_blocks: u32,
        /// First word of the block records (after all the quants).
        recs: u32,
    }
);

params!(
    /// norm_quant.wgsl.
    NormQuantParams {
        group: u32,
        /// 256-value pieces (one workgroup each).
        n_pieces: u32,
        eps: f32,
        /// The weight is F16 (else F32).
        w_f16: u32,
        recs: u32,
    }
);

params!(
    /// matvec.wgsl (`main`, `main_rows`, `main_gated`) and matvec_multi.wgsl.
    MatVecParams {
        /// Weight rows of this part (matrix 1 of matvec_multi).
        n: u32,
        /// Token rows.
        rows: u32,
        row_bytes: u32,
        /// Tasks per weight row.
        tasks: u32,
        /// Columns of dst before this part's.
        n_off: u32,
        /// dst row length.
        n_dst: u32,
        has_bias: u32,
        /// First 16-byte unit of the block records of quantized activations (quantize.wgsl).
        recs: u32,
        /// 16-byte units per activation row: k / 16 quantized, k / 4 float.
        avec: u32,
        /// Activation blocks per row (quantized).
        nb: u32,
        /// Also add each output into `res` (the residual add fused as an epilogue).
        add: u32,
        /// matvec_multi.wgsl: rows and row bytes of matrices 2 and 3, workgroups of 1 and 2.
        n_b: u32,
        rb_b: u32,
        n_c: u32,
        rb_c: u32,
        g_a: u32,
        g_b: u32,
    }
);

params!(
    /// rms_norm.wgsl.
    RmsNormParams {
        group: u32,
        n_groups: u32,
        eps: f32,
        w_f16: u32,
    }
);

params!(
    /// rope.wgsl and rope_table.wgsl.
    RopeParams {
        n_heads: u32,
        head_dim: u32,
        n_rot: u32,
        rows: u32,
        theta_scale: f32,
        freq_scale: f32,
        /// YaRN's ramp weight (0: none), its first and last pair, and the scale of cos and sin.
        ext_factor: f32,
        corr_low: f32,
        corr_high: f32,
        mscale: f32,
        /// Whether binding `freqs` holds frequency factors (else every factor is 1).
        has_freqs: u32,
        neox: u32,
        /// Row length of the slot.
        width: u32,
        /// The graph's tokens and most sequences: the step buffer's layout (step.wgsl).
        n_tok: u32,
        n_seq: u32,
    }
);

params!(
    /// kv_shift.wgsl: one layer's shift.
    KvShiftParams {
        n_heads: u32,
        head_dim: u32,
        n_rot: u32,
        /// Key row width of the layer.
        k_dim: u32,
        /// Rows that move (blocks × 64).
        n_rows: u32,
        /// Positions added (an integer, exact in f32).
        delta: f32,
        theta_scale: f32,
        freq_scale: f32,
        /// YaRN's ramp weight (0: none), its first and last pair, and the scale of cos and
        /// sin (1: a shift is a pure rotation).
        ext_factor: f32,
        corr_low: f32,
        corr_high: f32,
        mscale: f32,
        /// Whether binding `freqs` holds frequency factors (else every factor is 1).
        has_freqs: u32,
        neox: u32,
    }
);

params!(
    /// rope_kv.wgsl.
    RopeKvParams {
        n_heads: u32,
        head_dim: u32,
        n_rot: u32,
        rows: u32,
        neox: u32,
        q_width: u32,
        k_dim: u32,
        v_dim: u32,
        /// The graph's tokens and most sequences: the step buffer's layout (step.wgsl).
        n_tok: u32,
        n_seq: u32,
    }
);

params!(
    /// kv_store.wgsl.
    KvStoreParams {
        dim: u32,
        rows: u32,
        /// The graph's tokens and most sequences: the step buffer's layout (step.wgsl).
        n_tok: u32,
        n_seq: u32,
    }
);

params!(
    /// attention.wgsl, attention_split.wgsl, attention_combine.wgsl, attention_tiled.wgsl.
    AttentionParams {
        n_heads: u32,
        /// Query heads per KV head.
        group: u32,
        head_dim: u32,
        rows: u32,
        k_dim: u32,
        v_dim: u32,
        /// Sliding window (0: none).
        window: u32,
        q_width: u32,
        scale: f32,
        /// Logit soft-capping (0: none).
        softcap: f32,
        /// Splits of the keys of a decode step (attention_split.wgsl and its combine).
        splits: u32,
        /// Workgroups per KV head, each taking some of its query heads (attention_split.wgsl).
        blocks: u32,
        /// The graph's tokens and most sequences: the step buffer's layout (step.wgsl).
        n_tok: u32,
        n_seq: u32,
    }
);

params!(
    /// gated_act.wgsl and add.wgsl.
    CountParams {
        n: u32,
    }
);

params!(
    /// argmax.wgsl.
    ArgmaxParams {
        /// Logits per row.
        n: u32,
        /// The logits have a row per token (take each sequence's last token's row), not per
        /// sequence.
        all: u32,
        /// The graph's tokens and most sequences: the step buffer's layout (step.wgsl).
        n_tok: u32,
        n_seq: u32,
        /// Chunks of a row (the first pass's workgroups per sequence, at most 256) and values
        /// per chunk (a multiple of 256).
        parts: u32,
        chunk: u32,
    }
);

params!(
    /// take_last.wgsl.
    TakeLastParams {
        /// Row length.
        cols: u32,
        /// The graph's tokens and most sequences: the step buffer's layout (step.wgsl).
        n_tok: u32,
        n_seq: u32,
    }
);

// Native only: naga (the WGSL checker) is a native dev-dependency.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// naga's layout of `P::WGSL` as a uniform: (member name, offset) and the struct's span.
    fn naga_layout<P: Params>() -> (Vec<(String, u32)>, u32) {
        let src = format!("{}@group(0) @binding(0) var<uniform> p: Params;\n", P::WGSL);
        let module = naga::front::wgsl::parse_str(&src).expect("parameter struct parses");
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .expect("parameter struct validates as a uniform");
        let (_, ty) = module.types.iter().find(|(_, t)| t.name.as_deref() == Some("Params")).expect("Params");
        let naga::TypeInner::Struct { members, span } = &ty.inner else { panic!("Params is not a struct") };
        (members.iter().map(|m| (m.name.clone().unwrap_or_default(), m.offset)).collect(), *span)
    }

    macro_rules! check_layout {
        ($t:ident { $($f:ident),* }) => {{
            let (members, span) = naga_layout::<$t>();
            let rust = [$((stringify!($f).to_string(), offset_of!($t, $f) as u32)),*];
            assert_eq!(members, rust, "{} member offsets", stringify!($t));
            assert_eq!(span as usize, size_of::<$t>(), "{} size", stringify!($t));
            assert_eq!($t::default().words().len() * 4, size_of::<$t>());
            // Within the parameter binding (record.rs binds 128 bytes of each slot).
            assert!(size_of::<$t>() <= 128);
        }};
    }

    /// Every parameter struct's Rust layout is the one WGSL gives its twin.
    #[test]
    fn rust_layouts_match_wgsl() {
        check_layout!(EmbedParams { k, rows, row_bytes, row_start, row_end, scale });
        check_layout!(QuantizeParams { n_blocks, recs });
        check_layout!(NormQuantParams { group, n_pieces, eps, w_f16, recs });
        check_layout!(MatVecParams {
            n,
            rows,
            row_bytes,
            tasks,
            n_off,
            n_dst,
            has_bias,
            recs,
            avec,
            nb,
            add,
            n_b,
            rb_b,
            n_c,
            rb_c,
            g_a,
            g_b
        });
        check_layout!(RmsNormParams { group, n_groups, eps, w_f16 });
        check_layout!(RopeParams {
            n_heads,
            head_dim,
            n_rot,
            rows,
            theta_scale,
            freq_scale,
            ext_factor,
            corr_low,
            corr_high,
            mscale,
            has_freqs,
            neox,
            width,
            n_tok,
            n_seq
        });
        check_layout!(RopeKvParams {
            n_heads,
            head_dim,
            n_rot,
            rows,
            neox,
            q_width,
            k_dim,
            v_dim,
            n_tok,
            n_seq
        });
        check_layout!(KvStoreParams { dim, rows, n_tok, n_seq });
        check_layout!(KvShiftParams {
            n_heads,
            head_dim,
            n_rot,
            k_dim,
            n_rows,
            delta,
            theta_scale,
            freq_scale,
            ext_factor,
            corr_low,
            corr_high,
            mscale,
            has_freqs,
            neox
        });
        check_layout!(AttentionParams {
            n_heads,
            group,
            head_dim,
            rows,
            k_dim,
            v_dim,
            window,
            q_width,
            scale,
            softcap,
            splits,
            blocks,
            n_tok,
            n_seq
        });
        check_layout!(CountParams { n });
        check_layout!(ArgmaxParams { n, all, n_tok, n_seq, parts, chunk });
        check_layout!(TakeLastParams { cols, n_tok, n_seq });
    }

    /// Words are the fields' bits in order (f32 as its bit pattern).
    #[test]
    fn words_in_declaration_order() {
        let p = ArgmaxParams { n: 7, all: 9, n_tok: 3, n_seq: 1, parts: 2, chunk: 256 };
        assert_eq!(p.words(), vec![7, 9, 3, 1, 2, 256]);
        let e = EmbedParams { k: 1, scale: 2.0, ..Default::default() };
        assert_eq!(e.words(), vec![1, 0, 0, 0, 0, 2.0f32.to_bits()]);
    }
}
