#!/usr/bin/env python3
"""Reference renders of chat templates for tests/chat_templates.rs.

Reads `tokenizer.chat_template` from the GGUF files with the `gguf` package and renders
conversations with jinja2 exactly as Hugging Face transformers does
(transformers/utils/chat_template_utils.py: ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, loopcontrols, the `raise_exception` and `strftime_now`
globals and the json.dumps-based `tojson` filter; `tools`/`documents` passed as None).
`strftime_now` is pinned to FIXED_TIME so the references are reproducible (wick's test pins
the same time with ChatTemplate::set_fixed_time).

Writes tests/data/chat_refs.json (template sources + expected strings), so the Rust test needs
no model file.

    python3 tests/scripts/make_chat_refs.py [--models DIR] [--out FILE]

Needs: gguf (0.19), jinja2 (3.x). If missing:
    pip install --target /tmp/pyc gguf==0.19.0 numpy jinja2 && PYTHONPATH=/tmp/pyc python3 ...
"""

import argparse
import datetime
import json
import os

import gguf
import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# 2024-02-29 13:05:09 UTC: a leap day, afternoon, so %d/%b/%I/%p all have something to show.
FIXED_TIME = 1709211909

# Gemma 3's published chat template (google/gemma-3-270m-it, tokenizer_config.json). The
# gemma-3-270m GGUF in models/ is the base model and carries no tokenizer.chat_template, so
# the instruct model's template is written here. Used only when the GGUF has none.
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

# Llama 3 (Meta-Llama-3-8B-Instruct) style: one line, `| trim` inside a concatenation.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Llama 3.2 style (tools part left out): strftime_now for the date, `is defined`, reassigning
# `messages`, and `{{-`/`{%-` whitespace control over a multi-line template.
LLAMA32_TEMPLATE = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Qwen2-Instruct (ChatML) with its default system prompt.
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen2.5 style (tool branch kept: `tools` is None so it is skipped, as in transformers).
QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Not a real model's: exercises trim_blocks/lstrip_blocks on plain (no `-`) tags, Python
# string and dict methods (pycompat), namespace(), tojson with and without indent, loop.last.
PYCOMPAT_TEMPLATE = """{% set ns = namespace(n=0, words=0) %}
{% for message in messages %}
    {% set ns.n = ns.n + 1 %}
    {% set ns.words = ns.words + message.content.split() | length %}
    {% if message.content.strip().startswith('Hi') %}
[greeting] {{ message.content.strip().upper() }}
    {% elif message.role.endswith('tem') %}
[{{ message['role'] | upper }}] {{ message.content.replace('helpful', 'HELPFUL') }}
    {% else %}
[{{ message['role'] }}] {{ message.content.split(' ') | join('|') }}
    {% endif %}
    {{ message | tojson }}
    {% for k, v in message.items() %}{{ k }}={{ v | length }}{% if not loop.last %},{% endif %}{% endfor %}

{% endfor %}
count={{ ns.n }} words={{ ns.words }} last={{ messages[-1] | tojson(indent=2) }}
{{ messages[0].get('name', 'anon') }} {{ messages | map(attribute='role') | list | tojson }}
{% if add_generation_prompt %}
<assistant>
{% endif %}
"""

CONVERSATIONS = {
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi there! What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "user", "content": "Hello, who are you?"},
        {"role": "assistant", "content": "I am a language model."},
        {"role": "user", "content": "Tell me a joke about \"quotes\" and back\\slashes."},
    ],
    "system_multi_turn_unicode": [
        {"role": "system", "content": "  Answer briefly; héllo — 日本語 ✓\n"},
        {"role": "user", "content": "  Hi! Spaces around\tme  \n"},
        {"role": "assistant", "content": "Sure.\n\nTwo\nlines <b>&</b>"},
        {"role": "user", "content": "Emoji 🦀 and a tab\there."},
    ],
}


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
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def gguf_template(path):
    reader = gguf.GGUFReader(path)
    field = reader.fields.get("tokenizer.chat_template")
    tokens = reader.fields["tokenizer.ggml.tokens"]

    def tok(key):
        return tokens.contents(reader.fields[key].contents())

    bos, eos = tok("tokenizer.ggml.bos_token_id"), tok("tokenizer.ggml.eos_token_id")
    return (field.contents() if field is not None else None), bos, eos


def render_cases(env, source, bos, eos, conv_names):
    tmpl = env.from_string(source)
    cases = []
    for name in conv_names:
        for agp in (False, True):
            msgs = CONVERSATIONS[name]
            out = tmpl.render(messages=msgs, tools=None, documents=None,
                              add_generation_prompt=agp, bos_token=bos, eos_token=eos)
            cases.append({"conversation": name, "messages": msgs,
                          "add_generation_prompt": agp, "expected": out})
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "chat_refs.json"))
    args = ap.parse_args()
    env = transformers_env()
    all_convs = list(CONVERSATIONS)

    templates = []
    smol_src, smol_bos, smol_eos = gguf_template(
        os.path.join(args.models, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert smol_src, "SmolLM2 GGUF should carry a chat template"
    templates.append(("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf tokenizer.chat_template",
                      smol_src, smol_bos, smol_eos))

    gemma_src, gemma_bos, gemma_eos = gguf_template(
        os.path.join(args.models, "gemma-3-270m-q4_k_m.gguf"))
    origin = "gemma-3-270m-q4_k_m.gguf tokenizer.chat_template"
    if not gemma_src:
        gemma_src = GEMMA3_TEMPLATE
        origin = ("google/gemma-3-270m-it tokenizer_config.json (gemma-3-270m-q4_k_m.gguf has no "
                  "tokenizer.chat_template); bos/eos from the GGUF")
    templates.append(("gemma3", origin, gemma_src, gemma_bos, gemma_eos))
    templates.append(("llama3", "Llama 3 Instruct style (written for wick's tests)",
                      LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"))
    templates.append(("llama3.2", "Llama 3.2 style without tools (written for wick's tests)",
                      LLAMA32_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"))
    templates.append(("qwen2", "Qwen2-Instruct ChatML (written for wick's tests)",
                      QWEN2_TEMPLATE, "<|endoftext|>", "<|im_end|>"))
    templates.append(("qwen2.5", "Qwen2.5 style ChatML with tool branch (written for wick's tests)",
                      QWEN25_TEMPLATE, "<|endoftext|>", "<|im_end|>"))
    templates.append(("pycompat", "exercises Python methods, tojson, trim/lstrip_blocks",
                      PYCOMPAT_TEMPLATE, "<s>", "</s>"))

    out = {"generator": "tests/scripts/make_chat_refs.py",
           "jinja2_version": jinja2.__version__,
           "fixed_time": FIXED_TIME,
           "templates": []}
    for name, origin, src, bos, eos in templates:
        out["templates"].append({"name": name, "origin": origin, "source": src,
                                 "bos_token": bos, "eos_token": eos,
                                 "cases": render_cases(env, src, bos, eos, all_convs)})

    # Gemma 3 rejects two user turns in a row through raise_exception.
    bad = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    try:
        env.from_string(gemma_src).render(messages=bad, add_generation_prompt=True,
                                          bos_token=gemma_bos, eos_token=gemma_eos)
        raise AssertionError("gemma3 template should have raised")
    except jinja2.exceptions.TemplateError as e:
        out["errors"] = [{"template": "gemma3", "messages": bad, "add_generation_prompt": True,
                          "message_contains": str(e)}]

    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(out['templates'])} templates")


if __name__ == "__main__":
    main()
