"""Linear layers that multiply through their LinearMethod, and the fused QKV and gate-up projections."""

from __future__ import annotations

import torch
from torch import nn

from inference.models.quantization.base import DENSE, LinearMethod


class Linear(nn.Linear):
    """nn.Linear whose weights are held through one LinearMethod, chosen at load (quantization/base.py)."""

    method: LinearMethod = DENSE

    def use(self, method: LinearMethod) -> None:
        """Multiply through `method` from now on; the dense weight goes where the method holds its own."""
        self.method = method
        if not method.keeps_dense:
            self.weight = nn.Parameter(torch.empty(0, dtype=self.weight.dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.method.apply(x, self.weight, self.bias)


class ShardedLinear(Linear):
    """A Linear whose output rows are the concatenation of several checkpoint tensors (fused projections)."""

    def __init__(self, in_features: int, shard_sizes: dict[str, int], *, bias: bool) -> None:
        super().__init__(in_features, sum(shard_sizes.values()), bias=bias)
        self.shard_offsets: dict[str, tuple[int, int]] = {}
        offset = 0
        for name, size in shard_sizes.items():
            self.shard_offsets[name] = (offset, size)
            offset += size

    def load_shard(self, param: nn.Parameter, shard: str, tensor: torch.Tensor) -> None:
        offset, size = self.shard_offsets[shard]
        if tensor.shape[0] != size or tuple(tensor.shape[1:]) != tuple(param.shape[1:]):
            raise ValueError(f"shard {shard!r} has shape {tuple(tensor.shape)}, expected {size} rows")
        param.data[offset : offset + size].copy_(tensor)


class QKVLinear(ShardedLinear):
    def __init__(self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: int, *, bias: bool) -> None:
        q, kv = num_heads * head_dim, num_kv_heads * head_dim
        super().__init__(hidden, {"q": q, "k": kv, "v": kv}, bias=bias)
        self.split_sizes = [q, kv, kv]
