#!/usr/bin/env python3
"""The official `openai` client against `wick serve` (run by tests/serve_api.rs):
chat and text completions, streamed and not, and an error as the client raises it.

    python3 tests/scripts/openai_client.py http://127.0.0.1:8080/v1
"""
import sys

import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key="unused")
model = client.models.list().data[0].id
print("model:", model)

r = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0
)
assert r.choices[0].message.role == "assistant" and r.choices[0].message.content, r
assert r.usage.completion_tokens == 8 or r.choices[0].finish_reason == "stop", r
print("chat:", repr(r.choices[0].message.content), r.usage)

pieces = []
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say hello."}],
    max_tokens=8,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
usage = None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage
    for c in chunk.choices:
        pieces.append(c.delta.content or "")
streamed = "".join(pieces)
assert streamed == r.choices[0].message.content, (streamed, r.choices[0].message.content)
assert usage and usage.completion_tokens == r.usage.completion_tokens, usage
print("chat stream:", repr(streamed), usage)

t = client.completions.create(model=model, prompt="The capital of France is", max_tokens=5, temperature=0)
assert t.choices[0].text and t.usage.completion_tokens == 5, t
ts = "".join(c.choices[0].text for c in client.completions.create(
    model=model, prompt="The capital of France is", max_tokens=5, temperature=0, stream=True))
assert ts == t.choices[0].text, (ts, t.choices[0].text)
print("completion:", repr(t.choices[0].text))

try:
    client.chat.completions.create(model=model, messages=[], max_tokens=2)
    raise SystemExit("an empty conversation was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "messages" in str(e), e
    print("error:", e.status_code)
print("ok")
