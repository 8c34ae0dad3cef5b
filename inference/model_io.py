"""Plain data passed between the engine core and the model side (scheduler/engine <-> model runner)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class ScheduledChunk:
    """One sequence's share of a step: compute `num_tokens` tokens starting at position `start`."""

    token_ids: list[int]  # every token the sequence has so far (prompt + generated)
    start: int  # tokens already in the KV cache (computed or prefix-cache hits)
    num_tokens: int  # tokens to compute this step; start + num_tokens <= len(token_ids)
    block_table: list[int]  # physical KV block ids covering at least start + num_tokens positions
    return_all_logits: bool = False  # also return logits for every computed position (prompt logprobs)


@dataclass(slots=True)
class StepLogits:
    """What one forward pass returns: float32 logits on the runner's device."""

    last: torch.Tensor  # [num_chunks, vocab]: logits at each chunk's final computed position
    all_positions: dict[int, torch.Tensor] = field(default_factory=dict)  # chunk index -> [num_tokens, vocab]
