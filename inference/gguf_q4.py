"""A GGUF's 4-bit linears (Q4_0, Q4_1) as levels, scales and minimums, for `quantization: gguf` and the
small-batch decode kernel on CPU; and a Q8_0 matrix (the tied head) for that kernel.

The block layouts are ggml's: Q4_0 is an fp16 scale d and 16 bytes of nibbles (W = d * (q - 8)); Q4_1 adds
an fp16 minimum m (W = d * q + m). The first 16 weights of a block are the low nibbles, the next 16 the
high ones. llama.cpp interleaves the rows of llama-architecture Q/K projections for its rotary layout;
they are put back the way our models (and the dequantized cache) have them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inference.gguf_convert import _PERMUTED_ARCHS, _hf_name, _unpermute
from inference.models.int4 import GROUP, Q4Blocks
from inference.models.q4_decode import Q8Blocks

_BLOCK_BYTES = {"Q4_0": 2 + GROUP // 2, "Q4_1": 4 + GROUP // 2}


@dataclass(frozen=True, slots=True)
class GGUFBlocks:
    """The blocks the CPU paths can use, read in one pass: opening a GGUF takes seconds."""

    linears: dict[str, Q4Blocks]  # every Q4_0/Q4_1 weight, keyed by its Hugging Face name
    embedding: Q8Blocks | None  # the token embedding (a tied model's head), when it is Q8_0


def read_blocks(gguf_path: Path, *, num_heads: int, num_kv_heads: int) -> GGUFBlocks:
    """The file's Q4_0/Q4_1 weights and its Q8_0 token embedding (other types are left out)."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path)
    arch_field = reader.get_field("general.architecture")
    arch = str(arch_field.contents()) if arch_field is not None else "?"
    linears: dict[str, Q4Blocks] = {}
    embedding: Q8Blocks | None = None
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if tensor.name == "token_embd.weight" and kind == "Q8_0":
            embedding = parse_q8_0(np.asarray(tensor.data))
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
        linears[name] = blocks
    return GGUFBlocks(linears, embedding)


def parse_q8_0(raw: np.ndarray) -> Q8Blocks:
    """raw [rows, bytes per row] uint8 of ggml Q8_0 blocks (an fp16 d, then 32 int8) -> levels and scales."""
    blocks = raw.reshape(raw.shape[0], -1, 2 + GROUP)
    levels = np.ascontiguousarray(blocks[..., 2:]).view(np.int8).reshape(raw.shape[0], -1)
    return Q8Blocks(levels, _fp16(blocks[..., 0:2]))


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
