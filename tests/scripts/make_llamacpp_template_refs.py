#!/usr/bin/env python3
"""Reference renders of llama.cpp's chat templates (models/templates/) for tests/chat_templates.rs.

Renders every `*.jinja` in llama.cpp's `models/templates/` with jinja2 set up exactly as
Hugging Face transformers sets it up (the environment of tests/scripts/make_chat_refs.py:
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, `raise_exception`,
`strftime_now` pinned to FIXED_TIME, json.dumps-based `tojson`; plus transformers'
`{% generation %}` tag), for a few conversations with and without tools. `tools` is passed as
transformers' `apply_chat_template` passes it: the list of tool dicts, or None when there are
none; `documents` is None.

Writes tests/data/llamacpp_template_refs.json: the template sources, bos/eos texts, the
conversations and the expected renders, so the Rust test needs neither llama.cpp nor Python.
A render jinja2 itself fails (`raise_exception`, or an error in the template) is recorded with
its error instead of an expected text; the test counts those, and checks that wick fails too
where the template raised (`TemplateError: ...`).

    python3 tests/scripts/make_llamacpp_template_refs.py --templates DIR [--out FILE]

DIR is llama.cpp's models/templates, e.g. from the llama-cpp-python sdist:
    tar xzf llama_cpp_python-0.3.36.tar.gz --wildcards '*/models/templates/*' -C /tmp/tpl
    DIR=/tmp/tpl/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates

Needs jinja2 (3.x).
"""

import argparse
import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# Same pinned time as make_chat_refs.py: 2024-02-29 13:05:09 UTC.
FIXED_TIME = 1709211909


def sorted_keys(x):
    """Dicts with their keys in sorted order, recursively.

    wick's serde_json keeps object keys sorted (no `preserve_order`), so a caller's tools reach
    the template with sorted keys; writing them sorted here keeps both sides the same input.
    """
    if isinstance(x, dict):
        return {k: sorted_keys(x[k]) for k in sorted(x)}
    if isinstance(x, list):
        return [sorted_keys(v) for v in x]
    return x


TOOLS = sorted_keys([
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    }},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web and return the top results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for"},
                "max_results": {"type": "integer", "description": "How many results"},
            },
            "required": ["query"],
        },
    }},
])

# Messages carry their keys in the order wick's MessageValue gives them: role, content, then
# tool_calls, tool_call_id, name when present. A tool call is {id, type, function: {name,
# arguments}} with `arguments` a mapping (wick parses an OpenAI JSON string into one).
CONVERSATIONS = {
    "chat": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi there! What is 2+2?"},
        {"role": "assistant", "content": "2+2 is 4."},
        {"role": "user", "content": "And \"3+3\"? Answer in 日本語 ✓"},
    ],
    "chat_no_system": [
        {"role": "user", "content": "Hi there! What is 2+2?"},
        {"role": "assistant", "content": "2+2 is 4."},
        {"role": "user", "content": "Thanks."},
    ],
    "tool_call": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        ]},
        {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call00001", "name": "get_weather"},
    ],
    "tool_call_answered": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        ]},
        {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call00001", "name": "get_weather"},
        {"role": "assistant", "content": "It is 21 degrees in Paris."},
    ],
}

# (conversation, with tools, add_generation_prompt)
CASES = [
    ("chat", False, False),
    ("chat", False, True),
    ("chat", True, True),
    ("chat_no_system", False, True),
    ("tool_call", True, True),
    ("tool_call_answered", True, False),
]

# bos/eos texts by family (a substring of the file name, first match wins); they only need to
# be the same on both sides, but plausible ones exercise the templates' usual paths.
SPECIAL_TOKENS = [
    ("Llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("Hermes", "<|begin_of_text|>", "<|im_end|>"),
    ("functionary", "<|begin_of_text|>", "<|eot_id|>"),
    ("Qwen", "", "<|im_end|>"),
    ("QwQ", "", "<|im_end|>"),
    ("MiMo", "", "<|im_end|>"),
    ("gemma", "<bos>", "<eos>"),
    ("DeepSeek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("GLM", "", "<|endoftext|>"),
    ("Phi-3", "<s>", "<|end|>"),
    ("Cohere", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("gpt-oss", "<|startoftext|>", "<|return|>"),
    ("granite", "", "<|end_of_text|>"),
    ("LFM", "<|startoftext|>", "<|im_end|>"),
]


def special_tokens(name):
    for key, bos, eos in SPECIAL_TOKENS:
        if key in name:
            return bos, eos
    return "<s>", "</s>"


class AssistantTracker(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` tag (chat_template_utils.py): it
    marks the assistant's tokens for `return_assistant_tokens_mask` and renders its body as is.
    """

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def transformers_env():
    """jinja2 environment set up as transformers' _compile_jinja_template does."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    fixed = datetime.datetime.fromtimestamp(FIXED_TIME, datetime.timezone.utc)

    def strftime_now(format):
        return fixed.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--templates", required=True, help="llama.cpp's models/templates directory")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "llamacpp_template_refs.json"))
    args = ap.parse_args()
    env = transformers_env()

    out = {"generator": "tests/scripts/make_llamacpp_template_refs.py",
           "jinja2_version": jinja2.__version__,
           "fixed_time": FIXED_TIME,
           "tools": TOOLS,
           "conversations": CONVERSATIONS,
           "templates": []}
    renders = failed = 0
    for fname in sorted(os.listdir(args.templates)):
        if not fname.endswith(".jinja"):
            continue
        with open(os.path.join(args.templates, fname), encoding="utf-8") as f:
            src = f.read()
        name = fname[:-len(".jinja")]
        bos, eos = special_tokens(name)
        entry = {"name": name, "source": src, "bos_token": bos, "eos_token": eos, "cases": []}
        try:
            tmpl = env.from_string(src)
        except jinja2.exceptions.TemplateError as e:
            entry["compile_error"] = f"{type(e).__name__}: {e}"
            out["templates"].append(entry)
            failed += len(CASES)
            continue
        for conv, with_tools, agp in CASES:
            case = {"conversation": conv, "tools": with_tools, "add_generation_prompt": agp}
            try:
                case["expected"] = tmpl.render(
                    messages=CONVERSATIONS[conv], tools=TOOLS if with_tools else None,
                    documents=None, add_generation_prompt=agp, bos_token=bos, eos_token=eos)
                renders += 1
            except Exception as e:  # noqa: BLE001 - any jinja2 failure is recorded as such
                case["error"] = f"{type(e).__name__}: {e}"
                failed += 1
            entry["cases"].append(case)
        out["templates"].append(entry)

    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {args.out}: {len(out['templates'])} templates, {renders} renders, "
          f"{failed} that jinja2 cannot render")


if __name__ == "__main__":
    main()
