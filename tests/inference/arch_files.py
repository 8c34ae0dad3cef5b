"""Tiny model files that say only what architecture they are (and, for a GGUF, how its weights are
stored): a config.json, and a GGUF written with gguf-py. Enough for what reads headers, never for a load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from inference.manager.footprint import DeviceFacts

# A CPU with the GGUF block kernels and native bf16 ("auto" is bf16), whatever CPU the tests run on.
CPU_BF16 = DeviceFacts("cpu", 64 << 30, 32 << 30, 2, block_kernels=True)


def hf_dir(path: Path, architecture: str) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": [architecture]}), encoding="utf-8")
    return path


def gguf_file(path: Path, arch: str = "llama", kind: GGMLQuantizationType | None = None) -> Path:
    """token_embd in F32 and one projection, stored as `kind` (None: F16)."""
    rng = np.random.default_rng(0)
    writer = GGUFWriter(str(path), arch)
    writer.add_tensor("token_embd.weight", rng.standard_normal((8, 64)).astype(np.float32))
    dense = rng.standard_normal((4, 256)).astype(np.float32)
    if kind is None:
        writer.add_tensor("blk.0.attn_q.weight", dense.astype(np.float16))
    else:
        packed = quantize(dense, kind)
        writer.add_tensor("blk.0.attn_q.weight", packed, raw_shape=packed.shape, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
