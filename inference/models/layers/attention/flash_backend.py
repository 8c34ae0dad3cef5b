"""flash-attn 2 over the paged cache (CUDA only).

Upstream flash-attn only accepts a block_table when the page size is a multiple of 256; for smaller blocks
we gather each sequence's keys/values into a packed buffer and run the same varlen kernel without one.
flash-attn's causal mask is bottom-right aligned, which is what chunked prefill and prefix hits need.
Sliding windows and logit soft-capping go to its window_size and softcap arguments where the installed
version has them (window_size since 2.3, softcap since 2.6); the selector sends models that need what it
lacks to Triton, and a forward asked for one anyway fails rather than attend over the wrong keys.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from inference.models.layers.attention.base import AttentionBackend, BatchLayout, padded_block_table, write_kv

PAGED_BLOCK_MULTIPLE = 256


@dataclass(slots=True)
class FlashAttentionMetadata:
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor  # [B + 1] int32
    cu_seqlens_k: torch.Tensor  # [B + 1] int32
    context_lens: torch.Tensor  # [B] int32
    max_query_len: int
    max_context_len: int
    decode_only: bool
    block_table: torch.Tensor | None  # [B, max_blocks] int32, when the cache can be read paged
    key_slots: torch.Tensor | None  # [sum(context_lens)] int64, when it must be gathered
    step_lens: tuple[list[int], list[int]] | None = None  # (query_lens, context_lens): sequence_lengths()


class FlashAttentionBackend(AttentionBackend):
    name = "flash_attn"

    def __init__(self, block_size: int) -> None:
        from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

        self._varlen: Any = flash_attn_varlen_func
        self._with_kvcache: Any = flash_attn_with_kvcache
        self.paged = block_size % PAGED_BLOCK_MULTIPLE == 0
        both = set(inspect.signature(flash_attn_varlen_func).parameters)
        both &= set(inspect.signature(flash_attn_with_kvcache).parameters)
        self.supports_window = "window_size" in both
        self.supports_softcap = "softcap" in both

    def build_metadata(self, layout: BatchLayout) -> FlashAttentionMetadata:
        device, bs = layout.device, layout.block_size
        q_lens = torch.tensor(layout.query_lens, dtype=torch.int32)
        ctx_lens = torch.tensor(layout.context_lens, dtype=torch.int32)
        zero = torch.zeros(1, dtype=torch.int32)
        n_blocks = [-(-c // bs) for c in layout.context_lens]
        table = padded_block_table(layout.block_tables, n_blocks, device)
        key_slots = None
        if not self.paged:
            # Slot of every context position, sequence after sequence: the packed K/V for varlen.
            slots = table.long()[:, :, None] * bs + torch.arange(bs, device=device)
            slots = slots.flatten(1)
            valid = torch.arange(slots.shape[1], device=device)[None, :] < ctx_lens.to(device)[:, None]
            key_slots = slots[valid]
        return FlashAttentionMetadata(
            slot_mapping=layout.slot_mapping,
            cu_seqlens_q=torch.cat([zero, q_lens.cumsum(0, dtype=torch.int32)]).to(device, non_blocking=True),
            cu_seqlens_k=torch.cat([zero, ctx_lens.cumsum(0, dtype=torch.int32)]).to(
                device, non_blocking=True
            ),
            context_lens=ctx_lens.to(device, non_blocking=True),
            max_query_len=max(layout.query_lens),
            max_context_len=max(layout.context_lens),
            decode_only=max(layout.query_lens) == 1,
            block_table=table if self.paged else None,
            key_slots=key_slots,
            step_lens=(layout.query_lens, layout.context_lens),
        )

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: FlashAttentionMetadata,
        scale: float,
        *,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        extra = self._options(window, softcap)
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        if meta.block_table is not None and meta.decode_only:
            out = self._with_kvcache(
                q.unsqueeze(1),
                k_cache,
                v_cache,
                cache_seqlens=meta.context_lens,
                block_table=meta.block_table,
                softmax_scale=scale,
                causal=True,
                **extra,
            )
            return out.squeeze(1)
        if meta.key_slots is None:
            keys, values = k_cache, v_cache
        else:
            keys = k_cache.view(-1, *k_cache.shape[2:]).index_select(0, meta.key_slots)
            values = v_cache.view(-1, *v_cache.shape[2:]).index_select(0, meta.key_slots)
        return self._varlen(
            q,
            keys,
            values,
            meta.cu_seqlens_q,
            meta.cu_seqlens_k,
            meta.max_query_len,
            meta.max_context_len,
            softmax_scale=scale,
            causal=True,
            block_table=meta.block_table,
            **extra,
        )

    def _options(self, window: int | None, softcap: float | None) -> dict[str, Any]:
        """The kernel arguments for a window and a soft cap; none for plain layers (any version)."""
        extra: dict[str, Any] = {}
        if window is not None:
            if not self.supports_window:
                raise ValueError("this flash-attn has no window_size: a sliding-window layer needs >= 2.3")
            # Keys [p - (window - 1), p]: transformers' window of `window` keys, the row's own included.
            extra["window_size"] = (window - 1, 0)
        if softcap is not None:
            if not self.supports_softcap:
                raise ValueError("this flash-attn has no softcap: a soft-capped layer needs >= 2.6")
            extra["softcap"] = softcap
        return extra
