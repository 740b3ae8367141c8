//! Byte-level BPE (GPT-2 style): every byte of a pre-tokenized word is one printable unicode
//! character, and adjacent symbols merge in the order the `tokenizer.ggml.merges` list ranks
//! them (llama.cpp `llm_tokenizer_bpe_session`).

use std::collections::{BinaryHeap, HashMap};

use super::bytes::byte_to_char;
use super::vocab::Vocab;
use crate::gguf::Metadata;
use crate::{Error, Result};

/// Merge rules, keyed by symbol pair. Symbols are token ids, or ids past the vocabulary for
/// merge results that are not tokens themselves.
#[derive(Debug, Clone)]
pub(crate) struct Merges {
    /// (left, right) → (rank, merged symbol).
    rules: HashMap<(u32, u32), (u32, u32)>,
    /// The symbol of each single byte.
    byte_sym: [u32; 256],
}

/// A symbol id that no rule produces or consumes (a byte whose character is not a token).
const NO_SYMBOL: u32 = u32::MAX;

impl Merges {
    pub fn from_metadata(md: &Metadata, vocab: &Vocab) -> Result<Merges> {
        const KEY: &str = "tokenizer.ggml.merges";
        let list = md.str_array(KEY)?;
        let n_vocab = vocab.len() as u32;
        let mut extra: HashMap<String, u32> = HashMap::new();
        let mut rules = HashMap::with_capacity(list.len());
        let mut joined = String::new();
        for (rank, rule) in list.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte.
            let split = rule.as_bytes().iter().skip(1).position(|&b| b == b' ').map(|p| p + 1);
            let Some(split) = split else {
                return Err(Error::Tokenizer(format!(
                    "merge {rank} ({rule:?}) has no space separating its two parts"
                )));
            };
            let (left, right) = (&rule[..split], &rule[split + 1..]);
            let sym = |part: &str| {
                vocab.id(part).ok_or_else(|| {
                    Error::Tokenizer(format!(
                        "merge {rank} ({rule:?}): {part:?} is not a token of the vocabulary"
                    ))
                })
            };
            let (l, r) = (sym(left)?, sym(right)?);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let merged = match vocab.id(&joined) {
                Some(id) => id,
                None => {
                    let next = n_vocab + extra.len() as u32;
                    *extra.entry(joined.clone()).or_insert(next)
                }
            };
            // Duplicate rules keep their first (best) rank, as in llama.cpp.
            rules.entry((l, r)).or_insert((rank as u32, merged));
        }
        let mut byte_sym = [NO_SYMBOL; 256];
        let mut buf = [0u8; 4];
        for b in 0..=255u8 {
            if let Some(id) = vocab.id(byte_to_char(b).encode_utf8(&mut buf)) {
                byte_sym[b as usize] = id;
            }
        }
        Ok(Merges { rules, byte_sym })
    }

    /// Tokenize one pre-tokenized word (raw bytes) and append the ids.
    pub fn encode_word(&self, vocab: &Vocab, word: &[u8], ignore_merges: bool, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if ignore_merges {
            let encoded: String = word.iter().map(|&b| byte_to_char(b)).collect();
            if let Some(id) = vocab.id(&encoded) {
                out.push(id);
                return;
            }
        }

        #[derive(Clone, Copy)]
        struct Sym {
            id: u32,
            start: u32,
            len: u32,
            prev: i32,
            next: i32,
        }
        #[derive(PartialEq, Eq)]
        struct Pair {
            rank: u32,
            left: i32,
            right: i32,
            left_id: u32,
            right_id: u32,
        }
        impl Ord for Pair {
            // Lowest rank first, then leftmost: BinaryHeap is a max-heap, so reverse.
            fn cmp(&self, o: &Self) -> std::cmp::Ordering {
                o.rank.cmp(&self.rank).then(o.left.cmp(&self.left))
            }
        }
        impl PartialOrd for Pair {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(o))
            }
        }

        let n = word.len();
        let mut syms: Vec<Sym> = (0..n)
            .map(|i| Sym {
                id: self.byte_sym[word[i] as usize],
                start: i as u32,
                len: 1,
                prev: i as i32 - 1,
                next: if i + 1 == n { -1 } else { i as i32 + 1 },
            })
            .collect();
        let mut heap = BinaryHeap::new();
        let try_pair = |syms: &[Sym], heap: &mut BinaryHeap<Pair>, left: i32, right: i32| {
            if left < 0 || right < 0 {
                return;
            }
            let (l, r) = (syms[left as usize].id, syms[right as usize].id);
            if let Some(&(rank, _)) = self.rules.get(&(l, r)) {
                heap.push(Pair { rank, left, right, left_id: l, right_id: r });
            }
        };
        for i in 1..n as i32 {
            try_pair(&syms, &mut heap, i - 1, i);
        }
        while let Some(p) = heap.pop() {
            let (li, ri) = (p.left as usize, p.right as usize);
            let (l, r) = (syms[li], syms[ri]);
            if l.len == 0 || r.len == 0 || l.id != p.left_id || r.id != p.right_id {
                continue; // stale
            }
            let Some(&(_, merged)) = self.rules.get(&(l.id, r.id)) else { continue };
            syms[li].id = merged;
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
            if (s.id as usize) < vocab.len() {
                out.push(s.id);
            } else {
                // Not a token: llama.cpp looks each UTF-8 byte of the byte-level text up as a
                // one-byte token, which only ever finds printable ASCII.
                for &b in &word[s.start as usize..(s.start + s.len) as usize] {
                    if (0x21..=0x7E).contains(&b) {
                        if let Some(id) = vocab.id(std::str::from_utf8(&[b]).unwrap_or("")) {
                            out.push(id);
                        }
                    }
                }
            }
            i = s.next;
        }
    }
}
