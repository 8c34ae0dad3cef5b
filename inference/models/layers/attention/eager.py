"""Attention in plain torch ops for what SDPA cannot do (logit soft-capping), and sliding-window masks.

Both follow transformers: a row at position p sees keys k with p - window < k <= p, and soft-capping
turns the scaled scores s into softcap * tanh(s / softcap) before the mask and an fp32 softmax.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None,
    scale: float,
    softcap: float | None,
) -> torch.Tensor:
    """q [N, H, Tq, D] over k/v [N, Hkv, Tk, D] (GQA when Hkv < H). mask: bool, broadcastable to
    [N, H, Tq, Tk], True = attend; None = causal with Tq == Tk."""
    gqa = q.shape[1] != k.shape[1]
    if softcap is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=gqa
        )
    if gqa:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if mask is None:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(-1, dtype=torch.float32).to(q.dtype), v)


def window_mask(query_pos: torch.Tensor, key_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """[len(query_pos), len(key_pos)] bool: causal, and within `window` where one is given."""
    offset = query_pos[:, None] - key_pos[None, :]
    visible = offset >= 0
    return visible if window is None else visible & (offset < window)


def first_visible_key(context_len: int, query_len: int, window: int | None) -> int:
    """The oldest key any of a chunk's rows sees: the chunk's first row's window start."""
    if window is None:
        return 0
    return max(0, context_len - query_len - window + 1)
