"""Projections that multiply with a GGUF's blocks through a CPU kernel (avx512.py or avx2.py): for small
decode batches beside a dense copy, or for every batch where the blocks are the only copy."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

import torch

from inference.models.quantization.base import LinearMethod
from inference.models.quantization.gguf.layout import BlockWeight


class BlockKernel(Protocol):
    """Multiplies activations with a GGUF's blocks: q4_decode.Avx512Kernel (bf16, AVX512) or
    avx2_blocks.Avx2Kernel (fp32, AVX2)."""

    @property
    def max_rows(self) -> int:
        """The most rows `linear` takes; more go to `batch_linear` (or the dense copy)."""

    def linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor: ...

    def batch_linear(
        self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None
    ) -> torch.Tensor: ...


_blocks_allowed: ContextVar[bool] = ContextVar("blocks_for_small_batches", default=True)


@contextmanager
def blocks_for_small_batches(allowed: bool) -> Iterator[None]:
    """Within: whether GGUFDecodeMethod may read its blocks for small batches. The runner turns that off
    for steps that carry prompt chunks, so a prompt's projections are the dense path's whatever its length
    (row for row the same bits at any batch size: AMX tiles, or oneDNN's AVX512-BF16 kernels)."""
    token = _blocks_allowed.set(allowed)
    try:
        yield
    finally:
        _blocks_allowed.reset(token)


class GGUFDecodeMethod(LinearMethod):
    """Decoding batches of up to kernel.max_rows rows read the GGUF's blocks (quantization/gguf/avx512.py).
    Larger ones,
    prompt chunks among them, go to `fallback` where the model keeps a dense bf16 copy (the tiled or packed
    weights), else through the blocks too, on the kernel's batch path: then the blocks are the layer's only
    copy of its weights. A fused projection whose shards the file stores in different types holds one part
    per type, row after row; each output row's sum is the same either way."""

    name = "gguf-decode"

    def __init__(
        self, parts: Sequence[BlockWeight], kernel: BlockKernel, fallback: LinearMethod | None
    ) -> None:
        self.parts, self.kernel, self.fallback = list(parts), kernel, fallback

    @property
    def keeps_dense(self) -> bool:
        return self.fallback is not None and self.fallback.keeps_dense

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        multiply = self.kernel.linear
        if not (x.numel() <= self.kernel.max_rows * x.shape[-1] and _blocks_allowed.get()):
            if self.fallback is not None:
                return self.fallback.apply(x, weight, bias)
            multiply = self.kernel.batch_linear
        if len(self.parts) == 1:
            return multiply(x, self.parts[0], bias)
        outs, start = [], 0
        for part in self.parts:
            stop = start + part.out_features
            outs.append(multiply(x, part, None if bias is None else bias[start:stop]))
            start = stop
        return torch.cat(outs, dim=-1)

    def nbytes(self) -> int:
        fallback = self.fallback.nbytes() if self.fallback is not None else 0
        return sum(part.nbytes() for part in self.parts) + fallback


class GGUFBlocksMethod(GGUFDecodeMethod):
    """GGUFDecodeMethod with no dense copy: every batch reads the blocks."""

    name = "gguf-blocks"

    def __init__(self, parts: Sequence[BlockWeight], kernel: BlockKernel) -> None:
        super().__init__(parts, kernel, None)
