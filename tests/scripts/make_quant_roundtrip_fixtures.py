#!/usr/bin/env python3
"""Dequantize wick's quantized fixture rows with the `gguf` package; compare with llama.cpp.

Usage:
  WICK_REGEN_QUANT_FIXTURES=1 cargo test --release --test quant_roundtrip quantized_bytes
  python3 tests/scripts/make_quant_roundtrip_fixtures.py

tests/data/quant_roundtrip/ holds, per type, TYPE.input.f32 (one row of 2048 values) and
TYPE.bin (that row quantized by wick's `quantize_weights`). This script writes
TYPE.gguf_py.f32: the values `gguf.quants.dequantize` reads from TYPE.bin, as little-endian
f32; tests/quant_roundtrip.rs checks that wick's `dequantize` gives the same bits.

When llama-cpp-python is installed it also quantizes the same input with llama.cpp's
`ggml_quantize_chunk` (what llama-quantize runs, no importance matrix) and prints, per type,
the share of identical blocks and both relative RMS errors. Nothing of that is written.
"""
import ctypes
import glob
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

DIR = os.path.join(os.path.dirname(__file__), "..", "data", "quant_roundtrip")
N = 2048


def ggml_quantizer():
    try:
        import llama_cpp
    except ImportError:
        return None
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]

    def quantize(qtype, x):
        block, size = GGML_QUANT_SIZES[qtype]
        out = np.zeros(x.size // block * size, dtype=np.uint8)
        lib.ggml_quantize_init(int(qtype))
        lib.ggml_quantize_chunk(int(qtype), x.ctypes.data, out.ctypes.data, 0, 1, x.size, None)
        return out
    return quantize


def deq(qtype, raw):
    if qtype == T.F32:
        return raw.view(np.float32).copy()
    if qtype == T.F16:
        return raw.view(np.float16).astype(np.float32)
    return np.asarray(dequantize(raw.reshape(1, -1), qtype), dtype=np.float32).reshape(-1)


def rel(x, y):
    r = np.sqrt(np.mean(x.astype(np.float64) ** 2))
    return np.sqrt(np.mean((x.astype(np.float64) - y) ** 2)) / r


def main():
    quantize = ggml_quantizer()
    for path in sorted(glob.glob(os.path.join(DIR, "*.bin"))):
        name = os.path.basename(path)[:-4]
        qtype = T[name]
        raw = np.fromfile(path, dtype=np.uint8)
        out = deq(qtype, raw)
        assert out.size == N, (name, out.size)
        out.astype("<f4").tofile(os.path.join(DIR, name + ".gguf_py.f32"))
        x = np.fromfile(os.path.join(DIR, name + ".input.f32"), dtype="<f4")
        line = f"{name:5} wick {100 * rel(x, out):7.3f}%"
        if quantize is not None and qtype not in (T.F32, T.F16, T.BF16):
            ref = quantize(qtype, x)
            _, size = GGML_QUANT_SIZES[qtype]
            same = np.mean(np.all(ref.reshape(-1, size) == raw.reshape(-1, size), axis=1))
            line += f"  llama.cpp {100 * rel(x, deq(qtype, ref)):7.3f}%  identical blocks {100 * same:5.1f}%"
        print(line)


if __name__ == "__main__":
    main()
