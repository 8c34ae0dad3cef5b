"""Device memory between phases: free it, and read the peak a run reached."""

from __future__ import annotations

import gc
import resource

import torch


def free_memory(device: str) -> None:
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def reset_peak(device: str) -> None:
    free_memory(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS (KiB on Linux)
