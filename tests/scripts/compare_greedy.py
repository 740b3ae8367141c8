#!/usr/bin/env python3
"""How far a llama.cpp build agrees with the CPU references of tests/data/generation_refs.json,
by the measures tests/generation_llamacpp.rs applies to wick: the top-logit error at the last
prompt position, free-running greedy tokens equal, and "decisive" prompts (32 tokens equal).

  compare_greedy.py prompts MODEL_NAME > prompts.txt     # input for llama_greedy
  compare_greedy.py compare MODEL_NAME out.txt            # llama_greedy's output against the refs
"""
import json
import os
import sys

REFS = os.path.join(os.path.dirname(__file__), "..", "data", "generation_refs.json")
MIN_MATCH = 32
TIE = 0.5


def runs(name):
    with open(REFS) as f:
        return json.load(f)[name]["runs"]


def main():
    mode, name = sys.argv[1], sys.argv[2]
    if mode == "prompts":
        for r in runs(name):
            print(len(r["greedy"]), " ".join(str(i) for i in r["prompt_ids"]))
        return
    lines = open(sys.argv[3]).read().split("\n")
    outs = [lines[i:i + 3] for i in range(0, len(lines) - 2, 3)]
    decisive = 0
    for r, (g, gaps, top) in zip(runs(name), outs):
        got = [int(x) for x in g.split()[1:]]
        want = r["greedy"]
        same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        mine = dict((int(p.split(":")[0]), float(p.split(":")[1])) for p in top.split()[1:])
        err = max((abs(mine[i] - v) for i, v in r["last_logits_top"] if i in mine), default=float("nan"))
        first_tie = next((i for i, x in enumerate(r["gaps"]) if x < TIE), len(want))
        need = min(len(want), MIN_MATCH)
        decisive += same >= need
        print(f"{r['prompt']!r:.40}: top-logit error {err:.3f}; {same}/{len(want)} equal; "
              f"refs' first near-tie at {first_tie}")
    print(f"{name}: decisive {decisive} of {len(outs)}")


if __name__ == "__main__":
    main()
