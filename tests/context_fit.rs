//! The default context is the largest that fits the executor's memory budget, up to the
//! model's own; a context asked for that does not fit is an error naming the figures, before
//! the cache is allocated. On the CPU executor, with a tiny synthetic model (context 2048) and
//! budgets given through `LoadOptions::memory_budget`.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::donor_metadata;
use wick::{ExecutorKind, LoadOptions, Model, SessionOptions};

fn try_tiny(budget: Option<u64>) -> wick::Result<Model> {
    let spec = wick::synth::SynthSpec::tiny(wick::model::Arch::Llama, 3);
    let bytes = wick::synth::write(Vec::new(), &spec, &donor_metadata()).expect("synth");
    let opts = LoadOptions { executor: ExecutorKind::Cpu, memory_budget: budget, ..Default::default() };
    block_on(Model::load(wick::source::MemorySource::new(bytes), opts))
}

fn tiny(budget: Option<u64>) -> Model {
    try_tiny(budget).expect("load")
}

#[test]
fn the_default_context_is_the_models_own_where_memory_allows() {
    let model = tiny(None);
    assert_eq!(model.hparams().n_ctx_train, 2048);
    let budget = model.memory_budget().expect("this machine's MemAvailable");
    assert!(budget.covers_weights && budget.source.contains("MemAvailable"), "{budget}");
    let s = model.session(SessionOptions::default()).unwrap();
    assert_eq!(s.n_ctx(), 2048);
}

#[test]
fn the_default_context_shrinks_with_the_budget() {
    // The tiny model's KV cache: 2 layers × 2 heads × (16 + 16) × 2 bytes = 256 bytes a position.
    let probe = tiny(None);
    let at = |n| probe.memory_estimate(n, 256).unwrap();
    let kv_and_scratch = |n| at(n).kv + at(n).scratch;
    assert_eq!(at(1024).kv, 1024 * 256);
    for (budget, want) in
        [(kv_and_scratch(1024), 1024), (kv_and_scratch(1024) - 1, 960), (kv_and_scratch(2048), 2048)]
    {
        let model = tiny(Some(budget));
        let s = model.session(SessionOptions::default()).unwrap();
        assert_eq!(s.n_ctx(), want, "budget {budget}");
    }
    // Not even the smallest context (256) fits: the load fails, before any weight is read,
    // with the figures.
    let e = try_tiny(Some(kv_and_scratch(256) - 1)).err().expect("no context fits").to_string();
    assert!(e.contains("a context of 256 tokens does not fit") && e.contains("MiB"), "{e}");
}

#[test]
fn a_context_asked_for_that_does_not_fit_is_an_error_before_allocating() {
    let probe = tiny(None);
    let e1024 = probe.memory_estimate(1024, 256).unwrap();
    let model = tiny(Some(e1024.kv + e1024.scratch));
    assert_eq!(model.session(SessionOptions { n_ctx: 1024, ..Default::default() }).unwrap().n_ctx(), 1024);
    let e = model
        .session(SessionOptions { n_ctx: 1088, ..Default::default() })
        .err()
        .expect("too big")
        .to_string();
    // The estimator's message (not the allocator's), with the estimate and the budget.
    assert!(
        e.contains("a context of 1088 tokens does not fit")
            && e.contains("KV cache")
            && e.contains("the caller's memory budget"),
        "{e}"
    );
    // Past the model's own context: the model's length is the error, whatever the budget.
    let e = model
        .session(SessionOptions { n_ctx: 4096, ..Default::default() })
        .err()
        .expect("too long")
        .to_string();
    assert!(e.contains("more than the model's own (2048"), "{e}");
}
