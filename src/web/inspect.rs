//! `inspectHeader`: a model's memory from the first bytes of its file, for the package's
//! `Wick.inspect(url)`, which fetches them with Range requests and asks for more while the
//! header is cut short. The same estimator and fitting as a session's ([`FitReport`]).

use js_sys::{Object, Uint8Array};
use wasm_bindgen::prelude::*;

use super::{js_err, options, set};
use crate::exec::{ExecutorKind, MemoryBudget};
use crate::gguf::GgufReader;
use crate::model::{ContextFit, FitReport};
use crate::source::StreamSource;
use crate::{Error, ModelInfo};

/// The report for the GGUF whose first bytes are `bytes`: `{ needMore: true }` when the header
/// goes past them, else `{ architecture, name, parameters, contextLength, nCtx, memory: {
/// weights, kv, scratch, total }, fits, problem, full: {...}, budget: { bytes, source,
/// coversWeights, maxBuffer } }`. `opts`: `{ executor: "webgpu"|"cpu", nCtx, memoryBudget,
/// maxBinding }` (the adapter's storage binding limit, WebGPU).
#[wasm_bindgen(js_name = inspectHeader)]
pub async fn inspect_header(bytes: Uint8Array, opts: JsValue) -> Result<JsValue, JsValue> {
    let data = bytes.to_vec();
    // A stream of unknown length: the reader would otherwise check the tensor data against
    // the bytes given (only the header's) and call them truncated.
    let header = match GgufReader::open(StreamSource::new(Once(Some(data)))).await {
        Ok(r) => r.into_header(),
        Err(Error::Truncated { .. }) => {
            let o = Object::new();
            set(&o, "needMore", true);
            return Ok(o.into());
        }
        Err(e) => return Err(js_err(e)),
    };
    let mi = ModelInfo::from_header(&header.metadata, &header.tensors).map_err(js_err)?;
    let kind = options::executor(&opts).map_err(js_err)?;
    let n_ctx = options::count(&opts, "nCtx").map_err(js_err)?.unwrap_or(0);
    let given = options::number(&opts, "memoryBudget").map_err(js_err)?.filter(|b| *b > 0.0);
    let max_binding = options::number(&opts, "maxBinding").map_err(js_err)?.filter(|b| *b > 0.0);
    let budget = match kind {
        ExecutorKind::WebGpu => {
            MemoryBudget::webgpu(given.map(|b| b as u64), max_binding.map_or(128 << 20, |b| b as u64))
        }
        // A fresh wasm heap (the model loads in its own worker): 4 GiB less the margin.
        _ => match given {
            Some(b) => MemoryBudget::given(b as u64, None),
            None => MemoryBudget::free_memory(4 << 30, "a wasm32 heap's 4 GiB"),
        },
    };
    let kind = if kind == ExecutorKind::WebGpu { kind } else { ExecutorKind::Cpu };
    let r = FitReport::new(&mi.hparams, mi.n_vocab, &header.tensors, n_ctx, 256, kind, Some(budget))
        .map_err(js_err)?;
    let o = Object::new();
    set(&o, "architecture", mi.hparams.arch.name());
    let name = header.metadata.str_opt("general.name").ok().flatten().map(str::to_string);
    set(&o, "name", name.map(JsValue::from).unwrap_or(JsValue::NULL));
    let params = header.tensors.iter().map(|t| t.dims.iter().product::<u64>()).sum::<u64>();
    set(&o, "parameters", params as f64);
    set(&o, "size", r.chosen.memory.weights as f64);
    set(&o, "headerBytes", header.data_offset as f64);
    set(&o, "contextLength", mi.hparams.n_ctx_train as f64);
    set(&o, "executor", if kind == ExecutorKind::WebGpu { "webgpu" } else { "cpu" });
    set(&o, "nCtx", r.chosen.n_ctx as f64);
    set(&o, "memory", memory(&r.chosen));
    set(&o, "fits", r.chosen.fits());
    set(&o, "problem", r.chosen.problem.clone().map(JsValue::from).unwrap_or(JsValue::NULL));
    let full = Object::new();
    set(&full, "nCtx", r.full.n_ctx as f64);
    set(&full, "memory", memory(&r.full));
    set(&full, "fits", r.full.fits());
    set(&o, "full", full);
    if let Some(b) = &r.budget {
        let bo = Object::new();
        set(&bo, "bytes", b.bytes as f64);
        set(&bo, "source", b.source.clone());
        set(&bo, "coversWeights", b.covers_weights);
        set(&bo, "maxBuffer", b.max_buffer.map(|m| JsValue::from(m as f64)).unwrap_or(JsValue::NULL));
        set(&o, "budget", bo);
    }
    Ok(o.into())
}

/// `{ weights, kv, scratch, total }` in bytes.
fn memory(f: &ContextFit) -> Object {
    let m = Object::new();
    set(&m, "weights", f.memory.weights as f64);
    set(&m, "kv", f.memory.kv as f64);
    set(&m, "scratch", f.memory.scratch as f64);
    set(&m, "total", f.memory.total() as f64);
    m
}

/// A stream of one chunk.
struct Once(Option<Vec<u8>>);

impl futures_core::Stream for Once {
    type Item = crate::Result<Vec<u8>>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.0.take().map(Ok))
    }
}
