#!/usr/bin/env python3
"""Reference logits from llama.cpp for wick's tiny synthetic models.

Usage: make_synthetic_refs.py OUT.json FILE.gguf [FILE.gguf ...]

The files come from `wick synth --shape SHAPE --arch ARCH --type T --seed S --donor SmolLM2.gguf -o FILE`
(the test regenerates them from the same arguments, so only this JSON is committed). For each
file: its size and byte sum (to notice if the generator changes), the logits llama.cpp
computes at every position of a fixed token sequence (top 16 and every 257th value per
position), and its greedy continuation.
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama

TOKENS = [1, 504, 3575, 282, 4649, 314, 28, 2000, 17, 9, 44, 1180, 355, 7, 3, 90]


def main():
    out, files = sys.argv[1], sys.argv[2:]
    res = {}
    for path in files:
        data = np.fromfile(path, dtype=np.uint8)
        llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, flash_attn=False,
                    logits_all=True, verbose=False)
        llm.eval(TOKENS)
        positions = []
        for i in range(len(TOKENS)):
            row = np.array(llm.scores[i], dtype=np.float32)
            top = np.argsort(-row)[:16]
            positions.append({"top": [[int(j), float(row[j])] for j in top],
                              "strided": [float(v) for v in row[::257]]})
        greedy = []
        for _ in range(16):
            nxt = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1])))
            greedy.append(nxt)
            llm.eval([nxt])
        res[os.path.basename(path)] = {"size": int(data.size), "byte_sum": int(data.sum(dtype=np.uint64)),
                                       "tokens": TOKENS, "positions": positions, "greedy": greedy}
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
