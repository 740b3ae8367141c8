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
        let rows = budget.as_ref().and_then(|b| b.max_buffer).and_then(|max| too_wide(tensors, max));
        let at = |n: usize| {
            let problem = budget.as_ref().and_then(|b| check(&mem, weights, b, false, n).err());
            let problem = problem.or_else(|| rows.clone().map(crate::Error::InvalidArgument));
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

/// Why a weight cannot be loaded on a device whose largest buffer is `max_buffer` bytes, if
/// one cannot: a weight is split across buffers by whole rows, four or more a buffer, with
/// 32 bytes of slack (the WebGPU executor's `GpuWeight`), so its rows may be as wide as a
/// quarter of a buffer and no wider. A tensor of any length is split; a row is not.
fn too_wide(tensors: &[TensorInfo], max_buffer: u64) -> Option<String> {
    tensors.iter().find_map(|t| {
        let row = t.dtype.row_bytes(*t.dims.first()?).ok()?;
        (row.saturating_mul(4).saturating_add(32) > max_buffer).then(|| {
            format!(
                "'{}' cannot be loaded on this device: its rows of {:.1} MiB do not fit four to a \
                 buffer of at most {:.1} MiB (the device's storage binding limit)",
                t.name,
                row as f64 / (1u64 << 20) as f64,
                max_buffer as f64 / (1u64 << 20) as f64
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;

    fn tensor(name: &str, dims: &[u64], dtype: GgmlType) -> TensorInfo {
        TensorInfo { name: name.into(), dims: dims.to_vec(), dtype, offset: 0 }
    }

    #[test]
    fn a_row_wider_than_a_quarter_of_the_largest_buffer_cannot_be_loaded() {
        // An F32 table of 4 GiB: 262144 rows of 16 KiB. Split across 1 GiB buffers it loads.
        let table = [tensor("token_embd.weight", &[4096, 262144], GgmlType::F32)];
        assert_eq!(too_wide(&table, 1 << 30), None);
        assert_eq!(too_wide(&table, 4 * 16384 + 32), None);
        let msg = too_wide(&table, 4 * 16384 + 31).expect("four rows and the slack do not fit");
        assert!(msg.contains("token_embd.weight") && msg.contains("0.1 MiB"), "{msg}");
        // A 1-D tensor is one row.
        let norm = [tensor("output_norm.weight", &[1 << 20], GgmlType::F32)];
        assert!(too_wide(&norm, 16 << 20).is_some() && too_wide(&norm, 17 << 20).is_none());
    }
}
