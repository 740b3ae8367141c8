//! Matrix products against quantized weights, the CPU executor's hot loop.
//!
//! Like llama.cpp's CPU backend, the activations are first converted to the weight type's
//! dot-product partner (q8 blocks for quantized weights, f16 for f16 weights), then every
//! output is one block-format dot product. Threads split the weight rows, so each thread
//! streams its own slice of the weight bytes once per step.

use super::par;
use super::Weight;
use crate::quant;
use crate::{Error, Result};

/// Buffers reused across the matmuls of a step.
#[derive(Default)]
pub struct Scratch {
    acts: Vec<u8>,
    /// What `acts` holds: (format, values a row, rows).
    held: Option<(quant::GgmlType, usize, usize)>,
    row: Vec<u8>,
    tmp: Vec<f32>,
    scales: Vec<f32>,
    /// The eight-row tile's activation quants (`quant::pack_tile8`).
    packed: Vec<u8>,
}

/// out (rows × n) = x (rows × k) · Wᵀ, W being `w` (n rows of k). `same_input`: the previous
/// matmul of the step read the same, unchanged `x`, so its converted activations are taken
/// again where they are in this weight's format (Q, K and V; gate and up).
pub fn matmul(
    w: &Weight,
    x: &[f32],
    rows: usize,
    out: &mut [f32],
    s: &mut Scratch,
    same_input: bool,
) -> Result<()> {
    let (k, n) = (w.k(), w.n_rows());
    if x.len() != rows * k || out.len() != rows * n {
        return Err(Error::Executor {
            executor: "cpu",
            message: format!("matmul shape mismatch on '{}'", w.name),
        });
    }
    if rows == 0 {
        return Ok(());
    }
    let vt = quant::vec_dot_type(w.dtype);
    if !(same_input && s.held == Some((vt, k, rows))) {
        convert(vt, x, k, rows, s)?;
    }
    let arb = s.acts.len() / rows;
    let wrb = w.dtype.row_bytes(k as u64)? as usize;
    let (acts, data, dtype) = (&s.acts[..], &w.data[..], w.dtype);
    // Enough chunks to balance the threads, big enough to amortise the scheduling.
    let chunk = (n / (par::threads() * 8)).max(16);
    let tiled = quant::has_tile(dtype);
    if rows == 1 {
        par::for_each_chunk(out, chunk, |ci, o| {
            let j0 = ci * chunk;
            // One weight row at a time: measured, four rows sharing each activation block
            // (a 4 x 1 tile) ran at less than half the speed, the four interleaved weight
            // streams defeating the hardware prefetcher on the memory-bound output matrix.
            quant::vec_dot_rows(dtype, k, &data[j0 * wrb..(j0 + o.len()) * wrb], wrb, acts, o);
        });
        return Ok(());
    }
    matmul_batched(
        tiled,
        dtype,
        k,
        n,
        rows,
        data,
        wrb,
        acts,
        arb,
        chunk,
        out,
        &mut s.tmp,
        &mut s.scales,
        &mut s.packed,
    );
    Ok(())
}

/// `x` (rows of k) into `s.acts` in the format `vt`, the rows split among the threads.
fn convert(vt: quant::GgmlType, x: &[f32], k: usize, rows: usize, s: &mut Scratch) -> Result<()> {
    s.held = None;
    // The first row on this thread: its size, and any error, before the others.
    quant::quantize_row_into(vt, &x[..k], &mut s.row)?;
    let arb = s.row.len();
    s.acts.resize(rows * arb, 0);
    s.acts[..arb].copy_from_slice(&s.row);
    let per = (rows - 1).div_ceil(par::threads()).max(8);
    par::for_each_chunk(&mut s.acts[arb..], per * arb, |ci, part| {
        let mut row = Vec::with_capacity(arb);
        for (j, dst) in part.chunks_exact_mut(arb).enumerate() {
            let r = 1 + ci * per + j;
            // The format converted the first row, so it converts these (an error is not
            // possible here; the row would stay zero).
            if quant::quantize_row_into(vt, &x[r * k..(r + 1) * k], &mut row).is_ok() {
                dst.copy_from_slice(&row);
            }
        }
    });
    s.held = Some((vt, k, rows));
    Ok(())
}

/// The batched product: each weight row is read once and dotted with every activation row,
/// eight or four activation rows at a time. `tiled` (the legacy types): the tiles of
/// [`quant::vec_dot_tile8`] / [`quant::vec_dot_tile4`], whose results are bit-identical to one
/// [`quant::vec_dot`] per output (for these types llama.cpp's 4-row kernels round as its
/// one-row kernels do). Otherwise llama.cpp's 4-row order, [`quant::vec_dot_gemm4`] (Q4_K on x86
/// rounds differently there), by [`quant::vec_dot_gemm4_tile`]. Rows past the last group of
/// four take [`quant::vec_dot`], as in llama.cpp. (Q4_K unpacked once for eight rows, as the
/// legacy types are, was tried: no faster on Gemma 3 270M.)
#[allow(clippy::too_many_arguments)]
fn matmul_batched(
    tiled: bool,
    dtype: quant::GgmlType,
    k: usize,
    n: usize,
    rows: usize,
    data: &[u8],
    wrb: usize,
    acts: &[u8],
    arb: usize,
    chunk: usize,
    out: &mut [f32],
    tmp: &mut Vec<f32>,
    scales: &mut Vec<f32>,
    packed: &mut Vec<u8>,
) {
    // Each thread's chunk of weight rows j0..j0 + nj is a block of tmp laid out by activation
    // row (block[r * nj + jj]: activation row r times weight row j0 + jj), so that the chunk's
    // part of each output row is one copy at the end. (A transpose of the whole product, one
    // element at a time on one thread, was 4% of Gemma 3 270M's pp64.)
    tmp.resize(n * rows, 0.0);
    let rows4 = rows / 4 * 4;
    // The activations' block scales as f32, once for every weight row (8 values a block a group).
    let gsz = if tiled { 8 * (k / dtype.block_size()) } else { 0 };
    scales.resize(rows4 / 4 * gsz, 0.0);
    if tiled {
        for (g, sc) in scales.chunks_exact_mut(gsz).enumerate() {
            quant::tile_scales(dtype, k, &acts[4 * g * arb..], arb, sc);
        }
    }
    let scales = &scales[..];
    // Eight rows at a time where the type has that kernel (each weight block unpacked once for
    // eight: Gemma 3 270M's Q5_0 prefill, pp64 on one thread, 261-264 -> 285-290 tok/s), then
    // four, then one.
    let rows8 = if tiled && quant::has_tile8(dtype) { rows / 8 * 8 } else { 0 };
    // Their quants packed block by block (256 bytes a block a group of eight), 32-byte aligned.
    let psz = 256 * (k / dtype.block_size());
    packed.resize(rows8 / 8 * psz + 32, 0);
    let p0 = packed.as_ptr().align_offset(32).min(32);
    let packed = &mut packed[p0..p0 + rows8 / 8 * psz];
    for (h, p) in packed.chunks_exact_mut(psz.max(1)).enumerate() {
        quant::pack_tile8(k, &acts[8 * h * arb..], arb, p);
    }
    let packed = &packed[..];
    // Weight rows in runs that stay in L1 while every activation group passes over them, each
    // group in turn staying in L1 across the run. Row by row, the whole activation matrix
    // (Gemma 3 270M's pp64: 64 rows of 680 bytes, and their scales) went through L2 once per
    // weight row.
    let run = (8192 / wrb).clamp(1, 16);
    par::for_each_chunk(tmp, chunk * rows, |ci, t| {
        let j0 = ci * chunk;
        let nj = t.len() / rows;
        let wr = |jj: usize| &data[(j0 + jj) * wrb..(j0 + jj + 1) * wrb];
        for jb in (0..nj).step_by(run) {
            let js = jb..(jb + run).min(nj);
            for h in 0..rows8 / 8 {
                let (sc0, sc1) = (&scales[2 * h * gsz..], &scales[(2 * h + 1) * gsz..]);
                let w = &data[(j0 + js.start) * wrb..(j0 + js.end) * wrb];
                let o = &mut t[8 * h * nj + js.start..];
                let a = quant::Tile8Acts {
                    raw: &acts[8 * h * arb..],
                    arb,
                    packed: &packed[h * psz..(h + 1) * psz],
                    scales: [sc0, sc1],
                };
                quant::vec_dot_tile8_run(dtype, k, (w, wrb, js.len()), &a, o, nj);
            }
            for g in rows8 / 4..rows4 / 4 {
                let (sc, a) = (&scales[g * gsz..(g + 1) * gsz], &acts[4 * g * arb..]);
                if !tiled {
                    let w = &data[(j0 + js.start) * wrb..(j0 + js.end) * wrb];
                    let o = &mut t[4 * g * nj + js.start..];
                    quant::vec_dot_gemm4_run(dtype, k, w, wrb, js.len(), a, arb, o, nj);
                    continue;
                }
                for jj in js.clone() {
                    let mut o = [0f32; 4];
                    quant::vec_dot_tile4(dtype, k, wr(jj), a, arb, sc, &mut o);
                    for (c, v) in o.into_iter().enumerate() {
                        t[(4 * g + c) * nj + jj] = v;
                    }
                }
            }
            for r in rows4..rows {
                for jj in js.clone() {
                    t[r * nj + jj] = quant::vec_dot(dtype, k, wr(jj), &acts[r * arb..(r + 1) * arb]);
                }
            }
        }
    });
    // Each output row gathers its pieces from the chunks, the rows split among the threads.
    let tmp = &tmp[..];
    par::for_each_rows(out, n, |r0, part| {
        for (ci, t) in tmp.chunks(chunk * rows).enumerate() {
            let (j0, nj) = (ci * chunk, t.len() / rows);
            for (r, o) in part.chunks_exact_mut(n).enumerate() {
                let src = &t[(r0 + r) * nj..(r0 + r + 1) * nj];
                o[j0..j0 + nj].copy_from_slice(src);
            }
        }
    });
}
