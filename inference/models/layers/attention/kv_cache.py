"""The paged KV cache: per layer, K and V of shape [num_blocks, block_size, num_kv_heads, head_dim]."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class KVCacheSpec:
    """Shape of one layer's cache entries; the same for every layer of the models we support."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    def bytes_per_block(self, block_size: int) -> int:
        """K and V, all layers, for one block of `block_size` token slots."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * block_size * self.num_kv_heads * self.head_dim * elem


def allocate_kv_cache(
    spec: KVCacheSpec, *, num_blocks: int, block_size: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Zeroed so padded gathers of never-written slots stay finite (masked, but NaN * 0 = NaN)."""
    shape = (num_blocks, block_size, spec.num_kv_heads, spec.head_dim)
    return [
        (
            torch.zeros(shape, dtype=spec.dtype, device=device),
            torch.zeros(shape, dtype=spec.dtype, device=device),
        )
        for _ in range(spec.num_layers)
    ]
