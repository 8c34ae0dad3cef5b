"""4-bit linears for a GGUF's Q4_0/Q4_1 weights on CPU: the file's own levels, never dequantized.

torch's CPU int4 kernel computes x @ W^T with W = (level - 8) * scale + zero per group of 32 input
columns. A Q4_1 block (d * level + m) is that with scale = d and zero = m + 8d; a Q4_0 block
(d * (level - 8)) with zero = 0. The kernel holds scale and zero in bf16, so W differs from the GGUF's
values by bf16 rounding, as the bf16 dequantized weights do. A decode step then reads 4.5 bits per weight
instead of 16: the batch-1 weight stream of the default model is about 3x shorter
(docs/design/gguf-blocks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from inference.models.quantization.base import LinearMethod
from inference.models.quantization.gguf.formats import GROUP, Q4Blocks


@dataclass(slots=True)
class Int4Weight:
    packed: torch.Tensor  # torch's CPU int4 layout
    scales_zeros: torch.Tensor  # [in // 32, out, 2] bf16
    out_features: int
    in_features: int

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.packed, self.scales_zeros))


def pack_int4(blocks: Q4Blocks) -> Int4Weight:
    out_features, in_features = blocks.shape
    if in_features % GROUP:
        raise ValueError(f"4-bit weights need an input size divisible by {GROUP}, got {in_features}")
    # torch's packing takes one int32 level per weight: the one place the file's nibbles are unpacked.
    levels = torch.from_numpy(blocks.unpack_levels().astype(np.int32))
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(levels, 1)
    scales_zeros = torch.stack(
        [torch.from_numpy(blocks.scale).T, torch.from_numpy(blocks.zero).T], dim=-1
    ).to(torch.bfloat16)
    return Int4Weight(packed, scales_zeros.contiguous(), out_features, in_features)


def int4_linear(x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] in bf16 -> [..., out] in bf16."""
    flat = x.reshape(-1, weight.in_features)
    out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, weight.packed, GROUP, weight.scales_zeros)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.out_features)


def int4_supported() -> bool:
    """Whether this torch has the CPU int4 kernels."""
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"
    )


class Int4Method(LinearMethod):
    """quantization "int4": the file's Q4 levels in torch's int4 layout, for every batch size."""

    name = "int4"

    def __init__(self, weight: Int4Weight) -> None:
        self.weight = weight

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return int4_linear(x, self.weight, bias)

    def nbytes(self) -> int:
        return self.weight.nbytes()
