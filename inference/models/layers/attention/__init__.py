"""Attention backends behind one interface, chosen at load time."""

from __future__ import annotations

import importlib.util
import logging
import os

import torch

from inference.config_groups import ATTENTION_BACKENDS
from inference.models.layers.attention.base import AttentionBackend, BatchLayout
from inference.models.layers.attention.flash_backend import PAGED_BLOCK_MULTIPLE
from inference.models.layers.attention.torch_backend import TorchAttentionBackend

logger = logging.getLogger(__name__)

BACKEND_NAMES = ATTENTION_BACKENDS  # one list: config validation, this selector and the console share it


def select_backend(
    name: str,
    *,
    device: torch.device,
    dtype: torch.dtype,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    avx512_kernels: bool = False,
    avx2_kernels: bool = False,
    sliding_window: bool = False,
    softcap: bool = False,
    kv_dtype: torch.dtype | None = None,
) -> AttentionBackend:
    """With "auto" on CUDA: flash-attn where it reads the cache in place, else Triton, else torch.

    flash-attn's paged kernels need blocks of a multiple of 256 positions; with smaller blocks (16 by
    default) our flash backend gathers every context each step, so "auto" takes Triton's paged decode and
    its CUDA graphs instead (fp16/bf16 only for flash). On CPU "auto" is torch. Explicit choices fail
    loud; "triton" off CUDA needs TRITON_INTERPRET=1 (Triton's CPU interpreter, which the tests use).
    avx512_kernels: the caller loaded kernels/csrc/avx512's library; the torch backend then attends in bf16
    through its prompt_attention op, which reads a bf16 cache (kv_dtype: the cache's, None: `dtype`).
    avx2_kernels: the model reads a GGUF's blocks through kernels/csrc/avx2 (fp32): every row then attends
    through that library's paged_attention, one way whatever its step (SDPA's fp32 rows are not).
    sliding_window / softcap: some layer of the model needs that; every backend has both except a
    flash-attn too old for them, which "auto" then passes over and an explicit "flash_attn" refuses.
    """
    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown attention_backend {name!r}; expected one of {', '.join(BACKEND_NAMES)}")
    cuda = device.type == "cuda"
    if name == "torch" or (name == "auto" and not cuda):
        # prompt_attention reads a bf16 cache only: a kv_cache_dtype apart from it keeps SDPA there.
        bf16 = dtype == torch.bfloat16 and kv_dtype in (None, torch.bfloat16)
        native = avx512_kernels and not cuda and bf16 and head_dim in (32, 64, 128)
        # paged_attention reads an fp32, bf16 or fp16 cache: SDPA would give this path two answers again.
        fp32 = dtype == torch.float32 and kv_dtype in (None, torch.float32, torch.bfloat16, torch.float16)
        if avx2_kernels and not cuda and fp32 and head_dim % 8 == 0 and head_dim <= 256:
            return TorchAttentionBackend(native=True, library="mooncake_avx2")
        return TorchAttentionBackend(native=native)
    if name == "flash_attn" or (name == "auto" and block_size % PAGED_BLOCK_MULTIPLE == 0):
        flash = _flash_backend(name, cuda=cuda, dtype=dtype, block_size=block_size)
        if flash is not None:
            missing = _missing_features(flash, sliding_window=sliding_window, softcap=softcap)
            if not missing:
                return flash
            if name == "flash_attn":
                raise ValueError(f"attention_backend='flash_attn': this flash-attn has no {missing}")
            logger.info("flash-attn lacks %s for this model; using Triton", missing)
    return _triton_backend(name, cuda=cuda, num_kv_heads=num_kv_heads, head_dim=head_dim)


def _flash_backend(name: str, *, cuda: bool, dtype: torch.dtype, block_size: int) -> AttentionBackend | None:
    if not cuda or dtype not in (torch.float16, torch.bfloat16):
        if name == "flash_attn":
            raise ValueError("attention_backend='flash_attn' needs a CUDA device and float16 or bfloat16")
        return None
    try:
        from inference.models.layers.attention.flash_backend import FlashAttentionBackend

        return FlashAttentionBackend(block_size)
    except Exception as exc:  # ImportError, or a flash-attn build that does not match this torch/CUDA
        if name == "flash_attn":
            raise ValueError(
                f"attention_backend='flash_attn' requested but flash-attn is unusable: {exc}"
            ) from exc
        logger.info("flash-attn unavailable (%s)", exc)
        return None


def _missing_features(backend: AttentionBackend, *, sliding_window: bool, softcap: bool) -> str:
    needed = {"window_size": sliding_window, "softcap": softcap}
    have = {
        "window_size": getattr(backend, "supports_window", True),
        "softcap": getattr(backend, "supports_softcap", True),
    }
    return " or ".join(name for name, need in needed.items() if need and not have[name])


def _triton_backend(name: str, *, cuda: bool, num_kv_heads: int, head_dim: int) -> AttentionBackend:
    problem = None
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        problem = "needs a CUDA device (or TRITON_INTERPRET=1)"
    elif importlib.util.find_spec("triton") is None:
        problem = "Triton is not installed"
    else:
        from inference.models.layers.attention.triton_decode import supports_head_dim

        if not supports_head_dim(head_dim):
            problem = f"head_dim {head_dim} is not a power of two >= 16"
    if problem is None:
        from inference.models.layers.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend(num_kv_heads)
    if name == "triton":
        raise ValueError(f"attention_backend='triton' is unusable: {problem}")
    logger.info("Triton attention unavailable (%s); using the torch attention backend", problem)
    return TorchAttentionBackend()


__all__ = ["BACKEND_NAMES", "AttentionBackend", "BatchLayout", "select_backend"]
