//! RoPE, the KV-cache store, and both fused: RoPE of queries and keys with the store of the
//! rotated keys and the values.

use super::{check, groups, Builder};
use crate::exec::webgpu::kernels::Kernel;
use crate::exec::webgpu::params::Params;
use crate::exec::webgpu::params::{KvStoreParams, RopeKvParams, RopeParams};
use crate::exec::webgpu::record::{KvUse, Res};
use crate::exec::{ActId, Op, RopeConsts, RopeMode};
use crate::quant::GgmlType;
use crate::Result;

/// The fields of Rope op `i` that the kernels read, checked: (slot, parameters, the frequency
/// factors' binding).
fn checked(b: &Builder, i: usize) -> Result<(ActId, RopeParams, Res)> {
    let op = &b.g.ops[i];
    let Op::Rope { x, n_heads, head_dim, n_rot, base, freq_scale, mode, freqs, ext } = *op else {
        unreachable!("rope launch for {op:?}")
    };
    check(n_rot <= head_dim && n_rot % 2 == 0 && n_heads * head_dim <= b.g.cols(x), || {
        format!("{op:?} does not fit its slot")
    })?;
    let res = match freqs {
        None => Res::Dummy,
        Some(f) => {
            let w = b.weight(f);
            check(w.dtype == GgmlType::F32 && w.parts.len() == 1, || {
                format!("RoPE frequency factors '{}' of type {} (F32 expected)", w.name, w.dtype)
            })?;
            Res::Weight(f.0 as usize, 0)
        }
    };
    let k = RopeConsts::new(n_rot, base, freq_scale, ext);
    let p = RopeParams {
        n_heads: n_heads as u32,
        head_dim: head_dim as u32,
        n_rot: n_rot as u32,
        rows: b.g.rows(x) as u32,
        theta_scale: k.theta_scale,
        freq_scale: k.freq_scale,
        ext_factor: k.ext_factor,
        corr_low: k.corr_low,
        corr_high: k.corr_high,
        mscale: k.mscale,
        has_freqs: freqs.is_some() as u32,
        neox: (mode == RopeMode::Neox) as u32,
        width: b.g.cols(x) as u32,
        n_tok: b.g.n_tokens as u32,
        n_seq: b.g.n_seqs as u32,
    };
    Ok((x, p, res))
}

/// `Op::Rope` (rope.wgsl), in place.
pub fn rope(b: &mut Builder, i: usize) -> Result<()> {
    let (x, p, freqs) = checked(b, i)?;
    let pairs = p.rows as usize * p.n_heads as usize * p.n_rot as usize / 2;
    b.run("rope".into(), Kernel::Rope, &p, vec![Res::Step, Res::Act(x), freqs], groups(pairs.div_ceil(64)));
    b.wrote(x);
    Ok(())
}

/// The table of the step's RoPE angles for the constants of `p` and factors `freqs`
/// (rope_table.wgsl): made by a dispatch at its first use in the graph, read by every later
/// layer with the same constants (Gemma 3's local and global layers have two).
fn angles(b: &mut Builder, p: &RopeParams, freqs: Res) -> Res {
    let consts = RopeParams { n_heads: 0, head_dim: 0, width: 0, neox: 0, ..*p };
    let key = (consts.words(), freqs);
    if let Some(t) = b.rope_tables.iter().position(|(k, _)| *k == key) {
        return Res::RopeTable(t);
    }
    let t = b.rope_tables.len();
    let entries = p.rows as usize * p.n_rot as usize / 2;
    b.rope_tables.push((key, 8 * entries as u64));
    let table = Res::RopeTable(t);
    b.run(
        "rope_table".into(),
        Kernel::RopeTable,
        &consts,
        vec![Res::Step, table, freqs],
        groups(entries.div_ceil(64)),
    );
    table
}

/// Rope op `i` (queries), the Rope after it (keys) and the KvStore after that as one
/// dispatch (rope_kv.wgsl; fuse.rs): the rotated keys go to the cache only. The angles come
/// from the step's table.
pub fn rope_kv(b: &mut Builder, i: usize) -> Result<()> {
    let (x, p, freqs) = checked(b, i)?;
    let Some(&Op::KvStore { layer, k, v }) = b.g.ops.get(i + 2) else {
        // fuse.rs chose the fusion only before a KV store: this does not happen.
        return rope(b, i);
    };
    let table = angles(b, &p, freqs);
    let (kd, vd) = (b.g.cols(k), b.g.cols(v));
    let rp = RopeKvParams {
        n_heads: p.n_heads,
        head_dim: p.head_dim,
        n_rot: p.n_rot,
        rows: p.rows,
        neox: p.neox,
        q_width: p.width,
        k_dim: kd as u32,
        v_dim: vd as u32,
        n_tok: p.n_tok,
        n_seq: p.n_seq,
    };
    let rows = p.rows as usize;
    let work = rows * (p.n_heads as usize * p.n_rot as usize / 2 + kd / 2 + vd / 2);
    let what = KvUse::RopeStore { q: x, k, v, layer, table };
    b.kv("rope_kv", Kernel::RopeKv, &rp, what, groups(work.div_ceil(64)));
    b.wrote(x);
    Ok(())
}

/// `Op::KvStore` (kv_store.wgsl): one dispatch for the keys, one for the values.
pub fn kv_store(b: &mut Builder, i: usize) -> Result<()> {
    let op = &b.g.ops[i];
    let Op::KvStore { layer, k, v } = *op else { unreachable!("kv_store launch for {op:?}") };
    for (src, value) in [(k, false), (v, true)] {
        let dim = b.g.cols(src);
        check(dim.is_multiple_of(2), || format!("{op:?}: odd row width {dim}"))?;
        let rows = b.g.rows(src);
        let p = KvStoreParams {
            dim: dim as u32,
            rows: rows as u32,
            n_tok: b.g.n_tokens as u32,
            n_seq: b.g.n_seqs as u32,
        };
        b.kv(
            "kv_store",
            Kernel::KvStore,
            &p,
            KvUse::Store { src, layer, value },
            groups((rows * dim / 2).div_ceil(64)),
        );
    }
    Ok(())
}
