//! The subcommands.

use std::io::{BufRead, Write};
use std::time::Instant;

use wick::chat::tools::{parse_tool_calls, tool_choice_grammar, validate_tools, ToolChoice};
use wick::chat::ChatMessage;
use wick::gguf::{GgufReader, MetaArray, MetaValue};
use wick::sampling::SamplingParams;
use wick::source::FileSource;
use wick::{
    Constraint, Error, GenerateOptions, LoadOptions, Model, ModelInfo, Result, Session, SessionOptions,
};

use super::progress::Bar;
use super::prompt_cache;
use super::{
    BenchArgs, ChatArgs, ConstraintArgs, GenerateArgs, InfoArgs, ModelArgs, SamplingArgs, SynthArgs,
    TokenizeArgs,
};

async fn load(a: &ModelArgs) -> Result<Model> {
    let executor = a.executor.parse()?;
    let src = FileSource::open(&a.model).await?;
    let mut bar = (!a.no_progress).then(Bar::new);
    let opts = LoadOptions {
        executor,
        on_progress: bar.as_mut().map(|b| Box::new(move |p: &_| b.update(p)) as wick::ProgressFn),
        memory_budget: a.memory_budget.map(|m| (m as u64) << 20),
        ..LoadOptions::default()
    };
    let model = Model::load(src, opts).await?;
    if let Some(b) = bar {
        b.finish();
    }
    Ok(model)
}

fn sampling(s: &SamplingArgs) -> SamplingParams {
    SamplingParams {
        temperature: s.temperature,
        top_k: s.top_k,
        top_p: s.top_p,
        min_p: s.min_p,
        repeat_penalty: s.repeat_penalty,
        presence_penalty: s.presence_penalty,
        frequency_penalty: s.frequency_penalty,
        penalty_last_n: s.repeat_last_n,
        seed: s.seed,
    }
}

/// The constraint the flags ask for, read and parsed before the model loads (compiling it
/// needs the vocabulary, so that error comes after loading, still before any token).
fn constraint(a: &ConstraintArgs) -> Result<Option<Constraint>> {
    if let Some(arg) = &a.json_schema {
        let text = if arg.trim_start().starts_with('{') {
            arg.clone()
        } else {
            std::fs::read_to_string(arg)
                .map_err(|e| Error::io(format!("reading the JSON schema {arg}"), e))?
        };
        let schema: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::Grammar(format!("the JSON schema ({arg}) is not valid JSON: {e}")))?;
        return Ok(Some(Constraint::JsonSchema(schema)));
    }
    if let Some(path) = &a.grammar {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading the grammar {}", path.display()), e))?;
        return Ok(Some(Constraint::grammar_text(text)));
    }
    Ok(a.json_object.then_some(Constraint::JsonObject))
}

fn render(model: &Model, messages: &[ChatMessage]) -> Result<String> {
    render_with_tools(model, messages, None)
}

fn render_with_tools(
    model: &Model,
    messages: &[ChatMessage],
    tools: Option<&serde_json::Value>,
) -> Result<String> {
    let t = model
        .chat_template()
        .ok_or_else(|| Error::Template("this model has no chat template (tokenizer.chat_template)".into()))?;
    t.render_with_tools(messages, true, tools, &serde_json::Map::new())
}

/// `--tools FILE` and `--tool-choice`, read and checked before the model loads.
fn tool_args(a: &GenerateArgs) -> Result<Option<(serde_json::Value, ToolChoice)>> {
    let Some(path) = &a.tools else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading the tools {}", path.display()), e))?;
    let tools: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::InvalidArgument(format!("the tools ({}) are not valid JSON: {e}", path.display()))
    })?;
    validate_tools(&tools)?;
    let choice = match a.tool_choice.as_str() {
        c @ ("auto" | "none" | "required") => ToolChoice::from_json(&serde_json::json!(c))?,
        name => {
            let known = tools.as_array().is_some_and(|l| l.iter().any(|t| t["function"]["name"] == name));
            if !known {
                return Err(Error::InvalidArgument(format!(
                    "--tool-choice {name}: no such function in --tools"
                )));
            }
            ToolChoice::Function(name.to_string())
        }
    };
    let forced = matches!(choice, ToolChoice::Required | ToolChoice::Function(_));
    let c = &a.constraint;
    if forced && (c.json_schema.is_some() || c.json_object || c.grammar.is_some()) {
        return Err(Error::InvalidArgument(
            "--tool-choice required or a function is a constraint of its own: drop --json-schema, --json-object and --grammar".into(),
        ));
    }
    Ok(Some((tools, choice)))
}

/// Generate after `prompt`, writing text (or JSON lines) to stdout; returns the generated text
/// and why it ended.
async fn run(
    session: &mut Session<'_>,
    prompt: &[u32],
    opts: GenerateOptions,
    json: bool,
) -> Result<(String, wick::FinishReason)> {
    let t0 = Instant::now();
    let mut gen = session.generate(prompt, opts)?;
    let n_eval = gen.n_prompt_evaluated();
    let mut out = std::io::stdout().lock();
    let mut text = String::new();
    let mut t_first = None;
    while let Some(tok) = gen.next().await {
        let tok = tok?;
        t_first.get_or_insert_with(Instant::now);
        text.push_str(&tok.text);
        if json {
            let mut obj = serde_json::json!({ "id": tok.id, "text": tok.text });
            if let Some(lp) = &tok.logprobs {
                let top: Vec<_> =
                    lp.top.iter().map(|t| serde_json::json!({ "id": t.id, "logprob": t.logprob })).collect();
                obj["logprob"] = serde_json::json!(lp.token.logprob);
                obj["top_logprobs"] = serde_json::json!(top);
            }
            let _ = writeln!(out, "{obj}");
        } else {
            let _ = write!(out, "{}", tok.text);
        }
        let _ = out.flush();
    }
    if !json {
        let _ = writeln!(out);
    }
    let n_gen = gen.n_generated();
    let finish = gen.finish_reason().unwrap_or(wick::FinishReason::Length);
    let t_first = t_first.unwrap_or_else(Instant::now);
    let prefill = (t_first - t0).as_secs_f64();
    let decode = t_first.elapsed().as_secs_f64();
    // The constraint's host time per token (its masks overlap the device's steps on a GPU).
    let constraint = match gen.constraint_secs() {
        Some(s) if n_gen > 0 => format!(" | constraint: {:.0} µs a token", s * 1e6 / n_gen as f64),
        _ => String::new(),
    };
    eprintln!(
        "prompt: {n_eval} tokens in {prefill:.3} s ({:.1} tok/s) | generated: {n_gen} tokens in {decode:.3} s ({:.1} tok/s) | finish: {:?}{constraint}",
        n_eval as f64 / prefill.max(1e-9),
        n_gen.saturating_sub(1) as f64 / decode.max(1e-9),
        finish
    );
    Ok((text, finish))
}

pub async fn generate(a: GenerateArgs) -> Result<()> {
    // Every option is checked before the model loads: a typo costs no multi-GB read.
    sampling(&a.sampling).validate()?;
    let mut constraint = constraint(&a.constraint)?;
    let tools = tool_args(&a)?.filter(|(_, c)| *c != ToolChoice::None);
    let cache_dir = prompt_cache::dir(&a.prompt_cache)?;
    let model = load(&a.model).await?;
    let family =
        model.chat_template().map(|t| t.tool_family()).unwrap_or(wick::chat::tools::ToolFamily::Generic);
    let parallel = !a.no_parallel_tool_calls;
    if let Some((list, choice)) = &tools {
        let tok = model.tokenizer();
        let special = |text: &str| tok.find_token(text).filter(|&id| tok.is_control(id));
        // `auto`'s lazy grammar gives way to a constraint of the caller's (--json-schema,
        // --grammar); `required` and a named function replace it.
        if let Some(c) = tool_choice_grammar(family, list, choice, parallel, &special)? {
            if *choice != ToolChoice::Auto || constraint.is_none() {
                constraint = Some(c);
            }
        }
    }
    let text = if a.chat {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(ChatMessage::new("system", s.clone()));
        }
        msgs.push(ChatMessage::new("user", a.prompt.clone()));
        render_with_tools(&model, &msgs, tools.as_ref().map(|t| &t.0))?
    } else {
        a.prompt.clone()
    };
    // As llama.cpp by default: BOS where the vocabulary asks for it, special tokens parsed.
    let ids = model.tokenizer().encode(&text, !a.chat, true)?;
    let mut session = model.session(SessionOptions { n_ctx: a.model.n_ctx, ..Default::default() })?;
    if let Some(dir) = &cache_dir {
        prompt_cache::restore(dir, &mut session, &ids).await;
    }
    let opts = GenerateOptions {
        max_tokens: a.n_predict,
        sampling: sampling(&a.sampling),
        stop: a.sampling.stop.clone(),
        constraint,
        logprobs: a.logprobs.filter(|_| a.json),
        ignore_eog: a.ignore_eos,
        control_text: tools.is_some(),
        logit_bias: a.sampling.logit_bias.clone(),
        // The prompt stays; the generated text scrolls.
        context_shift: a.context_shift.then_some(ids.len()),
    };
    let (reply, finish) = run(&mut session, &ids, opts, a.json).await?;
    if let Some(dir) = &cache_dir {
        prompt_cache::save(dir, &session).await;
    }
    if tools.is_some() {
        let out = parse_tool_calls(&reply, family, parallel);
        let calls: Vec<serde_json::Value> = out
            .calls
            .iter()
            .map(|c| serde_json::json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
            .collect();
        let finish = match (out.unfinished.is_some(), calls.is_empty(), finish) {
            (true, _, _) | (_, _, wick::FinishReason::Length) => "length",
            (false, false, _) => "tool_calls",
            _ => "stop",
        };
        println!(
            "{}",
            serde_json::json!({ "content": out.content, "tool_calls": calls, "finish_reason": finish })
        );
    }
    Ok(())
}

pub async fn chat(a: ChatArgs) -> Result<()> {
    sampling(&a.sampling).validate()?;
    let constraint = constraint(&a.constraint)?;
    let cache_dir = prompt_cache::dir(&a.prompt_cache)?;
    let model = load(&a.model).await?;
    if let Some(c) = &constraint {
        model.constraints()?.check(c)?;
    }
    let mut session = model.session(SessionOptions { n_ctx: a.model.n_ctx, ..Default::default() })?;
    let mut msgs = Vec::new();
    if let Some(s) = &a.system {
        msgs.push(ChatMessage::new("system", s.clone()));
    }
    eprintln!(
        "wick chat with {} on {} — empty line or Ctrl-D to quit",
        model.name().unwrap_or("model"),
        model.executor_name()
    );
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).map_err(|e| Error::io("reading stdin", e))? == 0 {
            break;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        msgs.push(ChatMessage::new("user", line.to_string()));
        let mut ids = model.tokenizer().encode(&render(&model, &msgs)?, false, true)?;
        // A conversation longer than the context loses its oldest turns after the system
        // prompt, whole messages at a time, keeping room for a reply.
        let room = session.n_ctx().saturating_sub(a.n_predict.min(session.n_ctx() / 2));
        while ids.len() > room && msgs.iter().filter(|m| m.role != "system").count() > 1 {
            let first = msgs.iter().position(|m| m.role != "system").unwrap_or(0);
            msgs.remove(first);
            ids = model.tokenizer().encode(&render(&model, &msgs)?, false, true)?;
        }
        let opts = GenerateOptions {
            max_tokens: a.n_predict,
            sampling: sampling(&a.sampling),
            stop: a.sampling.stop.clone(),
            constraint: constraint.clone(),
            logprobs: None,
            ignore_eog: false,
            control_text: false,
            logit_bias: a.sampling.logit_bias.clone(),
            context_shift: None,
        };
        // A first message may continue a conversation saved by an earlier run.
        if let Some(dir) = cache_dir.as_ref().filter(|_| session.tokens().is_empty()) {
            prompt_cache::restore(dir, &mut session, &ids).await;
        }
        match run(&mut session, &ids, opts, false).await {
            Ok((reply, _)) => {
                msgs.push(ChatMessage::new("assistant", reply));
                if let Some(dir) = &cache_dir {
                    prompt_cache::save(dir, &session).await;
                }
            }
            Err(e @ Error::ContextOverflow { .. }) => {
                eprintln!("error: {e}; starting a new conversation");
                msgs.retain(|m| m.role == "system");
                session.reset();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub async fn tokenize(a: TokenizeArgs) -> Result<()> {
    let reader = GgufReader::open(FileSource::open(&a.model).await?).await?;
    let h = reader.header();
    let tok = wick::tokenizer::Tokenizer::from_metadata(&h.metadata)?;
    let ids = tok.encode(&a.text, !a.no_special, !a.no_parse_special)?;
    if a.json {
        emit(&format!("{}\n", serde_json::json!({ "ids": ids })));
    } else {
        let lines: String =
            ids.iter().map(|&id| format!("{id:>8} {:?}\n", tok.token_text(id).unwrap_or(""))).collect();
        emit(&lines);
    }
    Ok(())
}

fn show(v: &MetaValue, full: bool) -> String {
    let limit = if full { usize::MAX } else { 8 };
    fn list<T: std::fmt::Debug>(v: &[T], limit: usize) -> String {
        let shown: Vec<String> = v.iter().take(limit).map(|x| format!("{x:?}")).collect();
        let more = if v.len() > limit { format!(", … ({} in all)", v.len()) } else { String::new() };
        format!("[{}{more}]", shown.join(", "))
    }
    match v {
        MetaValue::Str(s) if !full && s.len() > 120 => {
            let cut = (0..=120).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
            format!("{:?}… ({} bytes)", &s[..cut], s.len())
        }
        MetaValue::Str(s) => format!("{s:?}"),
        MetaValue::Array(a) => match a {
            MetaArray::Str(v) => list(v, limit),
            MetaArray::F32(v) => list(v, limit),
            MetaArray::I32(v) => list(v, limit),
            MetaArray::U32(v) => list(v, limit),
            other => format!("array of {} elements", other.len()),
        },
        MetaValue::F32(x) => format!("{x}"),
        MetaValue::F64(x) => format!("{x}"),
        MetaValue::Bool(b) => format!("{b}"),
        other => other.as_int().map(|i| i.to_string()).unwrap_or_default(),
    }
}

/// Print to stdout, ending quietly when the reader has gone away (`wick info | head`).
fn emit(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

pub async fn info(a: InfoArgs) -> Result<()> {
    use std::fmt::Write as _;
    let reader = GgufReader::open(FileSource::open(&a.model).await?).await?;
    let h = reader.header();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "GGUF v{}  {} metadata keys  {} tensors  data at byte {}",
        h.version,
        h.metadata.len(),
        h.tensors.len(),
        h.data_offset
    );
    let _ = writeln!(o, "\nmetadata:");
    for (k, v) in h.metadata.iter() {
        let _ = writeln!(o, "  {k} = {}", show(v, a.full));
    }
    let _ = writeln!(o, "\ntensors:");
    let mut total = 0u64;
    for t in &h.tensors {
        total += t.n_bytes();
        let _ = writeln!(o, "  {:<40} {:<6} {:?}", t.name, t.dtype.name(), t.dims);
    }
    let _ = writeln!(o, "\n{:.1} MB of tensor data", total as f64 / 1e6);
    match ModelInfo::from_header(&h.metadata, &h.tensors) {
        Ok(mi) => {
            let _ = writeln!(o, "wick can run this model: {:?}", mi.hparams);
            memory_report(&mut o, &a, &mi, &h.tensors).await?;
        }
        Err(e) => {
            let _ = writeln!(o, "wick cannot run this model: {e}");
        }
    }
    emit(&o);
    Ok(())
}

/// `info`'s memory lines: the estimate at the context a session would get (or `--ctx`) and at
/// the model's own, and whether each fits the executor's budget (header only).
async fn memory_report(
    o: &mut String,
    a: &InfoArgs,
    mi: &ModelInfo,
    tensors: &[wick::gguf::TensorInfo],
) -> Result<()> {
    use std::fmt::Write as _;
    let kind: wick::ExecutorKind = a.executor.parse()?;
    let (name, budget) = match wick::exec::create(kind).await {
        Ok(e) => {
            let own = e.memory_budget();
            let given = a.memory_budget.map(|m| {
                wick::exec::MemoryBudget::given((m as u64) << 20, own.as_ref().and_then(|b| b.max_buffer))
            });
            (e.name(), given.or(own))
        }
        Err(e) => {
            let _ = writeln!(o, "memory: no {} executor here ({e}); the budget is unknown", a.executor);
            (a.executor.as_str(), None)
        }
    };
    let exec_kind = name.parse().unwrap_or_default();
    // Prompt chunks of 0: the executor's own, as a session takes them.
    let r = wick::model::FitReport::new(&mi.hparams, mi.n_vocab, tensors, a.n_ctx, 0, exec_kind, budget)?;
    match &r.budget {
        Some(b) => {
            let _ = writeln!(o, "memory on the {name} executor, budget {b}:");
        }
        None => {
            let _ = writeln!(o, "memory on the {name} executor (budget unknown):");
        }
    }
    let how = if !r.default {
        "the context asked for"
    } else if r.budget.is_some() {
        "the default: the largest that fits, at most the model's own"
    } else {
        "the default: the model's own, at most 4096"
    };
    let verdict = |f: &wick::model::ContextFit| match (&f.problem, &r.budget) {
        (None, Some(_)) => "fits".to_string(),
        (None, None) => "fit unknown".to_string(),
        (Some(p), _) => format!("does not fit: {p}"),
    };
    let _ = writeln!(o, "  context {} ({how}): {}; {}", r.chosen.n_ctx, r.chosen.memory, verdict(&r.chosen));
    if r.full.n_ctx != r.chosen.n_ctx {
        let _ = writeln!(
            o,
            "  context {} (the model's own): {}; {}",
            r.full.n_ctx,
            r.full.memory,
            verdict(&r.full)
        );
    }
    Ok(())
}

pub async fn synth(a: SynthArgs) -> Result<()> {
    use wick::synth::{FileType, SynthSpec};
    // Options first, so that a bad one is named before any file is opened.
    let embd_type = match &a.embd_type {
        Some(name) => Some(wick::quant::GgmlType::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = wick::quant::GgmlType::WEIGHT_TYPES.iter().map(|t| t.name()).collect();
            Error::InvalidArgument(format!("unknown --embd-type '{name}' (one of {})", names.join(", ")))
        })?),
        None => None,
    };
    let donor = GgufReader::open(FileSource::open(&a.donor).await?).await?.into_header().metadata;
    let file = std::fs::File::create(&a.output)
        .map_err(|e| Error::io(format!("creating {}", a.output.display()), e))?;
    let w = std::io::BufWriter::with_capacity(1 << 20, file);
    let start = std::time::Instant::now();
    let w = if a.extract_tokenizer {
        wick::synth::write_tokenizer_only(w, &donor)?
    } else {
        let arch = wick::model::Arch::from_name(&a.arch)?;
        let mut spec = SynthSpec::shape(&a.shape, arch, FileType::parse(&a.dtype)?, a.seed)?;
        spec.n_layer = a.layers.unwrap_or(spec.n_layer);
        spec.embd_type = embd_type.or(spec.embd_type);
        let n_vocab = donor.str_array("tokenizer.ggml.tokens")?.len();
        eprintln!(
            "writing {} {} {} ({:.2} B parameters)...",
            a.arch,
            a.shape,
            spec.file_type.name(),
            spec.n_params(n_vocab) as f64 / 1e9
        );
        match a.distinct_rows {
            Some(d) => wick::synth::write_repeating(w, &spec, &donor, d)?,
            None => wick::synth::write(w, &spec, &donor)?,
        }
    };
    let file = w.into_inner().map_err(|e| Error::io("writing the model", e.error()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "wrote {} ({:.1} MiB in {:.1} s)",
        a.output.display(),
        size as f64 / (1u64 << 20) as f64,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Bytes of K and V rows (f16) one decoded token reads at a context of `ctx` positions: every
/// layer's key and value rows of every position it attends to (a sliding-window layer at most
/// its window).
fn kv_bytes_read(hp: &wick::model::Hparams, ctx: f64) -> f64 {
    let row = (hp.n_head_kv * (hp.head_dim + hp.v_head_dim) * 2) as f64;
    (0..hp.n_layer)
        .map(|il| {
            let seen = match hp.sliding_window {
                Some(w) if hp.is_swa_layer(il) => ctx.min(w as f64),
                _ => ctx,
            };
            seen * row
        })
        .sum()
}

pub async fn bench(a: BenchArgs) -> Result<()> {
    let mut out = String::new();
    let mut json_rows = Vec::new();
    if !a.json {
        out.push_str(
            "| model | size | executor | test | tokens/s | ms/token | floor ms/token (share reached) |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|\n");
    }
    for path in &a.model {
        let margs = ModelArgs {
            model: path.clone(),
            executor: a.executor.clone(),
            n_ctx: 0,
            memory_budget: a.memory_budget,
            no_progress: true,
        };
        let model = load(&margs).await?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        // Decode reads every weight byte once per token (the file size is the weights plus a
        // small header) and the K and V rows of every context position it attends to.
        let bandwidth = match a.bandwidth {
            Some(gbps) => Some(gbps * 1e9),
            None => model.measure_bandwidth().await?,
        };
        if let Some(b) = bandwidth {
            eprintln!(
                "{name}: bandwidth {:.1} GB/s, weights floor {:.3} ms/token",
                b / 1e9,
                size as f64 / b * 1e3
            );
        }
        let rows = super::bench::run(
            &model,
            &a.n_prompt,
            &a.n_gen,
            &a.depth,
            &a.parallel,
            a.repetitions.max(1),
            a.ubatch,
        )
        .await?;
        for r in rows {
            let ms = 1e3 / r.mean();
            // Decode rows: the weights and the KV cache at the mean context of the generated
            // tokens. Prefill rows have no floor.
            let kv_bytes = (r.decode && r.parallel == 1).then(|| {
                kv_bytes_read(model.hparams(), super::bench::mean_decode_context(r.depth, r.n_tokens))
            });
            let floor = match (bandwidth, kv_bytes) {
                (Some(b), Some(kv)) => Some((size as f64 + kv) / b * 1e3),
                _ => None,
            };
            if a.json {
                json_rows.push(serde_json::json!({
                    "model": name, "size_bytes": size, "executor": model.executor_name(), "test": r.test,
                    "n_tokens": r.n_tokens, "depth": r.depth, "parallel": r.parallel, "tokens_per_s_mean": r.mean(),
                    "tokens_per_s_stddev": r.stddev(), "samples": r.samples,
                    "bandwidth_bytes_per_s": bandwidth, "kv_bytes_per_token": kv_bytes,
                    "floor_ms_per_token": floor,
                }));
            } else {
                let floor = floor
                    .map_or("".to_string(), |f| format!("{f:.3} ({:.0}%)", f / (1e3 / r.mean()) * 100.0));
                let line = format!(
                    "| {name} | {:.1} MiB | {} | {} | {:.2} ± {:.2} | {ms:.3} | {floor} |\n",
                    size as f64 / (1 << 20) as f64,
                    model.executor_name(),
                    r.test,
                    r.mean(),
                    r.stddev()
                );
                eprint!("{line}");
                out.push_str(&line);
            }
        }
    }
    if a.json {
        out = format!("{}\n", serde_json::Value::Array(json_rows));
    }
    emit(&out);
    Ok(())
}

#[cfg(feature = "serve")]
pub fn serve(a: crate::ServeArgs) -> Result<()> {
    let opts = crate::serve::ServeOptions {
        host: a.host.clone(),
        port: a.port,
        parallel: a.parallel,
        n_batch: a.batch,
        queue: a.queue,
        context_shift: a.context_shift,
        api_key: a.api_key.clone().or_else(|| std::env::var("WICK_API_KEY").ok().filter(|k| !k.is_empty())),
    };
    let model_args = a.model.clone();
    crate::serve::serve(move || pollster::block_on(load(&model_args)), a.model.n_ctx, opts)
}
