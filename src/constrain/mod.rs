//! Constrained decoding: JSON objects, JSON schemas and Lark grammars enforced token by token
//! with llguidance.
//!
//! How it fits together:
//! - `vocab.rs` turns wick's vocabulary into llguidance's token trie, once per model (the
//!   [`ConstraintCompiler`], kept by the `Model` and built on first use);
//! - `grammar.rs` holds the public [`Constraint`] and its translation to an llguidance grammar;
//! - `guide.rs` is one generation's matcher: before each sampling step it sets the logits of
//!   every token the grammar forbids to -inf (so the whole sampler chain, greedy included, sees
//!   only allowed tokens), and it advances with each sampled token. End-of-generation tokens
//!   are allowed exactly where the text may end; where nothing may follow, generation ends.
//!
//! The mask of step t depends on the token of step t - 1, so it can only overlap step t's own
//! forward pass: the generation loops compute it ([`Guide::next_mask`]) as the host work of
//! [`crate::exec::Executor::run_with`], which the GPU executors call after submitting the
//! forward pass and before the argmax (the CPU executor, before the step). Where the device
//! picks the token (greedy decoding without penalties, log-probabilities or a logit bias), the
//! mask goes to the device's argmax as a bit mask ([`crate::exec::SeqStep::mask`]), which
//! counts the ids it leaves out as -inf, and only the token id comes back. Otherwise
//! (sampling) the logits are read back and the mask computed meanwhile is applied on the host
//! ([`Guide::apply`]); both give the same tokens.
//!
//! The same llguidance features are compiled natively and in wasm (no `referencing`, `rayon`
//! or `ahash`), so both builds accept the same schemas: `$ref` works for references inside the
//! schema (`#/$defs/...`, `#/definitions/...`, `#`), never for remote documents.

mod gbnf;
mod grammar;
mod guide;
mod vocab;

pub use gbnf::{gbnf_to_lark, looks_like_gbnf};
pub use grammar::Constraint;
pub use guide::Guide;

use std::panic::{catch_unwind, AssertUnwindSafe};

use llguidance::ParserFactory;

use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// A vocabulary's compiled state for constraints: the token trie and llguidance's parser
/// factory. Building it takes a fraction of a second for a 50k vocabulary; a `Model` builds
/// it once, on the first constrained generation.
pub struct ConstraintCompiler {
    factory: ParserFactory,
}

impl ConstraintCompiler {
    /// Build the trie of `tok`'s vocabulary.
    pub fn new(tok: &Tokenizer) -> Result<ConstraintCompiler> {
        // `token_env` checks toktrie's limits first; the guard is for any panic they miss.
        let built = catch_unwind(AssertUnwindSafe(|| {
            let env = vocab::token_env(tok)?;
            ParserFactory::new_simple(&env)
                .map_err(|e| Error::Grammar(format!("could not prepare the vocabulary: {e}")))
        }));
        let mut factory = built
            .map_err(|_| Error::Grammar("this vocabulary cannot be made into a token trie".into()))??;
        // Warnings and errors come back as values; nothing goes to stderr.
        factory.quiet();
        Ok(ConstraintCompiler { factory })
    }

    /// Start enforcing `c`: compiles the schema or grammar (an error names what is wrong).
    pub fn guide(&self, c: &Constraint) -> Result<Guide> {
        Guide::new(&self.factory, c)
    }

    /// Check that `c` compiles, without generating anything.
    pub fn check(&self, c: &Constraint) -> Result<()> {
        self.guide(c).map(|_| ())
    }
}
