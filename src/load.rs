//! Loading a model: header first, checks, then every tensor's bytes streamed to the executor.

use std::cell::{OnceCell, RefCell};

use crate::chat::ChatTemplate;
use crate::constrain::ConstraintCompiler;
use crate::digest::ModelDigest;
use crate::exec::{self, Executor, ExecutorKind, GraphId, MemoryBudget, WeightId};
use crate::gguf::{GgufReader, Metadata, Progress};
use crate::model::{self, keys, Hparams, Logits, MemoryEstimate, WeightTable};
use crate::source::ByteSource;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// A progress callback, called as the weights stream in.
pub type ProgressFn<'a> = Box<dyn FnMut(&Progress) + 'a>;

/// How to load a model.
pub struct LoadOptions<'a> {
    /// Which executor runs it.
    pub executor: ExecutorKind,
    /// Largest piece of tensor data held in host memory at once while streaming.
    pub chunk_size: usize,
    /// Called as bytes arrive.
    pub on_progress: Option<ProgressFn<'a>>,
    /// Bytes the KV caches and scratch of sessions may take, in place of what the executor
    /// reports ([`Executor::memory_budget`](crate::exec::Executor::memory_budget): free RAM or
    /// device memory, WebGPU's 1 GiB default). The default context is the largest that fits.
    pub memory_budget: Option<u64>,
}

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        LoadOptions {
            executor: ExecutorKind::Auto,
            chunk_size: 4 << 20,
            on_progress: None,
            memory_budget: None,
        }
    }
}

/// A loaded model: hyperparameters, tokenizer, chat template, and weights on an executor.
pub struct Model {
    pub(crate) hparams: Hparams,
    pub(crate) n_vocab: usize,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) template: Option<ChatTemplate>,
    pub(crate) exec: RefCell<Box<dyn Executor>>,
    weights: WeightTable,
    /// The weights' bytes in their block formats.
    weight_bytes: u64,
    graphs: RefCell<GraphCache>,
    name: Option<String>,
    /// The vocabulary's trie for constrained generation, built on first use.
    constraints: OnceCell<ConstraintCompiler>,
    /// How each layer's cached keys were rotated (for context shifts), from a step graph;
    /// `None` inside when some layer's keys are not RoPE-rotated.
    kv_rope: OnceCell<Option<Vec<Option<exec::KvRope>>>>,
    /// The model's identity for saved KV caches ([`crate::digest`]).
    digest: [u8; 16],
    /// The caller's budget for KV caches and scratch ([`LoadOptions::memory_budget`]).
    memory_budget: Option<u64>,
}

/// Everything about a model that its header tells, without loading weights.
pub struct ModelInfo {
    /// Hyperparameters.
    pub hparams: Hparams,
    /// Vocabulary size (rows of the embedding table).
    pub n_vocab: usize,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template, when the file has one.
    pub template: Option<ChatTemplate>,
}

impl ModelInfo {
    /// Read and check everything but the weights: hyperparameters, tokenizer, template, and
    /// that every tensor the architecture needs is present with the right shape.
    pub fn from_header(md: &Metadata, tensors: &[crate::gguf::TensorInfo]) -> Result<ModelInfo> {
        let hparams = Hparams::from_metadata(md)?;
        let tokenizer = Tokenizer::from_metadata(md)?;
        let embd = tensors.iter().find(|t| t.name == keys::tensor::TOKEN_EMBD).ok_or_else(|| {
            Error::BadTensor { tensor: keys::tensor::TOKEN_EMBD.into(), message: "missing".into() }
        })?;
        let n_vocab = embd.dims.get(1).copied().unwrap_or(1) as usize;
        if n_vocab != tokenizer.n_vocab() {
            return Err(Error::BadTensor {
                tensor: keys::tensor::TOKEN_EMBD.into(),
                message: format!("has {n_vocab} rows but the vocabulary has {} tokens", tokenizer.n_vocab()),
            });
        }
        // A dry run of the graph builder checks every tensor's presence and shape.
        model::build_graph(&hparams, n_vocab, &WeightTable::from_infos(tensors), 1, 1, Logits::Last)?;
        let text = |id: Option<u32>| id.and_then(|i| tokenizer.token_text(i)).unwrap_or("").to_string();
        let (bos, eos) = (text(tokenizer.bos_id()), text(tokenizer.eos_id()));
        let template = ChatTemplate::from_metadata(md, &bos, &eos)?;
        Ok(ModelInfo { hparams, n_vocab, tokenizer, template })
    }
}

/// The entry point: which executor models run on. (It will own the GPU device that the
/// models it loads share.)
#[derive(Debug, Clone)]
pub struct Engine {
    kind: ExecutorKind,
}

impl Engine {
    /// An engine on the executor `kind`; for a kind that cannot run here, an error now rather
    /// than at the first load. `Auto` picks the best available.
    pub async fn new(kind: ExecutorKind) -> Result<Engine> {
        exec::create(kind).await?;
        Ok(Engine { kind })
    }
    /// The executor kind models are loaded onto.
    pub fn executor(&self) -> ExecutorKind {
        self.kind
    }
    /// Load a model from `src` (the `executor` field of `opts` is ignored: the engine's is used).
    pub async fn load<S: ByteSource>(&self, src: S, opts: LoadOptions<'_>) -> Result<Model> {
        Model::load(src, LoadOptions { executor: self.kind, ..opts }).await
    }
}

impl Model {
    /// Stream a GGUF model from `src` onto the chosen executor.
    pub async fn load<S: ByteSource>(src: S, mut opts: LoadOptions<'_>) -> Result<Model> {
        trace(|| "reading the header".into());
        let mut reader = GgufReader::open(src).await?;
        reader.set_chunk_size(opts.chunk_size.max(4096));
        let header = reader.header();
        trace(|| {
            format!("header read: {} metadata, {} tensors", header.metadata.len(), header.tensors.len())
        });
        let tensors = header.tensors.clone();
        // The tokenizer and the template are made (natively on a thread of their own) while
        // the executor opens and the weights stream in: a 128k vocabulary took 0.17-0.23 s,
        // a CUDA context 0.2 s, an 8b's upload 0.5 s. Their errors still come first, and
        // early: the upload stops at the first chunk after they are known.
        let md = std::sync::Arc::new(reader.take_metadata());
        let mut header_work = HeaderWork::start(md.clone(), std::sync::Arc::new(tensors.clone()));
        // What the upload needs of the header (the digest, the memory check): read here too.
        let early = Hparams::from_metadata(&md).ok().zip(embedding_rows(&tensors));
        let exec = exec::create(opts.executor).await;
        let (hparams, n_vocab) = match (early, &exec) {
            (Some(e), Ok(_)) => e,
            // A bad header, or no executor: the header's error first, as ever.
            _ => {
                let done = header_work.finish()?;
                let e = (done.0.hparams.clone(), done.0.n_vocab);
                header_work = HeaderWork::Done(Box::new(Ok(done)));
                e
            }
        };
        let mut exec = exec?;
        trace(|| format!("{} executor open", exec.name()));
        let mut digest = ModelDigest::new(&hparams, &tensors);
        let uploaded = async {
            // Before any weight is read: the weights and the smallest context must fit.
            if let Some(budget) = budget_of(exec.as_ref(), opts.memory_budget) {
                let kind = exec.name().parse().unwrap_or_default();
                model::largest_context(&hparams, n_vocab, &tensors, 256, kind, &budget, false)?;
            }
            let mut handles: Vec<WeightId> = Vec::with_capacity(tensors.len());
            for t in &tensors {
                handles.push(exec.alloc_weight(&t.name, t.dtype, &t.dims)?);
            }
            // Where the upload's time goes (`WICK_CUDA_TRACE=1`): the source's reads, the
            // executor's writes.
            let (mut read, mut write) = (0.0, 0.0);
            loop {
                if header_work.failed() {
                    // The header's error is returned below.
                    return Err(Error::Cancelled);
                }
                let t = crate::clock::now_secs();
                let Some(chunk) = reader.next_chunk().await? else { break };
                let u = crate::clock::now_secs();
                exec.write_weight(handles[chunk.tensor], chunk.offset, chunk.data)?;
                (read, write) = (read + (u - t), write + (crate::clock::now_secs() - u));
                digest.observe(chunk.offset, chunk.data);
                if let Some(cb) = opts.on_progress.as_mut() {
                    let p = reader.progress();
                    cb(&p);
                }
            }
            trace(|| format!("weights streamed: reads {read:.3} s, the executor's writes {write:.3} s"));
            exec.finish_upload().await?;
            trace(|| "upload finished".into());
            Ok(handles)
        }
        .await;
        // A bad header's error first, then the upload's.
        let (info, name) = header_work.finish()?;
        let handles = uploaded?;
        Ok(Model {
            hparams: info.hparams,
            n_vocab: info.n_vocab,
            tokenizer: info.tokenizer,
            template: info.template,
            exec: RefCell::new(exec),
            weights: WeightTable::with_handles(&tensors, &handles),
            weight_bytes: tensors.iter().fold(0u64, |a, t| a.saturating_add(t.n_bytes())),
            graphs: RefCell::new(GraphCache::default()),
            name,
            constraints: OnceCell::new(),
            kv_rope: OnceCell::new(),
            digest: digest.finish(),
            memory_budget: opts.memory_budget,
        })
    }

    /// What memory sessions of this model can take now ([`MemoryBudget`]): the caller's budget
    /// ([`LoadOptions::memory_budget`]), else the executor's; `None` where unknown.
    pub fn memory_budget(&self) -> Option<MemoryBudget> {
        budget_of(self.exec.borrow().as_ref(), self.memory_budget)
    }

    /// Prompt tokens a session evaluates in one step unless told otherwise: the executor's
    /// chunk ([`crate::exec::ExecutorKind::prompt_chunk`]).
    pub fn prompt_chunk(&self) -> usize {
        self.executor_kind().prompt_chunk()
    }

    fn executor_kind(&self) -> crate::exec::ExecutorKind {
        self.executor_name().parse().unwrap_or_default()
    }

    /// What a session of `n_ctx` positions in prompt chunks of `n_batch` (0: the executor's,
    /// [`Model::prompt_chunk`]) takes on this model's executor (the one estimator,
    /// [`MemoryEstimate`]; weights included).
    pub fn memory_estimate(&self, n_ctx: usize, n_batch: usize) -> Result<MemoryEstimate> {
        let e = self.session_memory(n_batch)?.at(n_ctx);
        Ok(MemoryEstimate { weights: self.weight_bytes, ..e })
    }

    /// The context a session gets when it asks for none (`SessionOptions::n_ctx` 0): the
    /// largest whose KV cache and scratch (prompt chunks of `n_batch`; 0: the executor's) fit
    /// [`Model::memory_budget`], at most the model's own; where the budget is unknown, the
    /// model's own capped at 4096.
    pub fn default_context(&self, n_batch: usize) -> Result<usize> {
        match self.memory_budget() {
            None => Ok(self.hparams.n_ctx_train.min(4096)),
            Some(b) => model::fit(&self.hparams, &self.session_memory(n_batch)?, 0, &b, true),
        }
    }

    pub(crate) fn session_memory(&self, n_batch: usize) -> Result<model::SessionMemory> {
        model::SessionMemory::new(&self.hparams, self.n_vocab, &self.weights, n_batch, self.executor_kind())
    }

    /// The model's identity for saved KV caches: a digest of its hyperparameters, tensor
    /// table and a sample of every tensor's bytes, computed as the weights streamed in
    /// ([`crate::digest`]).
    pub fn digest(&self) -> [u8; 16] {
        self.digest
    }

    /// Hyperparameters.
    pub fn hparams(&self) -> &Hparams {
        &self.hparams
    }
    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
    /// The chat template, if the model has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }
    /// The compiler of constraints for this model's vocabulary (built on the first call).
    pub fn constraints(&self) -> Result<&ConstraintCompiler> {
        if let Some(c) = self.constraints.get() {
            return Ok(c);
        }
        let c = ConstraintCompiler::new(&self.tokenizer)?;
        Ok(self.constraints.get_or_init(|| c))
    }
    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
    /// `general.name`, when present.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// The executor's name ("cpu", ...).
    pub fn executor_name(&self) -> &'static str {
        self.exec.borrow().name()
    }

    /// The executor's measured memory bandwidth in bytes/s (read + write of a large copy), if
    /// it can measure one: the decode floor is the weight bytes divided by it.
    #[allow(clippy::await_holding_refcell_ref)]
    pub async fn measure_bandwidth(&self) -> Result<Option<f64>> {
        let mut exec = self.exec.try_borrow_mut().map_err(|_| Error::busy())?;
        exec.measure_bandwidth().await
    }

    /// The compiled graph for steps of `n` tokens of up to `n_seqs` sequences (built on first
    /// use; the least recently used one is freed once [`GraphCache::CAPACITY`] are kept).
    pub(crate) fn graph(&self, n: usize, n_seqs: usize, logits: Logits) -> Result<GraphId> {
        let key = (n, n_seqs, logits);
        if let Some(g) = self.graphs.borrow_mut().get(key) {
            return Ok(g);
        }
        let graph = model::build_graph(&self.hparams, self.n_vocab, &self.weights, n, n_seqs, logits)?;
        let mut exec = self.exec.try_borrow_mut().map_err(|_| Error::busy())?;
        let id = exec.compile(&graph)?;
        if let Some(evicted) = self.graphs.borrow_mut().insert(key, id) {
            exec.free_graph(evicted);
        }
        Ok(id)
    }

    /// How each layer's cached keys were rotated by RoPE, read from the model's own step graph
    /// ([`exec::KvShift::layers_of`]) so a context shift uses the forward pass's definition;
    /// `None` when the keys cannot be re-positioned by a rotation.
    pub(crate) fn kv_rope(&self) -> Option<&[Option<exec::KvRope>]> {
        self.kv_rope
            .get_or_init(|| {
                let g = model::build_graph(&self.hparams, self.n_vocab, &self.weights, 1, 1, Logits::Last)
                    .ok()?;
                exec::KvShift::layers_of(&g)
            })
            .as_deref()
    }

    /// How many compiled graphs the model keeps now (at most [`GraphCache::CAPACITY`]).
    pub fn compiled_graphs(&self) -> usize {
        self.graphs.borrow().entries.len()
    }
}

/// A compiled graph's shape: tokens per step, most sequences per step, logits rows.
type GraphKey = (usize, usize, Logits);

/// The compiled graphs of a model, by (tokens per step, sequences per step, logits), least
/// recently used first.
///
/// Each compiled graph owns device memory (its activation slots grow with its token count) and,
/// on CUDA, captured graphs. A chat sends prompt chunks of ever-different lengths, so an
/// unbounded map grew with every turn; this keeps a few and frees the rest (ARCHITECTURE.md,
/// rule "Compile for a bounded set of shapes").
#[derive(Default)]
pub(crate) struct GraphCache {
    entries: Vec<(GraphKey, GraphId)>,
}

impl GraphCache {
    /// Graphs kept: the one-token decode graph, the full prompt chunk, and a few remainders.
    pub(crate) const CAPACITY: usize = 6;

    /// The graph for `key`, marked as just used.
    fn get(&mut self, key: GraphKey) -> Option<GraphId> {
        let i = self.entries.iter().position(|(k, _)| *k == key)?;
        let e = self.entries.remove(i);
        self.entries.push(e);
        Some(e.1)
    }

    /// Keep `id` for `key`; returns the graph to free when that makes one too many.
    fn insert(&mut self, key: GraphKey, id: GraphId) -> Option<GraphId> {
        self.entries.push((key, id));
        (self.entries.len() > Self::CAPACITY).then(|| self.entries.remove(0).1)
    }
}

/// The rows of `token_embd` (the vocabulary size), as [`ModelInfo::from_header`] reads them.
fn embedding_rows(tensors: &[crate::gguf::TensorInfo]) -> Option<usize> {
    let embd = tensors.iter().find(|t| t.name == keys::tensor::TOKEN_EMBD)?;
    Some(embd.dims.get(1).copied().unwrap_or(1) as usize)
}

type HeaderResult = Result<(ModelInfo, Option<String>)>;

/// What the header tells (hyperparameters, tokenizer, template; the model's name), made on a
/// thread of its own natively, inline in wasm.
enum HeaderWork {
    Done(Box<HeaderResult>),
    #[cfg(not(target_arch = "wasm32"))]
    Thread(Option<std::thread::JoinHandle<HeaderResult>>),
}

impl HeaderWork {
    fn make(md: &Metadata, tensors: &[crate::gguf::TensorInfo]) -> HeaderResult {
        let info = ModelInfo::from_header(md, tensors)?;
        trace(|| "hyperparameters, tokenizer and template made".into());
        Ok((info, md.str_opt("general.name").ok().flatten().map(str::to_string)))
    }

    fn start(
        md: std::sync::Arc<Metadata>,
        tensors: std::sync::Arc<Vec<crate::gguf::TensorInfo>>,
    ) -> HeaderWork {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let (m, t) = (md.clone(), tensors.clone());
            let spawned = std::thread::Builder::new()
                .name("wick-header".into())
                .spawn(move || HeaderWork::make(&m, &t));
            // No thread to be had: on this one.
            match spawned {
                Ok(h) => HeaderWork::Thread(Some(h)),
                Err(_) => HeaderWork::Done(Box::new(HeaderWork::make(&md, &tensors))),
            }
        }
        #[cfg(target_arch = "wasm32")]
        HeaderWork::Done(Box::new(HeaderWork::make(&md, &tensors)))
    }

    /// Whether the work has ended with an error (without waiting for it).
    fn failed(&mut self) -> bool {
        #[cfg(not(target_arch = "wasm32"))]
        if let HeaderWork::Thread(h) = self {
            if h.as_ref().is_some_and(|h| h.is_finished()) {
                *self = HeaderWork::Done(Box::new(HeaderWork::join(h.take())));
            }
        }
        matches!(self, HeaderWork::Done(r) if r.is_err())
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn join(h: Option<std::thread::JoinHandle<HeaderResult>>) -> HeaderResult {
        let failed =
            || Error::InvalidArgument("reading the model's header failed (its thread panicked)".into());
        h.ok_or_else(failed)?.join().unwrap_or_else(|_| Err(failed()))
    }

    /// Wait for the work.
    fn finish(self) -> HeaderResult {
        match self {
            HeaderWork::Done(r) => *r,
            #[cfg(not(target_arch = "wasm32"))]
            HeaderWork::Thread(h) => HeaderWork::join(h),
        }
    }
}

/// `WICK_CUDA_TRACE=1`: what the CUDA executor's trace prints, with the same clock.
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
use crate::exec::cuda::trace;
#[cfg(not(all(feature = "cuda", not(target_arch = "wasm32"))))]
fn trace(_: impl FnOnce() -> String) {}

/// The caller's budget (`given` bytes for KV caches and scratch, a WebGPU device's binding
/// limit still applying), else the executor's own.
fn budget_of(exec: &dyn Executor, given: Option<u64>) -> Option<MemoryBudget> {
    let own = exec.memory_budget();
    match given {
        Some(b) => Some(MemoryBudget::given(b, own.and_then(|o| o.max_buffer))),
        None => own,
    }
}
