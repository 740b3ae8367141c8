//! The device layout of quantized weights: each GGUF block is split into its packed quants
//! and the rest (its "header": scales, mins, high bits), and the two parts are stored as two
//! arrays, quants first.
//!
//! Why: GGUF blocks are 18, 34 or 210 bytes long, so their quants sit at addresses that are
//! only 2-byte aligned and a kernel must read them two bytes at a time. Split, every block's
//! quants are 16, 32, 128, 160 or 192 bytes at a 16-byte aligned address (the quants array
//! starts the buffer; the header array starts at the next multiple of 16 after it), so the
//! matrix-vector kernels read them with 8- and 16-byte loads: a quarter to an eighth of the
//! load instructions for the same bytes.
//!
//! Block `b` of the tensor (counting row by row, as in the file) has its quants at
//! `b · Q` and its header at `header_offset + b · H`. Uploads arrive in file order in chunks
//! of any size; [`Repacker`] splits each whole block as it arrives and keeps the bytes of a
//! block cut by a chunk boundary until the next chunk (host memory: one chunk plus one block).

use rayon::prelude::*;

use crate::quant::GgmlType;

/// How one block type splits: `block` bytes, of which `quants` bytes from `quant_offset` are
/// the packed quants; the other bytes, in order, are the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub block: usize,
    pub quant_offset: usize,
    pub quants: usize,
}

impl Split {
    /// Header bytes per block.
    pub fn header(&self) -> usize {
        self.block - self.quants
    }
}

/// The split of block type `t`, or None when the type is stored as in the file (float types).
/// Must agree with the `Q*`/`H*` constants of kernels/common.cuh.
pub fn split(t: GgmlType) -> Option<Split> {
    let s = |block, quant_offset, quants| Some(Split { block, quant_offset, quants });
    match t {
        // d | qs[16]
        GgmlType::Q4_0 => s(18, 2, 16),
        // d, m | qs[16]
        GgmlType::Q4_1 => s(20, 4, 16),
        // d, qh[4] | qs[16]
        GgmlType::Q5_0 => s(22, 6, 16),
        // d, m, qh[4] | qs[16]
        GgmlType::Q5_1 => s(24, 8, 16),
        // d | qs[32]
        GgmlType::Q8_0 => s(34, 2, 32),
        // d, dmin, scales[12] | qs[128]
        GgmlType::Q4_K => s(144, 16, 128),
        // d, dmin, scales[12] | qh[32], qs[128]
        GgmlType::Q5_K => s(176, 16, 160),
        // ql[128], qh[64] | scales[16], d
        GgmlType::Q6_K => s(210, 0, 192),
        _ => None,
    }
}

/// Byte offset of the header array in a tensor of `blocks` blocks.
pub fn header_offset(s: &Split, blocks: u64) -> u64 {
    (blocks * s.quants as u64).div_ceil(16) * 16
}

/// Device bytes of a tensor of `blocks` blocks in the split layout.
pub fn device_bytes(s: &Split, blocks: u64) -> u64 {
    header_offset(s, blocks) + blocks * s.header() as u64
}

/// Blocks a task of the split.
const SPLIT_GROUP: usize = 2048;

/// An output buffer's start, shared by the split's tasks, each writing bytes of its own.
#[derive(Clone, Copy)]
struct Out(*mut u8);
// SAFETY: the tasks write disjoint ranges (`Repacker::push`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// The address of byte `i` (a method, so that closures capture `Out`, not its field).
    fn at(self, i: usize) -> *mut u8 {
        self.0.wrapping_add(i)
    }
}

/// Splits a tensor's blocks as its bytes arrive in file order.
#[derive(Debug)]
pub struct Repacker {
    split: Split,
    /// Bytes of the tensor received so far.
    received: u64,
    /// The start of a block cut by the last chunk's end.
    carry: Vec<u8>,
}

/// What to copy to the device for one chunk: `quants` at byte `quant_at` of the buffer,
/// `header` at byte `header_at`.
#[cfg(test)]
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pieces {
    pub quant_at: u64,
    pub quants: Vec<u8>,
    pub header_at: u64,
    pub header: Vec<u8>,
}

impl Repacker {
    pub fn new(split: Split) -> Self {
        Repacker { split, received: 0, carry: Vec::with_capacity(split.block) }
    }

    /// Bytes received so far (the offset the next chunk must start at).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Block bytes of the type.
    pub fn block(&self) -> usize {
        self.split.block
    }

    /// Split the whole blocks completed by `bytes` (the tensor's bytes from `received()` on)
    /// of a tensor of `blocks` blocks.
    #[cfg(test)]
    pub fn push(&mut self, bytes: &[u8], blocks: u64) -> Pieces {
        let mut out = vec![0u8; (self.carry.len() + bytes.len()) / self.split.block * self.split.block];
        let p = self.push_into(bytes, blocks, &mut out).expect("room for the blocks");
        let header = out.split_off(p.quants);
        Pieces { quant_at: p.quant_at, quants: out, header_at: p.header_at, header }
    }

    /// Split the whole blocks completed by `bytes` into `out`: their quants at its start, their
    /// headers right after them (`out` must hold the whole blocks these bytes complete:
    /// `bytes.len()` and a block is always enough; None, nothing taken, when it does not).
    /// The split goes straight into the pinned staging buffer, no copy in between.
    pub fn push_into(&mut self, bytes: &[u8], blocks: u64, out: &mut [u8]) -> Option<SplitAt> {
        let s = self.split;
        if out.len() < (self.carry.len() + bytes.len()) / s.block * s.block {
            return None;
        }
        let first = self.received / s.block as u64;
        self.received += bytes.len() as u64;
        let mut rest = bytes;
        let mut whole: Vec<&[u8]> = Vec::new();
        let mut joined = Vec::new();
        if !self.carry.is_empty() {
            let take = (s.block - self.carry.len()).min(rest.len());
            self.carry.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.carry.len() == s.block {
                joined = std::mem::take(&mut self.carry);
            }
        }
        if !joined.is_empty() {
            whole.push(&joined);
        }
        let n_whole = rest.len() / s.block;
        whole.extend(rest[..n_whole * s.block].chunks_exact(s.block));
        self.carry.extend_from_slice(&rest[n_whole * s.block..]);
        let n = whole.len();
        let (qs, hs, qo) = (s.quants, s.header(), s.quant_offset);
        let (quants, header) = out[..n * s.block].split_at_mut(n * qs);
        let (q, h) = (Out(quants.as_mut_ptr()), Out(header.as_mut_ptr()));
        // Groups of blocks on rayon's threads (a chunk of the upload is megabytes: one thread
        // split 5 GB/s here, a copy 8).
        whole.par_chunks(SPLIT_GROUP).enumerate().for_each(|(g, group)| {
            for (i, b) in group.iter().enumerate() {
                let k = g * SPLIT_GROUP + i;
                // SAFETY: block k's bytes go to [k·qs, (k+1)·qs) of `quants` and [k·hs,
                // (k+1)·hs) of `header` (n blocks each, checked by the slicing above), written
                // by this task alone; `b` is a whole block (s.block = qo + qs + the rest).
                unsafe {
                    std::ptr::copy_nonoverlapping(b.as_ptr().add(qo), q.at(k * qs), qs);
                    std::ptr::copy_nonoverlapping(b.as_ptr(), h.at(k * hs), qo);
                    std::ptr::copy_nonoverlapping(b.as_ptr().add(qo + qs), h.at(k * hs + qo), hs - qo);
                }
            }
        });
        Some(SplitAt {
            quant_at: first * s.quants as u64,
            quants: n * qs,
            header_at: header_offset(&s, blocks) + first * s.header() as u64,
            header: n * hs,
        })
    }
}

/// Where [`Repacker::push_into`] put the split: `quants` bytes at the start of its output, for
/// byte `quant_at` of the device buffer, then `header` bytes for byte `header_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitAt {
    pub quant_at: u64,
    pub quants: usize,
    pub header_at: u64,
    pub header: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any chunking gives the same device bytes as splitting the whole tensor at once.
    #[test]
    fn chunking_does_not_matter() {
        for t in [GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q5_K, GgmlType::Q6_K] {
            let s = split(t).unwrap();
            let blocks = 37u64;
            let file: Vec<u8> = (0..blocks as usize * s.block).map(|i| (i * 7 + i / 13) as u8).collect();
            let mut want = vec![0u8; device_bytes(&s, blocks) as usize];
            let hoff = header_offset(&s, blocks) as usize;
            assert_eq!(hoff % 16, 0);
            for (b, blk) in file.chunks_exact(s.block).enumerate() {
                want[b * s.quants..][..s.quants].copy_from_slice(&blk[s.quant_offset..][..s.quants]);
                let h: Vec<u8> =
                    blk[..s.quant_offset].iter().chain(&blk[s.quant_offset + s.quants..]).copied().collect();
                want[hoff + b * s.header()..][..s.header()].copy_from_slice(&h);
            }
            for chunk in [1usize, 5, s.block - 1, s.block, s.block + 3, 1000] {
                let mut got = vec![0u8; want.len()];
                let mut r = Repacker::new(s);
                for c in file.chunks(chunk) {
                    let p = r.push(c, blocks);
                    got[p.quant_at as usize..][..p.quants.len()].copy_from_slice(&p.quants);
                    got[p.header_at as usize..][..p.header.len()].copy_from_slice(&p.header);
                }
                assert_eq!(r.received(), file.len() as u64);
                assert_eq!(got, want, "{t:?} in chunks of {chunk}");
            }
        }
    }

    /// An output too small for the blocks completed is refused, nothing taken.
    #[test]
    fn short_output_is_refused() {
        let s = split(GgmlType::Q4_K).unwrap();
        let mut r = Repacker::new(s);
        let bytes = vec![1u8; 2 * s.block + 5];
        assert_eq!(r.push_into(&bytes, 4, &mut [0u8; 143]), None);
        assert_eq!(r.received(), 0);
        let mut out = vec![0u8; 2 * s.block];
        let p = r.push_into(&bytes, 4, &mut out).unwrap();
        assert_eq!((p.quants, p.header, r.received()), (256, 32, bytes.len() as u64));
    }
}

#[cfg(test)]
mod speed {
    use super::*;

    /// Diagnostic: split throughput for Q4_K in 4 MiB chunks, against a plain copy.
    #[test]
    #[ignore]
    fn split_speed() {
        let s = split(GgmlType::Q4_K).unwrap();
        let blocks = (1u64 << 30) / s.block as u64;
        let file: Vec<u8> = (0..blocks as usize * s.block).map(|i| i as u8).collect();
        let t = std::time::Instant::now();
        let mut r = Repacker::new(s);
        let mut n = 0;
        for c in file.chunks(4 << 20) {
            n += r.push(c, blocks).quants.len();
        }
        let dt = t.elapsed().as_secs_f64();
        eprintln!("split: {:.2} GB/s ({n})", file.len() as f64 / dt / 1e9);
        let mut out = vec![0u8; 4 << 20];
        let t = std::time::Instant::now();
        for c in file.chunks(4 << 20) {
            out[..c.len()].copy_from_slice(c);
        }
        eprintln!("copy: {:.2} GB/s {}", file.len() as f64 / t.elapsed().as_secs_f64() / 1e9, out[7]);
    }
}
