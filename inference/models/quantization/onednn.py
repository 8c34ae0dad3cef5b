"""oneDNN-prepacked bf16 linears for CPUs with AMX or AVX512-BF16.

A plain bf16 `F.linear` on CPU reorders the weight into oneDNN's blocked layout on every call, so at decode
batch sizes it streams each weight twice. Reordering once at load time leaves one read per step: measured
here (1 thread, the real SmolLM2-135M weight stream) 41 ms per batch-16 step against 57 ms for plain bf16
and 156 ms for fp32. The packed product is bitwise the plain bf16 `F.linear`'s (same oneDNN kernel), so
packing changes speed, never outputs: `packing_supported` checks exactly that before the model is packed.

The ops are PyTorch's own (`torch.ops.mkldnn`, what Inductor's CPU freezing pass emits); they are private,
so everything here degrades to the unpacked path when they are missing or disagree.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from inference.device import fast_bf16_cpu
from inference.models.kernels.library import checked_kernel
from inference.models.quantization.base import LinearMethod

logger = logging.getLogger(__name__)

# The batch-size hint oneDNN picks a blocked layout for; the packed weight serves every batch size.
_PACK_HINT_ROWS = 16


def packing_supported(dtype: torch.dtype) -> bool:
    """True when prepacking works for `dtype` on this CPU and gives F.linear's exact result."""
    if dtype != torch.bfloat16 or not fast_bf16_cpu():
        return False
    return bool(
        checked_kernel(
            "onednn-packing",
            lambda: True,
            lambda _: _packed_matches_plain(),
            what="oneDNN packed bf16 linears",
            fallback="bf16 linears stay unpacked",
        )
    )


def _packed_matches_plain() -> bool:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(48, 64, generator=generator).bfloat16()
    bias = torch.randn(48, generator=generator).bfloat16()
    packed = pack_weight(weight)
    for rows in (1, 5, 37):
        x = torch.randn(rows, 64, generator=generator).bfloat16()
        if not torch.equal(packed_linear(x, packed, bias), F.linear(x, weight, bias)):
            return False
    return True


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """Reorder a dense [out, in] weight into oneDNN's blocked layout (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), _PACK_HINT_ROWS)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] @ packed.T + bias, for a weight from `pack_weight`."""
    if x.dim() == 2:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    flat = x.reshape(-1, x.shape[-1])
    out = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
    return out.view(*x.shape[:-1], out.shape[-1])


class PackedMethod(LinearMethod):
    """oneDNN's prepacked bf16 weight: bitwise F.linear's result, one weight read per call."""

    name = "packed"

    def __init__(self, packed: torch.Tensor) -> None:
        self.packed = packed

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return packed_linear(x, self.packed, bias)

    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size()
