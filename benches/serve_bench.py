#!/usr/bin/env python3
"""Load `wick serve` with N concurrent streaming completions (prompt ~P tokens, G generated
tokens each, end-of-generation ignored) and report, per N:
- generated tok/s over the wall: all streams' tokens over the time from the first request sent
  to the last stream's end (prefill included; llama-batched-bench's equivalent is
  npl * ntg / T, T its total time);
- decode tok/s: the tokens after each stream's first, over the time from the first stream's
  first token to the last stream's end (llama-batched-bench's S_TG; a little low here, since
  the streams' decoding does not start at once);
- steady decode tok/s: the text chunks that arrived while every stream was decoding (from
  the last stream's first token to the first stream's end), over that window: the rate of
  the decode steps alone, as llama-batched-bench's S_TG measures it (a chunk is a token,
  or a few when a token ends inside a character, so this is a little low);
- the mean of each stream's own decode rate, and the median / max time to first token.
Standard library only.

    python3 benches/serve_bench.py http://127.0.0.1:8080 -n 1,4,16,64 -p 128 -g 128
"""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def one(url, prompt, gen, out, i):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first, tokens, arrivals = None, 0, []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        v = json.loads(data)
        if v.get("usage"):
            tokens = v["usage"]["completion_tokens"]
        elif v["choices"] and v["choices"][0].get("text"):
            arrivals.append(time.perf_counter())
            if first is None:
                first = arrivals[-1]
    end = time.perf_counter()
    out[i] = (t0, first or end, tokens, end, arrivals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("-n", default="1,4,16,64")
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-g", type=int, default=128)
    a = ap.parse_args()
    # About P tokens: one short word a token in most vocabularies.
    prompt = " ".join(["hello"] * a.p)
    print("| streams | generated tok/s over the wall | decode tok/s, all streams | steady decode tok/s "
          "| per stream tok/s | TTFT median ms | TTFT max ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in [int(x) for x in a.n.split(",")]:
        out = [None] * n
        t0 = time.perf_counter()
        th = [threading.Thread(target=one, args=(a.url, prompt, a.g, out, i)) for i in range(n)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.perf_counter() - t0
        toks = sum(o[2] for o in out)
        ttft = [(o[1] - o[0]) * 1000 for o in out]
        decode = sum(o[2] - 1 for o in out) / max(max(o[3] for o in out) - min(o[1] for o in out), 1e-9)
        # Strictly after the last first token, up to the first stream's last chunk.
        lo, hi = max(o[1] for o in out), min(o[4][-1] if o[4] else o[3] for o in out)
        steady = sum(sum(lo < t <= hi for t in o[4]) for o in out) / (hi - lo) if hi > lo else float("nan")
        per = statistics.mean((o[2] - 1) / max(o[3] - o[1], 1e-9) for o in out)
        print(f"| {n} | {toks / wall:.1f} | {decode:.1f} | {steady:.1f} | {per:.1f} | {statistics.median(ttft):.0f} "
              f"| {max(ttft):.0f} |", flush=True)


main()
