// The chat API's request errors, shaped like OpenAI's: a 400 status and an `error` object.

/** What in an error's message marks it as the request's fault (bad options, a bad schema or
 *  grammar, a template that rejects the messages, a prompt longer than the context). */
const REQUEST_FAULT =
  /^(constraint|invalid argument|chat template|context overflow|tokenizer):|^option '|^logit_bias|^'top_logprobs'|^messages|^template variables|^n must/;

export class BadRequestError extends Error {
  constructor(message, code = null) {
    super(message);
    this.name = 'BadRequestError';
    this.status = 400;
    this.error = { message, type: 'invalid_request_error', param: null, code };
  }
}

/** `e` as a BadRequestError when it is the request's fault, else `e` itself. */
export function asRequestError(e) {
  if (e instanceof BadRequestError || !(e instanceof Error) || e.name === 'AbortError') return e;
  if (!REQUEST_FAULT.test(e.message)) return e;
  const code = e.message.startsWith('context overflow') ? 'context_length_exceeded' : null;
  const out = new BadRequestError(e.message, code);
  out.cause = e;
  return out;
}
