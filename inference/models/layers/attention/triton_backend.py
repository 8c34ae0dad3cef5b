"""The CUDA backend when flash-attn is absent: Triton paged decode, torch SDPA for prefill chunks.

Decode rows read the cache in place through their block tables (triton_decode.py) instead of gathering a
padded copy of every context per layer, and the same metadata can be built over fixed device buffers,
which is what lets the model runner capture decode steps in CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.models.layers.attention.torch_backend import TorchAttentionBackend, TorchAttentionMetadata
from inference.models.layers.attention.triton_decode import num_splits, paged_decode, store_kv


@dataclass(slots=True)
class TritonAttentionMetadata(TorchAttentionMetadata):
    decode_table: torch.Tensor | None = None  # [B, W] int32 block tables of the decode rows
    decode_context_lens: torch.Tensor | None = None  # [B] int32
    decode_splits: int = 1


class TritonAttentionBackend(TorchAttentionBackend):
    name = "triton"
    supports_cuda_graphs = True

    def __init__(self, num_kv_heads: int) -> None:
        super().__init__()
        self.num_kv_heads = num_kv_heads

    def new_metadata(self, slot_mapping: torch.Tensor) -> TritonAttentionMetadata:
        return TritonAttentionMetadata(slot_mapping=slot_mapping)

    def add_decode_metadata(
        self, meta: TorchAttentionMetadata, table: torch.Tensor, context_lens: list[int], block_size: int
    ) -> None:
        if not isinstance(meta, TritonAttentionMetadata):
            raise TypeError("the triton backend needs its own metadata")
        meta.decode_table = table
        meta.decode_context_lens = torch.tensor(context_lens, dtype=torch.int32).to(
            table.device, non_blocking=True
        )
        meta.decode_splits = num_splits(
            len(context_lens), self.num_kv_heads, table.device, max_context=max(context_lens)
        )

    def graph_metadata(
        self, slot_mapping: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor
    ) -> TritonAttentionMetadata:
        """A decode-only step over fixed buffers that the caller refills before each graph replay."""
        return TritonAttentionMetadata(
            slot_mapping=slot_mapping,
            all_decode=True,
            decode_table=block_table,
            decode_context_lens=context_lens,
            decode_splits=num_splits(slot_mapping.shape[0], self.num_kv_heads, slot_mapping.device),
        )

    def store(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        store_kv(k, v, k_cache, v_cache, slots)

    def decode(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: TorchAttentionMetadata,
        scale: float,
        *,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        if not isinstance(meta, TritonAttentionMetadata) or meta.decode_table is None:
            raise ValueError("decode metadata is missing its block table")
        if meta.decode_context_lens is None:
            raise ValueError("decode metadata is missing its context lengths")
        return paged_decode(
            q,
            k_cache,
            v_cache,
            meta.decode_table,
            meta.decode_context_lens,
            scale,
            meta.decode_splits,
            window=window,
            softcap=softcap,
        )
