"""The gated (SwiGLU-family) feed-forward over one fused gate-up projection."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from inference.models.layers.linear import Linear, ShardedLinear

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
