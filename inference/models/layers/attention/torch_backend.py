"""Portable attention with torch SDPA over the paged cache (CPU, and the GPU fallback).

Decode rows are batched: one index_select of the padded block tables into a step-wide workspace that every
layer reuses (measured 1.6x faster than advanced indexing, and no per-layer allocation), plus a length mask.
The workspace spans only the batch's longest context, not max_model_len. Prefill chunks run per
sequence with a lower-right aligned causal mask, because a chunk that starts after cached tokens must see
all of them (SDPA's is_causal aligns upper-left, which is only right when query and key lengths match).
Chunks over one shared cached prefix still attend one by one: attending the prefix once for all of them
and merging partial softmaxes would make a prompt's logits depend on which other prompts share its step.

Where the model's native CPU kernels are loaded (a bf16 model from a GGUF on an AVX512-BF16 CPU), all of a
step's rows go through one native call per layer instead (csrc/avx512/prompt_attention.cpp): it reads K/V in
place, costs about half of SDPA for a wave of short prompt chunks over a cached prefix and less for a long
prompt, and computes each row the same way however its prompt was cut into chunks and whatever else the
step holds. On the AVX2 block path (an fp32 model reading a GGUF's blocks) csrc/avx2/paged_attention.cpp
does the same for fp32 queries: SDPA's fp32 rows there depend on their batch and chunk, which gave identical
greedy requests two answers (issue 45).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from inference.models.layers.attention.base import AttentionBackend, BatchLayout, padded_block_table, write_kv
from inference.models.layers.attention.eager import attend, first_visible_key, window_mask


@dataclass(slots=True)
class PrefillSpan:
    q_start: int
    q_end: int
    context_len: int
    blocks: torch.Tensor | None  # None when the chunk is the whole context: attend to the fresh k/v directly
    mask: torch.Tensor | None  # [query_len, context_len] bool, True = attend
    # Per sliding window (layers may differ): the first key the rows see and their mask over keys from there.
    windowed: dict[int, tuple[int, torch.Tensor]] = field(default_factory=dict)

    def keys_for(self, window: int | None, device: torch.device) -> tuple[int, torch.Tensor | None]:
        """(first visible key, mask over keys [first, context_len)); the causal mask where nothing is cut."""
        query_len = self.q_end - self.q_start
        if window is None or window >= self.context_len:
            return 0, self.mask
        if window not in self.windowed:
            first = first_visible_key(self.context_len, query_len, window)
            query_pos = torch.arange(self.context_len - query_len, self.context_len, device=device)
            mask = window_mask(query_pos, torch.arange(first, self.context_len, device=device), window)
            self.windowed[window] = (first, mask)
        return self.windowed[window]


@dataclass(slots=True)
class TorchAttentionMetadata:
    slot_mapping: torch.Tensor
    decode_token_idx: torch.Tensor | None = None  # flat token index of each decode row (mixed steps only)
    decode_blocks: torch.Tensor | None = None  # [B * max_blocks] int64: the padded block tables, flattened
    decode_width: int = 0  # max_blocks: blocks per row of the padded tables
    decode_mask: torch.Tensor | None = None  # [B, 1, 1, max_blocks * block_size] bool
    decode_lengths: torch.Tensor | None = None  # [B, 1] context lengths of the decode rows
    decode_window_masks: dict[int, torch.Tensor] = field(default_factory=dict)
    all_decode: bool = False  # every token is a decode row, in order: skip the scatter
    prefills: list[PrefillSpan] = field(default_factory=list)
    # The native path: every sequence's chunk as int64 [chunks, 3] (first token, tokens, context) and the
    # chunks' int32 block tables [chunks, width]; set instead of everything above but the slots.
    native_chunks: torch.Tensor | None = None
    native_tables: torch.Tensor | None = None
    # (K, V) gather targets, made by the first layer and overwritten by each later one: layers run one after
    # another (and in stream order on CUDA), so one buffer pair serves the whole step.
    workspace: tuple[torch.Tensor, torch.Tensor] | None = None
    # (query_lens, context_lens) of the step on the host: what sequence_lengths() reads.
    step_lens: tuple[list[int], list[int]] | None = None

    def decode_mask_for(self, window: int | None) -> torch.Tensor | None:
        """The decode rows' mask, cut to the last `window` keys where given (made once per window)."""
        if window is None or self.decode_mask is None or self.decode_lengths is None:
            return self.decode_mask
        if window not in self.decode_window_masks:
            key_pos = torch.arange(self.decode_mask.shape[-1], device=self.decode_mask.device)
            recent = key_pos[None, :] >= self.decode_lengths - window
            self.decode_window_masks[window] = self.decode_mask & recent[:, None, None, :]
        return self.decode_window_masks[window]

    def decode_workspace(self, k_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.workspace is None or self.workspace[0].dtype != k_cache.dtype:
            if self.decode_blocks is None:
                raise ValueError("no decode rows in this step")
            shape = (self.decode_blocks.shape[0], *k_cache.shape[1:])
            self.workspace = (
                torch.empty(shape, dtype=k_cache.dtype, device=k_cache.device),
                torch.empty(shape, dtype=k_cache.dtype, device=k_cache.device),
            )
        return self.workspace


class TorchAttentionBackend(AttentionBackend):
    name = "torch"

    def __init__(self, *, native: bool = False, library: str = "mooncake_avx512") -> None:
        # True only where the caller loaded a native library whose attention op fits the model (see the module
        # doc): mooncake_avx512's prompt_attention (bf16), or mooncake_avx2's paged_attention (fp32 queries).
        self.native = native
        self.library = library

    def build_metadata(self, layout: BatchLayout) -> TorchAttentionMetadata:
        meta = self.new_metadata(layout.slot_mapping)
        meta.step_lens = (layout.query_lens, layout.context_lens)
        bs, device = layout.block_size, layout.device
        if self.native:
            # Single rows too: a prompt whose last chunk is one token is computed as any other chunk.
            offsets = np.cumsum([0, *layout.query_lens[:-1]])
            chunks = np.stack([offsets, layout.query_lens, layout.context_lens], axis=1).astype(np.int64)
            meta.native_chunks = torch.from_numpy(chunks)
            widths = [-(-ctx // bs) for ctx in layout.context_lens]
            meta.native_tables = padded_block_table(layout.block_tables, widths, device)
            return meta
        decode_rows: list[int] = []
        decode_tokens: list[int] = []
        offset = 0
        for i, (q_len, ctx) in enumerate(zip(layout.query_lens, layout.context_lens, strict=True)):
            if q_len == 1:
                decode_rows.append(i)
                decode_tokens.append(offset)
            elif q_len == ctx:
                meta.prefills.append(PrefillSpan(offset, offset + q_len, ctx, None, None))
            else:
                n_blocks = -(-ctx // bs)
                blocks = torch.tensor(layout.block_tables[i][:n_blocks], dtype=torch.int64, device=device)
                key_pos = torch.arange(ctx, device=device)
                query_pos = torch.arange(ctx - q_len, ctx, device=device)
                mask = key_pos[None, :] <= query_pos[:, None]
                meta.prefills.append(PrefillSpan(offset, offset + q_len, ctx, blocks, mask))
            offset += q_len
        if decode_rows:
            meta.all_decode = len(decode_rows) == offset
            if not meta.all_decode:
                meta.decode_token_idx = torch.tensor(decode_tokens, dtype=torch.int64, device=device)
            ctx_lens = [layout.context_lens[i] for i in decode_rows]
            widths = [-(-c // bs) for c in ctx_lens]
            table = padded_block_table([layout.block_tables[i] for i in decode_rows], widths, device)
            self.add_decode_metadata(meta, table, ctx_lens, bs)
        return meta

    def new_metadata(self, slot_mapping: torch.Tensor) -> TorchAttentionMetadata:
        return TorchAttentionMetadata(slot_mapping=slot_mapping)

    def add_decode_metadata(
        self, meta: TorchAttentionMetadata, table: torch.Tensor, context_lens: list[int], block_size: int
    ) -> None:
        """The decode rows' gather indices and length mask, from their padded block tables."""
        meta.decode_blocks = table.long().flatten()
        meta.decode_width = table.shape[1]
        lengths = torch.tensor(context_lens, device=table.device)
        key_pos = torch.arange(table.shape[1] * block_size, device=table.device)
        meta.decode_mask = (key_pos[None, :] < lengths[:, None])[:, None, None, :]
        meta.decode_lengths = lengths[:, None]

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: TorchAttentionMetadata,
        scale: float,
        *,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        self.store(k, v, k_cache, v_cache, meta.slot_mapping)
        if meta.all_decode:
            return self.decode(q, k_cache, v_cache, meta, scale, window=window, softcap=softcap)
        if meta.native_chunks is not None and meta.native_tables is not None:
            op = getattr(torch.ops, self.library)
            attention = op.prompt_attention if self.library == "mooncake_avx512" else op.paged_attention
            return attention(
                q.contiguous(),
                k_cache,
                v_cache,
                meta.native_tables,
                meta.native_chunks,
                scale,
                window or 0,  # the op's "none"
                softcap or 0.0,
            )
        out = torch.empty_like(q)
        if meta.decode_token_idx is not None:
            od = self.decode(
                q.index_select(0, meta.decode_token_idx),
                k_cache,
                v_cache,
                meta,
                scale,
                window=window,
                softcap=softcap,
            )
            out.index_copy_(0, meta.decode_token_idx, od)
        block = k_cache.shape[1]
        for span in meta.prefills:
            first, mask = span.keys_for(window, q.device)
            # 4-D [1, heads, tokens, head_dim]: with 3-D inputs and GQA, CPU SDPA falls back to its math
            # kernel, 11x slower than the flash kernel for a 400-token bf16 prompt.
            qi = q[span.q_start : span.q_end].transpose(0, 1)[None]
            if span.blocks is None:  # a fresh prompt: its first row sees key 0, so first == 0
                ki = _as_cached(k[span.q_start : span.q_end], k_cache).transpose(0, 1)[None]
                vi = _as_cached(v[span.q_start : span.q_end], v_cache).transpose(0, 1)[None]
            else:
                # Only the blocks holding visible keys are gathered: a window bounds the work per chunk.
                skip = first // block * block
                blocks = span.blocks[first // block :]
                keys = slice(first - skip, span.context_len - skip)
                ki = k_cache[blocks].flatten(0, 1)[keys].transpose(0, 1)[None].to(q.dtype)
                vi = v_cache[blocks].flatten(0, 1)[keys].transpose(0, 1)[None].to(q.dtype)
            oi = attend(qi, ki, vi, mask=mask, scale=scale, softcap=softcap)
            out[span.q_start : span.q_end] = oi[0].transpose(0, 1)
        return out

    def store(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        write_kv(k, v, k_cache, v_cache, slots)

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
        """Attention of the decode rows' queries q [B, H, D] over their cached contexts."""
        if meta.decode_blocks is None:
            raise ValueError("decode metadata is missing its block gather")
        kbuf, vbuf = meta.decode_workspace(k_cache)
        torch.index_select(k_cache, 0, meta.decode_blocks, out=kbuf)
        torch.index_select(v_cache, 0, meta.decode_blocks, out=vbuf)
        # [B * blocks, block_size, Hkv, D] -> [B, Hkv, blocks * block_size, D]
        rows = (q.shape[0], meta.decode_width * k_cache.shape[1], *k_cache.shape[2:])
        kd = kbuf.view(rows).transpose(1, 2)
        vd = vbuf.view(rows).transpose(1, 2)
        mask = meta.decode_mask_for(window)
        return attend(
            q.unsqueeze(2), kd.to(q.dtype), vd.to(q.dtype), mask=mask, scale=scale, softcap=softcap
        ).squeeze(2)


def _as_cached(fresh: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """Fresh keys or values as a later read of the cache gives them back: rounded to a narrower cache dtype
    (kv_cache_dtype), so a prompt attends alike whether its prefix was computed now or found cached."""
    if cache.dtype == fresh.dtype:
        return fresh
    return fresh.to(cache.dtype).to(fresh.dtype)
