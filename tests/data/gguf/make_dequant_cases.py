#!/usr/bin/env python3
"""Writes dequant/<TYPE>.blocks (random blocks, raw bytes) and dequant/<TYPE>.f32 (their values
as gguf-py's reference numpy dequantizer computes them, little-endian float32).

Usage: LLAMA_CPP=/path/to/llama.cpp python3 make_dequant_cases.py   (needs numpy)
The scale fields (f16 d / dmin) are set to random finite values; every other byte is random.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.environ["LLAMA_CPP"], "gguf-py"))
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

# type -> byte offsets of its f16 scale fields inside a block (ggml-common.h)
SCALES = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
          "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
N_BLOCKS = 8

out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dequant")
os.makedirs(out_dir, exist_ok=True)
rng = np.random.default_rng(20261124)
for name in ["F32", "F16", "BF16"] + list(SCALES):
    qtype = T[name]
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    n_blocks = N_BLOCKS * (256 // block_elems if block_elems < 256 else 1)
    if name == "F32":
        data = rng.normal(0, 1, 256).astype(np.float32).view(np.uint8)
    elif name == "F16":
        data = rng.normal(0, 1, 256).astype(np.float16).view(np.uint8)
    elif name == "BF16":
        data = (rng.normal(0, 1, 256).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    else:
        data = rng.integers(0, 256, n_blocks * block_bytes, dtype=np.uint8)
        blocks = data.reshape(n_blocks, block_bytes)
        for off in SCALES[name]:
            scale = rng.normal(0, 0.02, n_blocks).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
            blocks[:, off:off + 2] = scale
    values = quants.dequantize(data, qtype).astype("<f4").reshape(-1)
    assert np.all(np.isfinite(values)), name
    data.tofile(os.path.join(out_dir, f"{name}.blocks"))
    values.tofile(os.path.join(out_dir, f"{name}.f32"))
    print(name, data.size, "bytes ->", values.size, "values")
