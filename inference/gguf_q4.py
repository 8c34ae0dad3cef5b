"""A GGUF's 4-bit linears (Q4_0, Q4_1) as levels, scales and zeros, for `quantization: gguf` on CPU.

The block layouts are ggml's: Q4_0 is an fp16 scale d and 16 bytes of nibbles (W = d * (q - 8)); Q4_1 adds
an fp16 minimum m (W = d * q + m). The first 16 weights of a block are the low nibbles, the next 16 the
high ones. llama.cpp interleaves the rows of llama-architecture Q/K projections for its rotary layout;
they are put back the way our models (and the dequantized cache) have them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inference.gguf_convert import _PERMUTED_ARCHS, _hf_name, _unpermute
from inference.models.int4 import GROUP, Q4Blocks

_BLOCK_BYTES = {"Q4_0": 2 + GROUP // 2, "Q4_1": 4 + GROUP // 2}


def read_q4_linears(gguf_path: Path, *, num_heads: int, num_kv_heads: int) -> dict[str, Q4Blocks]:
    """Every Q4_0/Q4_1 weight of the file, keyed by its Hugging Face name (other types are left out)."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path)
    arch_field = reader.get_field("general.architecture")
    arch = str(arch_field.contents()) if arch_field is not None else "?"
    out: dict[str, Q4Blocks] = {}
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        name = _hf_name(tensor.name)
        if kind not in _BLOCK_BYTES or name is None:
            continue
        blocks = parse_q4(np.asarray(tensor.data), kind)
        if arch in _PERMUTED_ARCHS and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = num_heads if "q_proj" in name else num_kv_heads
            blocks = Q4Blocks(
                _unpermute(blocks.levels, heads),
                _unpermute(blocks.scale, heads),
                _unpermute(blocks.minimum, heads),
            )
        out[name] = blocks
    return out


def parse_q4(raw: np.ndarray, kind: str) -> Q4Blocks:
    """raw [rows, bytes per row] uint8 of ggml blocks -> levels, scale and zero per block."""
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, _BLOCK_BYTES[kind])
    d = _fp16(blocks[..., 0:2])
    nibbles = blocks[..., -GROUP // 2 :]
    levels = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).reshape(rows, -1)
    # Q4_0: d * (q - 8) = d * q - 8d; Q4_1: d * q + m
    minimum = -8.0 * d if kind == "Q4_0" else _fp16(blocks[..., 2:4])
    return Q4Blocks(levels.astype(np.uint8), d, minimum)


def _fp16(pairs: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(pairs).view(np.float16)[..., 0].astype(np.float32)
