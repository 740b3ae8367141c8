//! The kernels' parameters: one `#[repr(C)]` struct per kernel signature, passed by value
//! (`kernel(const XParams p)` in CUDA C, `.arg(&params)` in Rust).
//!
//! Each struct is declared once, here, by [`params!`]: the macro defines the Rust struct and
//! records its C field types, from which [`header`] writes the C declarations that are
//! prepended to the kernels of its family (every module of it), each followed by
//! `static_assert`s of its size, alignment and every field's offset as Rust computed them.
//! NVRTC thus proves that both sides agree on the layout; a field added on one side only fails
//! to compile. Device addresses are `u64` here and typed pointers in C (8 bytes on every CUDA
//! target). Fields are ordered 8-byte first, so no struct has padding between fields.
//!
//! The driver copies a launch's parameters when the launch is enqueued (and a CUDA graph
//! keeps its own copy when it is captured), so a struct built on the stack for one launch is
//! enough, with or without programmatic dependent launch.

use std::fmt::Write;

use super::kernels::Family;

/// One struct's layout, as Rust computed it: for the generated C declaration.
struct Layout {
    family: Family,
    name: &'static str,
    size: usize,
    align: usize,
    /// (C type, name, byte offset) of each field, in order.
    fields: Vec<(&'static str, &'static str, usize)>,
}

/// A parameter struct of this file: what a launch may pass to a kernel.
pub(crate) trait KernelParams: cudarc::driver::DeviceRepr {
    /// The struct's name, as `Kernel::params` names the struct a kernel takes.
    const NAME: &'static str;
}

/// Declares the parameter structs (each: doc comment, `[Family]`, `struct Name { field: RustType
/// = "C type", ... }`) and `layouts()`, their layouts for the C header.
macro_rules! params {
    ($(
        $(#[doc = $doc:literal])+
        [$family:ident] struct $name:ident {
            $($field:ident: $ty:ty = $c:literal,)+
        }
    )+) => {
        $(
            $(#[doc = $doc])+
            #[repr(C)]
            #[derive(Debug, Clone, Copy, Default, PartialEq)]
            pub(crate) struct $name {
                $(#[doc = concat!("`", $c, " ", stringify!($field), "` in C.")] pub $field: $ty,)+
            }
            // SAFETY: plain integers and floats in a repr(C) struct whose C twin NVRTC checks
            // field by field (see `header`); the driver copies it bit for bit.
            unsafe impl cudarc::driver::DeviceRepr for $name {}
            impl KernelParams for $name {
                const NAME: &'static str = stringify!($name);
            }
        )+

        /// Every parameter struct's layout.
        fn layouts() -> Vec<Layout> {
            vec![$(Layout {
                family: Family::$family,
                name: stringify!($name),
                size: std::mem::size_of::<$name>(),
                align: std::mem::align_of::<$name>(),
                fields: vec![$(($c, stringify!($field), std::mem::offset_of!($name, $field)),)+],
            },)+]
        }
    };
}

params! {
    /// `embed`: dst row r = row tokens[r] of the table (n_rows rows of k, type wtype), · scale.
    [Elementwise] struct EmbedParams {
        table: u64 = "const u8*",
        n_rows: i64 = "long long",
        tokens: u64 = "const u32*",
        dst: u64 = "float*",
        wtype: i32 = "int",
        k: i32 = "int",
        scale: f32 = "float",
    }
    /// `gated_act`: gate = act(gate) · up over n values (act 0 SiLU, 1 GELU).
    [Elementwise] struct GatedActParams {
        gate: u64 = "float*",
        up: u64 = "const float*",
        n: i64 = "long long",
        act: i32 = "int",
    }
    /// `add`: dst = a + b over n values.
    [Elementwise] struct AddParams {
        a: u64 = "const float*",
        b: u64 = "const float*",
        dst: u64 = "float*",
        n: i64 = "long long",
    }
    /// `copy`: dst row i (n values) = src row rows[i], a block row per row of dst.
    [Elementwise] struct CopyParams {
        src: u64 = "const float*",
        dst: u64 = "float*",
        rows: u64 = "const u32*",
        n: i64 = "long long",
    }
    /// `rms_norm`: RMSNorm of x into dst over groups of `group` values, times the weight w.
    [Norm] struct RmsNormParams {
        x: u64 = "const float*",
        dst: u64 = "float*",
        w: u64 = "const u8*",
        wtype: i32 = "int",
        group: i32 = "int",
        eps: f32 = "float",
    }
    /// `rms_norm_q8s`: RMSNorm of one row of k values into dst, also converted to the split q8
    /// layout (qs, ds) of format `kind` ([`crate::exec::fuse::ActQuant`]).
    [Norm] struct RmsNormQ8Params {
        x: u64 = "const float*",
        dst: u64 = "float*",
        w: u64 = "const u8*",
        qs: u64 = "i8*",
        ds: u64 = "float*",
        wtype: i32 = "int",
        k: i32 = "int",
        eps: f32 = "float",
        kind: i32 = "int",
    }
    /// `rope`: RoPE in place on rows of n_heads heads, row r at position pos[r].
    [Rope] struct RopeParams {
        x: u64 = "float*",
        pos: u64 = "const int*",
        freqs: u64 = "const float*",
        n_heads: i32 = "int",
        head_dim: i32 = "int",
        n_rot: i32 = "int",
        theta_scale: f32 = "float",
        freq_scale: f32 = "float",
        ext_factor: f32 = "float",
        corr_low: f32 = "float",
        corr_high: f32 = "float",
        mscale: f32 = "float",
        neox: i32 = "int",
    }
    /// `rope_kv`: RoPE of one row's queries and keys, and keys and values into the cache.
    [Rope] struct RopeKvParams {
        q: u64 = "float*",
        k: u64 = "float*",
        v: u64 = "const float*",
        kc: u64 = "u16*",
        vc: u64 = "u16*",
        pos: u64 = "const int*",
        seq: u64 = "const int*",
        tables: u64 = "const u32*",
        freqs: u64 = "const float*",
        n_heads: i32 = "int",
        n_kv_heads: i32 = "int",
        head_dim: i32 = "int",
        n_rot: i32 = "int",
        theta_scale: f32 = "float",
        freq_scale: f32 = "float",
        ext_factor: f32 = "float",
        corr_low: f32 = "float",
        corr_high: f32 = "float",
        mscale: f32 = "float",
        neox: i32 = "int",
        k_dim: i32 = "int",
        v_dim: i32 = "int",
        tstride: i32 = "int",
    }
    /// `kv_store`: n values of src (rows of `dim`) into an f16 cache of rows of `dim`, row r at
    /// position pos[r] of sequence seq[r], through its block table (`tables`, rows of tstride).
    [Rope] struct KvStoreParams {
        src: u64 = "const float*",
        cache: u64 = "u16*",
        pos: u64 = "const int*",
        seq: u64 = "const int*",
        tables: u64 = "const u32*",
        n: i64 = "long long",
        dim: i32 = "int",
        tstride: i32 = "int",
    }
    /// `kv_shift`: the keys of rows blocks[r / 64] · 64 + r % 64 rotated by the angle of delta
    /// positions, one (row, KV head) a block.
    [Rope] struct KvShiftParams {
        kc: u64 = "u16*",
        blocks: u64 = "const u32*",
        freqs: u64 = "const float*",
        n_heads: i32 = "int",
        head_dim: i32 = "int",
        n_rot: i32 = "int",
        k_dim: i32 = "int",
        delta: i32 = "int",
        theta_scale: f32 = "float",
        freq_scale: f32 = "float",
        ext_factor: f32 = "float",
        corr_low: f32 = "float",
        corr_high: f32 = "float",
        mscale: f32 = "float",
        neox: i32 = "int",
    }
    /// `attention` and `attention_rows_*` (which alone read n_rows, the query rows).
    [Attention] struct AttentionParams {
        q: u64 = "const float*",
        dst: u64 = "float*",
        kc: u64 = "const u16*",
        vc: u64 = "const u16*",
        scores: u64 = "float*",
        pos: u64 = "const int*",
        seq: u64 = "const int*",
        seq_start: u64 = "const int*",
        tables: u64 = "const u32*",
        n_ctx: i32 = "int",
        n_heads: i32 = "int",
        n_kv_heads: i32 = "int",
        head_dim: i32 = "int",
        k_dim: i32 = "int",
        v_dim: i32 = "int",
        scale: f32 = "float",
        window: i32 = "int",
        softcap: f32 = "float",
        n_rows: i32 = "int",
        tstride: i32 = "int",
        n_seqs: i32 = "int",
    }
    /// `attention_split_*` (attention_split.cu): decode attention in `n_split` chunks of the keys;
    /// `part` holds part_rows rows of head_dim outputs, then part_rows (max, sum) pairs;
    /// `counters` one zeroed counter per (row, KV head, head group).
    [Attention] struct AttentionSplitParams {
        q: u64 = "const float*",
        dst: u64 = "float*",
        kc: u64 = "const u16*",
        vc: u64 = "const u16*",
        part: u64 = "float*",
        counters: u64 = "int*",
        pos: u64 = "const int*",
        seq: u64 = "const int*",
        tables: u64 = "const u32*",
        n_heads: i32 = "int",
        n_kv_heads: i32 = "int",
        k_dim: i32 = "int",
        v_dim: i32 = "int",
        scale: f32 = "float",
        window: i32 = "int",
        softcap: f32 = "float",
        n_split: i32 = "int",
        part_rows: i32 = "int",
        tstride: i32 = "int",
    }
    /// `attention_flash_*` (attention_flash.cu): prefill attention on the tensor cores, `gb`
    /// query heads sharing a KV head a block, the keys in up to `n_split` chunks; `part` and
    /// `counters` as for `AttentionSplitParams`.
    [Attention] struct AttentionFlashParams {
        q: u64 = "const float*",
        dst: u64 = "float*",
        kc: u64 = "const u16*",
        vc: u64 = "const u16*",
        part: u64 = "float*",
        counters: u64 = "int*",
        pos: u64 = "const int*",
        seq_start: u64 = "const int*",
        tables: u64 = "const u32*",
        n_heads: i32 = "int",
        n_kv_heads: i32 = "int",
        k_dim: i32 = "int",
        v_dim: i32 = "int",
        scale: f32 = "float",
        window: i32 = "int",
        softcap: f32 = "float",
        n_rows: i32 = "int",
        gb: i32 = "int",
        n_split: i32 = "int",
        part_rows: i32 = "int",
        tstride: i32 = "int",
        n_seqs: i32 = "int",
    }
    /// `argmax`: per block b, the index of the largest of the n values of row b of x into out[b];
    /// with `mask` (not null), among the ids that row b's mask (ceil(n / 32) words from
    /// mask + b · ceil(n / 32), one bit per id) allows, the others taken as -inf.
    [Sampling] struct ArgmaxParams {
        x: u64 = "const float*",
        out: u64 = "u32*",
        mask: u64 = "const u32*",
        n: i32 = "int",
    }
    /// `quantize_q8_0` (q8_1 with with_sum) and `quantize_q8_k` (which does not read with_sum):
    /// rows of k values to q8 blocks in the file layout.
    [Matmul] struct QuantizeParams {
        x: u64 = "const float*",
        out: u64 = "u8*",
        k: i32 = "int",
        with_sum: i32 = "int",
    }
    /// `round_f16`: n values rounded to f16 (kept as f32).
    [Matmul] struct RoundF16Params {
        x: u64 = "const float*",
        out: u64 = "float*",
        n: i64 = "long long",
    }
    /// `to_halves`: n values to f16 (bf16 when `bf16` is 1), for cuBLAS's products.
    [Matmul] struct HalvesParams {
        x: u64 = "const float*",
        out: u64 = "u16*",
        n: i64 = "long long",
        bf16: i32 = "int",
    }
    /// `q8_halves`: n activations to the f16 values of their q8 conversion (`k256`: q8_K's,
    /// one scale per 256 values; else q8_0's per 32), for cuBLAS's products of dequantized
    /// weights.
    [Matmul] struct Q8HalvesParams {
        x: u64 = "const float*",
        out: u64 = "u16*",
        n: i64 = "long long",
        k256: i32 = "int",
    }
    /// `bias_rows`: out[r][j] += bias[j] for `rows` rows of n values (bias of type btype).
    [Matmul] struct BiasRowsParams {
        out: u64 = "float*",
        bias: u64 = "const u8*",
        btype: i32 = "int",
        n: i32 = "int",
        rows: i32 = "int",
    }
    /// `quantize_q8s` (q8_1 with with_sum; `nb` 32-value blocks) and `quantize_q8ks` (which
    /// reads neither): values to the split q8 layout (qs, ds).
    [Matmul] struct QuantizeSplitParams {
        x: u64 = "const float*",
        qs: u64 = "i8*",
        ds: u64 = "float*",
        with_sum: i32 = "int",
        nb: i32 = "int",
    }
    /// `matvec_T`, `matvec_T_r8`: out = a · wᵀ (+ bias) for `rows` rows (q8 activations in the
    /// file layout, or f32 for float weights).
    [Matmul] struct MatVecParams {
        w: u64 = "const u8*",
        a: u64 = "const u8*",
        out: u64 = "float*",
        bias: u64 = "const u8*",
        btype: i32 = "int",
        k: i32 = "int",
        n: i32 = "int",
        rows: i32 = "int",
    }
    /// `mmv_T`: out = w · a (+ bias) (+ add), keeping the running argmax in *best when set;
    /// `mmvn_T` the same for `rows` rows (no argmax). (`rows` is read by the `mmvn` kernels
    /// only, here and in the next two.)
    [Matmul] struct MmvParams {
        w: u64 = "const u8*",
        aq: u64 = "const i8*",
        ad: u64 = "const float*",
        out: u64 = "float*",
        bias: u64 = "const u8*",
        add: u64 = "const float*",
        best: u64 = "u64*",
        btype: i32 = "int",
        k: i32 = "int",
        n: i32 = "int",
        rows: i32 = "int",
    }
    /// `mmv2_T`, `mmvn2_T`: out = act(w1 · a) · (w2 · a).
    [Matmul] struct Mmv2Params {
        w1: u64 = "const u8*",
        w2: u64 = "const u8*",
        aq: u64 = "const i8*",
        ad: u64 = "const float*",
        out: u64 = "float*",
        act: i32 = "int",
        k: i32 = "int",
        n: i32 = "int",
        rows: i32 = "int",
    }
    /// `mmv3_T`, `mmvn3_T` and `mmv3_kmix` (which alone reads the weight types t0..t2): three
    /// products of one input.
    [Matmul] struct Mmv3Params {
        w0: u64 = "const u8*",
        w1: u64 = "const u8*",
        w2: u64 = "const u8*",
        o0: u64 = "float*",
        o1: u64 = "float*",
        o2: u64 = "float*",
        b0: u64 = "const u8*",
        b1: u64 = "const u8*",
        b2: u64 = "const u8*",
        aq: u64 = "const i8*",
        ad: u64 = "const float*",
        bt0: i32 = "int",
        bt1: i32 = "int",
        bt2: i32 = "int",
        n0: i32 = "int",
        n1: i32 = "int",
        n2: i32 = "int",
        k: i32 = "int",
        t0: i32 = "int",
        t1: i32 = "int",
        t2: i32 = "int",
        rows: i32 = "int",
    }
    /// `mmq_T`, `mmq_T_n32`: the tensor-core product of `rows` rows in the split q8 layout;
    /// split along k into `splits` runs (the grid's z) whose partial sums go to `part`, added
    /// by `mmq_reduce`.
    [Mmq] struct MmqParams {
        w: u64 = "const u8*",
        aq: u64 = "const i8*",
        ad: u64 = "const float*",
        out: u64 = "float*",
        bias: u64 = "const u8*",
        part: u64 = "float*",
        btype: i32 = "int",
        k: i32 = "int",
        n: i32 = "int",
        rows: i32 = "int",
        splits: i32 = "int",
    }
    /// `dequant_T`: weight rows r0..r0 + rows (of n, k values each) to f16, row-major in `out`,
    /// for cuBLAS's products of quantized weights in prefill.
    [Mmq] struct DequantParams {
        w: u64 = "const u8*",
        out: u64 = "u16*",
        k: i32 = "int",
        n: i32 = "int",
        r0: i32 = "int",
        rows: i32 = "int",
    }
}

/// The C declarations of the parameter structs of `family`'s kernels with their layout checks
/// (prepended to the sources of each of its modules after common.cuh, which defines the
/// integer types).
pub fn header(family: Family) -> String {
    let mut h = String::from(
        "// Generated from src/exec/cuda/params.rs: the parameter structs of this family's kernels.\n\
         // Each static_assert holds what Rust computed, so NVRTC checks both sides agree.\n\
         // NVRTC has no <cstddef> and no __builtin_offsetof; its front end (EDG) takes a member's\n\
         // address in a null object as a constant inside __INTADDR__, as EDG's own offsetof does.\n\
         #ifndef offsetof\n#define offsetof(T, f) __INTADDR__(&(((T*)0)->f))\n#endif\n",
    );
    for l in layouts().iter().filter(|l| l.family == family) {
        declare(&mut h, l);
    }
    h
}

/// The size of the parameter struct named `name`.
pub fn size_of(name: &str) -> Option<usize> {
    layouts().into_iter().find(|l| l.name == name).map(|l| l.size)
}

/// Append the declaration and layout checks of one struct.
fn declare(h: &mut String, l: &Layout) {
    let n = l.name;
    let _ = writeln!(h, "\nstruct {n} {{");
    for (c, f, _) in &l.fields {
        let _ = writeln!(h, "    {c} {f};");
    }
    let _ = writeln!(h, "}};");
    let _ = writeln!(h, "static_assert(sizeof({n}) == {}, \"{n}: size differs from Rust's\");", l.size);
    let _ =
        writeln!(h, "static_assert(alignof({n}) == {}, \"{n}: alignment differs from Rust's\");", l.align);
    for (_, f, off) in &l.fields {
        let _ = writeln!(
            h,
            "static_assert(offsetof({n}, {f}) == {off}, \"{n}.{f}: offset differs from Rust's\");"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated declaration of one struct, as NVRTC sees it.
    #[test]
    fn header_declares_and_checks_a_struct() {
        let l = layouts().into_iter().find(|l| l.name == "CopyParams").expect("CopyParams is declared");
        let mut h = String::new();
        declare(&mut h, &l);
        assert_eq!(
            h,
            "\nstruct CopyParams {\n    const float* src;\n    float* dst;\n    const u32* rows;\n    long long n;\n};\n\
             static_assert(sizeof(CopyParams) == 32, \"CopyParams: size differs from Rust's\");\n\
             static_assert(alignof(CopyParams) == 8, \"CopyParams: alignment differs from Rust's\");\n\
             static_assert(offsetof(CopyParams, src) == 0, \"CopyParams.src: offset differs from Rust's\");\n\
             static_assert(offsetof(CopyParams, dst) == 8, \"CopyParams.dst: offset differs from Rust's\");\n\
             static_assert(offsetof(CopyParams, rows) == 16, \"CopyParams.rows: offset differs from Rust's\");\n\
             static_assert(offsetof(CopyParams, n) == 24, \"CopyParams.n: offset differs from Rust's\");\n"
        );
        assert!(header(Family::Elementwise).contains("struct CopyParams {"));
        assert!(!header(Family::Norm).contains("CopyParams"));
    }

    /// No struct has padding between fields (8-byte fields first): every byte up to the last
    /// field's end is some field's.
    #[test]
    fn no_interior_padding() {
        for l in layouts() {
            let sizes = |c: &str| if c.ends_with('*') || c == "long long" { 8 } else { 4 };
            let mut end = 0;
            for (c, f, off) in &l.fields {
                assert_eq!(*off, end, "{}.{f}", l.name);
                end += sizes(c);
            }
            assert!(l.size - end < l.align, "{}", l.name);
        }
    }
}
