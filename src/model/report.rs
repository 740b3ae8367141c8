//! What `wick info` and the package's `Wick.inspect` tell before a download or a load: the
//! estimate at the context a session would get, and at the model's own, and whether each fits
//! the executor's budget. Header only: the same estimator and fitting a [`Session`] uses.
//!
//! [`Session`]: crate::Session

use super::memory::{check, fit, SessionMemory};
use super::{Hparams, MemoryEstimate, WeightTable};
use crate::exec::{ExecutorKind, MemoryBudget};
use crate::gguf::TensorInfo;
use crate::Result;

/// The estimate at one context, and whether it fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFit {
    /// Context in tokens.
    pub n_ctx: usize,
    /// Weights, KV cache and scratch at that context.
    pub memory: MemoryEstimate,
    /// `None`: it fits (or the budget is unknown); else why not, with the figures.
    pub problem: Option<String>,
}

impl ContextFit {
    /// Whether it fits the budget (true where the budget is unknown).
    pub fn fits(&self) -> bool {
        self.problem.is_none()
    }
}

/// A model's memory on an executor, from its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitReport {
    /// At the context asked for, or (none asked) the one a session would choose: the largest
    /// that fits the budget, at most the model's own.
    pub chosen: ContextFit,
    /// Whether `chosen` is the default choice (no context asked for).
    pub default: bool,
    /// At the model's own context (`context_length`).
    pub full: ContextFit,
    /// The budget compared with; `None` where the executor reports none.
    pub budget: Option<MemoryBudget>,
}

impl FitReport {
    /// The report for a session of `n_ctx` positions (0: the default) in prompt chunks of
    /// `n_batch` (0: the executor's), on an executor of `kind` with `budget`, before loading
    /// (the weights still to come out of a budget that covers them).
    pub fn new(
        hp: &Hparams,
        n_vocab: usize,
        tensors: &[TensorInfo],
        n_ctx: usize,
        n_batch: usize,
        kind: ExecutorKind,
        budget: Option<MemoryBudget>,
    ) -> Result<FitReport> {
        let weights = tensors.iter().fold(0u64, |a, t| a.saturating_add(t.n_bytes()));
        let mem = SessionMemory::new(hp, n_vocab, &WeightTable::from_infos(tensors), n_batch, kind)?;
        let top = hp.n_ctx_train.max(1);
        let at = |n: usize| {
            let problem = budget.as_ref().and_then(|b| check(&mem, weights, b, false, n).err());
            ContextFit {
                n_ctx: n,
                memory: MemoryEstimate { weights, ..mem.at(n) },
                problem: problem.map(|e| match e {
                    crate::Error::InvalidArgument(m) => m,
                    e => e.to_string(),
                }),
            }
        };
        let chosen = match (n_ctx, &budget) {
            (0, None) => top.min(4096),
            (0, Some(b)) => fit(hp, &mem, weights, b, false).unwrap_or(super::MIN_CONTEXT.min(top)),
            (n, _) => n,
        };
        let mut chosen = at(chosen);
        if chosen.n_ctx > top {
            chosen.problem = Some(format!(
                "a context of {} tokens is more than the model's own ({top}, {}.context_length)",
                chosen.n_ctx,
                hp.arch.name()
            ));
        }
        Ok(FitReport { chosen, default: n_ctx == 0, full: at(top), budget })
    }
}
