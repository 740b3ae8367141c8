// Types of wick-llm's public API.

/** Where a model comes from: a URL (string or URL), a File or Blob, or a stream of bytes. */
export type ModelSource = string | URL | Blob | File | ReadableStream<Uint8Array>;

/** A progress report while a model arrives. */
export interface LoadProgress {
  /** `"download"`: bytes going into the OPFS cache; `"load"`: weights going to the executor. */
  phase: 'download' | 'load';
  /** Bytes done. */
  loaded: number;
  /** Total bytes, when known. */
  total?: number;
  /** Tensors uploaded (phase `"load"` only). */
  tensorsDone?: number;
  /** Number of tensors (phase `"load"` only). */
  tensorsTotal?: number;
  /** Bytes of wick's wasm memory (phase `"load"` only). It only grows, so the last report is
   *  the load's peak; the weights themselves go to the GPU without passing through it whole. */
  heapBytes?: number;
}

export interface LoadOptions {
  /** Called as the model downloads and loads. */
  onProgress?: (p: LoadProgress) => void;
  /** Aborts the load (the promise rejects with the signal's reason, an `AbortError`). */
  signal?: AbortSignal;
  /** Run in a Web Worker (default: true where workers exist). */
  worker?: boolean;
  /** Keep a URL's file in the Origin Private File System and load it from there next time (default: true). */
  cache?: boolean;
  /** `"auto"` (default: WebGPU, else the CPU), `"webgpu"` or `"cpu"`. */
  executor?: 'auto' | 'webgpu' | 'cpu';
  /** A ReadableStream's length in bytes, for progress reports. */
  size?: number;
  /** Bytes the KV cache and scratch may take (default: on WebGPU 1 GiB, which the adapter's
   *  limits cannot tell; on the CPU what the 4 GiB wasm memory can still grow to, less a
   *  margin). The default context is the largest that fits, at most the model's own. */
  memoryBudget?: number;
  /** Where to fetch `wick_bg.wasm` from (default: next to the package's files). Setting it
   *  takes the one-thread build. */
  wasmUrl?: string | URL;
  /** Threads for the CPU executor (default: every core, at most 8). Above 1 on a cross-origin
   *  isolated page (COOP `same-origin` and COEP `require-corp` headers) the threaded build
   *  runs, on Web Workers sharing its memory; elsewhere, or with 1, the one-thread build. The
   *  first load (or `Wick.init`) in a page or worker decides for it. `info.threads` says what
   *  the model got. */
  threads?: number;
  /** Which wasm SIMD build runs the CPU executor: `relaxed` (relaxed SIMD's integer dot
   *  products) or `simd128` (default: `relaxed` where the engine validates it, falling back to
   *  `simd128` if its file does not load). Decided with `threads` by the first load.
   *  `info.simd` says what ran. */
  simd?: 'relaxed' | 'simd128';
  /** Where the worker script is (default: the package's `worker.js`). */
  workerUrl?: string | URL;
  /** Replaces the global `fetch` for a URL's download into the cache (main thread only: a
   *  function cannot be sent to the worker, so it needs `worker: false`). */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
  /** Keep chat conversations' KV caches in OPFS and restore one after a reload, so the next
   *  turn prefills only its new tokens (default: the `cache` option's value). */
  promptCache?: boolean;
  /** Most bytes the saved conversations may take in OPFS; the least recently used go first
   *  (default 1 GiB). */
  promptCacheMaxBytes?: number;
}

/** Sampling options (OpenAI's names; camelCase spellings are accepted too). */
export interface SamplingOptions {
  /** Most tokens to generate (default 256). */
  max_tokens?: number;
  maxTokens?: number;
  /** Softmax temperature; 0 is greedy (default 0.8). */
  temperature?: number;
  top_p?: number;
  topP?: number;
  top_k?: number;
  topK?: number;
  min_p?: number;
  minP?: number;
  repeat_penalty?: number;
  repeatPenalty?: number;
  presence_penalty?: number;
  presencePenalty?: number;
  frequency_penalty?: number;
  frequencyPenalty?: number;
  /** Seed of the sampler (default 42). */
  seed?: number;
  /** Generation stops before any of these strings. */
  stop?: string | string[];
  /** Context size in tokens (default: the largest that fits the memory budget, at most the
   *  model's own; `info.nCtx`). A context that does not fit is an error. A different size
   *  than the previous call's starts a new KV cache. */
  nCtx?: number;
  /** Structured output (OpenAI's): any JSON object, or JSON valid under a schema. Enforced
   *  token by token; an invalid schema rejects the call before any token. */
  response_format?: ResponseFormat;
  /** Constrain the output to JSON valid under this JSON Schema (wick's shorthand). */
  json_schema?: JsonSchema;
  /**
   * Constrain the output to the language of this grammar: llama.cpp's GBNF (`root ::= ...`)
   * or Lark (llguidance's dialect, `start: ...`), told apart by its rules.
   */
  grammar?: string;
  /** Added to these tokens' logits before sampling (OpenAI's): `{"13": -100}` bans token 13.
   *  Biases from -100 to 100. */
  logit_bias?: Record<string, number>;
  /** Keep generating past end-of-generation tokens, to `max_tokens`. */
  ignore_eos?: boolean;
  /**
   * When the context is full: `true` keeps the prompt and drops the older half of the
   * generated text (whole KV blocks), re-evaluating the rest, and generation goes on; a
   * number keeps that many tokens from the start instead. At most half the context is kept.
   * Without it a full context ends the generation (`finish_reason: "length"`).
   */
  context_shift?: boolean | number;
}

/** A JSON Schema (draft 2020-12 keywords; `$ref`s inside the schema only). */
export type JsonSchema = { [key: string]: unknown } | boolean;

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; schema?: JsonSchema; strict?: boolean | null; description?: string } };

/** A token's log-probability (natural log of the model's probability, before sampling). */
export interface TokenLogprob {
  token: string;
  logprob: number;
  /** The token's UTF-8 bytes (a token may hold part of a character). */
  bytes: number[];
}

export interface ChatCompletionTokenLogprob extends TokenLogprob {
  /** The most likely tokens at this position, most likely first. */
  top_logprobs: TokenLogprob[];
}

export interface ChoiceLogprobs {
  content: ChatCompletionTokenLogprob[];
}

export interface GenerateOptions extends SamplingOptions {
  /** Stops generation; the iterator then throws the signal's reason (an `AbortError`). */
  signal?: AbortSignal;
  /** Add BOS/EOS as the vocabulary asks (default true). */
  addSpecial?: boolean;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  /** May be null on an assistant turn that only calls tools. */
  content: string | null;
  /** An assistant turn's calls (as a chat completion returned them). */
  tool_calls?: ToolCall[];
  /** A tool result (`role: 'tool'`): the id of the call it answers. */
  tool_call_id?: string;
  /** A tool result: the function's name. */
  name?: string;
}

/** A function the model may call (OpenAI's `tools` entry). */
export interface ChatCompletionTool {
  type: 'function';
  function: {
    /** 1 to 64 letters, digits, `_`, `-` or `.`. */
    name: string;
    description?: string;
    /** A JSON schema of the arguments object. */
    parameters?: JsonSchema;
  };
}

/** `auto` (the model decides; once it starts a call, a lazy grammar makes the call parse and
 *  match its schema), `none` (no tools rendered), `required` (a call is forced by a grammar),
 *  or a named function (that function is forced). */
export type ToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };

/** A call the model made. */
export interface ToolCall {
  id: string;
  type: 'function';
  /** `arguments`: the JSON text of an object. */
  function: { name: string; arguments: string };
}

/** A streamed piece of a call: the first has `id`, `type` and the name (arguments `""`), the
 *  rest fragments of the arguments' JSON text. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

export interface ChatCompletionRequestBase extends SamplingOptions {
  messages: ChatMessage[];
  /** Ignored (the loaded model answers); accepted for OpenAI compatibility. */
  model?: string;
  /** Choices to generate (1 to 16), one after another; choice i samples with `seed + i`. */
  n?: number;
  /** OpenAI's: with `include_usage`, a stream ends with a chunk of no choices carrying the
   *  usage of all choices (otherwise the usage rides on the last choice's last chunk). */
  stream_options?: { include_usage?: boolean };
  signal?: AbortSignal;
  /** Passed to the chat template (Qwen 3 and others): false asks the model not to think. */
  enable_thinking?: boolean;
  /** Extra chat-template variables (as transformers' and llama-server's). */
  chat_template_kwargs?: Record<string, unknown>;
  /** Report each generated token's log-probability in `choices[0].logprobs`. */
  logprobs?: boolean;
  /** With `logprobs`: this many most likely alternatives per token (0 to 20). */
  top_logprobs?: number;
  /** Functions the model may call: rendered through the model's chat template, and the calls
   *  parsed from its output in the template family's syntax (Llama 3, Hermes/Qwen,
   *  Qwen3-Coder, Mistral, or JSON) into `tool_calls`. */
  tools?: ChatCompletionTool[];
  /** Default `auto`. */
  tool_choice?: ToolChoice;
  /** false: keep only the first call (default true). */
  parallel_tool_calls?: boolean;
}

export interface ChatCompletionRequestStreaming extends ChatCompletionRequestBase {
  stream: true;
}

export interface ChatCompletionRequestNonStreaming extends ChatCompletionRequestBase {
  stream?: false;
}

/** `tool_calls`: the model called tools; `length` also when a call was cut off (it is then
 *  not reported). */
export type FinishReason = 'stop' | 'length' | 'abort' | 'tool_calls';

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** wick's speed report (an extension of the OpenAI shape). */
export interface Timings {
  prompt_tokens_evaluated: number;
  prefill_ms: number;
  decode_ms: number;
  prefill_tokens_per_s: number | null;
  decode_tokens_per_s: number | null;
  /** Prompt tokens restored from the prompt cache instead of evaluated (first turn after a load). */
  prompt_tokens_restored?: number;
  restore_ms?: number;
  /** With a constraint (structured output, a grammar, a forced tool call): host time spent on
   *  its token masks and on advancing it past each token, in all and per generated token. On a
   *  GPU the masks are computed while the device runs each step, so most of it is hidden. */
  constraint_ms?: number;
  constraint_ms_per_token?: number | null;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    /** `<think>` blocks arrive as `reasoning_content`, the answer as `content`. */
    delta: { role?: 'assistant'; content?: string; reasoning_content?: string; tool_calls?: ToolCallDelta[] };
    finish_reason: FinishReason | null;
    /** With `logprobs: true`: the entries of this chunk's tokens. */
    logprobs: ChoiceLogprobs | null;
  }>;
  /** On the last chunk only (all choices' tokens). */
  usage?: CompletionUsage;
  /** On the last chunk only. */
  timings?: Timings;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    /** `reasoning_content`: the model's `<think>` block, when it wrote one. */
    /** `content` is null when the model only called tools. */
    message: { role: 'assistant'; content: string | null; reasoning_content?: string; tool_calls?: ToolCall[] };
    finish_reason: FinishReason;
    /** With `logprobs: true`: one entry per generated token. */
    logprobs: ChoiceLogprobs | null;
  }>;
  usage: CompletionUsage;
  timings: Timings;
}

/** A stream of chunks: iterate it directly, or `await` it first (as with OpenAI's SDK). */
export interface ChatCompletionStream extends AsyncIterable<ChatCompletionChunk>, PromiseLike<AsyncIterable<ChatCompletionChunk>> {}

/** What a generation measured. */
export interface GenerationStats extends Timings {
  promptTokens: number;
  promptEvaluated: number;
  completionTokens: number;
  prefillMs: number;
  decodeMs: number;
  /** With a constraint: host time its masks and advancing took (`constraint_ms`). */
  constraintMs?: number;
  finishReason: FinishReason;
  /** Tokens the conversation's KV cache holds after this generation (context fill). */
  contextTokens?: number;
  /** The context's size in tokens. */
  nCtx?: number;
  /** Bytes of wick's wasm memory after this generation (it only grows: the peak so far). */
  heapBytes?: number;
  /** Prompt tokens restored from a saved conversation (the prompt cache) before this
   *  generation, when one was: they were not evaluated. */
  promptRestored?: number;
  /** Milliseconds the restore took (not counted in `prefillMs`). */
  restoreMs?: number;
}

export interface ModelInfo {
  name: string | null;
  executor: 'webgpu' | 'cpu';
  arch: string;
  nLayer: number;
  nEmbd: number;
  nCtxTrain: number;
  nVocab: number;
  hasChatTemplate: boolean;
  /** Threads the CPU executor runs on: 1, or with the threaded build the model's thread plus
   *  its workers. */
  threads: number;
  /** The wasm SIMD the CPU executor's kernels use: `relaxed` (the build with relaxed SIMD's
   *  integer dot product, where the engine has it) or `simd128`. */
  simd: 'relaxed' | 'simd128';
  /** The context a generation gets by default: the largest that fits the memory budget. */
  nCtx?: number;
  /** The estimate at `nCtx`, in bytes. */
  memory?: MemoryEstimate;
}

/** Bytes a model takes, by part (the Rust estimator's figures). */
export interface MemoryEstimate {
  weights: number;
  kv: number;
  scratch: number;
  total: number;
}

export interface InspectOptions {
  /** The context to estimate (default: the one a load would choose, the largest that fits). */
  nCtx?: number;
  /** The executor to fit (default `"auto"`: WebGPU on a hardware adapter, else the CPU). */
  executor?: 'auto' | 'webgpu' | 'cpu';
  /** As the load option: bytes the KV cache and scratch may take. */
  memoryBudget?: number;
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
  wasmUrl?: string | URL;
  signal?: AbortSignal;
}

/** What `Wick.inspect` tells from a model's header. */
export interface InspectReport {
  architecture: string;
  name: string | null;
  /** Elements of all tensors. */
  parameters: number;
  /** The weights' bytes. */
  size: number;
  /** The model's own context (`context_length`). */
  contextLength: number;
  executor: 'webgpu' | 'cpu';
  /** The context estimated: the one asked for, or the one a load would choose. */
  nCtx: number;
  memory: MemoryEstimate;
  /** Whether `memory` fits `budget` (and a KV layer the largest buffer). */
  fits: boolean;
  /** Why not, with the figures; null when it fits. */
  problem: string | null;
  /** At the model's own context. */
  full: { nCtx: number; memory: MemoryEstimate; fits: boolean };
  budget: { bytes: number; source: string; coversWeights: boolean; maxBuffer: number | null };
  /** Bytes fetched (the header), and the file's size. */
  bytesRead: number;
  fileSize: number;
  headerBytes: number;
}

/** A model's memory at a context and whether it fits this browser, from its header alone
 *  (HTTP Range requests; a few MB for big vocabularies). */
export declare function inspect(url: string | URL, opts?: InspectOptions): Promise<InspectReport>;

export declare class WickModel {
  private constructor();
  /** `"webgpu"`, or `"cpu"` when the browser has no WebGPU adapter (much slower). */
  readonly executor: 'webgpu' | 'cpu';
  readonly info: ModelInfo;
  /** The URL it was loaded from, if any. */
  readonly source: string | null;
  /** The stats of the last finished generation. */
  lastStats: GenerationStats | null;
  readonly chat: {
    completions: {
      create(request: ChatCompletionRequestStreaming): ChatCompletionStream;
      create(request: ChatCompletionRequestNonStreaming): Promise<ChatCompletion>;
    };
  };
  /** Render messages with the model's chat template (the assistant's turn opened); `vars`:
   *  extra template variables, e.g. `{ enable_thinking: false }`; `tools`: the functions the
   *  template presents to the model. */
  applyChatTemplate(messages: ChatMessage[], vars?: Record<string, unknown>, tools?: ChatCompletionTool[]): Promise<string>;
  /** Text pieces of a continuation of `prompt`; returns the stats when done. */
  generate(prompt: string, opts?: GenerateOptions): AsyncGenerator<string, GenerationStats, undefined>;
  /** Free the model's GPU (or CPU) memory; the model cannot be used afterwards. */
  unload(): Promise<void>;
}

/** A cached model in OPFS. */
export interface CachedModel {
  url: string;
  size: number | null;
  /** False for a partial download, resumed on the next load. */
  complete: boolean;
  savedAt: string | null;
}

/**
 * A chat request's fault (OpenAI's 400): bad options, an invalid schema or grammar, a template
 * that rejects the messages, a prompt longer than the context (`code: 'context_length_exceeded'`).
 * Thrown (or the stream's iterator throws) before any chunk.
 */
export declare class BadRequestError extends Error {
  name: 'BadRequestError';
  status: 400;
  error: { message: string; type: 'invalid_request_error'; param: string | null; code: string | null };
}

/** Thrown when the storage quota cannot hold a model being cached. */
export declare class WickStorageError extends Error {
  name: 'WickStorageError';
}

export declare function listCachedModels(): Promise<CachedModel[]>;
/** Delete the cached copy (complete or partial) of a URL; true if there was one. */
export declare function deleteCachedModel(url: string | URL): Promise<boolean>;
export declare function clearCache(): Promise<void>;
export declare function cacheAvailable(): boolean;
/** A saved conversation of the prompt cache. */
export interface SavedPrompt {
  /** The model's digest (weights, shapes, hyperparameters). */
  digest: string;
  tokens: number;
  bytes: number;
  usedAt: number;
}
export declare function listPromptCaches(): Promise<SavedPrompt[]>;
/** Delete every saved conversation of the prompt cache. */
export declare function clearPromptCache(): Promise<void>;
export declare function hasWebGPU(): boolean;

export declare const Wick: {
  load(source: ModelSource, opts?: LoadOptions): Promise<WickModel>;
  init(wasmUrl?: string | URL, threads?: number): Promise<void>;
  inspect: typeof inspect;
  hasWebGPU: typeof hasWebGPU;
  listCachedModels: typeof listCachedModels;
  deleteCachedModel: typeof deleteCachedModel;
  clearCache: typeof clearCache;
  listPromptCaches: typeof listPromptCaches;
  clearPromptCache: typeof clearPromptCache;
};

export default Wick;
