"""Attention backends behind one interface, chosen at load time."""

from __future__ import annotations

import logging

import torch

from inference.attention.base import AttentionBackend, BatchLayout
from inference.attention.torch_backend import TorchAttentionBackend

logger = logging.getLogger(__name__)

BACKEND_NAMES = ("auto", "torch", "flash_attn")


def select_backend(
    name: str, *, device: torch.device, dtype: torch.dtype, block_size: int
) -> AttentionBackend:
    """With "auto": flash-attn on CUDA in fp16/bf16 if it imports, else torch. Explicit choices fail loud."""
    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown attention_backend {name!r}; expected one of {', '.join(BACKEND_NAMES)}")
    flash_ok = device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
    if name == "torch" or (name == "auto" and not flash_ok):
        return TorchAttentionBackend()
    if not flash_ok:
        raise ValueError("attention_backend='flash_attn' needs a CUDA device and float16 or bfloat16")
    try:
        from inference.attention.flash_backend import FlashAttentionBackend

        return FlashAttentionBackend(block_size)
    except Exception as exc:  # ImportError, or a flash-attn build that does not match this torch/CUDA
        if name == "flash_attn":
            raise ValueError(
                f"attention_backend='flash_attn' requested but flash-attn is unusable: {exc}"
            ) from exc
        logger.info("flash-attn unavailable (%s); using the torch attention backend", exc)
        return TorchAttentionBackend()


__all__ = ["BACKEND_NAMES", "AttentionBackend", "BatchLayout", "select_backend"]
