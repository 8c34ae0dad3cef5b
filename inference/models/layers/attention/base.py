"""The attention backend interface: one step's layout in, per-backend metadata out, then per-layer forward."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(slots=True)
class BatchLayout:
    """Host-side shape of one ragged step, in the order of the flat token batch."""

    query_lens: list[int]  # tokens computed this step, per sequence
    context_lens: list[int]  # cached + new tokens per sequence (= start + query_len)
    block_tables: list[list[int]]  # physical blocks per sequence, at least ceil(context_len / block_size)
    slot_mapping: torch.Tensor  # [num_tokens] int64 on the device: where each new token's K/V goes
    block_size: int
    device: torch.device


class AttentionBackend(ABC):
    name: str

    @abstractmethod
    def build_metadata(self, layout: BatchLayout) -> Any:
        """Everything the layers need, built once per step and shared by all layers."""

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: Any,
        scale: float,
        *,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        """Store k/v ([T, Hkv, D]) into the cache, then attend q ([T, H, D]) over each sequence's context.

        window: a row at position p sees only keys after p - window (transformers' sliding window: the row's
        own key and the window - 1 before it). softcap: scores (after `scale`) become
        softcap * tanh(score / softcap) before the softmax, as Gemma 2 does.
        """


def write_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor
) -> None:
    """Scatter the step's new keys/values into their cache slots (cache viewed as [num_slots, Hkv, D])."""
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v.to(v_cache.dtype))


def sequence_lengths(meta: Any, positions: torch.Tensor) -> torch.Tensor:
    """Per token, its sequence's length once this step is done (what LongRoPE picks its factors by).

    Metadata without the step's lengths is a decode-only step (a CUDA graph's): each token ends its sequence.
    """
    lens = getattr(meta, "step_lens", None)
    if lens is None:
        return positions + 1
    query_lens, context_lens = lens
    per_token = np.repeat(np.asarray(context_lens, dtype=np.int64), query_lens)
    return torch.from_numpy(per_token).to(positions.device, non_blocking=True)


def padded_block_table(
    block_tables: list[list[int]], num_blocks: list[int], device: torch.device
) -> torch.Tensor:
    """[B, max(num_blocks)] int32 table holding only the blocks each sequence uses, zero padded."""
    width = max(num_blocks) if num_blocks else 0
    table = np.zeros((len(block_tables), width), dtype=np.int32)
    for row, (blocks, n) in enumerate(zip(block_tables, num_blocks, strict=True)):
        table[row, :n] = blocks[:n]  # numpy takes the list slice directly: no tensor per row
    return torch.from_numpy(table).to(device, non_blocking=True)
