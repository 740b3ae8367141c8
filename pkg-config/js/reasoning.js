// Splits a model's output into reasoning (`<think>...</think>`, as Qwen 3, DeepSeek R1 and
// QwQ write it) and the answer, piece by piece as it streams: a tag cut across two pieces is
// held back until it is whole.

const OPEN = '<think>';
const CLOSE = '</think>';

/** The longest suffix of `text` that is a proper prefix of `tag`. */
function partialTail(text, tag) {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

export class ReasoningSplitter {
  /**
   * @param {boolean} inside the prompt already opened a `<think>` block (the template ends
   *   its generation prompt with one), so the output starts as reasoning.
   */
  constructor(inside = false) {
    // 'start': nothing but whitespace seen yet (a `<think>` may still open);
    // 'think': inside the block; 'answer': after it, or output without one.
    this.state = inside ? 'think' : 'start';
    this.held = '';
  }

  /** Feed a piece of output; returns `{ reasoning, content }` (either may be empty). */
  push(piece) {
    let text = this.held + piece;
    this.held = '';
    let reasoning = '';
    let content = '';
    for (;;) {
      if (this.state === 'start') {
        const trimmed = text.replace(/^\s+/, '');
        if (trimmed.startsWith(OPEN)) {
          text = trimmed.slice(OPEN.length);
          this.state = 'think';
          continue;
        }
        if (trimmed.length < OPEN.length && OPEN.startsWith(trimmed)) {
          this.held = text;
          break;
        }
        this.state = 'answer';
        continue;
      }
      if (this.state === 'think') {
        const end = text.indexOf(CLOSE);
        if (end >= 0) {
          reasoning += text.slice(0, end);
          text = text.slice(end + CLOSE.length).replace(/^\s+/, '');
          this.state = 'answer';
          continue;
        }
        const keep = partialTail(text, CLOSE);
        reasoning += text.slice(0, text.length - keep);
        this.held = text.slice(text.length - keep);
        break;
      }
      content += text;
      break;
    }
    return { reasoning, content };
  }

  /** The end of the output: whatever was held back, where it belongs. */
  flush() {
    const text = this.held;
    this.held = '';
    if (this.state === 'think') return { reasoning: text, content: '' };
    return { reasoning: '', content: text };
  }
}

/** Whether a rendered prompt ends inside an opened `<think>` block. */
export function promptOpensThinking(prompt) {
  const open = prompt.lastIndexOf(OPEN);
  return open >= 0 && prompt.indexOf(CLOSE, open) < 0 && prompt.slice(open + OPEN.length).trim() === '';
}
