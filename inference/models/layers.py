"""Building blocks of our decoder models: RMSNorms, linears, fused QKV and gate-up projections."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from inference.models.linear_method import DENSE, LinearMethod


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32 and cast back before the weight, exactly as HF does, so bf16 outputs match too.
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


class OffsetRMSNorm(RMSNorm):
    """Gemma's RMSNorm: the weight is stored as an offset from 1, and multiplies before the cast back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


class Linear(nn.Linear):
    """nn.Linear whose weights are held through one LinearMethod, chosen at load (linear_method.py)."""

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


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GeGLU (Gemma)
}


class GatedMLP(nn.Module):
    """SwiGLU (or GeGLU) MLP with gate and up fused into one matmul."""

    def __init__(self, hidden: int, intermediate: int, *, bias: bool, activation: str = "silu") -> None:
        super().__init__()
        self.gate_up_proj = ShardedLinear(hidden, {"gate": intermediate, "up": intermediate}, bias=bias)
        self.down_proj = Linear(intermediate, hidden, bias=bias)
        self.intermediate = intermediate
        self.act = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(self.act(gate) * up)
