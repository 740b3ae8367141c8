//! The `wick` command-line tool.

mod bench;
mod commands;
mod progress;
mod prompt_cache;
#[cfg(feature = "serve")]
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};

/// Run GGUF language models: generate text, chat, tokenize, inspect files.
#[derive(Parser)]
#[command(name = "wick", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a continuation of a prompt (or a chat reply with --chat).
    Generate(GenerateArgs),
    /// Chat interactively: type a message, get a reply; an empty line or Ctrl-D ends.
    Chat(ChatArgs),
    /// Print the token ids of a text.
    Tokenize(TokenizeArgs),
    /// Print a GGUF file's metadata and tensors.
    Info(InfoArgs),
    /// Write a synthetic model: a real architecture, random weights, a real tokenizer.
    Synth(SynthArgs),
    /// Measure prefill and decode speed (like llama-bench).
    Bench(BenchArgs),
    /// Serve the model over HTTP with OpenAI's API (/v1/chat/completions, /v1/completions,
    /// /v1/models, /health, /metrics, /tokenize, /detokenize), batching concurrent requests.
    #[cfg(feature = "serve")]
    Serve(ServeArgs),
}

#[cfg(feature = "serve")]
#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on (localhost only unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Requests generated at once (more wait in the queue); --ctx is shared by them
    /// (default: 4096 positions a request).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256).map(|v| v as usize))]
    parallel: usize,
    /// Most tokens of one step (prompt chunks and decode tokens together).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=8192).map(|v| v as usize))]
    batch: usize,
    /// Most requests waiting for a slot; more get 503.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000).map(|v| v as usize))]
    queue: usize,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health (also WICK_API_KEY).
    #[arg(long)]
    api_key: Option<String>,
    /// When a request's tokens fill its window (the model's own context, at most --ctx), keep
    /// the prompt (at most half the window), drop the older half of the rest (whole KV blocks;
    /// the blocks after them re-positioned by rotating their keys) and go on to max_tokens.
    /// Without it such a reply ends with finish_reason "length".
    #[arg(long)]
    context_shift: bool,
}

/// Options shared by the commands that load a model.
#[derive(Args, Clone)]
struct ModelArgs {
    /// GGUF model file.
    #[arg(short, long)]
    model: PathBuf,
    /// Executor: auto, cpu, webgpu or cuda.
    #[arg(long, default_value = "auto")]
    executor: String,
    /// Context size in tokens (0: the largest that fits the executor's memory, at most the
    /// model's own context; see `wick info`).
    #[arg(long = "ctx", default_value_t = 0, value_parser = count(1 << 24))]
    n_ctx: usize,
    /// MiB that the KV cache and scratch may take, in place of the executor's budget (free
    /// RAM or device memory less a margin; WebGPU: 1024).
    #[arg(long = "memory-budget", value_parser = count(1 << 30))]
    memory_budget: Option<usize>,
    /// Do not draw the loading progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// Prompt cache: conversations' KV saved to disk and reused by later runs.
#[derive(Args, Clone)]
struct PromptCacheArgs {
    /// Save the conversation's KV cache in DIR after generating, and start from the saved
    /// cache that shares the longest prefix with the prompt (only the rest is evaluated).
    #[arg(long, value_name = "DIR")]
    prompt_cache: Option<PathBuf>,
    /// Most GiB the prompt cache directory may hold; the least recently used caches go first.
    #[arg(long, value_name = "GIB", default_value_t = 8.0, requires = "prompt_cache")]
    prompt_cache_max: f64,
}

/// Sampling options.
#[derive(Args, Clone)]
struct SamplingArgs {
    /// Temperature; 0 means greedy.
    #[arg(long = "temp", default_value_t = 0.8)]
    temperature: f32,
    /// Keep the k most likely tokens (0: off).
    #[arg(long, default_value_t = 40, value_parser = count(1 << 24))]
    top_k: usize,
    /// Keep the most likely tokens up to this total probability (1: off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens less likely than this fraction of the best one (0: off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Penalise repeated tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Presence penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    /// Frequency penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    /// How many recent tokens the penalties consider.
    #[arg(long, default_value_t = 64, value_parser = count(1 << 24))]
    repeat_last_n: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Stop before this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Add BIAS (-100 to 100) to token ID's logit before sampling, as OpenAI's `logit_bias`
    /// (-100 bans the token); repeatable.
    #[arg(long, value_name = "ID=BIAS", value_parser = logit_bias)]
    logit_bias: Vec<(u32, f32)>,
}

/// Structured output: constrain what the model may write.
#[derive(Args, Clone)]
struct ConstraintArgs {
    /// Constrain the output to JSON valid under this JSON Schema: a file, or the schema's JSON
    /// text itself (starting with `{`).
    #[arg(long, value_name = "FILE-or-JSON", conflicts_with_all = ["grammar", "json_object"])]
    json_schema: Option<String>,
    /// Constrain the output to any JSON object.
    #[arg(long, conflicts_with = "grammar")]
    json_object: bool,
    /// Constrain the output to the language of this grammar file: llama.cpp's GBNF
    /// (`root ::= ...`) or Lark (llguidance's dialect, `start: ...`), told apart by its rules.
    #[arg(long, value_name = "FILE")]
    grammar: Option<PathBuf>,
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt.
    #[arg(short, long)]
    prompt: String,
    /// Tokens to generate at most.
    #[arg(short = 'n', long, default_value_t = 128, value_parser = count(1 << 24))]
    n_predict: usize,
    /// Treat the prompt as a user message and render it with the model's chat template.
    #[arg(long)]
    chat: bool,
    /// System message (with --chat).
    #[arg(long)]
    system: Option<String>,
    /// Print one JSON object per generated token ({"id":..,"text":..}), one per line.
    #[arg(long)]
    json: bool,
    /// With --json: add each token's log-probability and this many likeliest alternatives (0-20).
    #[arg(long, value_name = "N", value_parser = count(20))]
    logprobs: Option<usize>,
    /// Keep generating past the model's end-of-generation tokens, to -n tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// When the context fills, drop the older half of the generated text (the prompt stays)
    /// and go on, instead of stopping with "context full".
    #[arg(long)]
    context_shift: bool,
    /// With --chat: the tools the model may call, a JSON file of OpenAI's `tools` list
    /// (`[{"type": "function", "function": {"name", "description", "parameters"}}]`); the
    /// calls parsed from the reply are printed after it as one JSON line
    /// (`{"content", "tool_calls", "finish_reason"}`).
    #[arg(long, value_name = "FILE", requires = "chat")]
    tools: Option<PathBuf>,
    /// With --tools: auto (the model decides; a call it starts is made to parse by a lazy
    /// grammar, unless --json-schema or --grammar is given), none, required (a call is forced
    /// by a grammar), or a function's name (that function is forced).
    #[arg(long, value_name = "CHOICE", default_value = "auto", requires = "tools")]
    tool_choice: String,
    /// With --tools: keep only the model's first call.
    #[arg(long, requires = "tools")]
    no_parallel_tool_calls: bool,
    #[command(flatten)]
    prompt_cache: PromptCacheArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    constraint: ConstraintArgs,
}

#[derive(Args)]
struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// System message.
    #[arg(long)]
    system: Option<String>,
    /// Tokens per reply at most.
    #[arg(short = 'n', long, default_value_t = 512, value_parser = count(1 << 24))]
    n_predict: usize,
    #[command(flatten)]
    prompt_cache: PromptCacheArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    constraint: ConstraintArgs,
}

#[derive(Args)]
struct TokenizeArgs {
    /// GGUF model file (only its header and vocabulary are read).
    #[arg(short, long)]
    model: PathBuf,
    /// Print {"ids": [...]}.
    #[arg(long)]
    json: bool,
    /// Do not add BOS/EOS even where the vocabulary asks for them.
    #[arg(long)]
    no_special: bool,
    /// Treat special-token texts (like <|im_start|>) as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// The text.
    text: String,
}

#[derive(Args)]
struct InfoArgs {
    /// GGUF file.
    #[arg(short, long)]
    model: PathBuf,
    /// Print every array element instead of the first few.
    #[arg(long)]
    full: bool,
    /// The context to estimate memory for (0: the one a session would choose: the largest
    /// that fits the executor's memory, at most the model's own).
    #[arg(long = "ctx", default_value_t = 0, value_parser = count(1 << 24))]
    n_ctx: usize,
    /// The executor whose memory the estimate is compared with: auto, cpu, webgpu or cuda.
    #[arg(long, default_value = "auto")]
    executor: String,
    /// MiB that the KV cache and scratch may take, in place of the executor's budget.
    #[arg(long = "memory-budget", value_parser = count(1 << 30))]
    memory_budget: Option<usize>,
}

#[derive(Args)]
struct BenchArgs {
    /// GGUF model files (one result block per model).
    #[arg(short, long, required = true, num_args = 1..)]
    model: Vec<PathBuf>,
    /// Executor: auto, cpu, webgpu or cuda.
    #[arg(long, default_value = "auto")]
    executor: String,
    /// Prompt tokens of the prefill test (0: skip); a comma list runs one test per value.
    #[arg(short = 'p', long, default_value = "512", value_delimiter = ',', num_args = 1.., value_parser = count(1 << 24))]
    n_prompt: Vec<usize>,
    /// Tokens of the decode test (0: skip); a comma list runs one test per value.
    #[arg(short = 'n', long, default_value = "128", value_delimiter = ',', num_args = 1.., value_parser = count(1 << 24))]
    n_gen: Vec<usize>,
    /// Tokens already in the KV cache before each test; a comma list (`-d 0,1024,4096`) runs
    /// every test at each depth.
    #[arg(short = 'd', long, default_value = "0", value_delimiter = ',', num_args = 1.., value_parser = count(1 << 24))]
    depth: Vec<usize>,
    /// Sequences evaluated together, as llama-batched-bench's `-npl`: N > 1 prefills N prompts
    /// in one step and decodes N sequences a token each per step, reporting all their tokens/s;
    /// a comma list runs every test at each count.
    #[arg(long, default_value = "1", value_delimiter = ',', num_args = 1.., value_parser = clap::value_parser!(u64).range(1..=4096).map(|v| v as usize))]
    parallel: Vec<usize>,
    /// Prompt tokens evaluated a step in the pp tests (0: the executor's chunk, as `generate`
    /// uses: CUDA 1024, the others 256), as llama-bench's `-ub`.
    #[arg(long, default_value_t = 0, value_parser = count(1 << 24))]
    ubatch: usize,
    /// Repetitions of each test (1 to 1000).
    #[arg(short = 'r', long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000).map(|v| v as usize))]
    repetitions: usize,
    /// Print JSON instead of a markdown table.
    #[arg(long)]
    json: bool,
    /// Memory bandwidth in GB/s for the decode floor, instead of measuring it with a large copy
    /// on the device (the WebGPU executor cannot measure it yet).
    #[arg(long, value_parser = positive_f64)]
    bandwidth: Option<f64>,
    /// MiB that the KV cache and scratch may take, in place of the executor's budget (WebGPU's
    /// default, 1024, holds no 16k context of an 8B model).
    #[arg(long = "memory-budget", value_parser = count(1 << 30))]
    memory_budget: Option<usize>,
}

#[derive(Args)]
struct SynthArgs {
    /// Architecture: llama, qwen2, qwen3 or gemma3.
    #[arg(long, default_value = "llama")]
    arch: String,
    /// Shape: tiny (64 hidden, 2 layers), small (256 hidden, 8 layers), 1b (Llama 3.2 1B:
    /// 2048 hidden, 16 layers, tied), 8b (Llama 3.1 8B: 4096 hidden, 32 layers).
    #[arg(long, default_value = "tiny")]
    shape: String,
    /// File type, with llama-quantize's per-tensor mix: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q8_0, Q2_K, Q3_K_M (Q3_K), Q4_K_S, Q4_K_M (Q4_K), Q5_K_S, Q5_K_M (Q5_K), Q6_K.
    #[arg(long = "type", default_value = "Q8_0")]
    dtype: String,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A GGUF whose tokenizer metadata is copied (a real model or a tokenizer-only file).
    #[arg(long)]
    donor: PathBuf,
    /// Blocks (layers), instead of the shape's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024).map(|v| v as usize))]
    layers: Option<usize>,
    /// The token embedding's type (F32, F16, BF16, Q8_0, Q4_K, ...), instead of the file type's.
    /// An F32 embedding of a large vocabulary makes a file of several GB that decodes at the
    /// speed of a smaller one (a decoded token reads one row of it).
    #[arg(long)]
    embd_type: Option<String>,
    /// Make only N distinct random rows per tensor and repeat them: an 8B file in seconds
    /// rather than minutes, for speed and load tests (same header and size).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1 << 20).map(|v| v as usize))]
    distinct_rows: Option<usize>,
    /// Write a tokenizer-only GGUF (the donor's tokenizer metadata, no tensors; a small donor
    /// for other machines) instead of a model.
    #[arg(long)]
    extract_tokenizer: bool,
    /// Output file.
    #[arg(short, long)]
    output: PathBuf,
}

/// A count flag: 0 to `max`. Counts are bounded here so that an absurd value is a clear error
/// before anything loads, not an allocation that overflows later.
fn count(max: u64) -> impl clap::builder::TypedValueParser<Value = usize> {
    clap::value_parser!(u64).range(0..=max).map(|v| v as usize)
}

/// `ID=BIAS`: a token id and a bias from -100 to 100.
fn logit_bias(s: &str) -> Result<(u32, f32), String> {
    let (id, bias) = s.split_once('=').ok_or("expected ID=BIAS, e.g. 13=-100")?;
    let id: u32 = id.trim().parse().map_err(|e| format!("token id {id:?}: {e}"))?;
    let bias: f32 = bias.trim().parse().map_err(|e| format!("bias {bias:?}: {e}"))?;
    if !(-100.0..=100.0).contains(&bias) {
        return Err(format!("bias {bias} is outside -100..100"));
    }
    Ok((id, bias))
}

/// A finite, positive number.
fn positive_f64(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not a finite positive number"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = pollster::block_on(async {
        match cli.command {
            Command::Generate(a) => commands::generate(a).await,
            Command::Chat(a) => commands::chat(a).await,
            Command::Tokenize(a) => commands::tokenize(a).await,
            Command::Info(a) => commands::info(a).await,
            Command::Synth(a) => commands::synth(a).await,
            Command::Bench(a) => commands::bench(a).await,
            #[cfg(feature = "serve")]
            Command::Serve(a) => commands::serve(a),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
