//! Cutting special-token texts out of the input before tokenizing the rest (llama.cpp
//! `tokenizer_st_partition`): for each special token, longest text first, every occurrence in
//! every remaining text fragment becomes that token.

use super::vocab::{attr, Vocab};

/// A piece of the input: plain text (a byte range of it) or a token already decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(usize, usize),
    Token(u32),
}

/// Split `text` at special-token texts. Control and unknown tokens count only when
/// `parse_special`; user-defined tokens always do.
pub(crate) fn partition(vocab: &Vocab, text: &str, parse_special: bool) -> Vec<Fragment> {
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text(0, text.len()));
    let mut next = Vec::new();
    for &id in &vocab.special_cache {
        if !parse_special && vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let needle = vocab.texts[id as usize].as_str();
        // Most special tokens never occur: one scan of the whole input rules them out.
        if needle.is_empty() || !text.contains(needle) {
            continue;
        }
        next.clear();
        for &f in &frags {
            let Fragment::Text(start, end) = f else {
                next.push(f);
                continue;
            };
            let mut pos = start;
            for (m, _) in text[start..end].match_indices(needle) {
                let m = start + m;
                if m > pos {
                    next.push(Fragment::Text(pos, m));
                }
                next.push(Fragment::Token(id));
                pos = m + needle.len();
            }
            if pos < end {
                next.push(Fragment::Text(pos, end));
            }
        }
        std::mem::swap(&mut frags, &mut next);
    }
    frags
}
