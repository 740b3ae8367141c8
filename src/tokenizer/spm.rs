//! SentencePiece BPE as llama.cpp runs it (`llm_tokenizer_spm_session`): start from single
//! UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the token with the
//! highest score (leftmost on ties), then spell anything that is not a token as `<0xXX>` bytes.

use std::collections::BinaryHeap;

use super::vocab::Vocab;
use crate::{Error, Result};

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

struct Pair {
    score: f32,
    left: i32,
    right: i32,
    size: u32,
}

impl PartialEq for Pair {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Pair {}
impl Ord for Pair {
    // Highest score first, then leftmost.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.score.total_cmp(&o.score).then(o.left.cmp(&self.left))
    }
}
impl PartialOrd for Pair {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// The token for one byte: `<0xXX>`, else the one-byte text itself, else `<unk>`.
pub(crate) fn byte_token(vocab: &Vocab, b: u8) -> Option<u32> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let name = [b'<', b'0', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize], b'>'];
    if let Some(id) = std::str::from_utf8(&name).ok().and_then(|s| vocab.id(s)) {
        return Some(id);
    }
    if b < 0x80 {
        if let Some(id) = std::str::from_utf8(&[b]).ok().and_then(|s| vocab.id(s)) {
            return Some(id);
        }
    }
    vocab.specials.unk
}

/// Tokenize `text` (spaces already escaped as ▁) and append the ids.
pub(crate) fn encode(vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        syms.push(Sym {
            start: start as u32,
            len: len as u32,
            prev: i as i32 - 1,
            next: if start + len == text.len() { -1 } else { i as i32 + 1 },
        });
    }
    let mut heap = BinaryHeap::new();
    let try_pair = |syms: &[Sym], heap: &mut BinaryHeap<Pair>, left: i32, right: i32| {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (syms[left as usize], syms[right as usize]);
        let s = l.start as usize;
        let e = (r.start + r.len) as usize;
        if let Some(id) = text.get(s..e).and_then(|t| vocab.id(t)) {
            heap.push(Pair { score: vocab.scores[id as usize], left, right, size: (e - s) as u32 });
        }
    };
    for i in 1..syms.len() as i32 {
        try_pair(&syms, &mut heap, i - 1, i);
    }
    while let Some(p) = heap.pop() {
        let (li, ri) = (p.left as usize, p.right as usize);
        let (l, r) = (syms[li], syms[ri]);
        // Stale if either side already merged elsewhere.
        if l.len == 0 || r.len == 0 || l.len + r.len != p.size {
            continue;
        }
        syms[li].len += r.len;
        syms[li].next = r.next;
        syms[ri].len = 0;
        if r.next >= 0 {
            syms[r.next as usize].prev = p.left;
        }
        try_pair(&syms, &mut heap, l.prev, p.left);
        try_pair(&syms, &mut heap, p.left, syms[li].next);
    }

    let mut i = 0i32;
    while i >= 0 {
        let s = syms[i as usize];
        let piece = &text.as_bytes()[s.start as usize..(s.start + s.len) as usize];
        match std::str::from_utf8(piece).ok().and_then(|t| vocab.id(t)) {
            Some(id) => out.push(id),
            None => {
                for &b in piece {
                    let id = byte_token(vocab, b).ok_or_else(|| {
                        Error::Tokenizer(format!("no token for byte 0x{b:02X} and no <unk> token"))
                    })?;
                    out.push(id);
                }
            }
        }
        i = s.next;
    }
    Ok(())
}
