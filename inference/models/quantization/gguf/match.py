"""Whether a GGUF's blocks are, bit for bit, the weights a model holds: the check before a projection reads
its blocks instead of its dense weight (linear_method.choose_method) or is loaded as blocks alone
(quantization/gguf/block_only.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from inference.models.quantization.gguf.formats import GROUP, BlockMatrix, KQuantBlocks, Q8Blocks, row_slice

_MATCH_ROWS = 4096  # rows `matches` expands at a time


def matches(shards: Sequence[BlockMatrix], dense: torch.Tensor) -> bool:
    """Whether the kernel's weights (the shards' rows one after another), bf16(d * q + m) for Q4 and gguf-py's
    values rounded to bf16 for the rest, are bit for bit the model's bf16 weight. For an fp32 model
    (quantization/gguf/avx2.py), whether gguf-py's fp32 values are its weight's, on rows at each shard's
    start, middle
    and end (a permutation shows there; all of a vocabulary through gguf-py's numpy would take seconds)."""
    shape = (sum(s.shape[0] for s in shards), shards[0].shape[1])
    bf16 = dense.dtype == torch.bfloat16
    if not (bf16 or dense.dtype == torch.float32) or tuple(dense.shape) != shape:
        return False
    if any(s.shape[1] != shape[1] for s in shards):
        return False
    # A few thousand rows at a time: a whole vocabulary's expansion in fp32 would add a gigabyte to the
    # load's peak for a moment (a tied head's embedding).
    start, step = 0, _MATCH_ROWS if bf16 else 2
    for shard in shards:
        rows = shard.shape[0]
        for first in sorted(
            {max(f, 0) for f in (range(0, rows, step) if bf16 else (0, rows // 2, rows - 2))}
        ):
            some = row_slice(shard, first, min(first + step, rows))
            part = dequantized_bf16(some) if bf16 else torch.from_numpy(some.dequantize())
            if not torch.equal(part, dense[start + first : start + first + part.shape[0]]):
                return False
        start += rows
    return True


def dequantized_bf16(blocks: BlockMatrix) -> torch.Tensor:
    """blocks.dequantize() rounded to bf16, the same fp32 product and sum computed by torch or by the kernels'
    own expansion (on every core; numpy's one thread made this check a third of a server's model load)."""
    out_features, in_features = blocks.shape
    if isinstance(blocks, KQuantBlocks):
        raw = torch.from_numpy(np.ascontiguousarray(blocks.raw))
        try:
            return torch.ops.mooncake_avx512.kquant_dequantize(raw, blocks.type_id, in_features)
        except AttributeError:  # no AVX512 library here (quantization/gguf/avx2.py): gguf-py's own expansion
            return torch.from_numpy(blocks.dequantize()).view(out_features, in_features).to(torch.bfloat16)
    if isinstance(blocks, Q8Blocks):
        levels = torch.from_numpy(blocks.levels).view(out_features, -1, GROUP).float()
        weights = levels * torch.from_numpy(blocks.scale)[..., None]
    else:
        nibbles = torch.from_numpy(blocks.nibbles).view(out_features, -1, GROUP // 2)
        levels = torch.cat([nibbles & 0x0F, nibbles >> 4], dim=-1).float()
        weights = (
            levels * torch.from_numpy(blocks.scale)[..., None] + torch.from_numpy(blocks.minimum)[..., None]
        )
    return weights.view(out_features, in_features).to(torch.bfloat16)
