"""Prompt chunks that continue one shared cached prefix attend to it together (CPU).

When a wave of requests with one system prompt arrives, the prefix cache hands each of them the same
physical blocks, and each computes only its own tail. Attending per request re-gathers the prefix and runs
one small SDPA per request and layer (about 0.3 ms each for 25 queries over 425 keys on this CPU, 16
requests x 30 layers a step). Here the queries of every such chunk attend the shared blocks in one call,
unmasked (every query sits after the whole prefix); each chunk then attends its own remaining keys under a
lower-right causal mask; the two partial softmaxes merge through their log-sum-exps. The result is the same
attention up to summation order.

GQA without copies: a KV head's G query heads become G x T query rows against that head's keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# CPU SDPA's flash kernel, which also returns the log-sum-exp the merge needs (the public API does not).
_flash_with_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


@dataclass(slots=True)
class Tail:
    """One chunk's queries and the keys it sees after the shared prefix."""

    q_start: int
    q_end: int
    blocks: torch.Tensor  # its blocks from the first one past the shared prefix
    length: int  # keys past the shared prefix: its context minus the prefix
    causal: torch.Tensor  # [q_len, length] bool, True = attend (lower-right aligned)
    masks: dict[tuple[int, torch.dtype], torch.Tensor] = field(default_factory=dict)

    def additive_mask(self, group: int, dtype: torch.dtype) -> torch.Tensor:
        """[group * q_len, length] 0 / -inf for the grouped query rows, made once per step."""
        key = (group, dtype)
        if key not in self.masks:
            mask = torch.zeros(self.causal.shape, dtype=dtype, device=self.causal.device)
            mask.masked_fill_(~self.causal, float("-inf"))
            self.masks[key] = mask.repeat(group, 1)
        return self.masks[key]


@dataclass(slots=True)
class SharedPrefix:
    """Chunks whose contexts start with the same cached blocks, and the length those blocks hold."""

    blocks: torch.Tensor
    length: int
    rows: torch.Tensor  # flat token index of every chunk's queries, tail by tail
    tails: list[Tail]


@dataclass(slots=True)
class CachedChunk:
    """A prompt chunk that continues cached context (its query span and its sequence's blocks)."""

    q_start: int
    q_end: int
    context_len: int
    block_table: list[int]


def group_shared_prefixes(
    chunks: list[CachedChunk], block_size: int, device: torch.device
) -> tuple[list[SharedPrefix], list[CachedChunk]]:
    """Groups of at least two chunks by their first block, each with the longest run of blocks they all
    share that lies wholly before every one of their queries; and the chunks left to attend alone."""
    by_first: dict[int, list[CachedChunk]] = {}
    for chunk in chunks:
        by_first.setdefault(chunk.block_table[0], []).append(chunk)
    groups: list[SharedPrefix] = []
    alone: list[CachedChunk] = []
    for members in by_first.values():
        shared = _shared_blocks(members, block_size)
        if len(members) < 2 or shared == 0:
            alone.extend(members)
            continue
        groups.append(_group(members, shared, block_size, device))
    return groups, alone


def _shared_blocks(members: list[CachedChunk], block_size: int) -> int:
    limit = min((c.context_len - (c.q_end - c.q_start)) // block_size for c in members)
    first = members[0].block_table
    shared = 0
    while shared < limit and all(c.block_table[shared] == first[shared] for c in members):
        shared += 1
    return shared


def _group(members: list[CachedChunk], shared: int, block_size: int, device: torch.device) -> SharedPrefix:
    prefix = shared * block_size
    tails: list[Tail] = []
    rows: list[int] = []
    for c in members:
        q_len, length = c.q_end - c.q_start, c.context_len - prefix
        blocks = c.block_table[shared : -(-c.context_len // block_size)]
        key_pos = torch.arange(length, device=device)
        query_pos = torch.arange(length - q_len, length, device=device)
        causal = key_pos[None, :] <= query_pos[:, None]
        tails.append(
            Tail(c.q_start, c.q_end, torch.tensor(blocks, dtype=torch.int64, device=device), length, causal)
        )
        rows.extend(range(c.q_start, c.q_end))
    return SharedPrefix(
        blocks=torch.tensor(members[0].block_table[:shared], dtype=torch.int64, device=device),
        length=prefix,
        rows=torch.tensor(rows, dtype=torch.int64, device=device),
        tails=tails,
    )


def attend_shared_prefix(
    group: SharedPrefix,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    scale: float,
    out: torch.Tensor,
) -> None:
    """Write the attention of the group's query rows ([T, H, D] in q) into the same rows of out."""
    num_kv_heads = k_cache.shape[2]
    queries = q.index_select(0, group.rows)
    prefix_keys = _keys(k_cache, group.blocks, group.length, q.dtype)
    prefix_values = _keys(v_cache, group.blocks, group.length, q.dtype)
    prefix_out, prefix_lse = _attend(queries, prefix_keys, prefix_values, scale, None)
    tail_out: list[torch.Tensor] = []
    tail_lse: list[torch.Tensor] = []
    group_size = q.shape[1] // num_kv_heads
    for tail in group.tails:
        o, lse = _attend(
            q[tail.q_start : tail.q_end],
            _keys(k_cache, tail.blocks, tail.length, q.dtype),
            _keys(v_cache, tail.blocks, tail.length, q.dtype),
            scale,
            tail.additive_mask(group_size, q.dtype),
        )
        tail_out.append(o)
        tail_lse.append(lse)
    lse_a, lse_b = prefix_lse, torch.cat(tail_lse)
    top = torch.maximum(lse_a, lse_b)
    weight_a, weight_b = torch.exp(lse_a - top)[..., None], torch.exp(lse_b - top)[..., None]
    merged = (prefix_out.float() * weight_a + torch.cat(tail_out).float() * weight_b) / (weight_a + weight_b)
    out.index_copy_(0, group.rows, merged.to(out.dtype))


def _keys(cache: torch.Tensor, blocks: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """[1, Hkv, length, D] from the cache's blocks."""
    return cache.index_select(0, blocks).flatten(0, 1)[:length].permute(1, 0, 2).unsqueeze(0).to(dtype)


def _attend(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """queries [T, H, D] over keys/values [1, Hkv, L, D] -> (out [T, H, D], log-sum-exp [T, H] fp32)."""
    tokens, heads, dim = queries.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    grouped = queries.reshape(tokens, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(1, kv_heads, -1, dim)
    out, lse = _flash_with_lse(grouped, keys, values, 0.0, False, attn_mask=mask, scale=scale)
    out = out.reshape(kv_heads, group, tokens, dim).permute(2, 0, 1, 3).reshape(tokens, heads, dim)
    return out, lse.reshape(kv_heads, group, tokens).permute(2, 0, 1).reshape(tokens, heads)
