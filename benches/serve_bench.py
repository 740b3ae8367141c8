#!/usr/bin/env python3
"""Load `wick serve` with N concurrent streaming completions (prompt ~P tokens, G generated
tokens each, end-of-generation ignored) and report, per N: aggregate generated tokens/s over
the wall time, and the median / max time to first token. Standard library only.

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
    first, tokens = None, 0
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
        elif v["choices"] and v["choices"][0].get("text") and first is None:
            first = time.perf_counter() - t0
    out[i] = (first or (time.perf_counter() - t0), tokens, time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("-n", default="1,4,16,64")
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-g", type=int, default=128)
    a = ap.parse_args()
    # About P tokens: one short word a token in most vocabularies.
    prompt = " ".join(["hello"] * a.p)
    print("| streams | generated tok/s (all) | per stream tok/s | TTFT median ms | TTFT max ms |")
    print("|---:|---:|---:|---:|---:|")
    for n in [int(x) for x in a.n.split(",")]:
        out = [None] * n
        t0 = time.perf_counter()
        th = [threading.Thread(target=one, args=(a.url, prompt, a.g, out, i)) for i in range(n)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.perf_counter() - t0
        toks = sum(o[1] for o in out)
        ttft = [o[0] * 1000 for o in out]
        per = statistics.mean(o[1] / max(o[2] - o[0], 1e-9) for o in out)
        print(f"| {n} | {toks / wall:.1f} | {per:.1f} | {statistics.median(ttft):.0f} | {max(ttft):.0f} |", flush=True)


main()
