#!/usr/bin/env python3
"""Write tests/data/quant/<TYPE>.json: random blocks of each ggml weight type and their
dequantization by the `gguf` package (its numpy code is the reference for wick's `dequantize`).

Run from the repository root:  python3 tests/scripts/make_quant_fixtures.py
(needs `gguf` 0.19.0 and numpy; e.g. `pip install --target /tmp/pyg gguf==0.19.0 numpy` and
PYTHONPATH=/tmp/pyg). Deterministic: a fixed seed per type.

Block bytes are random, except the f16 scale fields, which are set to finite values of random
sign and magnitude in [0.001, 2] (plus one block whose scales are zero), so that the expected
floats are finite. Expected values are stored as the little-endian bytes of the f32 results, in
hex, so the comparison in tests/quant_fixtures.rs can be bit-exact.
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

# Byte offsets of the f16 scale fields inside one block (ggml-common.h layouts).
F16_FIELDS = {
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q8_0": [0],
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
}
FLOAT_TYPES = ["F32", "F16", "BF16"]
N_BLOCKS_LEGACY = 8
N_BLOCKS_K = 3
N_FLOATS = 96


def sane_scales(rng, n):
    mag = np.exp(rng.uniform(np.log(0.001), np.log(2.0), size=n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(np.float16)


def make(name, seed):
    rng = np.random.default_rng(seed)
    qt = getattr(T, name)
    block_size, type_size = GGML_QUANT_SIZES[qt]
    if name in FLOAT_TYPES:
        vals = rng.normal(0.0, 1.5, size=N_FLOATS).astype(np.float32)
        vals[:4] = [0.0, -0.0, 1e-30, -65000.0]
        if name == "F32":
            data = vals.view(np.uint8)
        elif name == "F16":
            data = vals.astype(np.float16).view(np.uint8)
        else:
            data = (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    else:
        n_blocks = N_BLOCKS_K if block_size == 256 else N_BLOCKS_LEGACY
        data = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
        for off in F16_FIELDS[name]:
            s = sane_scales(rng, n_blocks)
            s[-1] = 0.0  # one block with zero scales
            data[:, off:off + 2] = s.view(np.uint8).reshape(n_blocks, 2)
        data = data.reshape(-1)
    expected = gguf.quants.dequantize(data, qt).astype("<f4").reshape(-1)
    assert np.all(np.isfinite(expected)), name
    return {
        "type": name,
        "n_elements": int(expected.size),
        "gguf_version": "0.19.0",
        "blocks_hex": bytes(data).hex(),
        "expected_f32_le_hex": expected.tobytes().hex(),
    }


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant")
    os.makedirs(out_dir, exist_ok=True)
    names = FLOAT_TYPES + list(F16_FIELDS)
    for i, name in enumerate(names):
        fx = make(name, 1000 + i)
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump(fx, f, indent=1)
            f.write("\n")
        print(f"{name}: {fx['n_elements']} elements", file=sys.stderr)


if __name__ == "__main__":
    main()
