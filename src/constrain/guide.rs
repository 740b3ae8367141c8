//! The per-generation state of a constraint: an llguidance matcher that yields the mask of
//! allowed tokens at each step and advances with each accepted token.

use std::panic::{catch_unwind, AssertUnwindSafe};

use llguidance::{Matcher, ParserFactory};

use super::Constraint;
use crate::{Error, Result};

/// A constraint being enforced on one generation: [`Guide::mask`] before each sampling step,
/// [`Guide::accept`] after it. [`crate::Session::generate`] drives one for
/// [`crate::GenerateOptions::constraint`]; it is public for callers that sample themselves.
pub struct Guide {
    matcher: Matcher,
    n_vocab: usize,
    /// Tokens the last mask allowed, one bit each (a copy of llguidance's words).
    allowed: Vec<u32>,
}

/// llguidance's message for a failed step, as a wick error.
fn step_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Grammar(format!("{what}: {e}"))
}

impl Guide {
    /// Compile `c` for the vocabulary of `factory`: an invalid schema or grammar, or one
    /// llguidance cannot enforce, is an error here, before any token is generated.
    pub fn new(factory: &ParserFactory, c: &Constraint) -> Result<Guide> {
        let grammar = c.grammar()?;
        // llguidance reports bad grammars as errors; the guard is for any panic it would miss.
        let parser = catch_unwind(AssertUnwindSafe(|| factory.create_parser(grammar)))
            .map_err(|_| Error::Grammar("the grammar compiler failed on this input".into()))?;
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(Error::Grammar(e));
        }
        let n_vocab = factory.tok_env().tok_trie().vocab_size();
        Ok(Guide { matcher, n_vocab, allowed: Vec::new() })
    }

    /// Whether the text is complete and nothing more may follow (generation should end).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }

    /// Compute the tokens allowed next and set every other entry of `logits` to -inf. An
    /// end-of-generation token is allowed only where the text may end.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        self.next_mask(logits.len())?;
        self.apply(logits);
        Ok(())
    }

    /// Set every entry of `logits` that the last mask ([`Guide::next_mask`]) left out to -inf:
    /// the second half of [`Guide::mask`], for a mask computed while the device ran the step.
    pub fn apply(&self, logits: &mut [f32]) {
        for (i, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = if i * 32 < self.n_vocab { self.allowed.get(i).copied().unwrap_or(0) } else { 0 };
            if bits == u32::MAX {
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << b) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }

    /// Compute the tokens allowed next, as [`Guide::mask`] does, as a token mask for logits
    /// rows of `n` values ([`crate::exec::SeqStep::mask`]: `exec::mask_words(n)` words, one
    /// bit per id; ids past the vocabulary are left out), for the device's argmax to apply.
    pub fn next_mask(&mut self, n: usize) -> Result<Vec<u32>> {
        let vob = self.matcher.compute_mask().map_err(|e| step_error("constraint", e))?;
        self.allowed.clear();
        self.allowed.extend_from_slice(vob.as_slice());
        if self.allowed.iter().all(|&w| w == 0) {
            return Err(Error::Grammar("the constraint allows no token here".into()));
        }
        Ok((0..crate::exec::mask_words(n))
            .map(|w| if w * 32 < self.n_vocab { self.allowed.get(w).copied().unwrap_or(0) } else { 0 })
            .collect())
    }

    /// Whether the last mask allowed `id`.
    pub fn allows(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.n_vocab && self.allowed.get(i / 32).is_some_and(|w| w & (1 << (i % 32)) != 0)
    }

    /// Advance past the sampled token `id` (which the last mask allowed).
    pub fn accept(&mut self, id: u32) -> Result<()> {
        if !self.allows(id) {
            return Err(Error::Grammar(format!(
                "token {id} was sampled but the constraint does not allow it"
            )));
        }
        self.matcher.consume_token(id).map_err(|e| step_error("constraint", e))
    }
}
