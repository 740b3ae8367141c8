// The chat API's request errors (pkg-config/js/errors.js), under node:test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BadRequestError, asRequestError } from '../../pkg-config/js/errors.js';

test("the request's faults become 400s with OpenAI's error object", () => {
  for (const msg of ['constraint: bad schema', "option 'temperature' must be a finite number", 'invalid argument: x', 'chat template: raise_exception: roles']) {
    const e = asRequestError(new Error(msg));
    assert.ok(e instanceof BadRequestError, msg);
    assert.equal(e.status, 400);
    assert.deepEqual(e.error, { message: msg, type: 'invalid_request_error', param: null, code: null });
  }
  const ctx = asRequestError(new Error('context overflow: 5000 tokens needed but the context holds 4096'));
  assert.equal(ctx.error.code, 'context_length_exceeded');
});

test('other errors pass unchanged', () => {
  const gpu = new Error('webgpu executor: the device was lost');
  assert.equal(asRequestError(gpu), gpu);
  const abort = new DOMException('stopped', 'AbortError');
  assert.equal(asRequestError(abort), abort);
});
