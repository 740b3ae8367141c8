//! The model's thread: continuous batching over one shared KV cache ([`wick::Batch`]).
//!
//! Every step evaluates, in one forward pass, the next token of every sequence that is decoding
//! and a chunk of one waiting prompt, so running streams keep flowing while a new prompt is
//! prefilled. A finished sequence stays in the cache for prefix reuse (a later request that
//! starts with its tokens forks its whole blocks) until its blocks are needed (least recently
//! used first). A request whose client went away is dropped at the next step, freeing its blocks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use wick::chat::tools::{tool_choice_grammar, ToolChoice, ToolFamily};
use wick::chat::ChatMessage;
use wick::constrain::{Constraint, Guide};
use wick::exec::{Readback, KV_BLOCK};
use wick::sampling::{Sampler, SamplingParams};
use wick::stop::StopMatcher;
use wick::tokenizer::StreamDecoder;
use wick::{Batch, Error, Model, SeqId};

/// What a request asks the engine to generate from.
pub enum Prompt {
    /// Raw text (BOS/EOS added as the vocabulary asks).
    Text(String),
    /// A conversation, rendered with the model's chat template.
    Chat(Vec<ChatMessage>),
}

/// One generation request.
pub struct Job {
    pub prompt: Prompt,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub logit_bias: Vec<(u32, f32)>,
    pub ignore_eos: bool,
    /// Report each token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    /// The request's tools, when it has some.
    pub tools: Option<Tools>,
    /// The grammar the output must follow (`response_format`), when the request has one.
    pub constraint: Option<Constraint>,
    /// The choices of one request (`n` > 1) share its prompt: (request number, choice). Choice
    /// 0 is admitted first; the others wait until its prompt is evaluated and fork its blocks.
    pub choice: Option<(u64, usize)>,
    pub events: mpsc::UnboundedSender<Event>,
}

/// A chat request's tools: OpenAI's `tools` (checked), `tool_choice`, `parallel_tool_calls`.
pub struct Tools {
    pub list: serde_json::Value,
    pub choice: ToolChoice,
    pub parallel: bool,
}

/// What the engine reports about a job.
#[derive(Debug)]
pub enum Event {
    /// The prompt is accepted: how many of its tokens came from the prefix cache, and the
    /// syntax of the tool calls to parse from the text (when the request has tools in play).
    Started { cached: usize, tool_family: Option<ToolFamily> },
    /// Generated text, with the log-probability entries of the tokens since the last event
    /// (OpenAI's `logprobs.content` entries) when asked; never both empty.
    Text(String, Vec<serde_json::Value>),
    /// The end: `"stop"` or `"length"`, with the token counts.
    Done { finish: &'static str, prompt_tokens: usize, completion_tokens: usize },
    /// The request failed: a 400 when `bad_request` (the request's fault), else a 500.
    Error { message: String, bad_request: bool, code: Option<&'static str> },
}

/// A command for the engine.
pub enum Cmd {
    Generate(Box<Job>),
    Tokenize { text: String, add_special: bool, reply: oneshot::Sender<Result<Vec<u32>, String>> },
    Detokenize { ids: Vec<u32>, reply: oneshot::Sender<Result<String, String>> },
}

/// Counters the engine keeps for `/metrics`.
#[derive(Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub steps: AtomicU64,
    pub active: AtomicU64,
    /// Generation requests queued or running (the HTTP side bounds it).
    pub inflight: AtomicU64,
    pub step_seconds_micros: AtomicU64,
    /// Context shifts of full windows (`--context-shift`).
    pub context_shifts: AtomicU64,
}

/// How the engine runs.
#[derive(Clone, Copy)]
pub struct EngineOptions {
    /// Most sequences decoding at once.
    pub parallel: usize,
    /// Most tokens of one step (a prompt chunk and the decode tokens).
    pub n_batch: usize,
    /// Positions of the shared KV cache.
    pub n_ctx: usize,
    /// Most positions of one sequence (the model's own context, at most `n_ctx`).
    pub n_seq_max: usize,
    /// A sequence that fills `n_seq_max` keeps its prompt (at most half of it), drops the
    /// older half of the rest and goes on ([`Batch::shift_context`]); else its reply ends there.
    pub context_shift: bool,
}

struct Active<'m> {
    seq: SeqId,
    /// [`Job::choice`].
    choice: Option<(u64, usize)>,
    /// Tokens still to evaluate: the rest of the prompt, or the last sampled token.
    todo: Vec<u32>,
    prompting: bool,
    sampler: Sampler,
    decoder: StreamDecoder<'m>,
    stop: StopMatcher,
    history: Vec<u32>,
    generated: usize,
    max_tokens: usize,
    prompt_tokens: usize,
    logit_bias: Vec<(u32, f32)>,
    ignore_eos: bool,
    logprobs: Option<usize>,
    /// Log-probability entries not yet sent (their text is held back).
    pending: Vec<serde_json::Value>,
    /// The grammar of a forced tool call (`tool_choice` required or a named function).
    guide: Option<Guide>,
    /// Whether control tokens are written as their text (call markers such as `[TOOL_CALLS]`
    /// are control tokens, and the call parser must see them).
    show_control: bool,
    events: mpsc::UnboundedSender<Event>,
}

impl Active<'_> {
    /// Whether the device may pick this sequence's next token (greedy without penalties, and
    /// nothing on the host needs its logits; a constraint's mask goes with the step), as
    /// `Session` decides it.
    fn device_picks(&self) -> bool {
        self.sampler.is_greedy()
            && !self.sampler.params().penalties_on()
            && self.logprobs.is_none()
            && self.logit_bias.is_empty()
    }
}

/// Run the engine on this thread until every command sender is gone.
pub async fn run(model: Model, opts: EngineOptions, mut rx: mpsc::Receiver<Cmd>, metrics: Arc<Metrics>) {
    let mut batch = match model.batch(opts.n_ctx) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("wick serve: cannot make the KV cache: {e}");
            return;
        }
    };
    let mut active: Vec<Active> = Vec::new();
    // Finished sequences kept for prefix reuse, least recently used first.
    let mut kept: VecDeque<SeqId> = VecDeque::new();
    let mut waiting: VecDeque<Job> = VecDeque::new();
    loop {
        // Take new commands; wait for one when there is nothing to do.
        if active.is_empty() && waiting.is_empty() {
            match rx.recv().await {
                Some(c) => handle(&model, c, &mut waiting),
                None => return,
            }
        }
        while let Ok(c) = rx.try_recv() {
            handle(&model, c, &mut waiting);
        }
        // Admit waiting jobs while there is a free slot, in order, except a later choice of a
        // request whose first choice is still waiting or evaluating its prompt.
        let mut next = 0;
        while active.len() < opts.parallel && next < waiting.len() {
            let leader = match waiting[next].choice {
                Some((r, c)) if c > 0 => {
                    let queued = waiting.iter().take(next).any(|j| j.choice == Some((r, 0)));
                    let lead = active.iter().find(|a| a.choice == Some((r, 0)));
                    if queued || lead.is_some_and(|a| a.prompting) {
                        next += 1;
                        continue;
                    }
                    lead.map(|a| a.seq)
                }
                _ => None,
            };
            let Some(job) = waiting.remove(next) else { break };
            match admit(&model, &mut batch, &mut kept, leader, job, &opts, &metrics) {
                Some(a) => active.push(a),
                None => {
                    metrics.inflight.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        // Drop sequences whose client went away.
        active.retain(|a| {
            let gone = a.events.is_closed();
            if gone {
                batch.remove(a.seq);
                metrics.inflight.fetch_sub(1, Ordering::Relaxed);
            }
            !gone
        });
        metrics.active.store(active.len() as u64, Ordering::Relaxed);
        if active.is_empty() {
            continue;
        }
        // A decoding sequence whose window is full makes room (with --context-shift; without
        // it, max_tokens ended the reply before): its next token, after any cached tokens the
        // shift must evaluate again, which it then takes as a prompt.
        if opts.context_shift {
            for a in active.iter_mut().filter(|a| !a.prompting) {
                let held = batch.tokens(a.seq).map_or(0, <[u32]>::len);
                if held + a.todo.len() > opts.n_seq_max {
                    if let Ok(todo) = batch.shift_context(a.seq, opts.n_seq_max, a.prompt_tokens, &a.todo) {
                        a.prompting = todo.len() > 1;
                        a.todo = todo;
                        metrics.context_shifts.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        // The step: every decoding sequence's token, then prompt chunks within the budget.
        let mut work: Vec<(usize, usize)> = Vec::new(); // (active index, tokens taken)
        let mut budget = opts.n_batch;
        for (i, a) in active.iter().enumerate() {
            if !a.prompting && budget > 0 {
                work.push((i, 1));
                budget -= 1;
            }
        }
        for (i, a) in active.iter().enumerate() {
            if a.prompting && budget > 0 {
                let n = a.todo.len().min(budget);
                work.push((i, n));
                budget -= n;
            }
        }
        // Room for the step: give back kept sequences, oldest first, until it fits.
        let need: usize = work.iter().map(|&(_, n)| n.div_ceil(KV_BLOCK) * KV_BLOCK + KV_BLOCK).sum();
        while batch.free_positions() < need {
            match kept.pop_front() {
                Some(s) => batch.remove(s),
                None => break,
            }
        }
        // The device picks the tokens when no sequence of the step needs its logits on the host.
        let on_device = work.iter().all(|&(i, _)| active[i].device_picks());
        let readback = if on_device { Readback::Argmax } else { Readback::LastLogits };
        let n_vocab = model.n_vocab();
        // The token masks of the constrained sequences that pick a token in this step, computed
        // while the device runs the forward pass: for the device's argmax, or kept by the guide
        // for `pick`. One that fails ends its request after the step (as on the host).
        let tokens: Vec<(SeqId, Vec<u32>)> =
            work.iter().map(|&(i, n)| (active[i].seq, active[i].todo[..n].to_vec())).collect();
        let items: Vec<(SeqId, &[u32])> = tokens.iter().map(|(s, t)| (*s, &t[..])).collect();
        let mut mask_errors: Vec<Option<Error>> = work.iter().map(|_| None).collect();
        let mut next_masks = || -> wick::Result<Vec<Option<Vec<u32>>>> {
            let mut masks = Vec::with_capacity(work.len());
            for (row, &(i, n)) in work.iter().enumerate() {
                let a = &mut active[i];
                let mask = match a.guide.as_mut().filter(|_| a.todo.len() == n) {
                    Some(g) => match g.next_mask(n_vocab) {
                        Ok(m) => Some(m).filter(|_| on_device),
                        Err(e) => {
                            mask_errors[row] = Some(e);
                            None
                        }
                    },
                    None => None,
                };
                masks.push(mask);
            }
            Ok(masks)
        };
        let t = Instant::now();
        let out = batch.step_with(&items, readback, Some(&mut next_masks)).await;
        metrics.step_seconds_micros.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        metrics.steps.fetch_add(1, Ordering::Relaxed);
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                // The cache is full even with nothing kept: fail the longest sequence's request.
                let fault = matches!(e, Error::ContextOverflow { .. });
                let worst =
                    (0..active.len()).max_by_key(|&i| batch.tokens(active[i].seq).map_or(0, |t| t.len()));
                if let Some(i) = worst {
                    let a = active.remove(i);
                    let _ = a.events.send(Event::Error {
                        message: format!("the step failed: {e}"),
                        bad_request: false,
                        code: fault.then_some("kv_cache_full"),
                    });
                    batch.remove(a.seq);
                    metrics.inflight.fetch_sub(1, Ordering::Relaxed);
                }
                continue;
            }
        };
        let mut finished: Vec<usize> = Vec::new();
        for (row, &(i, n)) in work.iter().enumerate() {
            let a = &mut active[i];
            a.todo.drain(..n);
            if !a.todo.is_empty() {
                continue; // mid-prompt: no token yet
            }
            a.prompting = false;
            let picked = match (mask_errors[row].take(), out.tokens.get(row)) {
                (Some(e), _) => Err(e),
                (_, Some(&id)) if on_device => Ok(id),
                _ => pick(&model, a, &mut out.logits[row * n_vocab..(row + 1) * n_vocab].to_vec()),
            };
            let next = match picked {
                Ok(id) => next_token(&model, a, id, &metrics),
                Err(e) => Some(fail(a, e)),
            };
            if let Some(finish) = next {
                finish_job(a, finish);
                finished.push(i);
            }
        }
        for &i in finished.iter().rev() {
            let a = active.remove(i);
            kept.push_back(a.seq);
            metrics.inflight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Pick the next token of `a` from its logits: the logit bias, the constraint's mask, the
/// sampler; its log-probability entry is queued when asked.
fn pick(model: &Model, a: &mut Active, logits: &mut [f32]) -> Result<u32, Error> {
    let raw = a.logprobs.map(|_| logits.to_vec());
    for &(t, b) in &a.logit_bias {
        if let Some(l) = logits.get_mut(t as usize) {
            *l += b;
        }
    }
    if let Some(g) = a.guide.as_ref() {
        g.apply(logits); // the mask computed during the step
    }
    let id = a.sampler.sample(logits, &a.history);
    if let (Some(n), Some(raw)) = (a.logprobs, raw) {
        a.pending.push(entry(model, &wick::logprobs(&raw, id, n)));
    }
    Ok(id)
}

/// Report and queue token `id` of `a`; `Some(finish reason)` when it ends.
fn next_token(model: &Model, a: &mut Active, id: u32, metrics: &Metrics) -> Option<&'static str> {
    a.generated += 1;
    metrics.generated_tokens.fetch_add(1, Ordering::Relaxed);
    if model.tokenizer().is_eog(id) && !a.ignore_eos {
        return Some("stop");
    }
    if let Some(g) = a.guide.as_mut() {
        if let Err(e) = g.accept(id) {
            return Some(fail(a, e));
        }
    }
    a.history.push(id);
    let tok = model.tokenizer();
    let piece = if a.show_control && tok.is_control(id) {
        a.decoder.flush() + tok.token_text(id).unwrap_or_default()
    } else {
        a.decoder.push(id)
    };
    let r = a.stop.push(&piece);
    if !r.emit.is_empty() {
        let _ = a.events.send(Event::Text(r.emit, std::mem::take(&mut a.pending)));
    }
    if r.stopped || a.guide.as_ref().is_some_and(Guide::is_finished) {
        return Some("stop");
    }
    if a.generated >= a.max_tokens {
        return Some("length");
    }
    a.todo = vec![id];
    None
}

/// A failed step of a constrained generation: report it and end the job.
fn fail(a: &mut Active, e: Error) -> &'static str {
    let _ = a.events.send(Event::Error { message: e.to_string(), bad_request: false, code: None });
    "error"
}

fn finish_job(a: &mut Active, finish: &'static str) {
    if finish == "error" {
        return;
    }
    if finish != "stop" || !a.stop.is_stopped() {
        let tail = a.decoder.flush();
        let text = a.stop.push(&tail).emit + &a.stop.flush();
        if !text.is_empty() || !a.pending.is_empty() {
            let _ = a.events.send(Event::Text(text, std::mem::take(&mut a.pending)));
        }
    }
    let _ =
        a.events.send(Event::Done { finish, prompt_tokens: a.prompt_tokens, completion_tokens: a.generated });
}

fn handle(model: &Model, c: Cmd, waiting: &mut VecDeque<Job>) {
    match c {
        Cmd::Generate(job) => waiting.push_back(*job),
        Cmd::Tokenize { text, add_special, reply } => {
            let _ = reply.send(model.tokenizer().encode(&text, add_special, true).map_err(|e| e.to_string()));
        }
        Cmd::Detokenize { ids, reply } => {
            let n = model.n_vocab();
            let r = match ids.iter().find(|&&t| t as usize >= n) {
                Some(t) => Err(format!("token id {t} is outside the vocabulary of {n}")),
                None => Ok(model.tokenizer().decode(&ids)),
            };
            let _ = reply.send(r);
        }
    }
}

/// Tokenize a job, check it, and give it a sequence (forked from the kept sequence, or the
/// running first choice `leader` of the same request, sharing the longest prefix, when that is
/// at least a block).
fn admit<'m>(
    model: &'m Model,
    batch: &mut Batch<'m>,
    kept: &mut VecDeque<SeqId>,
    leader: Option<SeqId>,
    job: Job,
    opts: &EngineOptions,
    metrics: &Metrics,
) -> Option<Active<'m>> {
    let bad = |events: &mpsc::UnboundedSender<Event>, message: String, code: Option<&'static str>| {
        let _ = events.send(Event::Error { message, bad_request: true, code });
        None
    };
    // Tools in play (any choice but `none`): rendered, parsed, and forced by a grammar when
    // the choice asks for a call.
    let tools = job.tools.as_ref().filter(|t| t.choice != ToolChoice::None);
    let family = model.chat_template().map_or(ToolFamily::Generic, |t| t.tool_family());
    let ids = match &job.prompt {
        Prompt::Text(t) => model.tokenizer().encode(t, true, true),
        Prompt::Chat(msgs) => match model.chat_template() {
            Some(tmpl) => {
                let text = match tools {
                    Some(t) => tmpl.render_with_tools(msgs, true, Some(&t.list), &serde_json::Map::new()),
                    None => tmpl.render(msgs, true),
                };
                text.and_then(|text| model.tokenizer().encode(&text, false, true))
            }
            None => Err(Error::Template("this model has no chat template".into())),
        },
    };
    let guide = match (tools, &job.constraint) {
        (_, Some(c)) => match model.constraints().and_then(|cc| cc.guide(c)) {
            Ok(g) => Some(g),
            Err(e) => return bad(&job.events, e.to_string(), None),
        },
        (Some(t), None) => {
            let tok = model.tokenizer();
            let special = |text: &str| tok.find_token(text).filter(|&id| tok.is_control(id));
            let built = tool_choice_grammar(family, &t.list, &t.choice, t.parallel, &special)
                .and_then(|c| c.map(|c| model.constraints().and_then(|cc| cc.guide(&c))).transpose());
            match built {
                Ok(g) => g,
                Err(e) => return bad(&job.events, e.to_string(), None),
            }
        }
        (None, None) => None,
    };
    let ids = match ids {
        Ok(ids) if !ids.is_empty() => ids,
        Ok(_) => return bad(&job.events, "the prompt is empty".into(), None),
        Err(e) => return bad(&job.events, e.to_string(), None),
    };
    if ids.len() + 1 > opts.n_seq_max {
        return bad(
            &job.events,
            format!(
                "the prompt has {} tokens; this server takes at most {} per request",
                ids.len(),
                opts.n_seq_max - 1
            ),
            Some("context_length_exceeded"),
        );
    }
    let sampler = match Sampler::new(job.sampling) {
        Ok(s) => s,
        Err(e) => return bad(&job.events, e.to_string(), None),
    };
    let n_vocab = model.n_vocab();
    if let Some(&(t, b)) =
        job.logit_bias.iter().find(|&&(t, b)| t as usize >= n_vocab || !(-100.0..=100.0).contains(&b))
    {
        return bad(
            &job.events,
            format!("logit_bias {{{t}: {b}}}: token ids below {n_vocab}, biases from -100 to 100"),
            None,
        );
    }
    // The sequence sharing the longest prefix (at least a whole block): a kept one (with its
    // place in `kept`) or the leader.
    let mut best: Option<(Option<usize>, SeqId, usize)> = None; // (index in kept, sequence, common length)
    let candidates = kept.iter().enumerate().map(|(k, &s)| (Some(k), s)).chain(leader.map(|s| (None, s)));
    for (k, s) in candidates {
        let t = batch.tokens(s).unwrap_or(&[]);
        let common = t.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
        if common >= KV_BLOCK && best.is_none_or(|b| common > b.2) {
            best = Some((k, s, common));
        }
    }
    let (seq, todo, cached) = match best {
        Some((k, from, common)) => {
            let (seq, rest) = match batch.fork(from, common) {
                Ok(f) => f,
                Err(e) => return bad(&job.events, e.to_string(), None),
            };
            // Most recently used last.
            if let Some(k) = k {
                kept.remove(k);
                kept.push_back(from);
            }
            let held = common - rest.len();
            (seq, [rest, ids[common..].to_vec()].concat(), held)
        }
        None => (batch.add(), ids.clone(), 0),
    };
    metrics.requests.fetch_add(1, Ordering::Relaxed);
    metrics.prompt_tokens.fetch_add(ids.len() as u64, Ordering::Relaxed);
    metrics.cached_tokens.fetch_add(cached as u64, Ordering::Relaxed);
    let _ = job.events.send(Event::Started { cached, tool_family: tools.is_some().then_some(family) });
    let show_control = tools.is_some();
    let max_tokens =
        if opts.context_shift { job.max_tokens } else { job.max_tokens.min(opts.n_seq_max - ids.len()) };
    Some(Active {
        seq,
        choice: job.choice,
        todo,
        prompting: true,
        sampler,
        decoder: StreamDecoder::new(model.tokenizer()),
        stop: StopMatcher::new(job.stop),
        history: ids.clone(),
        generated: 0,
        max_tokens,
        prompt_tokens: ids.len(),
        logit_bias: job.logit_bias,
        ignore_eos: job.ignore_eos,
        logprobs: job.logprobs,
        pending: Vec::new(),
        guide,
        show_control,
        events: job.events,
    })
}

/// One `logprobs.content` entry: the token, its log-probability and bytes, and the alternatives.
fn entry(model: &Model, lp: &wick::Logprobs) -> serde_json::Value {
    let one = |t: &wick::TokenLogprob| {
        let bytes = model.tokenizer().token_bytes(t.id);
        serde_json::json!({ "token": String::from_utf8_lossy(bytes), "logprob": t.logprob, "bytes": bytes })
    };
    let mut e = one(&lp.token);
    e["top_logprobs"] = lp.top.iter().map(one).collect();
    e
}
