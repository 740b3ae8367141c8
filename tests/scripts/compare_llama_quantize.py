#!/usr/bin/env python3
"""Compare `wick synth --type T` with llama-quantize on the same weights.

Usage: compare_llama_quantize.py WICK_BIN DONOR.gguf [--shape small] [--arch llama] TYPE...

For each TYPE: writes the F32 synthetic model and the TYPE one with wick (same seed, so the
same weights), quantizes the F32 one to TYPE with llama.cpp (`llama_model_quantize`, no
importance matrix), and prints per tensor: wick's type vs llama.cpp's, the share of identical
bytes, and each one's RMS error relative to the F32 weights. Exits non-zero if a tensor type
differs. Files go to a temporary directory.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import llama_cpp
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def tensors(path):
    return {t.name: t for t in GGUFReader(path).tensors}


def values(t):
    return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("wick")
    ap.add_argument("donor")
    ap.add_argument("types", nargs="+")
    ap.add_argument("--shape", default="small")
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--seed", default="3")
    a = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        def synth(ty):
            out = os.path.join(d, f"{ty}.gguf")
            subprocess.run([a.wick, "synth", "--arch", a.arch, "--shape", a.shape, "--type", ty, "--seed", a.seed,
                            "--donor", a.donor, "-o", out], check=True, stderr=subprocess.DEVNULL)
            return out
        f32 = tensors(synth("F32"))
        for ty in a.types:
            ours = tensors(synth(ty))
            ref_path = os.path.join(d, f"{ty}.llama.gguf")
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ty}")
            params.nthread = 2
            rc = llama_cpp.llama_model_quantize(os.path.join(d, "F32.gguf").encode(), ref_path.encode(),
                                                ctypes.byref(params))
            assert rc == 0, rc
            ref = tensors(ref_path)
            print(f"== {ty}")
            err_w, err_l, n_same, n_all = 0.0, 0.0, 0, 0
            for name, t in ours.items():
                r = ref[name]
                if t.tensor_type != r.tensor_type:
                    print(f"  {name}: wick {t.tensor_type.name} llama.cpp {r.tensor_type.name}  TYPE DIFFERS")
                    bad += 1
                    continue
                if len(t.shape) < 2:
                    continue
                same = np.mean(np.asarray(t.data).reshape(-1).view(np.uint8) == np.asarray(r.data).reshape(-1).view(np.uint8))
                x = values(f32[name])
                ew, el = np.sum((values(t) - x) ** 2), np.sum((values(r) - x) ** 2)
                err_w, err_l = err_w + ew, err_l + el
                n_same += same * t.n_bytes
                n_all += t.n_bytes
                if name.startswith(("token_embd", "output", "blk.0.", "blk.1.")):
                    rx = np.sqrt(np.mean(x ** 2))
                    print(f"  {name:28} {t.tensor_type.name:5} identical bytes {100 * same:6.2f}%  "
                          f"rel RMS wick {100 * np.sqrt(ew / x.size) / rx:.3f}% llama.cpp {100 * np.sqrt(el / x.size) / rx:.3f}%")
            types = sorted({t.tensor_type.name for t in ours.values()})
            print(f"  all matrices: identical bytes {100 * n_same / n_all:.3f}%, squared error wick/llama.cpp "
                  f"{err_w / err_l:.5f}; types {types}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
