//! Attention of the step's queries over the KV cache. Steps of a few rows (decode) split the
//! keys across workgroups (attention_split.wgsl, merged by attention_combine.wgsl); steps of
//! many rows walk them in tiles (attention_tiled.wgsl). Head sizes that are not a multiple of
//! 4 take attention.wgsl (a workgroup per row and head).

use super::{check, groups, Builder};
use crate::exec::webgpu::kernels::{split_workgroup_bytes, Kernel, Tiles};
use crate::exec::webgpu::params::AttentionParams;
use crate::exec::webgpu::record::{KvUse, Res};
use crate::exec::Op;
use crate::Result;

/// Steps of at most this many rows split the keys (each row is attended to on its own).
pub const SPLIT_ROWS: usize = 4;
/// Splits of a decode step's keys (fewer where the partial results would not fit a binding;
/// at most 128: attention_combine.wgsl). With at least `SPLIT_MIN` (64, attention_keys.wgsl)
/// keys each, a row of 8 KV heads fills 512 workgroups of one key tile at 4096 keys, and 1024
/// of two tiles at 16384; a row of fewer than 64 keys takes one.
const MAX_SPLITS: usize = 128;
/// Query heads a split workgroup takes at most.
const MAX_SPLIT_HEADS: usize = 8;

/// `Op::Attention`: the split kernel and its merge, the tiled kernel, or the per-row kernel.
pub fn attention(b: &mut Builder, i: usize) -> Result<()> {
    let op = &b.g.ops[i];
    let Op::Attention { layer, q, dst, n_heads, n_kv_heads, head_dim, scale, window, softcap } = *op else {
        unreachable!("attention launch for {op:?}")
    };
    let g = b.g;
    check(
        head_dim <= 256
            && head_dim % 2 == 0
            && n_kv_heads > 0
            && n_heads % n_kv_heads == 0
            && g.cols(q) == n_heads * head_dim
            && g.cols(dst) == n_heads * head_dim
            && g.rows(q) == g.rows(dst),
        || format!("{op:?}: unsupported shape (head_dim at most 256)"),
    )?;
    let rows = g.rows(q);
    let kv_dim = n_kv_heads * head_dim;
    let group = n_heads / n_kv_heads;
    let mut p = AttentionParams {
        n_heads: n_heads as u32,
        group: group as u32,
        head_dim: head_dim as u32,
        rows: rows as u32,
        k_dim: kv_dim as u32,
        v_dim: kv_dim as u32,
        window: window.unwrap_or(0) as u32,
        q_width: (n_heads * head_dim) as u32,
        scale,
        softcap: softcap.unwrap_or(0.0),
        splits: 0,
        blocks: 0,
        n_tok: g.n_tokens as u32,
        n_seq: g.n_seqs as u32,
    };
    let wg_bytes = b.limits.max_compute_workgroup_storage_size as usize;
    if head_dim % 4 == 0 && rows <= SPLIT_ROWS {
        // Query heads per workgroup: the group's size rounded up to a power of two, at most 8,
        // fewer where workgroup memory is short.
        let mut heads = group.next_power_of_two().min(MAX_SPLIT_HEADS);
        while heads > 1 && split_workgroup_bytes(heads, head_dim) > wg_bytes {
            heads /= 2;
        }
        let per_split = 4 * (rows * n_heads * (head_dim + 2)) as u64;
        // `WICK_WEBGPU_SPLITS=N`: at most N splits (natively, to measure the kernel's shape).
        let most =
            std::env::var("WICK_WEBGPU_SPLITS").ok().and_then(|v| v.parse().ok()).unwrap_or(MAX_SPLITS);
        let splits = (b.limits.max_storage_buffer_binding_size / per_split)
            .min(most.clamp(1, MAX_SPLITS) as u64) as usize;
        if split_workgroup_bytes(heads, head_dim) <= wg_bytes && splits > 0 {
            p.splits = splits as u32;
            p.blocks = group.div_ceil(heads) as u32;
            b.attn_scratch = b.attn_scratch.max(per_split * splits as u64);
            let what = KvUse::AttendSplit { q, dst, layer, k_dim: kv_dim };
            let n = splits * p.blocks as usize * n_kv_heads * rows;
            b.kv(
                "attention split",
                Kernel::AttentionSplit { heads: heads as u8, dims: head_dim as u16 },
                &p,
                what,
                groups(n),
            );
            let bufs = vec![Res::Step, Res::AttnScratch, Res::Act(dst)];
            b.run(
                "attention combine".into(),
                Kernel::AttentionCombine { dims: head_dim as u16 },
                &p,
                bufs,
                groups(rows * n_heads),
            );
            b.wrote(dst);
            return Ok(());
        }
    }
    // In the browser too: it once went wrong there past the first key tile because its
    // scores were a loop-local `var`, which Chromium's compiler zeroes only once per
    // invocation, not at every tile (see attention_tiled.wgsl and the
    // `no_uninitialized_var_in_loops` check of every kernel's source).
    // Not right on lavapipe past about 6600 keys at head size 128 (11000 at 64): llvmpipe ends
    // every loop of an invocation once all its loops together have run 65535 iterations
    // (LP_MAX_TGSI_LOOP_ITERATIONS), and a workgroup walks every key tile. SwiftShader passes
    // the same steps (tests/ops attention_deep at 8256 and 14000 keys, tried by hand).
    if head_dim % 4 == 0 {
        if let Some(t) = tiles(head_dim, wg_bytes) {
            let what = KvUse::Attend { q, dst, layer, k_dim: kv_dim };
            // Each sequence's pairs are tiled on their own (attention_tiled.wgsl): at most
            // ceil(rows · group / pairs) + n_seqs - 1 tiles per KV head; the rest exit.
            let n = ((rows * group).div_ceil(t.pairs as usize) + g.n_seqs - 1) * n_kv_heads;
            b.kv("attention tiled", Kernel::AttentionTiled(t), &p, what, groups(n));
            b.wrote(dst);
            return Ok(());
        }
    }
    let what = KvUse::Attend { q, dst, layer, k_dim: kv_dim };
    b.kv("attention", Kernel::Attention, &p, what, groups(rows * n_heads));
    b.wrote(dst);
    Ok(())
}

/// The tiles of attention_tiled.wgsl for heads of `head_dim` in `wg_bytes` of workgroup
/// memory: 32 pairs per workgroup (16 past 128 dimensions, keeping each invocation's outputs
/// at 64 values), 64 keys per tile where they fit, else 32; None where neither fits.
fn tiles(head_dim: usize, wg_bytes: usize) -> Option<Tiles> {
    let pairs = if head_dim <= 128 { 32 } else { 16 };
    // `WICK_WEBGPU_TILE_KEYS=32`: the small tiles even where the large fit (natively, to test
    // the tiles that adapters with 16 KiB of workgroup memory get).
    let small = std::env::var("WICK_WEBGPU_TILE_KEYS").as_deref() == Ok("32");
    let keys: &[u8] = if small { &[32] } else { &[64, 32] };
    keys.iter().copied().find_map(|keys| {
        let mut t = Tiles { pairs, keys, chunks: 1 };
        t.chunks = head_dim.div_ceil(t.chunk_dims()) as u8;
        (t.workgroup_bytes() <= wg_bytes).then_some(t)
    })
}
