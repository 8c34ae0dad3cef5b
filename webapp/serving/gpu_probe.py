"""GPU figures through torch.cuda (utilisation from NVML via pynvml), for /metrics and the console.

`read_devices` never imports torch and never initialises CUDA: a process that has not put an engine on a
GPU reports nothing, and a scrape stays cheap. Every NVML or CUDA error leaves the figure out rather than
failing the caller.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int  # CUDA device index as this process sees it (after CUDA_VISIBLE_DEVICES)
    utilization: float | None  # percent of time a kernel ran (NVML, device-wide); None without NVML
    vram_bytes: int  # bytes this process's PyTorch tensors hold on the device


def _utilization(torch: Any, device: int | None) -> float | None:
    try:
        return float(torch.cuda.utilization(device))  # needs pynvml (nvidia-ml-py)
    except Exception:
        return None


def read_devices() -> list[GpuReading]:
    """One reading per CUDA device of a process that already uses CUDA; [] on CPU or before any load."""
    # Only a torch an engine already imported: importing it here would cost seconds and memory per scrape
    # in a process that has no local engine.
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    try:
        # Not initialised means no tensor was ever put on a GPU here; initialising it from a scrape would
        # block for seconds and take VRAM for a context.
        if not torch.cuda.is_initialized():
            return []
        count = int(torch.cuda.device_count())
    except Exception:
        return []
    readings = []
    for index in range(count):
        try:
            vram = int(torch.cuda.memory_allocated(index))
        except Exception:
            continue
        readings.append(GpuReading(index, _utilization(torch, index), vram))
    return readings


def console_gpu() -> tuple[float | None, float | None]:
    """GPU memory (MiB) and utilisation (%) through NVML when a CUDA device is in use."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, None
        used = torch.cuda.memory_allocated() / 2**20
        return used, _utilization(torch, None)
    except Exception:
        return None, None
