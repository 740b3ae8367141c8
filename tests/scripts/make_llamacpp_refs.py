#!/usr/bin/env python3
"""Greedy continuations and logits from llama.cpp (through llama-cpp-python), for wick's tests.

Usage: make_llamacpp_refs.py OUT.json MODEL.gguf [MODEL.gguf ...]
       (the committed file was made with --prompts-json tests/data/generation_prompts.json)
        [--prompts-json FILE] [--n-gen N] [--token-prompts]

For every model and prompt it records: the prompt's token ids (tokenized as llama.cpp does by
default: BOS where the vocabulary asks for it, special tokens parsed), llama.cpp's greedy
continuation (argmax of its logits, one token at a time), the gap between the best and
second-best logit at each step (small gaps are where numerics can legitimately flip a
choice), and the logits at the last prompt position (top 32 and every 97th value).

Made with llama-cpp-python 0.3.36 on the CPU (2 threads, flash attention off, f16 KV cache).
"""
import argparse
import hashlib
import json
import os

import numpy as np
from llama_cpp import Llama

DEFAULT_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, in a small village",
    "List three colors:\n1.",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_model(path, prompts, n_gen):
    llm = Llama(model_path=path, n_ctx=1024, n_batch=512, n_threads=2, flash_attn=False,
                logits_all=True, verbose=False, seed=0)
    out = []
    for p in prompts:
        ids = p if isinstance(p, list) else llm.tokenize(p.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        top = np.argsort(-last)[:32]
        gen, gaps = [], []
        for _ in range(n_gen):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            order = np.argsort(-logits, kind="stable")
            nxt = int(order[0])
            gaps.append(float(logits[order[0]] - logits[order[1]]))
            gen.append(nxt)
            if llm.token_is_eog(nxt) if hasattr(llm, "token_is_eog") else nxt == llm.token_eos():
                break
            llm.eval([nxt])
        out.append({
            "prompt": p if isinstance(p, str) else None,
            "prompt_ids": [int(i) for i in ids],
            "greedy": gen,
            "gaps": [round(g, 5) for g in gaps],
            "text": llm.detokenize(gen).decode("utf-8", "replace"),
            "last_logits_top": [[int(i), float(last[i])] for i in top],
            "last_logits_strided": [float(v) for v in last[::97]],
        })
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--prompts-json")
    ap.add_argument("--n-gen", type=int, default=48)
    a = ap.parse_args()
    prompts = DEFAULT_PROMPTS
    if a.prompts_json:
        with open(a.prompts_json) as f:
            prompts = json.load(f)
    res = {}
    for m in a.models:
        res[os.path.basename(m)] = {"sha256": sha256(m), "runs": run_model(m, prompts, a.n_gen)}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
