"""Device and dtype resolution shared by the loader and the model runner."""

from __future__ import annotations

import os

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    """Map "auto" | "cpu" | "cuda" | "cuda:N" to a torch.device, failing early when CUDA is missing."""
    if device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if device == "cpu":
        return torch.device("cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} requested but CUDA is not available")
        return torch.device(device)
    raise ValueError(f"unknown device {device!r}; expected auto, cpu or cuda")


def fast_bf16_cpu() -> bool:
    """Whether this CPU multiplies bf16 natively (AMX tiles or AVX512-BF16) rather than emulating it."""
    try:
        return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())
    except AttributeError:  # a torch without these probes: assume no native bf16
        return False


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """ "auto" is bf16 on Ampere+ GPUs and on CPUs with AMX or AVX512-BF16, fp16 on older GPUs, else fp32.

    On CPU, bf16 is what the hardware multiplies natively: it halves the weight stream that bounds decode
    and runs the linears 2.7-3.8x faster than fp32 (docs/design/determinism.md). Set float32 for outputs
    that match an fp32 reference token for token.
    """
    if dtype == "auto":
        if device.type != "cuda":
            return torch.bfloat16 if fast_bf16_cpu() else torch.float32
        major, _ = torch.cuda.get_device_capability(device)
        return torch.bfloat16 if major >= 8 else torch.float16
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def cpu_thread_count(requested: int | None = None) -> int:
    """Intra-op threads for CPU inference: `requested` (EngineConfig.cpu_threads), else every core we may
    run on.

    Asking for fewer matters on shared machines: OpenMP workers spin at barriers, so when other processes
    take the cores, two threads can run several times slower than one.
    """
    if requested is not None:
        if requested < 1:
            raise ValueError(f"cpu_threads must be a positive integer, got {requested!r}")
        return requested
    return cpu_core_count()


def cpu_core_count() -> int:
    """Cores this process may run on (respects affinity masks set by containers and taskset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
