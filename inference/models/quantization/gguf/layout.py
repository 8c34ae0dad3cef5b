"""A GGUF's blocks in the layouts the CPU kernels read (AVX512 and AVX2 alike): Q4_0/Q4_1 and Q8_0 as levels
with interleaved fp16 (d, m) pairs, K-quants as the file's super-block bytes, row for row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from inference.models.quantization.gguf.formats import (
    GROUP,
    SUPER_BLOCK,
    BlockMatrix,
    KQuantBlocks,
    Q8Blocks,
    same_type,
    stack_blocks,
)


@dataclass(slots=True)
class DecodeWeight:
    """One matrix's blocks in the kernel's layout (Q4_0/Q4_1 or Q8_0)."""

    levels: torch.Tensor  # [out, in // 2] uint8: each Q4 block's 16 bytes as ggml stores them; Q8_0: int8
    dm: torch.Tensor  # [out, in // 32 * 2] float16: (d, m) per block, W = d * q + m (m = 0 for Q8_0)

    @property
    def out_features(self) -> int:
        return int(self.levels.shape[0])

    def nbytes(self) -> int:
        return self.levels.numel() + self.dm.numel() * self.dm.element_size()


@dataclass(slots=True)
class KQuantWeight:
    """One matrix of Q4_K/Q5_K/Q6_K/IQ4_XS super-blocks, each row the file's bytes."""

    raw: torch.Tensor  # [out, in // 256 * bytes per super-block] uint8
    type_id: int  # ggml's number for the type

    @property
    def out_features(self) -> int:
        return int(self.raw.shape[0])

    def nbytes(self) -> int:
        return self.raw.numel()


BlockWeight = DecodeWeight | KQuantWeight
MAX_INPUT = 32768  # the kernels widen one row's scales into a fixed L1 buffer (kMaxDm)


def decode_weights(shards: Sequence[BlockMatrix]) -> list[BlockWeight]:
    """A projection's shards in the kernels' layouts, each run of one type stacked into one matrix (a Q4_K_M
    file's fused QKV mixes Q4_K with Q6_K, for one)."""
    runs: list[list[BlockMatrix]] = []
    for shard in shards:
        if runs and same_type(runs[-1][-1], shard):
            runs[-1].append(shard)
        else:
            runs.append([shard])
    return [decode_weight(stack_blocks(run)) for run in runs]


def decode_weight(blocks: BlockMatrix) -> BlockWeight:
    """The kernel takes a Q4 file's nibbles as they are; only the (d, m) pairs are interleaved, in the file's
    own fp16 (`eligible` has checked they fit it exactly). K-quant rows go as they are."""
    if isinstance(blocks, KQuantBlocks):
        return KQuantWeight(torch.from_numpy(np.ascontiguousarray(blocks.raw)), blocks.type_id)
    out_features = blocks.shape[0]
    if isinstance(blocks, Q8Blocks):
        levels = blocks.levels
        dm = np.stack([blocks.scale, np.zeros_like(blocks.scale)], axis=-1).astype(np.float16)
    else:
        levels = blocks.nibbles
        dm = np.stack([blocks.scale, blocks.minimum], axis=-1).astype(np.float16)
    return DecodeWeight(
        torch.from_numpy(np.ascontiguousarray(levels)),
        torch.from_numpy(np.ascontiguousarray(dm.reshape(out_features, -1))),
    )


def eligible(blocks: BlockMatrix) -> bool:
    """The kernel takes block pairs (the input size a multiple of 64) with fp16 scales and minimums, as GGUF
    files store them: 20 bytes per Q4 block, the file's own stream. K-quants come in whole super-blocks."""
    if blocks.shape[1] > MAX_INPUT:
        return False
    if isinstance(blocks, KQuantBlocks):
        return blocks.shape[1] % SUPER_BLOCK == 0
    if blocks.shape[1] % (2 * GROUP):
        return False
    pairs = [blocks.scale] if isinstance(blocks, Q8Blocks) else [blocks.scale, blocks.minimum]
    return all(np.array_equal(v.astype(np.float16).astype(v.dtype), v) for v in pairs)
