"""Plain data passed between the engine core and the model side (scheduler/engine <-> model runner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(slots=True)
class ScheduledChunk:
    """One sequence's share of a step: compute `num_tokens` tokens starting at position `start`."""

    token_ids: list[int]  # every token the sequence has so far (prompt + generated)
    start: int  # tokens already in the KV cache (computed or prefix-cache hits)
    num_tokens: int  # tokens to compute this step; start + num_tokens <= len(token_ids)
    block_table: list[int]  # physical KV block ids covering at least start + num_tokens positions
    return_all_logits: bool = False  # also return logits for every computed position (prompt logprobs)
    # Past the prompt: a decode, with any drafts to verify. On CPU such chunks take the native layer stack
    # whatever else their step holds; prompt chunks take the modules.
    decoding: bool = False


@dataclass(slots=True)
class StepLogits:
    """What one forward pass returns: float32 logits on the runner's device."""

    last: torch.Tensor  # [num_chunks, vocab]: logits at each chunk's final computed position
    all_positions: dict[int, torch.Tensor] = field(default_factory=dict)  # chunk index -> [num_tokens, vocab]


@dataclass(slots=True)
class InFlightIds:
    """Input ids the host has not seen yet (async scheduling): position dst[i] of a step's flat input ids
    is row src[i] of `sampled`, the ids the step before sampled, still on the device. The host batch holds
    a placeholder there; patching on the device keeps the host out of the loop between the two steps."""

    sampled: torch.Tensor
    src: list[int]
    dst: list[int]

    def patch(self, input_ids: torch.Tensor) -> None:
        """Overwrite the placeholders in a device tensor of flat input ids."""
        device = input_ids.device
        src, dst = small_tensor(self.src, device), small_tensor(self.dst, device)
        input_ids.index_copy_(0, dst, self.sampled.index_select(0, src).to(input_ids.dtype))

    def patch_host(self, input_ids: Any) -> None:
        """Overwrite the placeholders in a host (numpy) array: only when `sampled` lives on the CPU."""
        if self.sampled.device.type != "cpu":
            raise ValueError("patch_host needs sampled ids on the CPU")
        input_ids[self.dst] = self.sampled[self.src].numpy()


def small_tensor(values: list[int] | list[float] | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A few host values (row indices, per-row parameters) as a tensor on device, without waiting for it:
    on CUDA a copy from pageable memory waits for every kernel queued before it (the forward), one from
    pinned memory does not."""
    tensor = values if isinstance(values, torch.Tensor) else torch.tensor(values)
    if device.type == "cuda":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)
