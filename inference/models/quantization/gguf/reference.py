"""The activations the K-quant kernels' integer paths multiply with (csrc/avx512/kquant_int16.h,
kquant_int8.h), computed the kernels' way in torch: the reference their checks and tests hold them to."""

from __future__ import annotations

import torch

from inference.models.quantization.gguf.formats import (
    SUPER_BLOCK,  # one activation scale per super-block of weights
)

_LEVELS = {"int8": 127.0, "int16": 8191.0}  # the largest level of each integer path


def quantized_activations(x: torch.Tensor, activations: str) -> torch.Tensor:
    """The values an integer path ("int8" or "int16") multiplies with for x [rows, k] (k a multiple of 256),
    in fp32: per 256 values q = round-half-even(x * (L / amax)) times d = amax / L, each step in fp32 as the
    kernel takes it, L = 127 or 8191."""
    levels = _LEVELS[activations]
    values = x.float().reshape(x.shape[0], -1, SUPER_BLOCK)
    amax = values.abs().amax(dim=-1, keepdim=True)
    # A true division: `L / tensor` is torch's reciprocal times L, another fp32 value at times.
    iscale = torch.where(amax > 0, torch.full_like(amax, levels).div(torch.where(amax > 0, amax, 1.0)), 0.0)
    return (torch.round(values * iscale) * (amax / levels)).reshape(x.shape)
