//! Sessions (a conversation's KV cache) and generation as an async stream of tokens.

use crate::constrain::{Constraint, Guide};
use crate::exec::{blocks_for, HostWork, KvId, KvSpec, Readback, SeqStep, StepOutput};
use crate::kv::{BlockPool, SeqBlocks};
use crate::load::Model;
use crate::logprobs::{logprobs, Logprobs, MAX_TOP_LOGPROBS};
use crate::model::Logits;
use crate::prompt_cache::{self, CacheHeader, Checksum};
use crate::sampling::{Sampler, SamplingParams};
use crate::shift::{self, Cached};
use crate::source::{ByteSource, MemorySource};
use crate::stop::StopMatcher;
use crate::tokenizer::StreamDecoder;
use crate::{Error, Result};

/// Options of a session (default: every field 0, the model's and executor's own choices).
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Context size in tokens. 0: the largest that fits the executor's memory budget
    /// ([`Model::memory_budget`]), at most the model's own (`context_length`); where the budget
    /// is unknown, the model's own capped at 4096. A context that does not fit a known budget
    /// is an error, before the cache is allocated.
    pub n_ctx: usize,
    /// Largest number of prompt tokens evaluated in one step. 0: the executor's own
    /// ([`crate::exec::ExecutorKind::prompt_chunk`], [`Model::prompt_chunk`]). Never more
    /// than the context.
    pub n_batch: usize,
}

/// How a context shift ([`GenerateOptions::context_shift`], [`Session::shift_context`]) makes
/// room in a full context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShiftMode {
    /// Drop whole KV blocks after the kept prefix and re-position the blocks after them by
    /// rotating their cached keys (RoPE), evaluating nothing again. Where the model's keys are
    /// not all RoPE-rotated, the executor cannot shift, too few whole blocks can be dropped or
    /// a block is shared with another sequence, falls back to [`ShiftMode::Recompute`].
    #[default]
    Rotate,
    /// Cut the cache back to the kept prefix and evaluate the tokens after the dropped span
    /// again at their new positions: a cache exactly like a fresh evaluation's, at the cost of
    /// evaluating up to half a context.
    Recompute,
    /// Drop the blocks like `Rotate` but leave the keys after them as they are, rotated for
    /// their old positions: wrong on purpose (attention then sees them `drop` positions too
    /// far away), a diagnostic that shows what the rotation is worth.
    NoRotate,
}

/// A conversation with a model: its KV cache and the tokens in it.
pub struct Session<'m> {
    model: &'m Model,
    kv: KvId,
    /// The cache's shape (its row widths are a saved prompt cache's layout).
    spec: KvSpec,
    /// The cache's blocks, and the conversation's block table.
    pool: BlockPool,
    blocks: SeqBlocks,
    n_ctx: usize,
    n_batch: usize,
    tokens: Vec<u32>,
    shift_mode: ShiftMode,
    /// Cached tokens evaluated again because of context shifts, since the session began.
    n_shift_reevaluated: usize,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if let Ok(mut e) = self.model.exec.try_borrow_mut() {
            e.free_kv(self.kv);
        }
    }
}

/// How to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling parameters.
    pub sampling: SamplingParams,
    /// Generation stops before any of these strings; they are not returned.
    pub stop: Vec<String>,
    /// Constrain the output to a JSON schema, any JSON object, or a grammar (see
    /// [`Constraint`]). Invalid constraints fail [`Session::generate`], before any token.
    pub constraint: Option<Constraint>,
    /// Report each token's log-probability ([`Token::logprobs`]) with this many of the most
    /// likely alternatives (0 to 20); `None`: no log-probabilities.
    pub logprobs: Option<usize>,
    /// Keep generating past end-of-generation tokens (they are returned like any other), until
    /// `max_tokens` or a stop string: for benchmarks and long agreement tests.
    pub ignore_eog: bool,
    /// Write control tokens (other than end-of-generation ones) as their text, where they
    /// are otherwise written as nothing: tool-call markers such as Mistral's `[TOOL_CALLS]` and
    /// Llama's `<|python_tag|>` are control tokens, and the call parser must see them.
    pub control_text: bool,
    /// Added to these tokens' logits before the constraint and the sampler (OpenAI's
    /// `logit_bias`: -100 to 100; -100 bans a token, 100 all but forces it). Log-probabilities
    /// are of the raw logits.
    pub logit_bias: Vec<(u32, f32)>,
    /// When the context fills: `None` ends the generation with [`FinishReason::ContextFull`];
    /// `Some(n_keep)` shifts the context and goes on: the first `n_keep` tokens (a system
    /// prompt; at most half the context) stay, the older half of the rest is dropped (in
    /// whole KV blocks), and the cached keys after it are re-positioned by rotation, or their
    /// tokens evaluated again (see [`Session::shift_context`] and [`ShiftMode`]).
    pub context_shift: Option<usize>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            constraint: None,
            logprobs: None,
            ignore_eog: false,
            control_text: false,
            logit_bias: Vec::new(),
            context_shift: None,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end-of-generation token, or the constrained text is complete.
    Eog,
    /// A stop string appeared.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The context is full.
    ContextFull,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// Token id; `None` for text held back until the end (a partial stop string, an
    /// unfinished UTF-8 sequence) and released when generation finishes.
    pub id: Option<u32>,
    /// Text that became complete with this token (may be empty: partial UTF-8, held-back stop prefix).
    pub text: String,
    /// The token's log-probability and the most likely alternatives, when
    /// [`GenerateOptions::logprobs`] asks for them (`None` for held-back text).
    pub logprobs: Option<Logprobs>,
}

impl Model {
    /// A new conversation with its own KV cache.
    pub fn session(&self, opts: SessionOptions) -> Result<Session<'_>> {
        Session::new(self, opts)
    }
}

impl<'m> Session<'m> {
    fn new(model: &'m Model, opts: SessionOptions) -> Result<Session<'m>> {
        let hp = model.hparams();
        if opts.n_ctx > hp.n_ctx_train {
            return Err(Error::InvalidArgument(format!(
                "a context of {} tokens is more than the model's own ({}, {}.context_length)",
                opts.n_ctx,
                hp.n_ctx_train,
                hp.arch.name()
            )));
        }
        let n_batch = if opts.n_batch == 0 { model.prompt_chunk() } else { opts.n_batch };
        let n_ctx = if opts.n_ctx == 0 {
            model.default_context(n_batch)?
        } else {
            // No step of a session evaluates more tokens than its context holds.
            if let Some(budget) = model.memory_budget() {
                let memory = model.session_memory(n_batch.min(opts.n_ctx))?;
                crate::model::check(&memory, 0, &budget, true, opts.n_ctx)?;
            }
            opts.n_ctx
        };
        let n_batch = n_batch.min(n_ctx);
        let n_blocks = blocks_for(n_ctx);
        let spec = KvSpec {
            n_blocks,
            k_dims: vec![hp.n_head_kv * hp.head_dim; hp.n_layer],
            v_dims: vec![hp.n_head_kv * hp.v_head_dim; hp.n_layer],
        };
        let kv = model.exec.try_borrow_mut().map_err(|_| Error::busy())?.alloc_kv(&spec)?;
        Ok(Session {
            model,
            kv,
            spec,
            pool: BlockPool::new(n_blocks),
            blocks: SeqBlocks::default(),
            n_ctx,
            n_batch,
            tokens: Vec::new(),
            shift_mode: ShiftMode::default(),
            n_shift_reevaluated: 0,
        })
    }

    /// Context size.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// Tokens currently in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    /// The model.
    pub fn model(&self) -> &'m Model {
        self.model
    }
    /// Forget everything in the cache.
    pub fn reset(&mut self) {
        self.truncate(0);
    }
    /// Choose how context shifts make room (default [`ShiftMode::Rotate`]).
    pub fn set_shift_mode(&mut self, mode: ShiftMode) {
        self.shift_mode = mode;
    }
    /// Cached tokens that context shifts have had evaluated again since the session began (0
    /// while every shift could rotate the kept blocks instead).
    pub fn n_shift_reevaluated(&self) -> usize {
        self.n_shift_reevaluated
    }

    /// Make room in the context before evaluating `pending`: keep the first `keep` tokens (at
    /// most half the context; a system prompt), drop about half of the rest, and return what
    /// to evaluate next: `pending`, after the cached tokens that must be evaluated again.
    ///
    /// With [`ShiftMode::Rotate`] the kept prefix is `keep` rounded up to whole KV blocks (a
    /// few more tokens than asked stay, so that no block is split), the dropped span is whole
    /// cached blocks after it (half the rest, rounded up to blocks), and the blocks after it
    /// have their keys rotated to their new positions ([`KvShift`]): nothing is evaluated again,
    /// and the returned tokens are `pending`. The cache is then not what a fresh evaluation of
    /// the same tokens would give (the kept tokens were computed while they could see the
    /// dropped ones), as in llama.cpp. With [`ShiftMode::Recompute`] (or where rotating is not
    /// possible) the cache is cut back to `keep` and the tokens after the dropped span are
    /// returned for evaluation before `pending`.
    pub fn shift_context(&mut self, keep: usize, pending: &[u32]) -> Vec<u32> {
        let cached = Cached {
            model: self.model,
            kv: self.kv,
            pool: &mut self.pool,
            blocks: &mut self.blocks,
            tokens: &mut self.tokens,
        };
        let (next, again) = shift::shift(cached, self.n_ctx, self.shift_mode, keep, pending);
        self.n_shift_reevaluated += again;
        next
    }

    /// Save the cached conversation: its tokens and the KV blocks that hold them, keyed by the
    /// model's digest ([`crate::prompt_cache`]), handed to `sink` in pieces of at most
    /// [`prompt_cache::IO_CHUNK`] bytes, each awaited before the next is read (a file write,
    /// a browser stream's). Returns the bytes written. Restore it into a session of the same
    /// model (on any executor) with [`Session::restore_prompt_cache_from`].
    // The executor stays borrowed across each read on purpose (see `eval`).
    #[allow(clippy::await_holding_refcell_ref)]
    pub async fn save_prompt_cache_to<F, Fut>(&self, mut sink: F) -> Result<usize>
    where
        F: FnMut(Vec<u8>) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let header = CacheHeader {
            digest: self.model.digest(),
            k_dims: self.spec.k_dims.clone(),
            v_dims: self.spec.v_dims.clone(),
            tokens: self.tokens.clone(),
        };
        let head = prompt_cache::encode_header(&header)?;
        let head_len = head.len();
        let mut sum = Checksum::default();
        sum.update(&head);
        sink(head).await?;
        let blocks = &self.blocks.table()[..blocks_for(self.tokens.len())];
        let total = header.payload_bytes();
        let mut at = 0;
        while at < total {
            let end = (at + prompt_cache::IO_CHUNK).min(total);
            let mut exec = self.model.exec.try_borrow_mut().map_err(|_| Error::busy())?;
            let bytes = exec.read_kv_blocks(self.kv, blocks, at..end).await?;
            drop(exec);
            sum.update(&bytes);
            sink(bytes).await?;
            at = end;
        }
        sink(sum.finish().to_vec()).await?;
        Ok(prompt_cache::saved_len(&header, head_len))
    }

    /// [`Session::save_prompt_cache_to`] into one byte vector.
    pub async fn save_prompt_cache(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.save_prompt_cache_to(|b| {
            out.extend_from_slice(&b);
            std::future::ready(Ok(()))
        })
        .await?;
        Ok(out)
    }

    /// Replace the cache's content by a saved prompt cache's, read from `src` in bounded
    /// pieces: of its tokens, the longest common prefix with `prompt` (all of them for an
    /// empty `prompt`), at most `n_ctx - 1`. Returns how many tokens the cache now holds; the
    /// next [`Session::generate`] of `prompt` evaluates only the rest. The header is checked
    /// against the model before any block is written (another model, another layout, token ids
    /// outside the vocabulary), the checksum once the payload has streamed through; any failure
    /// is an [`Error::PromptCache`] (or the source's error) and leaves the session empty.
    pub async fn restore_prompt_cache_from<S: ByteSource>(
        &mut self,
        mut src: S,
        prompt: &[u32],
    ) -> Result<usize> {
        self.truncate(0);
        let restored = self.restore_from(&mut src, prompt).await;
        if restored.is_err() {
            self.truncate(0);
        }
        restored
    }

    /// [`Session::restore_prompt_cache_from`] from bytes in memory.
    pub async fn restore_prompt_cache(&mut self, bytes: &[u8], prompt: &[u32]) -> Result<usize> {
        self.restore_prompt_cache_from(MemorySource::new(bytes), prompt).await
    }

    async fn restore_from<S: ByteSource>(&mut self, src: &mut S, prompt: &[u32]) -> Result<usize> {
        let (header, head) = prompt_cache::read_header_from(src).await?;
        let (k_dims, v_dims) = (&self.spec.k_dims, &self.spec.v_dims);
        prompt_cache::check_header(&header, &self.model.digest(), k_dims, v_dims, self.model.n_vocab())?;
        let want = prompt_cache::saved_len(&header, head.len());
        if let Some(len) = src.len_hint().filter(|&n| n != want as u64) {
            return Err(Error::PromptCache(format!(
                "{len} bytes where its header announces {want} (truncated or corrupt)"
            )));
        }
        let saved = &header.tokens;
        let common = if prompt.is_empty() {
            saved.len()
        } else {
            saved.iter().zip(prompt).take_while(|(a, b)| a == b).count()
        };
        let n = common.min(self.n_ctx.saturating_sub(1));
        if n == 0 {
            return Ok(0);
        }
        self.blocks.reserve(&mut self.pool, n)?;
        let table = self.blocks.table()[..blocks_for(n)].to_vec();
        let sections = prompt_cache::Sections::new(k_dims, v_dims, blocks_for(saved.len()), table.len());
        let mut sum = Checksum::default();
        sum.update(&head);
        let mut buf = vec![0u8; prompt_cache::IO_CHUNK.min(sections.total())];
        let mut at = 0;
        while at < sections.total() {
            let len = buf.len().min(sections.total() - at);
            prompt_cache::read_exact(src, &mut buf[..len], "payload").await?;
            sum.update(&buf[..len]);
            let mut exec = self.model.exec.try_borrow_mut().map_err(|_| Error::busy())?;
            for (to, r) in sections.map(at, len) {
                exec.write_kv_blocks(self.kv, &table, to, &buf[r])?;
            }
            at += len;
        }
        let mut trailer = [0u8; 16];
        prompt_cache::read_exact(src, &mut trailer, "checksum").await?;
        if trailer != sum.finish() {
            return Err(Error::PromptCache("checksum mismatch (the file is corrupt)".into()));
        }
        if src.read(&mut [0u8; 1]).await? != 0 {
            return Err(Error::PromptCache("bytes after the checksum".into()));
        }
        self.tokens = saved[..n].to_vec();
        Ok(n)
    }

    /// Keep the first `n` tokens of the cache (fewer if a shared block must be given back);
    /// returns how many are kept.
    fn truncate(&mut self, n: usize) -> usize {
        let kept = self.blocks.truncate(&mut self.pool, n.min(self.tokens.len()));
        self.tokens.truncate(kept);
        kept
    }

    /// Append `tokens` to the context, evaluating them in batches, and read back for the last.
    pub async fn eval(&mut self, tokens: &[u32], readback: Readback) -> Result<StepOutput> {
        self.eval_with(tokens, readback, None).await
    }

    /// [`Session::eval`] with `work` done on the host while the device runs the last step's
    /// forward pass; the token mask it returns (entry 0) applies to the device's argmax of the
    /// last token ([`crate::exec::Executor::run_with`], [`SeqStep::mask`]: only with
    /// [`Readback::Argmax`], `exec::mask_words(n_vocab)` words).
    pub async fn eval_with(
        &mut self,
        tokens: &[u32],
        readback: Readback,
        work: Option<HostWork<'_>>,
    ) -> Result<StepOutput> {
        self.eval_inner(tokens, readback, work, false).await
    }

    /// [`Session::eval`] with [`Readback::Argmax`] in greedy decoding: the caller will most
    /// likely evaluate the token it returns next, so the executor may start that step before
    /// this one's token is read back ([`crate::exec::Executor::run_greedy`]). Any other next
    /// call is still right; only the device's time on the started step is lost.
    pub async fn eval_greedy(&mut self, tokens: &[u32]) -> Result<StepOutput> {
        self.eval_inner(tokens, Readback::Argmax, None, true).await
    }

    /// [`Session::eval_with`], or with `greedy` [`Session::eval_greedy`].
    // The executor stays borrowed across the step's readback on purpose: a second step started
    // meanwhile (from another task) gets a "busy" error instead of interleaving with this one.
    #[allow(clippy::await_holding_refcell_ref)]
    async fn eval_inner(
        &mut self,
        tokens: &[u32],
        readback: Readback,
        mut work: Option<HostWork<'_>>,
        greedy: bool,
    ) -> Result<StepOutput> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("nothing to evaluate".into()));
        }
        let needed = self.tokens.len() + tokens.len();
        if needed > self.n_ctx {
            return Err(Error::ContextOverflow { needed, n_ctx: self.n_ctx });
        }
        let logits = if readback == Readback::AllLogits { Logits::All } else { Logits::Last };
        self.blocks.reserve(&mut self.pool, needed)?;
        if greedy {
            // The next position too, where there is room: the step started after the last.
            let _ = self.blocks.reserve(&mut self.pool, (needed + 1).min(self.n_ctx));
        }
        let mut out = StepOutput::default();
        for (i, batch) in tokens.chunks(self.n_batch).enumerate() {
            let last = (i + 1) * self.n_batch >= tokens.len();
            let graph = self.model.graph(batch.len(), 1, logits)?;
            let rb = if last || readback == Readback::AllLogits { readback } else { Readback::LastLogits };
            let mut exec = self.model.exec.try_borrow_mut().map_err(|_| Error::busy())?;
            let seq = SeqStep::one(batch, self.tokens.len(), self.blocks.table());
            let step = match if last { work.take() } else { None } {
                Some(w) => exec.run_with(graph, self.kv, &seq, rb, w).await?,
                None if last && greedy && batch.len() == 1 => exec.run_greedy(graph, self.kv, &seq).await?,
                None => exec.run(graph, self.kv, &seq, rb).await?,
            };
            drop(exec);
            self.tokens.extend_from_slice(batch);
            if readback == Readback::AllLogits {
                out.logits.extend_from_slice(&step.logits);
            } else if last {
                out = step;
            }
        }
        Ok(out)
    }

    /// Generate a continuation of `prompt` (token ids of the whole conversation so far). The
    /// cached prefix shared with the previous call is reused.
    pub fn generate(&mut self, prompt: &[u32], opts: GenerateOptions) -> Result<Generation<'_, 'm>> {
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt is empty".into()));
        }
        if prompt.len() >= self.n_ctx {
            return Err(Error::ContextOverflow { needed: prompt.len() + 1, n_ctx: self.n_ctx });
        }
        let sampler = Sampler::new(opts.sampling.clone())?;
        if let Some(n) = opts.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return Err(Error::InvalidArgument(format!(
                "top_logprobs = {n}: at most {MAX_TOP_LOGPROBS} alternatives per token"
            )));
        }
        let n_vocab = self.model.n_vocab();
        if let Some(&(t, b)) =
            opts.logit_bias.iter().find(|&&(t, b)| t as usize >= n_vocab || !(-100.0..=100.0).contains(&b))
        {
            return Err(Error::InvalidArgument(format!(
                "logit_bias {{{t}: {b}}}: token ids below {n_vocab}, biases from -100 to 100"
            )));
        }
        // Compile the constraint first: a bad schema or grammar fails here, before any step.
        let guide = match &opts.constraint {
            Some(c) => Some(self.model.constraints()?.guide(c)?),
            None => None,
        };
        // Keep the common prefix, but always evaluate at least one token to get logits.
        let common = self.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
        let common = self.truncate(common);
        let pending = prompt[common..].to_vec();
        let model = self.model;
        Ok(Generation {
            session: self,
            sampler,
            decoder: StreamDecoder::new(&model.tokenizer),
            stop: StopMatcher::new(opts.stop.clone()),
            history: prompt.to_vec(),
            pending,
            generated: 0,
            max_tokens: opts.max_tokens,
            finish: None,
            n_prompt: prompt.len() - common,
            guide,
            logprobs: opts.logprobs,
            ignore_eog: opts.ignore_eog,
            control_text: opts.control_text,
            logit_bias: opts.logit_bias,
            context_shift: opts.context_shift,
            n_shifts: 0,
            n_reevaluated: 0,
            constraint_secs: 0.0,
        })
    }
}

/// A generation in progress: call [`Generation::next`] until it returns `None`. Dropping it
/// cancels the generation; the session stays usable.
pub struct Generation<'s, 'm> {
    session: &'s mut Session<'m>,
    sampler: Sampler,
    decoder: StreamDecoder<'m>,
    stop: StopMatcher,
    history: Vec<u32>,
    pending: Vec<u32>,
    generated: usize,
    max_tokens: usize,
    finish: Option<FinishReason>,
    n_prompt: usize,
    guide: Option<Guide>,
    logprobs: Option<usize>,
    ignore_eog: bool,
    control_text: bool,
    logit_bias: Vec<(u32, f32)>,
    context_shift: Option<usize>,
    n_shifts: usize,
    n_reevaluated: usize,
    /// Host time spent on the constraint: its masks and advancing it past each token.
    constraint_secs: f64,
}

impl Generation<'_, '_> {
    /// The next token, or `None` when generation has ended (see [`Generation::finish_reason`]).
    pub async fn next(&mut self) -> Option<Result<Token>> {
        if self.finish.is_some() {
            return None;
        }
        if self.generated >= self.max_tokens {
            return self.end(FinishReason::Length);
        }
        if self.session.tokens.len() + self.pending.len() > self.session.n_ctx {
            match self.context_shift {
                Some(keep) => self.shift(keep),
                None => return self.end(FinishReason::ContextFull),
            }
        }
        if self.guide.as_ref().is_some_and(Guide::is_finished) {
            return self.end(FinishReason::Eog);
        }
        // The device picks the token when nothing on the host needs the logits: greedy
        // without penalties, no log-probabilities, no logit bias. A constraint's mask is
        // computed while the device runs the forward pass; the device's argmax applies it (the
        // same tokens as the host's masking, without reading the logits back), or `pick`
        // applies it to the logits read back.
        let on_device = self.sampler.is_greedy()
            && !self.sampler.params().penalties_on()
            && self.logprobs.is_none()
            && self.logit_bias.is_empty();
        let readback = if on_device { Readback::Argmax } else { Readback::LastLogits };
        let pending = std::mem::take(&mut self.pending);
        let n_vocab = self.session.model.n_vocab();
        let spent = &mut self.constraint_secs;
        let mut next_mask = self.guide.as_mut().map(|g| {
            move || -> Result<Vec<Option<Vec<u32>>>> {
                let t = crate::clock::now_secs();
                let m = g.next_mask(n_vocab);
                *spent += crate::clock::now_secs() - t;
                let m = m?;
                Ok(if on_device { vec![Some(m)] } else { Vec::new() })
            }
        });
        let work = next_mask.as_mut().map(|w| w as HostWork);
        // Unconstrained greedy decoding with more tokens to come: the device may start the
        // next step on this one's argmax.
        let chain = on_device && work.is_none() && self.generated + 1 < self.max_tokens;
        let out = match if chain {
            self.session.eval_greedy(&pending).await
        } else {
            self.session.eval_with(&pending, readback, work).await
        } {
            Ok(o) => o,
            Err(e) => {
                self.finish = Some(FinishReason::Stop);
                return Some(Err(e));
            }
        };
        let (id, lp) = match out.token() {
            Some(t) => (t, None),
            None => match self.pick(out.logits) {
                Ok(picked) => picked,
                Err(e) => {
                    self.finish = Some(FinishReason::Stop);
                    return Some(Err(e));
                }
            },
        };
        self.generated += 1;
        let tok = self.session.model.tokenizer();
        if tok.is_eog(id) && !self.ignore_eog {
            return self.end(FinishReason::Eog);
        }
        if let Some(g) = self.guide.as_mut() {
            let t = crate::clock::now_secs();
            let accepted = g.accept(id);
            self.constraint_secs += crate::clock::now_secs() - t;
            if let Err(e) = accepted {
                self.finish = Some(FinishReason::Stop);
                return Some(Err(e));
            }
        }
        self.history.push(id);
        self.pending.push(id);
        let piece = if self.control_text && tok.is_control(id) && !tok.is_eog(id) {
            self.decoder.flush() + tok.token_text(id).unwrap_or_default()
        } else {
            self.decoder.push(id)
        };
        let r = self.stop.push(&piece);
        if r.stopped {
            self.finish = Some(FinishReason::Stop);
        }
        Some(Ok(Token { id: Some(id), text: r.emit, logprobs: lp }))
    }

    /// Make room in a full context ([`Session::shift_context`]).
    fn shift(&mut self, keep: usize) {
        let before = self.session.n_shift_reevaluated;
        self.pending = self.session.shift_context(keep, &self.pending);
        self.n_reevaluated += self.session.n_shift_reevaluated - before;
        self.n_shifts += 1;
    }

    /// Sample from a row of logits: log-probabilities of the raw row first (when asked), then
    /// the constraint's mask, then the sampler chain.
    fn pick(&mut self, mut logits: Vec<f32>) -> Result<(u32, Option<Logprobs>)> {
        let top_n = self.logprobs;
        let raw = top_n.map(|_| logits.clone());
        for &(t, b) in &self.logit_bias {
            logits[t as usize] += b;
        }
        if let Some(g) = self.guide.as_ref() {
            g.apply(&mut logits); // the mask computed during the step
        }
        let id = self.sampler.sample(&mut logits, &self.history);
        if let Some(g) = &self.guide {
            if !g.allows(id) {
                return Err(Error::Grammar(format!(
                    "the sampler picked token {id}, which the constraint forbids"
                )));
            }
        }
        Ok((id, raw.zip(top_n).map(|(row, n)| logprobs(&row, id, n))))
    }

    fn end(&mut self, reason: FinishReason) -> Option<Result<Token>> {
        self.finish = Some(reason);
        let tail = self.decoder.flush();
        let text = if self.finish == Some(FinishReason::Stop) {
            String::new()
        } else {
            self.stop.push(&tail).emit + &self.stop.flush()
        };
        if text.is_empty() {
            None
        } else {
            Some(Ok(Token { id: None, text, logprobs: None }))
        }
    }

    /// Why generation ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }
    /// Prompt tokens that had to be evaluated (not reused from the cache).
    pub fn n_prompt_evaluated(&self) -> usize {
        self.n_prompt
    }
    /// Host time the constraint took so far, in seconds: its token masks (computed while the
    /// device runs each step, so on a GPU mostly hidden) and advancing it past each token.
    /// `None` without a constraint.
    pub fn constraint_secs(&self) -> Option<f64> {
        self.guide.as_ref().map(|_| self.constraint_secs)
    }
    /// Tokens generated so far.
    pub fn n_generated(&self) -> usize {
        self.generated
    }
    /// Times the context was shifted ([`GenerateOptions::context_shift`]).
    pub fn n_context_shifts(&self) -> usize {
        self.n_shifts
    }
    /// Cached tokens that this generation's context shifts had evaluated again (0 where every
    /// shift rotated the kept blocks, [`ShiftMode::Rotate`]).
    pub fn n_shift_reevaluated(&self) -> usize {
        self.n_reevaluated
    }
}
