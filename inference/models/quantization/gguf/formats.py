"""A GGUF's block-quantized matrices as the file stores them: Q4_0, Q4_1, Q8_0 and the K-quants Q4_K, Q5_K
and Q6_K, for the linears and a tied head's embedding.

The block layouts are ggml's: Q4_0 is an fp16 scale d and 16 bytes of nibbles (W = d * (q - 8)); Q4_1 adds
an fp16 minimum m (W = d * q + m); Q8_0 is an fp16 d and 32 int8 (W = d * q). In a Q4 block the first 16
weights are the low nibbles and the next 16 the high ones. The nibbles are kept packed as read: the decode
kernel takes exactly those bytes, and only torch's int4 layout needs them one level per byte. The
K-quants' super-blocks of 256 weights (packed sub-block scales, then levels) are kept whole, each row the
file's bytes: the kernels read them as they are (csrc/avx512/kquant_formats.h).
llama.cpp interleaves the rows of llama-architecture Q/K projections for its rotary layout; they are put
back the way our models (and the dequantized cache) have them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf.constants import GGMLQuantizationType

from inference.models.gguf.architectures import architecture
from inference.models.gguf.names import fused_shards, hf_names, unpermute
from inference.models.gguf.reader import GGUFFile

GROUP = 32  # Q4_0, Q4_1 and Q8_0 quantize blocks of 32 weights along the input dimension
SUPER_BLOCK = 256  # the K-quants' super-block of 8 or 16 sub-blocks
_BLOCK_BYTES = {"Q4_0": 2 + GROUP // 2, "Q4_1": 4 + GROUP // 2}
KQUANT_BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210, "IQ4_XS": 136}  # bytes per super-block


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
class KQuantBlocks:
    """A Q4_K, Q5_K, Q6_K or IQ4_XS matrix: each row the file's super-blocks of 256 weights, as stored."""

    type_name: str  # one of KQUANT_BYTES
    raw: np.ndarray  # [out, in // 256 * KQUANT_BYTES[type_name]] uint8

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.raw.shape[0]), int(self.raw.shape[1]) // KQUANT_BYTES[self.type_name] * SUPER_BLOCK

    @classmethod
    def random(
        cls, type_name: str, out_features: int, in_features: int, *, seed: int, scale: float = 0.01
    ) -> KQuantBlocks:
        """Random levels and sub-block scales with finite fp16 super-block scales up to `scale` (tests,
        self-checks, benchmarks)."""
        rng = np.random.default_rng(seed)
        size = KQUANT_BYTES[type_name]
        blocks = rng.integers(0, 256, (out_features, in_features // SUPER_BLOCK, size), dtype=np.uint8)
        scales = rng.uniform(scale / 20, scale, (*blocks.shape[:2], 2)).astype(np.float16).view(np.uint8)
        if type_name == "Q6_K":
            blocks[..., size - 2 :] = scales[..., :2]  # d last; int8 sub-block scales before it
        elif type_name == "IQ4_XS":
            blocks[..., :2] = scales[..., :2]  # d first; the 6-bit sub-block scales after it
        else:
            blocks[..., :4] = scales  # d and dmin first
        return cls(type_name, blocks.reshape(out_features, -1))

    @property
    def type_id(self) -> int:
        """ggml's number for the type, which the kernel takes."""
        return int(GGMLQuantizationType[self.type_name])

    def dequantize(self) -> np.ndarray:
        """gguf-py's float32 weights, the reference every kernel is held to."""
        from gguf.quants import dequantize

        return dequantize(self.raw, GGMLQuantizationType[self.type_name]).reshape(self.shape)


BlockMatrix = Q4Blocks | Q8Blocks | KQuantBlocks


def stack_blocks(parts: list[BlockMatrix]) -> BlockMatrix:
    """Row-wise concatenation of shards of one type (a fused projection's)."""
    first = parts[0]
    if isinstance(first, Q4Blocks):
        return Q4Blocks.stack([p for p in parts if isinstance(p, Q4Blocks)])
    if isinstance(first, Q8Blocks):
        q8 = [p for p in parts if isinstance(p, Q8Blocks)]
        return Q8Blocks(np.concatenate([p.levels for p in q8]), np.concatenate([p.scale for p in q8]))
    kq = [p for p in parts if isinstance(p, KQuantBlocks)]
    return KQuantBlocks(first.type_name, np.concatenate([p.raw for p in kq]))


def same_type(a: BlockMatrix, b: BlockMatrix) -> bool:
    """Whether two shards stack into one matrix the kernel reads in one call."""
    if isinstance(a, KQuantBlocks) and isinstance(b, KQuantBlocks):
        return a.type_name == b.type_name
    return type(a) is type(b)


@dataclass(frozen=True, slots=True)
class GGUFBlocks:
    """The blocks the CPU paths can use, read in one pass over the file's tensor table."""

    linears: dict[str, BlockMatrix]  # every weight in a type we read, keyed by its Hugging Face name
    embedding: BlockMatrix | None  # the token embedding (a tied model's head), in such a type (not Q4)


def read_blocks(gguf_path: Path, *, num_heads: int, num_kv_heads: int) -> GGUFBlocks:
    """The file's Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K/IQ4_XS weights (other types are left out)."""
    reader = GGUFFile(gguf_path)
    arch = reader.architecture
    linears: dict[str, BlockMatrix] = {}
    embedding: BlockMatrix | None = None
    for tensor in reader.tensors:
        names = hf_names(tensor.name, tensor.data.shape, arch)
        if names is None:
            continue
        raw = np.asarray(tensor.data)
        # A 3-D expert tensor's experts are consecutive [rows, bytes] slices: each its own block matrix.
        for name, part in zip(names, [raw] if len(names) == 1 else list(raw), strict=True):
            blocks = _parse(part, tensor.type_name)
            if blocks is None:
                continue
            if tensor.name == "token_embd.weight" and not isinstance(blocks, Q4Blocks):
                embedding = blocks
                continue
            if architecture(arch).permuted_qk and name.endswith(("q_proj.weight", "k_proj.weight")):
                blocks = _permuted(blocks, num_heads if "q_proj" in name else num_kv_heads)
            # A fused projection (Phi-3's qkv and gate-up) as its shards: the fused module stacks them back.
            shards = fused_shards(name, blocks.shape[0], num_heads, num_kv_heads) or [(name, blocks.shape[0])]
            start = 0
            for shard, rows in shards:
                linears[shard] = blocks if len(shards) == 1 else row_slice(blocks, start, start + rows)
                start += rows
        reader.release(raw)  # every block matrix above owns a copy of its bytes
    return GGUFBlocks(linears, embedding)


def row_slice(blocks: BlockMatrix, start: int, stop: int) -> BlockMatrix:
    """Rows start..stop of a block matrix (blocks run along rows, so a row range is whole blocks)."""
    if isinstance(blocks, Q4Blocks):
        return Q4Blocks(blocks.nibbles[start:stop], blocks.scale[start:stop], blocks.minimum[start:stop])
    if isinstance(blocks, Q8Blocks):
        return Q8Blocks(blocks.levels[start:stop], blocks.scale[start:stop])
    return KQuantBlocks(blocks.type_name, blocks.raw[start:stop])


def _parse(raw: np.ndarray, kind: str) -> BlockMatrix | None:
    if kind in _BLOCK_BYTES:
        return parse_q4(raw, kind)
    if kind == "Q8_0":
        return parse_q8_0(raw)
    if kind in KQUANT_BYTES:
        return KQuantBlocks(kind, np.array(raw, copy=True))  # owned: the file's map is read-only
    return None


def _permuted(blocks: BlockMatrix, heads: int) -> BlockMatrix:
    """llama.cpp's Q/K row interleave undone: a row permutation moves each row's levels with its scales."""
    if isinstance(blocks, Q4Blocks):
        return Q4Blocks(
            unpermute(blocks.nibbles, heads),
            unpermute(blocks.scale, heads),
            unpermute(blocks.minimum, heads),
        )
    if isinstance(blocks, Q8Blocks):
        return Q8Blocks(unpermute(blocks.levels, heads), unpermute(blocks.scale, heads))
    return KQuantBlocks(blocks.type_name, np.ascontiguousarray(unpermute(blocks.raw, heads)))


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


def check_blocks() -> list[BlockMatrix]:
    """Seeded random blocks of every type the kernels read (Q4, Q8_0, each K-quant): 20 rows each, the
    matrices a kernel's self-check multiplies at load."""
    rng = np.random.default_rng(0)
    q4 = Q4Blocks.from_levels(
        rng.integers(0, 16, (20, 128), dtype=np.uint8),
        rng.uniform(0.001, 0.02, (20, 4)).astype(np.float16).astype(np.float32),
        rng.normal(0, 0.05, (20, 4)).astype(np.float16).astype(np.float32),
    )
    q8 = Q8Blocks(
        rng.integers(-128, 128, (20, 128), dtype=np.int8),
        rng.uniform(0.001, 0.02, (20, 4)).astype(np.float16).astype(np.float32),
    )
    return [q4, q8, *(KQuantBlocks.random(name, 20, SUPER_BLOCK, seed=1) for name in KQUANT_BYTES)]
