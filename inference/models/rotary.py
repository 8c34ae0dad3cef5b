"""Rotary position embeddings (HF "rotate_half" layout) with default, linear and llama3 frequency scaling."""

from __future__ import annotations

import math
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def inverse_frequencies(head_dim: int, rope: dict[str, Any]) -> torch.Tensor:
    """Per-pair inverse frequencies [head_dim // 2], in float32 like HF computes them."""
    rope_type = rope["rope_type"]
    base = float(rope["rope_theta"])
    # Explicit CPU device: models are constructed under `with torch.device("meta")`.
    steps = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float()
    inv_freq = 1.0 / (base ** (steps / head_dim))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        # Dividing frequencies by the factor is the same as dividing positions by it.
        return inv_freq / float(rope["factor"])
    if rope_type == "llama3":
        return _llama3_scaling(inv_freq, rope)
    raise ValueError(f"unsupported rope_type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")


def _llama3_scaling(inv_freq: torch.Tensor, rope: dict[str, Any]) -> torch.Tensor:
    factor = float(rope["factor"])
    low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
    old_len = float(rope["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are slowed by `factor`, short ones kept, the band between them interpolated.
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


class RotaryEmbedding(torch.nn.Module):
    def __init__(self, head_dim: int, rope: dict[str, Any]) -> None:
        super().__init__()
        # A plain attribute, not a buffer: models are built on the meta device and buffers would be lost.
        self._inv_freq = inverse_frequencies(head_dim, rope)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [num_tokens, head_dim] for the flat positions, shared by all layers."""
        if self._inv_freq.device != positions.device:
            self._inv_freq = self._inv_freq.to(positions.device)
        freqs = positions.float()[:, None] * self._inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [num_tokens, heads, head_dim]; cos/sin: [num_tokens, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
