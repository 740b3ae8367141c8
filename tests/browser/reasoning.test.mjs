// The reasoning splitter of the npm package (pkg-config/js/reasoning.js), under node:test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ReasoningSplitter, promptOpensThinking } from '../../pkg-config/js/reasoning.js';

/** Feed `pieces`; the concatenated reasoning and content. */
function split(pieces, inside = false) {
  const s = new ReasoningSplitter(inside);
  let reasoning = '';
  let content = '';
  for (const p of [...pieces.map((x) => s.push(x)), s.flush()]) {
    reasoning += p.reasoning;
    content += p.content;
  }
  return { reasoning, content };
}

test('a think block goes to reasoning, the rest to content', () => {
  assert.deepEqual(split(['<think>plan it</think>\n\nThe answer.']), { reasoning: 'plan it', content: 'The answer.' });
});

test('tags cut across pieces anywhere', () => {
  const whole = '  <think>a < b and c</thi</think>Done </think> x';
  for (let i = 0; i <= whole.length; i++) {
    for (let j = i; j <= whole.length; j++) {
      const got = split([whole.slice(0, i), whole.slice(i, j), whole.slice(j)]);
      assert.deepEqual(got, { reasoning: 'a < b and c</thi', content: 'Done </think> x' }, `cut at ${i}, ${j}`);
    }
  }
});

test('no think block: everything is content, a late <think> included', () => {
  assert.deepEqual(split(['Hello ', '<think>x</think>']), { reasoning: '', content: 'Hello <think>x</think>' });
  assert.deepEqual(split(['<thi', 'nking is fun']), { reasoning: '', content: '<thinking is fun' });
});

test('a prompt that opened the block: output starts as reasoning; unfinished reasoning stays reasoning', () => {
  assert.deepEqual(split(['step 1', '</think>ok'], true), { reasoning: 'step 1', content: 'ok' });
  assert.deepEqual(split(['<think>still going'], false), { reasoning: 'still going', content: '' });
  assert.equal(promptOpensThinking('<|im_start|>assistant\n<think>\n'), true);
  assert.equal(promptOpensThinking('<|im_start|>assistant\n<think>\n\n</think>\n\n'), false);
  assert.equal(promptOpensThinking('<|im_start|>assistant\n'), false);
});
