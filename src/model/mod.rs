//! Model architectures: each builds the forward pass of one step as an executor [`Graph`].
//!
//! The same builder runs twice: first against the GGUF header's tensor infos (so a missing
//! tensor or a wrong shape is reported before a single weight byte is streamed), then against
//! the executor's weight handles to produce the graphs that run.

mod blocks;
mod gemma3;
mod hparams;
pub mod keys;
mod llama;
mod memory;
mod report;

use std::collections::HashMap;

pub use hparams::{Arch, Hparams};
pub(crate) use memory::{check, fit, SessionMemory};
pub use memory::{largest_context, MemoryEstimate, MIN_CONTEXT};
pub use report::{ContextFit, FitReport};

use crate::exec::{Graph, WeightId};
use crate::gguf::TensorInfo;
use crate::{Error, Result};

/// Where a builder finds its weights by name, checking their shapes.
pub trait Weights {
    /// The weight named `name`, whose ggml dims must equal `dims`.
    fn get(&self, name: &str, dims: &[usize]) -> Result<WeightId>;
    /// Like `get`, but `None` when the tensor is absent (optional biases, tied outputs).
    fn get_opt(&self, name: &str, dims: &[usize]) -> Result<Option<WeightId>>;
}

/// Weights looked up in a name → (handle, dims) table.
pub struct WeightTable {
    map: HashMap<String, (WeightId, Vec<u64>)>,
}

impl WeightTable {
    /// Build from GGUF tensor infos; handles are indices into `tensors`.
    pub fn from_infos(tensors: &[TensorInfo]) -> Self {
        let map =
            tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), (WeightId(i as u32), t.dims.clone())));
        WeightTable { map: map.collect() }
    }
    /// Replace the handles by those the executor returned (same order as the infos).
    pub fn with_handles(tensors: &[TensorInfo], handles: &[WeightId]) -> Self {
        let map = tensors.iter().zip(handles).map(|(t, &h)| (t.name.clone(), (h, t.dims.clone())));
        WeightTable { map: map.collect() }
    }
}

impl Weights for WeightTable {
    fn get(&self, name: &str, dims: &[usize]) -> Result<WeightId> {
        self.get_opt(name, dims)?.ok_or_else(|| Error::BadTensor {
            tensor: name.into(),
            message: "missing from the model file".into(),
        })
    }
    fn get_opt(&self, name: &str, dims: &[usize]) -> Result<Option<WeightId>> {
        let Some((id, have)) = self.map.get(name) else { return Ok(None) };
        // Trailing 1-dims are equivalent in ggml ([576] == [576, 1]).
        let trim = |d: &[u64]| {
            let mut v: Vec<u64> = d.to_vec();
            while v.len() > 1 && v.last() == Some(&1) {
                v.pop();
            }
            v
        };
        let want: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        if trim(have) != trim(&want) {
            return Err(Error::BadTensor {
                tensor: name.into(),
                message: format!("has shape {have:?}, expected {want:?}"),
            });
        }
        Ok(Some(*id))
    }
}

/// What a graph computes logits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Logits {
    /// Only the last token (generation).
    Last,
    /// Every token (perplexity, tests).
    All,
}

/// Build the graph of one step of `n_tokens` tokens of up to `n_seqs` sequences.
pub fn build_graph(
    hp: &Hparams,
    n_vocab: usize,
    w: &dyn Weights,
    n_tokens: usize,
    n_seqs: usize,
    logits: Logits,
) -> Result<Graph> {
    match hp.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => llama::build(hp, n_vocab, w, n_tokens, n_seqs, logits),
        Arch::Gemma3 => gemma3::build(hp, n_vocab, w, n_tokens, n_seqs, logits),
    }
}
