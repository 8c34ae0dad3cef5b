"""A GGUF's block-quantized matrices as the file stores them: Q4_0/Q4_1 linears and a Q8_0 embedding.

The block layouts are ggml's: Q4_0 is an fp16 scale d and 16 bytes of nibbles (W = d * (q - 8)); Q4_1 adds
an fp16 minimum m (W = d * q + m); Q8_0 is an fp16 d and 32 int8 (W = d * q). In a Q4 block the first 16
weights are the low nibbles and the next 16 the high ones. The nibbles are kept packed as read: the decode
kernel takes exactly those bytes, and only torch's int4 layout needs them one level per byte.
llama.cpp interleaves the rows of llama-architecture Q/K projections for its rotary layout; they are put
back the way our models (and the dequantized cache) have them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inference.models.gguf_convert import _PERMUTED_ARCHS, _hf_name, _unpermute
from inference.models.gguf_file import GGUFFile

GROUP = 32  # Q4_0, Q4_1 and Q8_0 quantize blocks of 32 weights along the input dimension
_BLOCK_BYTES = {"Q4_0": 2 + GROUP // 2, "Q4_1": 4 + GROUP // 2}


@dataclass(frozen=True, slots=True)
class Q4Blocks:
    """One matrix of Q4_0/Q4_1 blocks: W = level * scale + minimum, computed in float32 as ggml and gguf-py
    do (a Q4_0 block's minimum is -8 * scale)."""

    nibbles: np.ndarray  # [out, in // 2] uint8: each block's 16 bytes as ggml stores them
    scale: np.ndarray  # [out, in // 32] float32
    minimum: np.ndarray  # [out, in // 32] float32: the weight at level 0

    @classmethod
    def from_levels(cls, levels: np.ndarray, scale: np.ndarray, minimum: np.ndarray) -> Q4Blocks:
        """From one level (0..15) per weight, [out, in] (tests and synthetic weights)."""
        grouped = levels.astype(np.uint8).reshape(levels.shape[0], -1, GROUP)
        nibbles = grouped[..., : GROUP // 2] | (grouped[..., GROUP // 2 :] << 4)
        return cls(nibbles.reshape(levels.shape[0], -1), scale, minimum)

    @property
    def shape(self) -> tuple[int, int]:
        """(out, in) of the weight matrix."""
        return int(self.nibbles.shape[0]), int(self.nibbles.shape[1]) * 2

    def unpack_levels(self) -> np.ndarray:
        """[out, in] uint8 in 0..15, one per weight."""
        out_features = self.nibbles.shape[0]
        grouped = self.nibbles.reshape(out_features, -1, GROUP // 2)
        return np.concatenate([grouped & 0x0F, grouped >> 4], axis=-1).reshape(out_features, -1)

    @property
    def zero(self) -> np.ndarray:
        """The weight at level 8, the form torch's int4 kernel takes: W = (levels - 8) * scale + zero."""
        return self.minimum + 8.0 * self.scale

    def dequantize(self) -> np.ndarray:
        """The exact weights, in float32 (the level-times-scale product is exact, so one rounding)."""
        scale = np.repeat(self.scale, GROUP, axis=1)
        minimum = np.repeat(self.minimum, GROUP, axis=1)
        return self.unpack_levels().astype(np.float32) * scale + minimum

    @staticmethod
    def stack(parts: list[Q4Blocks]) -> Q4Blocks:
        """Row-wise concatenation, as the fused QKV and gate-up projections stack their shards."""
        return Q4Blocks(
            np.concatenate([p.nibbles for p in parts]),
            np.concatenate([p.scale for p in parts]),
            np.concatenate([p.minimum for p in parts]),
        )


@dataclass(frozen=True, slots=True)
class Q8Blocks:
    """A Q8_0 matrix (a tied head's embedding, typically): W = levels * scale per block of 32."""

    levels: np.ndarray  # [out, in] int8
    scale: np.ndarray  # [out, in // 32] float32

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.levels.shape[0]), int(self.levels.shape[1])

    def dequantize(self) -> np.ndarray:
        """The exact weights, in float32 (int8 times an fp16 scale is exact)."""
        return self.levels.astype(np.float32) * np.repeat(self.scale, GROUP, axis=1)


@dataclass(frozen=True, slots=True)
class GGUFBlocks:
    """The blocks the CPU paths can use, read in one pass over the file's tensor table."""

    linears: dict[str, Q4Blocks]  # every Q4_0/Q4_1 weight, keyed by its Hugging Face name
    embedding: Q8Blocks | None  # the token embedding (a tied model's head), when it is Q8_0


def read_blocks(gguf_path: Path, *, num_heads: int, num_kv_heads: int) -> GGUFBlocks:
    """The file's Q4_0/Q4_1 weights and its Q8_0 token embedding (other types are left out)."""
    reader = GGUFFile(gguf_path)
    arch = reader.architecture
    linears: dict[str, Q4Blocks] = {}
    embedding: Q8Blocks | None = None
    for tensor in reader.tensors:
        kind = tensor.type_name
        if tensor.name == "token_embd.weight" and kind == "Q8_0":
            embedding = parse_q8_0(np.asarray(tensor.data))
        name = _hf_name(tensor.name)
        if kind not in _BLOCK_BYTES or name is None:
            continue
        blocks = parse_q4(np.asarray(tensor.data), kind)
        if arch in _PERMUTED_ARCHS and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = num_heads if "q_proj" in name else num_kv_heads
            # A row permutation: it moves each row's packed nibbles along with its scale and minimum.
            blocks = Q4Blocks(
                _unpermute(blocks.nibbles, heads),
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
    """raw [rows, bytes per row] uint8 of ggml Q4_0/Q4_1 blocks -> their nibbles, scale and minimum."""
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, _BLOCK_BYTES[kind])
    d = _fp16(blocks[..., 0:2])
    nibbles = np.ascontiguousarray(blocks[..., -GROUP // 2 :]).reshape(rows, -1)
    # Q4_0: d * (q - 8) = d * q - 8d; Q4_1: d * q + m
    minimum = -8.0 * d if kind == "Q4_0" else _fp16(blocks[..., 2:4])
    return Q4Blocks(nibbles, d, minimum)


def _fp16(pairs: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(pairs).view(np.float16)[..., 0].astype(np.float32)
