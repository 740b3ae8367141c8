import { ReasoningSplitter, promptOpensThinking } from './reasoning.js';
import { BadRequestError, asRequestError } from './errors.js';

// The public model object: the same on the main thread and through the worker proxy, built
// on a backend ({ executor, info, applyChatTemplate, stream, unload }).

let counter = 0;
const completionId = () => `chatcmpl-wick-${Date.now().toString(36)}${(counter++).toString(36)}`;

function timings(stats) {
  if (!stats) return undefined;
  const rate = (n, ms) => (ms > 0 ? (n * 1000) / ms : null);
  return {
    prompt_tokens_evaluated: stats.promptEvaluated,
    prefill_ms: stats.prefillMs,
    decode_ms: stats.decodeMs,
    prefill_tokens_per_s: rate(stats.promptEvaluated, stats.prefillMs),
    // The first token comes with the prefill; the rest are decode steps.
    decode_tokens_per_s: rate(Math.max(stats.completionTokens - 1, 0), stats.decodeMs),
    // With a constraint (response_format, json_schema, grammar, a forced tool call): the host
    // time its token masks and advancing took, in all and per generated token.
    ...(stats.constraintMs !== undefined
      ? { constraint_ms: stats.constraintMs, constraint_ms_per_token: stats.completionTokens > 0 ? stats.constraintMs / stats.completionTokens : null }
      : {}),
    // Tokens restored from the prompt cache (a conversation saved before a reload), if any.
    ...(stats.promptRestored !== undefined ? { prompt_tokens_restored: stats.promptRestored, restore_ms: stats.restoreMs } : {}),
  };
}

function usage(stats) {
  if (!stats) return undefined;
  return {
    prompt_tokens: stats.promptTokens,
    completion_tokens: stats.completionTokens,
    total_tokens: stats.promptTokens + stats.completionTokens,
  };
}

/** An async iterable that can also be awaited (to an async iterable), as OpenAI's SDK allows. */
function awaitableIterable(makeIterator) {
  const iterable = { [Symbol.asyncIterator]: makeIterator };
  return {
    [Symbol.asyncIterator]: makeIterator,
    then(resolve, reject) {
      return Promise.resolve(iterable).then(resolve, reject);
    },
  };
}

export class WickModel {
  /** @param backend the thread the model runs in */
  constructor(backend, source) {
    this._backend = backend;
    this.executor = backend.executor;
    this.info = backend.info;
    this.source = typeof source === 'string' ? source : source instanceof URL ? source.href : null;
    this.lastStats = null;
    const self = this;
    this.chat = {
      completions: {
        create(request) {
          return self._create(request);
        },
      },
    };
  }

  /** Render chat messages with the model's own chat template; `vars` are extra template
   *  variables (e.g. `{ enable_thinking: false }`); `tools`: OpenAI's tools list, which the
   *  template renders. */
  applyChatTemplate(messages, vars, tools) {
    return this._backend.applyChatTemplate(messages, vars, tools);
  }

  /**
   * Generate a continuation of `prompt`: an async iterator of text pieces. Its return value
   * (and `model.lastStats` afterwards) holds the timings.
   */
  async *generate(prompt, opts = {}) {
    const { signal, ...rest } = opts;
    const it = this._backend.stream(prompt, { addSpecial: true, ...rest }, signal);
    let r;
    while (!(r = await it.next()).done) {
      if (r.value.text) yield r.value.text;
    }
    this.lastStats = { ...r.value, ...timings(r.value) };
    return this.lastStats;
  }

  _create(request) {
    if (!request || !Array.isArray(request.messages)) {
      throw new BadRequestError('messages: chat.completions.create needs { messages: [{ role, content }, ...] }');
    }
    const {
      messages, stream, stream_options, signal, model: _model, n = 1, enable_thinking, chat_template_kwargs,
      tools, tool_choice, parallel_tool_calls, ...sampling
    } = request;
    if (tools != null && !Array.isArray(tools)) throw new BadRequestError('tools must be an array of { type: "function", function: { name, description, parameters } }');
    const hasTools = Array.isArray(tools) && tools.length > 0;
    if (!hasTools && tool_choice != null && tool_choice !== 'none' && tool_choice !== 'auto') {
      throw new BadRequestError("tool_choice asks for a call but there are no tools");
    }
    // Tools in play: rendered, parsed from the output, forced by a grammar when tool_choice
    // asks for a call. `none` renders none.
    const useTools = hasTools && tool_choice !== 'none';
    const parallel = parallel_tool_calls !== false;
    const vars = { ...(chat_template_kwargs || {}) };
    if (enable_thinking !== undefined) vars.enable_thinking = !!enable_thinking;
    if (!Number.isInteger(n) || n < 1 || n > 16) throw new BadRequestError('n must be an integer from 1 to 16');
    const includeUsage = !!(stream_options && stream_options.include_usage);
    const id = completionId();
    const created = Math.floor(Date.now() / 1000);
    const model = this.info?.name || this.source || 'wick';
    const base = { id, object: 'chat.completion.chunk', created, model };
    // The choices one after another (index 0, 1, ...), choice i sampled with seed + i.
    const chunks = async function* (self) {
      let grammar;
      if (useTools) {
        grammar = await self._backend.toolChoiceGrammar(tools, tool_choice ?? 'auto', parallel);
        const own = sampling.response_format || sampling.json_schema || sampling.grammar;
        // auto's lazy grammar (free text until a call starts) gives way to the caller's own.
        if (grammar && own && (tool_choice ?? 'auto') === 'auto') grammar = undefined;
        if (grammar && own) {
          throw new BadRequestError('tool_choice "required" or a function cannot be combined with response_format, json_schema or grammar');
        }
      }
      const prompt = await self._backend.applyChatTemplate(messages, vars, useTools ? tools : undefined);
      const total = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
      let stats = null;
      for (let index = 0; index < n; index++) {
        const seed = (sampling.seed ?? 42) + index;
        // The chat API keeps its conversations in the prompt cache (OPFS) when the load allows.
        const opts = { ...sampling, seed, addSpecial: false, promptCache: true };
        if (grammar) opts.grammar = grammar;
        if (useTools) opts.toolCalls = { parallel, idPrefix: `call_${id.slice(14)}_${index}_`, tools };
        const it = self._backend.stream(prompt, opts, signal);
        const chunk = (delta, finish_reason, extra, logprobs = null) => ({
          ...base,
          choices: [{ index, delta, finish_reason, logprobs }],
          ...extra,
        });
        // Logprob entries of tokens whose text is not out yet (partial UTF-8, a held-back stop
        // prefix) travel with the next chunk that has text.
        let pending = [];
        const takeLogprobs = () => {
          if (!sampling.logprobs) return null;
          const content = pending;
          pending = [];
          return { content };
        };
        // `<think>` blocks go to `reasoning_content`, the rest to `content`.
        const splitter = new ReasoningSplitter(promptOpensThinking(prompt));
        let first = true;
        const delta = ({ reasoning, content }) => {
          const d = first ? { role: 'assistant' } : {};
          if (reasoning) d.reasoning_content = reasoning;
          if (content) d.content = content;
          return d;
        };
        // A tool call's delta, as OpenAI streams it: index, id, type and name, then arguments.
        const callDelta = (d) => {
          const call = d.name !== undefined
            ? { index: d.index, id: d.id, type: 'function', function: { name: d.name, arguments: '' } }
            : { index: d.index, function: { arguments: d.arguments } };
          return first ? { role: 'assistant', tool_calls: [call] } : { tool_calls: [call] };
        };
        let r;
        while (!(r = await it.next()).done) {
          if (r.value.logprobs) pending.push(r.value.logprobs);
          // Without tools the text is all content; with them the parser says what is what.
          const parts = r.value.toolDeltas ?? (r.value.text ? [{ content: r.value.text }] : []);
          for (const part of parts) {
            if (part.content === undefined) {
              yield chunk(callDelta(part), null, undefined, takeLogprobs());
              first = false;
              continue;
            }
            const piece = splitter.push(part.content);
            if (!piece.reasoning && !piece.content) continue;
            yield chunk(delta(piece), null, undefined, takeLogprobs());
            first = false;
          }
        }
        const rest = splitter.flush();
        if (rest.reasoning || rest.content) {
          yield chunk(delta(rest), null, undefined, takeLogprobs());
          first = false;
        }
        stats = r.value;
        self.lastStats = { ...stats, ...timings(stats) };
        const u = usage(stats);
        total.prompt_tokens = u.prompt_tokens;
        total.completion_tokens += u.completion_tokens;
        total.total_tokens = total.prompt_tokens + total.completion_tokens;
        let finish = stats.finishReason === 'length' ? 'length' : stats.finishReason === 'abort' ? 'abort' : 'stop';
        // A call cut off is `length` (never half a call); calls made are `tool_calls`.
        if (finish !== 'abort' && stats.toolCallUnfinished) finish = 'length';
        else if (finish === 'stop' && stats.toolCalls > 0) finish = 'tool_calls';
        const last = index === n - 1 && !includeUsage;
        yield chunk(
          first ? { role: 'assistant', content: '' } : {},
          finish,
          last ? { usage: { ...total }, timings: timings(stats) } : undefined,
          pending.length ? takeLogprobs() : null,
        );
      }
      // OpenAI's stream_options.include_usage: one more chunk, no choices, the usage.
      if (includeUsage) yield { ...base, choices: [], usage: { ...total }, timings: timings(stats) };
    };
    // Errors before the first chunk that are the request's fault become BadRequestErrors
    // (status 400, OpenAI's error object); later ones pass as they are.
    const guarded = async function* (self) {
      let started = false;
      try {
        for await (const c of chunks(self)) {
          started = true;
          yield c;
        }
      } catch (e) {
        throw started ? e : asRequestError(e);
      }
    };
    if (stream) return awaitableIterable(() => guarded(this));
    return (async () => {
      const choices = [];
      let usageAll = null;
      let timingsAll = null;
      for await (const c of guarded(this)) {
        if (c.usage) {
          usageAll = c.usage;
          timingsAll = c.timings;
        }
        const ch = c.choices[0];
        if (!ch) continue;
        const choice = (choices[ch.index] ??= {
          index: ch.index,
          message: { role: 'assistant', content: '' },
          finish_reason: null,
          logprobs: sampling.logprobs ? { content: [] } : null,
        });
        choice.message.content += ch.delta.content || '';
        if (ch.delta.reasoning_content) {
          choice.message.reasoning_content = (choice.message.reasoning_content || '') + ch.delta.reasoning_content;
        }
        for (const tc of ch.delta.tool_calls || []) {
          const calls = (choice.message.tool_calls ??= []);
          const call = (calls[tc.index] ??= { id: tc.id, type: 'function', function: { name: tc.function.name, arguments: '' } });
          call.function.arguments += tc.function.arguments || '';
        }
        if (ch.logprobs) choice.logprobs.content.push(...ch.logprobs.content);
        if (ch.finish_reason) choice.finish_reason = ch.finish_reason;
      }
      // Only calls: content is null, as OpenAI sends it.
      for (const c of choices) if (c.message.tool_calls && c.message.content === '') c.message.content = null;
      return { id, object: 'chat.completion', created, model, choices, usage: usageAll, timings: timingsAll };
    })();
  }

  /** Free the model's memory (GPU buffers). The model cannot be used afterwards. */
  async unload() {
    await this._backend.unload();
  }
}
