//! The rule "Stream the weights" (ARCHITECTURE.md) in the browser: loading streams the weights, so the wasm heap stays bounded by
//! the loader's chunk size, not the model's size. A ~200 MB synthetic model (its header from
//! the synth module, its weights zeros made on the fly by a JS `ReadableStream`: the file
//! exists nowhere in full) loads onto WebGPU while the progress callback samples the wasm
//! memory's size. Once the header is parsed and the tokenizer built (the first progress event),
//! the heap may grow by less than [`GROWTH_LIMIT`] until the load ends.
#![cfg(target_arch = "wasm32")]

mod support;

use std::cell::Cell;
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use support::web::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use wick::gguf::GgufWriter;
use wick::model::Arch;
use wick::quant::GgmlType;
use wick::source::ReadableStreamSource;
use wick::synth::{FileType, SynthSpec};
use wick::{ExecutorKind, LoadOptions, Model};

wasm_bindgen_test_configure!(run_in_browser);

const MIB: f64 = (1 << 20) as f64;
/// Allowed heap growth during the weight stream.
const GROWTH_LIMIT: u64 = 64 << 20;

/// Bytes of the wasm linear memory (it only grows).
fn heap() -> u64 {
    let mem: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    mem.buffer().unchecked_into::<js_sys::ArrayBuffer>().byte_length() as u64
}

/// A `Write` whose bytes stay readable while a `GgufWriter` owns it.
#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[wasm_bindgen_test]
async fn loading_a_large_model_keeps_the_wasm_heap_small() {
    let n_vocab = 32_000;
    let donor = donor(n_vocab);
    let spec = SynthSpec {
        arch: Arch::Llama,
        n_embd: 1024,
        n_layer: 8,
        n_head: 16,
        n_head_kv: 4,
        head_dim: 64,
        n_ff: 4096,
        n_ctx: 2048,
        file_type: FileType::Q8_0,
        embd_type: Some(GgmlType::Q8_0),
        tied: false,
        seed: 1,
        rope_base: 10_000.0,
        llama3_rope: None,
    };
    let md = wick::synth::metadata(&spec, &donor).unwrap();
    let tensors = spec.tensor_specs(n_vocab);
    // The header (and its padding to the data section), then the data: every tensor's bytes
    // padded to the default alignment of 32, all zeros.
    let head = Shared::default();
    drop(GgufWriter::new(head.clone(), &md, &tensors).unwrap());
    let head = head.0.take();
    let data: u64 = tensors.iter().map(|t| t.n_bytes().unwrap().div_ceil(32) * 32).sum();
    let total = head.len() as u64 + data;
    assert!(data > 150 << 20, "the model should be large: {data} bytes");

    let before = heap();
    let first = Rc::new(Cell::new(None::<u64>));
    let peak = Rc::new(Cell::new(0u64));
    let events = Rc::new(Cell::new(0usize));
    let (f, p, e) = (first.clone(), peak.clone(), events.clone());
    let on_progress = Box::new(move |prog: &wick::gguf::Progress| {
        let h = heap();
        if f.get().is_none() {
            f.set(Some(h));
        }
        p.set(p.get().max(h));
        e.set(e.get() + 1);
        assert!(prog.bytes_done <= total);
    });
    let src = ReadableStreamSource::new(&zero_tail_stream_of(&head, data, 1 << 20)).unwrap().with_len(total);
    let t0 = js_sys::Date::now();
    let opts =
        LoadOptions { executor: ExecutorKind::WebGpu, on_progress: Some(on_progress), ..Default::default() };
    let model = Model::load(src, opts).await.unwrap();
    let secs = (js_sys::Date::now() - t0) / 1000.0;
    let after = heap();
    let (first, peak) = (first.get().unwrap(), peak.get().max(after));
    say!(
        "streamed {:.1} MiB (header {:.2} MiB, {} tensors) onto {} in {secs:.1} s, {} progress events; \
         wasm heap: {:.1} MiB before, {:.1} MiB at the first progress event (header, tokenizer of \
         {n_vocab} tokens, one chunk), {:.1} MiB peak, {:.1} MiB after: grew {:.1} MiB during the \
         weight stream (limit {:.0} MiB)",
        total as f64 / MIB,
        head.len() as f64 / MIB,
        tensors.len(),
        model.executor_name(),
        events.get(),
        before as f64 / MIB,
        first as f64 / MIB,
        peak as f64 / MIB,
        after as f64 / MIB,
        (peak - first) as f64 / MIB,
        GROWTH_LIMIT as f64 / MIB,
    );
    assert_eq!(model.executor_name(), "webgpu");
    assert!(peak - first < GROWTH_LIMIT, "the heap grew {} bytes while streaming the weights", peak - first);
    // Streaming, not buffering: the whole heap stays well below the model's size.
    assert!(peak < total, "the heap ({peak} bytes) reached the model's size ({total} bytes)");
}
