"""Rotary position embeddings (HF "rotate_half" layout) with default, linear, llama3 and LongRoPE scaling.

LongRoPE (Phi-3) has two sets of per-frequency divisors and picks one by the sequence's length, as
transformers does in each forward: a sequence longer than original_max_position_embeddings takes the long
factors. Here that is each sequence's length once the step is done, so a prompt computed in one chunk and
then decoded gets exactly what transformers' generate gives it; keys already in the cache keep the factors
they were computed with (a prompt cut into chunks across the original length, or a prefix-cache hit from a
shorter sequence), as keys in transformers' own cache do. cos and sin are scaled by the attention factor.
"""

from __future__ import annotations

import math
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "longrope")


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
    if rope_type == "longrope":
        return _longrope_frequencies(steps / head_dim, base, rope["short_factor"])
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


def _longrope_frequencies(exponents: torch.Tensor, base: float, factors: list[float]) -> torch.Tensor:
    if len(factors) != exponents.shape[0]:
        raise ValueError(f"LongRoPE needs {exponents.shape[0]} factors per set, got {len(factors)}")
    return 1.0 / (torch.tensor(factors, dtype=torch.float32, device="cpu") * base**exponents)


def longrope_attention_factor(rope: dict[str, Any]) -> float:
    """The cos/sin scale: the config's, else sqrt(1 + ln(factor) / ln(original length)) for factor > 1."""
    if rope.get("attention_factor") is not None:
        return float(rope["attention_factor"])
    original = float(rope["original_max_position_embeddings"])
    factor = rope.get("factor")
    factor = float(factor) if factor is not None else float(rope["max_position_embeddings"]) / original
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


class RotaryEmbedding(torch.nn.Module):
    def __init__(self, head_dim: int, rope: dict[str, Any]) -> None:
        super().__init__()
        # Plain attributes, not buffers: models are built on the meta device and buffers would be lost.
        self._inv_freq = inverse_frequencies(head_dim, rope)
        self._long_inv_freq: torch.Tensor | None = None
        self.attention_factor = 1.0
        self.original_length = 0
        if rope["rope_type"] == "longrope":
            steps = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float()
            base = float(rope["rope_theta"])
            self._long_inv_freq = _longrope_frequencies(steps / head_dim, base, rope["long_factor"])
            self.attention_factor = longrope_attention_factor(rope)
            self.original_length = int(rope["original_max_position_embeddings"])

    @property
    def by_sequence_length(self) -> bool:
        """cos_sin needs each token's sequence length (LongRoPE)."""
        return self._long_inv_freq is not None

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype, sequence_lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [num_tokens, head_dim] for the flat positions, shared by all layers.

        sequence_lengths [num_tokens]: each token's sequence length after the step (LongRoPE only)."""
        if self._inv_freq.device != positions.device:
            self._inv_freq = self._inv_freq.to(positions.device)
        freqs = positions.float()[:, None] * self._inv_freq[None, :]
        if self._long_inv_freq is not None:
            if sequence_lengths is None:
                raise ValueError("LongRoPE picks its factors by each token's sequence length; none given")
            if self._long_inv_freq.device != positions.device:
                self._long_inv_freq = self._long_inv_freq.to(positions.device)
            long = positions.float()[:, None] * self._long_inv_freq[None, :]
            freqs = torch.where((sequence_lengths > self.original_length)[:, None], long, freqs)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos.to(dtype), sin.to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [num_tokens, heads, head_dim]; cos/sin: [num_tokens, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
